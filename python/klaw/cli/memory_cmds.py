"""`klaw memory save|search|import|index` and `klaw reindex`."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from klaw.memory import Hit, Memory


def _err(msg: str) -> int:
    print(f"klaw: {msg}", file=sys.stderr)
    return 1


def _open() -> Memory:
    """Opens memory under the engine lock: while the engine runs it owns klaw.db."""
    from klaw.lock import EngineLock
    from klaw.memory import Memory
    from klaw.openclaw.writeback import WriteBack
    from klaw.paths import KlawPaths

    lock = EngineLock.of(KlawPaths.from_env()).acquire("this command")
    try:
        mem = Memory.open()
    except BaseException:
        lock.release()
        raise
    mem.on_close(lock.release)
    WriteBack.subscribe(mem.paths.workspace, mem.config, mem)  # `compatibility.openclaw`
    return mem


def _print_hits(hits: list[Hit], json_out: bool) -> None:
    if json_out:
        print(json.dumps([h.to_dict() for h in hits], ensure_ascii=False, indent=2))
        return
    if not hits:
        print("no results")
    for i, h in enumerate(hits, 1):
        print(f"{i:>2}. {h.citation}  (score {h.score:.4f}, {h.created_at})")
        body = " ".join(h.content.split())
        print(textwrap.indent(textwrap.shorten(body, 300, placeholder=" …"), "    "))


def save(text: str, source: str = "manual") -> int:
    from klaw.errors import KlawError

    try:
        with _open() as mem:
            ids = mem.save(text, source=source)
    except KlawError as exc:
        return _err(str(exc))
    print(f"saved ({len(ids)} chunk{'s' if len(ids) != 1 else ''})")
    return 0


def search(
    query: str | None,
    json_out: bool = False,
    top_k: int = 10,
    interactive: bool = False,
    kind: str | None = None,
    entity: str | None = None,
) -> int:
    from klaw.errors import KlawError

    if not interactive and not query:
        return _err("give a QUERY, or --interactive")
    from klaw.cli.engine_cmds import delegated_search, engine_running
    from klaw.paths import KlawPaths

    paths = KlawPaths.from_env()
    if query and not interactive and engine_running(paths):
        # The engine owns klaw.db while it runs: ask it instead of opening the file.
        return delegated_search(paths, query, top_k, json_out, kind, entity)
    try:
        with _open() as mem:
            if query:
                _print_hits(mem.search(query, top_k=top_k, kind=kind, entity=entity), json_out)
            if interactive:
                print("Search your memory (empty line or Ctrl-D to quit).")
                while True:
                    try:
                        q = input("search> ").strip()
                    except (EOFError, KeyboardInterrupt):
                        print()
                        break
                    if not q:
                        break
                    _print_hits(mem.search(q, top_k=top_k, kind=kind, entity=entity), json_out)
    except KlawError as exc:
        return _err(str(exc))
    return 0


def import_path(path: Path) -> int:
    from klaw.errors import KlawError

    if not path.exists():
        return _err(f"{path} does not exist")
    try:
        with _open() as mem:
            r = mem.import_path(path)
    except KlawError as exc:
        return _err(str(exc))
    print(f"indexed {len(r.indexed)} file(s), {r.chunks} chunks; {len(r.unchanged)} unchanged")
    return 0


def index_workspace() -> int:
    from klaw.errors import KlawError

    try:
        with _open() as mem:
            r = mem.index_workspace()
            total = mem.store.count_chunks()
    except KlawError as exc:
        return _err(str(exc))
    print(
        f"workspace memory: {len(r.indexed)} indexed, {len(r.unchanged)} unchanged, "
        f"{len(r.removed)} removed; {total} chunks in archival memory"
    )
    for e in r.errors:
        print(f"  skipped: {e}", file=sys.stderr)
    return 0


def reindex(progress: bool = True) -> int:
    import dataclasses

    from klaw.config import load_engine_config, resolve_workspace
    from klaw.errors import KlawError
    from klaw.memory.api import rebuild
    from klaw.paths import KlawPaths

    paths = KlawPaths.from_env()
    try:
        config = load_engine_config(paths.engine_config)
        # engine.yaml's `workspace` wins over $KLAW_WORKSPACE, as in the engine
        paths = dataclasses.replace(paths, workspace=resolve_workspace(config))
        r = rebuild(paths, config, progress=progress and sys.stderr.isatty())
    except KlawError as exc:
        return _err(str(exc))
    print(
        f"reindexed in {r.seconds:.1f}s: {r.messages} messages, {r.sessions} sessions, "
        f"{r.summaries} summaries, {r.files} memory files, {r.saved_facts} saved facts, "
        f"{r.chunks} chunks, {r.conversation_chunks} conversation chunks"
    )
    if r.skipped_count:
        print(f"skipped {r.skipped_count} unreadable line(s):", file=sys.stderr)
        for path, line, reason in r.skipped[:20]:
            print(f"  {path}:{line}: {reason}", file=sys.stderr)
    for e in r.errors:
        print(f"  {e}", file=sys.stderr)
    return 0

"""`klaw memory log|undo|condense`: versioned memory and a prompt that stays small
(docs/memory.md, "Versioned memory" and "A prompt that stays small")."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from klaw.cli.mcp_cmds import Doctor
    from klaw.config import EngineConfig
    from klaw.memory.versioning import MemoryGit
    from klaw.paths import KlawPaths


def _err(msg: str) -> int:
    print(f"klaw: {msg}", file=sys.stderr)
    return 1


def _setup() -> tuple[KlawPaths, EngineConfig, MemoryGit]:
    import dataclasses

    from klaw.config import load_engine_config, resolve_workspace
    from klaw.memory.versioning import versioner
    from klaw.paths import KlawPaths

    paths = KlawPaths.from_env()
    config = load_engine_config(paths.engine_config)
    paths = dataclasses.replace(paths, workspace=resolve_workspace(config))
    return paths, config, versioner(paths.workspace, config)


def _off(git: MemoryGit) -> int:
    if git.setting is False:
        return _err("memory versioning is off (memory.git: false in engine.yaml)")
    return _err(
        f"memory versioning is off: {git.workspace} is not a git repository "
        "(set memory.git: true in engine.yaml, or run `git init` there)"
    )


def log(n: int = 20) -> int:
    from klaw.errors import KlawError
    from klaw.memory.versioning import GitError

    try:
        _, _, git = _setup()
        if not git.active:
            return _off(git)
        entries = git.log_entries(n)
    except (KlawError, GitError) as exc:
        return _err(str(exc))
    if not entries:
        print("no changes by Klaw yet")
    for e in entries:
        print(f"{e.commit[:12]}  {e.date[:16].replace('T', ' ')}  {e.subject}")
        if e.body:
            print(f"    {e.body.splitlines()[0]}")
        if e.paths:
            print(f"    {', '.join(e.paths)}")
    return 0


def undo(commit: str | None = None) -> int:
    from klaw.errors import KlawError
    from klaw.memory.versioning import GitError

    try:
        paths, _, git = _setup()
        if not git.active:
            return _off(git)
        new, changed = git.undo(commit)
    except (KlawError, GitError) as exc:
        return _err(str(exc))
    print(f"undone as {new[:12]}: {', '.join(changed) or 'no file changed'}")
    return _reindex(paths)


def condense(apply: bool = False) -> int:
    from klaw.errors import KlawError
    from klaw.memory.archive import archive_logs
    from klaw.memory.condense import PROPOSAL_FILE, apply_proposal, propose, write_proposal
    from klaw.memory.rows import count_tokens_batch

    try:
        paths, config, git = _setup()
        ws = paths.workspace
        today = datetime.now(config.scheduler.zone()).date()
        share = config.memory.prompt.memory_md_tokens
        arch = config.memory.archive
        wrote = False
        if apply:
            if (ws / PROPOSAL_FILE).exists():
                done = apply_proposal(ws)
                print(f"MEMORY.md condensed: {', '.join(done)} written")
                wrote = True
            else:
                print(f"no proposal to apply ({PROPOSAL_FILE}); MEMORY.md is left as it is")
            report = archive_logs(ws, arch.after_days, today)
            wrote = wrote or bool(report.moved)
            print(f"{len(report.moved)} daily log(s) moved to memory/archive/")
        else:
            memory_md = ws / "MEMORY.md"
            data = memory_md.read_bytes() if memory_md.is_file() else b""
            proposal = propose(data, share, count_tokens_batch, today.isoformat(), ws)
            if proposal.needed:
                path = write_proposal(ws, proposal)
                print(
                    f"MEMORY.md is {proposal.tokens_before} tokens, over its share of the "
                    f"prompt ({share}, memory.prompt.memoryMdTokens).\nProposal: {path} keeps "
                    f"{proposal.tokens_after} tokens of your lines and moves "
                    f"{proposal.entries_moved} entries to {proposal.archive_path}, still "
                    "searchable. Read or edit it, then run `klaw memory condense --apply`."
                )
            else:
                print(
                    f"MEMORY.md is {proposal.tokens_before} tokens, within its share of the "
                    f"prompt ({share}): nothing to condense"
                )
            report = archive_logs(ws, arch.after_days, today, dry_run=True)
            print(
                f"{len(report.moved)} daily log(s) older than {arch.after_days} days "
                "(memory.archive.afterDays) would move to memory/archive/ with --apply"
            )
        for line in report.skipped:
            print(f"  not moved: {line}")
        git.flush()
    except KlawError as exc:
        return _err(str(exc))
    except OSError as exc:
        return _err(f"{exc.filename or 'the workspace'}: {exc.strerror}")
    return _reindex(paths) if wrote else 0


def check_memory(doc: Doctor, cfg: EngineConfig, workspace: Path) -> None:
    """`klaw doctor`'s lines on versioned memory and MEMORY.md's share of the prompt.
    Never a FAIL: memory works without either."""
    import shutil

    from klaw.memory.versioning import MemoryGit

    git = MemoryGit(workspace, enabled=cfg.memory.git)
    if cfg.memory.git is False:
        doc.ok("memory versioning: off (memory.git: false)")
    elif shutil.which("git") is None and (git.is_repo or cfg.memory.git):
        doc.warn(
            "memory versioning: git is not installed",
            "install it (apt install git) to have Klaw's memory changes committed",
        )
    elif git.is_repo:
        doc.ok(f"memory versioning: on ({workspace} is a git repository; `klaw memory log`)")
    elif cfg.memory.git:
        doc.ok("memory versioning: on (memory.git: true; the engine creates the repository)")
    else:
        doc.ok("memory versioning: off (the workspace is no git repository; memory.git: true)")
    share = cfg.memory.prompt.memory_md_tokens
    memory_md = workspace / "MEMORY.md"
    if share and memory_md.is_file():
        from klaw.memory.rows import count_tokens_batch
        from klaw.workspace_text import workspace_text

        text = workspace_text(memory_md.read_bytes().decode("utf-8", "replace"))
        tokens = count_tokens_batch([text])[0]
        if tokens > share:
            doc.warn(
                f"MEMORY.md: {tokens} tokens, over its share of the prompt ({share}); only "
                "its first lines go in",
                "`klaw memory condense` proposes a shorter file; `--apply` applies it",
            )
        else:
            doc.ok(f"MEMORY.md: {tokens} tokens, within its share of the prompt ({share})")


def _reindex(paths: KlawPaths) -> int:
    """Index what changed: the running engine's watcher does it; else here."""
    from klaw.cli.engine_cmds import engine_running

    if engine_running(paths):
        print("the engine reindexes the changed files")
        return 0
    from klaw.cli.memory_cmds import index_workspace

    return index_workspace()

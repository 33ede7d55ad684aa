"""`klaw engine`, `klaw status`, `klaw sessions`: the engine daemon and requests to it."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import TYPE_CHECKING

from klaw.paths import KlawPaths

if TYPE_CHECKING:
    from klaw.wire.protocol import ChannelHealth


def engine() -> int:
    from klaw.engine.daemon import main

    return main(KlawPaths.from_env())


def _err(msg: str) -> int:
    print(f"klaw: {msg}", file=sys.stderr)
    return 1


def status(json_out: bool = False) -> int:
    from klaw.engine import client
    from klaw.errors import KlawError

    try:
        r = asyncio.run(client.status(KlawPaths.from_env()))
    except KlawError as exc:
        return _err(str(exc))
    if json_out:
        print(r.model_dump_json(indent=2))
        return 0
    gateway = ", ".join(r.gateway.channels) if r.gateway else "not connected"
    print(f"engine  pid {r.pid}, version {r.version}, up {r.uptime_s:.0f}s")
    print(f"gateway {gateway}")
    for h in r.gateway.health if r.gateway else []:
        print(f"channel {_health(h)}")
    print(f"work    {r.in_flight} message(s) in flight")
    for name, count in sorted(r.counts.items()):
        print(f"store   {name}: {count}")
    for name, state in sorted(r.mcp.items()):
        print(f"mcp     {name}: {state}")
    return 0


def _health(h: ChannelHealth) -> str:
    """`telegram stale: no successful poll since 2026-11-27 04:12:03 UTC (timed out)`."""
    if h.state == "ok":
        return f"{h.name} ok"
    since = (
        h.last_ok.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
        if h.last_ok
        else "the gateway started"
    )
    detail = f" ({h.detail})" if h.detail else ""
    return f"{h.name} stale: no contact since {since}{detail}"


def sessions(json_out: bool = False) -> int:
    from klaw.engine import client
    from klaw.errors import KlawError

    try:
        r = asyncio.run(client.sessions(KlawPaths.from_env()))
    except KlawError as exc:
        return _err(str(exc))
    if json_out:
        print(r.model_dump_json(indent=2))
        return 0
    if not r.sessions:
        print("no sessions yet")
    for s in r.sessions:
        print(f"{s.chat_id:<28} {s.model or '-':<32} segment since {s.segment_start or '-'}")
    if r.unlisted:
        print(f"({r.unlisted} more in the store without a conversation folder)")
    return 0


def engine_running(paths: KlawPaths) -> bool:
    """True when an engine holds the lock (then it owns klaw.db and answers requests)."""
    from klaw.errors import StoreLocked
    from klaw.lock import EngineLock

    try:
        EngineLock.of(paths).acquire("a check").release()
    except StoreLocked:
        return True
    return False


def delegated_search(
    paths: KlawPaths,
    query: str,
    top_k: int,
    json_out: bool,
    kind: str | None = None,
    entity: str | None = None,
) -> int:
    """`klaw memory search` through the running engine's socket."""
    from klaw.engine import client
    from klaw.errors import KlawError

    try:
        r = asyncio.run(client.memory_search(paths, query, top_k, kind=kind, entity=entity))
    except KlawError as exc:
        return _err(str(exc))
    if json_out:
        print(json.dumps([h.model_dump() for h in r.hits], ensure_ascii=False, indent=2))
        return 0
    if not r.hits:
        print("no results")
    for i, h in enumerate(r.hits, 1):
        body = " ".join(h.content.split())
        print(f"{i:>2}. {h.citation}  (score {h.score:.4f}, {h.created_at})")
        print(f"    {body[:300]}")
    return 0

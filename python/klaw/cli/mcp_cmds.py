"""`klaw mcp serve`, and the MCP lines of `klaw doctor` (docs/mcp.md)."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable

    from klaw.config import EngineConfig
    from klaw.paths import KlawPaths

__all__ = ["check_mcp", "mcp_serve"]


class Doctor(Protocol):
    def ok(self, label: str) -> None: ...
    def warn(self, label: str, fix: str, details: Iterable[str] = ()) -> None: ...


def mcp_serve() -> int:
    from klaw.cli.mcp_serve import serve

    return serve()


def check_mcp(doc: Doctor, cfg: EngineConfig, paths: KlawPaths) -> None:
    """One line per enabled MCP server: the running engine's word on it when it runs,
    else whether its program can be found. Never a FAIL: the engine runs without it."""
    servers = {n: s for n, s in cfg.mcp_servers.items() if s.enabled}
    if not servers:
        return
    from klaw.engine import client
    from klaw.errors import KlawError
    from klaw.wire.protocol import Status

    try:
        live = client.call(paths, Status(), timeout=5.0)
        states = getattr(live, "mcp", {}) or {}
    except KlawError:
        states = {}
    for name, server in servers.items():
        label = f"MCP server {name}"
        state = states.get(name)
        if state is not None:
            if state.startswith("ready"):
                doc.ok(f"{label}: {state}")
            else:
                doc.warn(
                    f"{label}: {state}",
                    "see the engine log (`klaw logs`); its tools are not offered meanwhile",
                )
            continue
        if server.command is not None:
            from klaw.mcp.client import child_env

            found = shutil.which(server.command, path=child_env(server)["PATH"])
            if found is None:
                doc.warn(
                    f"{label}: command {server.command!r} not found on PATH",
                    f"install it, or give its full path in engine.yaml mcpServers.{name}.command",
                )
            else:
                doc.ok(f"{label}: {found} (starts with the engine)")
        else:
            doc.ok(f"{label}: {server.url} (connects when the engine starts)")

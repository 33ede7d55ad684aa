"""The engine's MCP servers: started in the background, offered as tool groups.

Nothing here imports the `mcp` SDK: each server's task imports it in a worker thread
(seconds on a Pi, not on the event loop), and only when a server is enabled. A server
that fails to start is logged and shown by `klaw doctor` (`status()`); the engine runs
on without it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from klaw.mcp.approvals import Approvals, Mode

if TYPE_CHECKING:
    from klaw.config.mcp import McpServerConfig
    from klaw.mcp.client import McpServer
    from klaw.mcp.tools import McpGroup
    from klaw.tools.groups import ToolGroup

__all__ = ["McpManager"]

log = logging.getLogger("klaw.mcp")

#: How long a stopping engine lets its servers stop (stdin closed, SIGTERM, SIGKILL).
STOP_TIMEOUT_S: Final = 8.0


class McpManager:
    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        *,
        approvals_path: Path | None = None,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.configs = {name: cfg for name, cfg in servers.items() if cfg.enabled}
        self.approvals = Approvals(approvals_path)
        self._environ = environ
        self.servers: dict[str, McpServer] = {}
        self._groups: list[McpGroup] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Starts every enabled server in the background; returns at once (each
        server's task imports the SDK in a worker thread first)."""
        from klaw.mcp.client import McpServer
        from klaw.mcp.tools import McpGroup

        for name, cfg in self.configs.items():
            server = McpServer(name, cfg, environ=self._environ)
            self.servers[name] = server
            self._groups.append(McpGroup(server, self.approvals))
            self._tasks.append(asyncio.create_task(server.run(self._stop), name=f"mcp-{name}"))

    def groups(self) -> list[ToolGroup]:
        return list(self._groups)

    def modes(self) -> dict[str, Mode]:
        return {g.server.name: g.mode() for g in self._groups}

    def approve(self, chat_id: str, arg: str, group: bool) -> str:
        """The reply to `/approve [server]` (see klaw.mcp.approvals)."""
        return self.approvals.approve(chat_id, arg, self.modes(), group)

    def status(self) -> dict[str, str]:
        """Server -> `ready: N tools` / `failed: why` / ..., for `klaw status` and doctor."""
        out: dict[str, str] = {}
        for name, server in self.servers.items():
            if server.state == "ready":
                out[name] = f"ready: {len(server.tools)} tool(s)"
            else:
                out[name] = server.state + (f": {server.error}" if server.error else "")
        return out

    async def aclose(self) -> None:
        """Stops every server (children and their process groups)."""
        self._stop.set()
        if not self._tasks:
            return
        done, pending = await asyncio.wait(self._tasks, timeout=STOP_TIMEOUT_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.error("MCP server task failed: %s", task.exception())

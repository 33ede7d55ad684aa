"""One MCP server kept running: connect, list its tools, call them, restart it when it dies.

`McpServer.run` is the server's supervisor task: it starts the server (a child process
over stdio, or a streamable HTTP session), lists its tools, and waits; when the
process exits or the connection fails it starts it again after the shared back-off
(klaw.retry: 1 s doubling to 5 min), forever, until the engine stops. A server that
cannot start is `failed` with the reason (the log, `klaw doctor`, and the model's line
for it say so); the engine goes on without it.

The `mcp` SDK is imported by the supervisor task, in a worker thread (seconds on a Pi:
not on the event loop, and not before the engine is up).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import shutil
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Final, Literal

from klaw import __version__
from klaw.errors import ToolError
from klaw.mcp.limits import CONTROLS
from klaw.retry import Backoff

if TYPE_CHECKING:
    import mcp.types as types
    from mcp.client.session import ClientSession

    from klaw.config.mcp import McpServerConfig
    from klaw.mcp.stdio import StdioChild

__all__ = ["RESTART_BACKOFF", "McpServer", "child_env"]

log = logging.getLogger("klaw.mcp")

#: Restarts of a server that died: 1 s, 2 s, 4 s ... at most 5 minutes apart.
RESTART_BACKOFF: Final = Backoff(1.0, 2.0, 300.0)
#: Starting (spawn or connect, initialize, list tools) may take this long.
START_TIMEOUT_S: Final = 30.0
#: A server up this long counts as started fine (its restarts wait from 1 s again).
STABLE_S: Final = 60.0
#: Tools listed per server at most (pages of tools/list are followed up to this).
MAX_TOOLS: Final = 1000
#: A tool whose argument schema's JSON is longer is not offered (~4k tokens).
MAX_SCHEMA_CHARS: Final = 16_000
#: PATH for a child when the engine has none.
DEFAULT_PATH: Final = "/usr/local/bin:/usr/bin:/bin"

State = Literal["starting", "ready", "restarting", "failed", "stopped"]


def child_env(config: McpServerConfig, environ: dict[str, str] | None = None) -> dict[str, str]:
    """A stdio server's whole environment: PATH and HOME, then what its `env` names.

    PATH finds the interpreter a server is launched with (`uvx`, `npx`, a script's
    `#!/usr/bin/env python3`), HOME is where such launchers keep their caches; neither
    holds a secret. Nothing else of the engine's environment (its API keys) is passed.
    """
    environ = dict(os.environ) if environ is None else environ
    base = {"PATH": environ.get("PATH") or DEFAULT_PATH}
    if environ.get("HOME"):
        base["HOME"] = environ["HOME"]
    return base | dict(config.env)


class McpServer:
    """A configured server, its state, and its tools as last listed."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        *,
        backoff: Backoff = RESTART_BACKOFF,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.backoff = backoff
        self._environ = environ
        self.state: State = "starting"
        self.error: str | None = None  # why it is not ready (the last failure)
        self.tools: list[types.Tool] = []  # as listed, after tools.allow / tools.deny
        self.description = ""  # what the server says of itself (instructions or title)
        self.starts = 0  # connections made (1 + restarts)
        self.child: StdioChild | None = None
        self._session: ClientSession | None = None
        self._dead = asyncio.Event()  # the connection failed: reconnect
        self._relist = asyncio.Event()  # the server's tools changed: list them again
        #: Set at each state change; tests and the bench wait on it.
        self.changed = asyncio.Event()
        self.on_change: list[Callable[[McpServer], None]] = []

    def _set(self, state: State, error: str | None = None) -> None:
        self.state, self.error = state, CONTROLS.sub("", error) if error else error
        self.changed.set()
        self.changed = asyncio.Event()
        for hook in self.on_change:
            hook(self)

    async def wait_state(self, *states: State, timeout: float = 60.0) -> State:
        """Waits until the server is in one of `states` (tests, the bench)."""
        async with asyncio.timeout(timeout):
            while self.state not in states:
                await self.changed.wait()
        return self.state

    # ------------------------------------------------------------------ supervisor

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.to_thread(importlib.import_module, "klaw.mcp.stdio")  # the SDK
        failures = 0
        while not stop.is_set():
            self._dead = asyncio.Event()
            up = time.monotonic()
            try:
                async with self._connect() as session:
                    await self._serve(session, stop)
            except Exception as exc:  # a server's failure never reaches the engine
                failures += 1
                self._failed(exc, failures)
            else:
                if stop.is_set():
                    break
                # It was up and ended: restart soon, later if it keeps dying young.
                failures = failures + 1 if time.monotonic() - up < STABLE_S else 1
                self._set("restarting", self._ended())
                log.warning("MCP server %s stopped (%s): restarting", self.name, self.error)
            finally:
                self._session = None
            if stop.is_set():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.backoff.delay(failures))
        self._set("stopped", None)

    def _failed(self, exc: BaseException, failures: int) -> None:
        why = _describe(exc)
        if self.child is not None and (tail := self.child.why()):
            why = f"{why} ({tail})"
        wait = self.backoff.delay(failures)
        self._set("failed", why)
        log.warning("MCP server %s failed: %s; trying again in %.0f s", self.name, why, wait)

    def _ended(self) -> str:
        if self.child is not None and self.child.proc.returncode is not None:
            return self.child.why() or "the process ended"
        return self.error or "the connection ended"

    async def _serve(self, session: ClientSession, stop: asyncio.Event) -> None:
        """Lists the tools, then waits for the engine to stop or the server to die."""
        async with asyncio.timeout(START_TIMEOUT_S):
            init = await session.initialize()
            self.tools = await self._list(session)
        about = init.server_info
        self.description = _first_line(
            init.instructions or about.description or about.title or about.name or ""
        )
        self._session = session
        self.starts += 1
        self._set("ready", None)
        log.info("MCP server %s ready: %d tool(s)", self.name, len(self.tools))
        while True:
            waits: list[asyncio.Future[object]] = [
                asyncio.ensure_future(stop.wait()),
                asyncio.ensure_future(self._dead.wait()),
            ]
            if self.child is not None:
                waits.append(asyncio.ensure_future(self.child.proc.wait()))
            relist: asyncio.Future[object] = asyncio.ensure_future(self._relist.wait())
            try:
                await asyncio.wait([*waits, relist], return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in [*waits, relist]:
                    w.cancel()
            if any(w.done() and not w.cancelled() for w in waits) or not self._relist.is_set():
                return
            # The server said its tools changed (notifications/tools/list_changed).
            self._relist.clear()
            async with asyncio.timeout(START_TIMEOUT_S):
                self.tools = await self._list(session)
            log.info("MCP server %s lists %d tool(s) now", self.name, len(self.tools))
            self._set("ready", None)

    async def _on_message(self, message: Any) -> None:
        import mcp.types as types

        if isinstance(message, types.ToolListChangedNotification):
            self._relist.set()

    async def _list(self, session: ClientSession) -> list[types.Tool]:
        import mcp.types as types

        listed: list[types.Tool] = []
        cursor: str | None = None
        while len(listed) < MAX_TOOLS:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            listed += page.tools
            cursor = page.next_cursor
            if not cursor:
                break
        if len(listed) > MAX_TOOLS:
            log.warning(
                "MCP server %s lists over %d tools: the rest are left out", self.name, MAX_TOOLS
            )
        return [t for t in listed[:MAX_TOOLS] if self._allowed(t.name) and self._small(t)]

    def _small(self, tool: types.Tool) -> bool:
        """A schema over MAX_SCHEMA_CHARS would cost more than whole prompts: left out."""
        size = len(json.dumps(tool.input_schema, ensure_ascii=False, default=str))
        if size <= MAX_SCHEMA_CHARS:
            return True
        log.warning(
            "MCP server %s: tool %s left out: its argument schema has %d characters (over %d)",
            self.name,
            tool.name,
            size,
            MAX_SCHEMA_CHARS,
        )
        return False

    def _allowed(self, tool: str) -> bool:
        from fnmatch import fnmatchcase

        rules = self.config.tools
        if rules.allow is not None and not any(fnmatchcase(tool, p) for p in rules.allow):
            return False
        return not any(fnmatchcase(tool, p) for p in rules.deny)

    @contextlib.asynccontextmanager
    async def _connect(self) -> AsyncIterator[ClientSession]:
        import mcp.types as types
        from mcp.client.session import ClientSession

        if self.state != "failed":  # a failed server stays failed (and why) while it retries
            self._set("starting" if self.starts == 0 else "restarting", self.error)
        info = types.Implementation(name="klaw", version=__version__)
        async with self._streams() as (read, write):
            session = ClientSession(read, write, client_info=info, message_handler=self._on_message)
            async with session:
                yield session

    @contextlib.asynccontextmanager
    async def _streams(self) -> AsyncIterator[tuple[Any, Any]]:
        from klaw.mcp.stdio import stdio_streams

        config = self.config
        if config.command is not None:
            env = child_env(config, self._environ)
            program = shutil.which(config.command, path=env["PATH"])
            if program is None:
                raise FileNotFoundError(f"command {config.command!r} not found on PATH")
            self.child = None

            def started(child: StdioChild) -> None:
                self.child = child

            async with stdio_streams(program, config.args, env, config.cwd, started) as streams:
                yield streams
            return
        from mcp.client.streamable_http import streamable_http_client

        from klaw.mcp.http import capped_client

        assert config.url is not None
        async with capped_client(dict(config.headers)) as http:
            async with streamable_http_client(config.url, http_client=http) as streams:
                yield streams

    # ------------------------------------------------------------------ calls

    async def call(self, tool: str, args: dict[str, Any]) -> types.CallToolResult:
        """Calls `tool`; raises ToolError (not ready, timed out, the server failed)."""
        import mcp.types as types
        from mcp.shared.exceptions import MCPError

        session = self._session
        if session is None or self.state != "ready":
            why = f": {self.error}" if self.error else ""
            raise ToolError(f"MCP server {self.name} is not available ({self.state}{why})")
        timeout = self.config.timeout_seconds
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(timeout + 1.0):
                result = await session.call_tool(tool, args, read_timeout_seconds=timeout)
        except TimeoutError:
            raise ToolError(
                f"{tool} of MCP server {self.name} did not answer within {timeout:g} s"
            ) from None
        except MCPError as exc:
            if _connection_lost(exc) or (self.child and self.child.proc.returncode is not None):
                if self.child is not None:  # its exit status says why, in a moment
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(self.child.proc.wait()), 1.0)
                why = self._ended()
                self._dead.set()
                if self.state == "ready":
                    self._set("restarting", why)
                raise ToolError(
                    f"MCP server {self.name} stopped during the call ({why}); it is being restarted"
                ) from None
            if exc.code == types.REQUEST_TIMEOUT or time.monotonic() - t0 >= timeout:
                raise ToolError(
                    f"{tool} of MCP server {self.name} did not answer within {timeout:g} s"
                ) from None
            raise ToolError(f"MCP server {self.name} refused the call: {exc}") from None
        except (OSError, ConnectionError) as exc:
            self._dead.set()
            if self.state == "ready":
                self._set("restarting", _describe(exc))
            raise ToolError(f"MCP server {self.name} cannot be reached: {_describe(exc)}") from None
        if not isinstance(result, types.CallToolResult):
            raise ToolError(f"MCP server {self.name} answered {tool} with no result")
        return result


def _connection_lost(exc: Any) -> bool:
    from mcp.types import CONNECTION_CLOSED

    return exc.code == CONNECTION_CLOSED or "closed" in str(exc).lower()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions[:3])
    if isinstance(exc, TimeoutError):
        return f"it did not start within {START_TIMEOUT_S:g} s"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _first_line(text: str, limit: int = 200) -> str:

    line = " ".join(CONTROLS.sub("", text).strip().splitlines()[:1]).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"

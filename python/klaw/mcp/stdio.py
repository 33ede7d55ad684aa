"""The stdio transport: an MCP server as a child process, JSON-RPC a line each way.

Not the SDK's `stdio_client`, for what it cannot be told: the child's environment is
exactly the `env` given (the SDK adds HOME, LOGNAME, SHELL, TERM, USER to it), it runs
in a process group of its own (a server's own children are stopped with it) and it
dies with the engine even when the engine is killed (PR_SET_PDEATHSIG: SIGKILL when
the thread that started it ends). Stopping closes its stdin, then SIGTERMs and SIGKILLs
the whole group.

What a server writes is data: a stdout line that is not JSON-RPC is logged (the first
few of a connection, then a count) and, when it carries a request's id (an answer
nested too deep to read), that request fails at once saying why instead of waiting
for its timeout; control characters (terminal escapes) are taken out of its stderr
before it is kept or logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import re
import signal
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final

import anyio
from mcp.shared.message import SessionMessage
from mcp.types import INTERNAL_ERROR, ErrorData, JSONRPCError, jsonrpc_message_adapter

from klaw.mcp.limits import CONTROLS, MAX_MESSAGE_BYTES

__all__ = ["MAX_MESSAGE_BYTES", "StdioChild", "stdio_streams"]

log = logging.getLogger("klaw.mcp")

#: The server's grace after its stdin closes, then after SIGTERM.
STOP_GRACE_S: Final = 2.0
#: Lines of the server's stderr kept to explain a failure.
STDERR_LINES: Final = 20
#: Lines that are not JSON-RPC logged per connection (then one line with the count).
GARBAGE_LOGGED: Final = 3
_ID: Final = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,200}")')

_PR_SET_PDEATHSIG: Final = 1
_libc: Any = None


def _die_with_parent(parent: int) -> Callable[[], None]:
    """The child's first act: SIGKILL when its parent (thread) ends. Runs between fork
    and exec, so it calls only what was loaded before the fork."""
    global _libc
    if _libc is None:
        with contextlib.suppress(OSError):
            _libc = ctypes.CDLL(None, use_errno=True)
    prctl = getattr(_libc, "prctl", None)

    def run() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return run


class StdioChild:
    """A running server process: its pid, exit and the tail of its stderr."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self.garbage = 0  # stdout lines that were not JSON-RPC

    @property
    def pid(self) -> int:
        return self.proc.pid

    def why(self) -> str:
        """How the process ended and what it said last, for the log and `klaw doctor`."""
        code = self.proc.returncode
        ended = ""
        if code is not None:
            ended = f"exited with {code}" if code >= 0 else f"killed by signal {-code}"
        tail = " | ".join(list(self.stderr)[-3:])
        return "; ".join(p for p in (ended, tail[-400:]) if p)

    async def _exited(self, within: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), within)
        return self.proc.returncode is not None

    async def stop(self) -> None:
        """stdin closed, then SIGTERM, then SIGKILL to the whole process group."""
        proc = self.proc
        if proc.stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                proc.stdin.close()
        if not await self._exited(STOP_GRACE_S):
            _kill_group(proc.pid, signal.SIGTERM)
            if not await self._exited(STOP_GRACE_S):
                _kill_group(proc.pid, signal.SIGKILL)
                await proc.wait()
        _kill_group(proc.pid, signal.SIGKILL)  # the group may outlive its leader


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _unreadable(
    child: StdioChild, command: str, line: bytes, exc: ValueError
) -> SessionMessage | Exception:
    """What the session gets for a line that is not JSON-RPC: an error answering the
    request whose id it names (so the request fails now), else the exception."""
    child.garbage += 1
    reason = CONTROLS.sub("", str(exc).splitlines()[1] if "\n" in str(exc) else str(exc))
    reason = reason.strip()[:160]
    if child.garbage <= GARBAGE_LOGGED:
        shown = CONTROLS.sub("", line[:80].decode("utf-8", "replace")).strip()
        log.warning(
            "MCP server %s wrote a line that is not JSON-RPC (%s): %r", command, reason, shown
        )
    elif child.garbage == GARBAGE_LOGGED + 1:
        log.warning("MCP server %s: more lines that are not JSON-RPC; not logged", command)
    found = _ID.search(line[:400])
    if found is None or not line.lstrip().startswith(b"{"):
        return exc
    msg_id: int | str = json.loads(found.group(1))
    error = ErrorData(code=INTERNAL_ERROR, message=f"its answer could not be read: {reason}")
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=msg_id, error=error))


@contextlib.asynccontextmanager
async def stdio_streams(
    command: str,
    args: list[str],
    env: Mapping[str, str],
    cwd: str | None = None,
    on_start: Callable[[StdioChild], None] | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """(read, write) streams of `SessionMessage`s for the SDK's `ClientSession`.

    Raises OSError when the program cannot be started. The read stream ends when the
    process does (its pending requests then fail at once).
    """
    proc = await asyncio.create_subprocess_exec(
        command,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,  # its own process group
        preexec_fn=_die_with_parent(os.getpid()),
        limit=MAX_MESSAGE_BYTES,
    )
    child = StdioChild(proc)
    if on_start is not None:
        on_start(child)
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_stdout() -> None:
        assert proc.stdout is not None
        async with read_send:
            while True:
                try:
                    line = await proc.stdout.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    log.warning(
                        "MCP server %s wrote a message over %d MB: stopping it",
                        command,
                        MAX_MESSAGE_BYTES >> 20,
                    )
                    _kill_group(proc.pid, signal.SIGKILL)
                    return
                if not line:
                    return
                if not line.strip():
                    continue
                try:
                    item: SessionMessage | Exception = SessionMessage(
                        jsonrpc_message_adapter.validate_json(line, by_name=False)
                    )
                except ValueError as exc:
                    item = _unreadable(child, command, line, exc)
                try:
                    await read_send.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return

    async def write_stdin() -> None:
        assert proc.stdin is not None
        async with write_recv:
            async for message in write_recv:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    proc.stdin.write(data.encode() + b"\n")
                    await proc.stdin.drain()
                except (OSError, RuntimeError):
                    return

    async def read_stderr() -> None:
        assert proc.stderr is not None
        while True:
            try:
                line = await proc.stderr.readline()
            except (ValueError, asyncio.LimitOverrunError):
                continue  # an endless line: skip it
            if not line:
                return
            text = CONTROLS.sub("", line.decode("utf-8", "replace")).rstrip()[:500]
            if text:
                child.stderr.append(text)
                log.debug("MCP server %s: %s", command, text)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_stdout)
            tg.start_soon(write_stdin)
            tg.start_soon(read_stderr)
            try:
                yield read_recv, write_send
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await child.stop()
            for stream in (read_recv, write_send, read_send, write_recv):
                await stream.aclose()

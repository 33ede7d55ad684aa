"""A small client for the CLI's request/response calls over the engine socket.

from klaw.engine import client
result = await client.status(paths)            # StatusResult
hits = (await client.memory_search(paths, "wifi")).hits
msg = client.call(paths, Sessions())           # blocking, for typer commands
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TypeVar

from klaw.errors import KlawError
from klaw.paths import KlawPaths
from klaw.wire.protocol import (
    MAX_ENGINE_LINE_BYTES,
    Error,
    LineReader,
    MemorySearch,
    MemorySearchResult,
    Message,
    ProtocolError,
    Request,
    Sessions,
    SessionsResult,
    Status,
    StatusResult,
    encode,
)

__all__ = [
    "EngineNotRunning",
    "EngineRequestError",
    "EngineTimeout",
    "call",
    "memory_search",
    "request",
    "sessions",
    "status",
]

DEFAULT_TIMEOUT = 30.0
_T = TypeVar("_T", StatusResult, SessionsResult, MemorySearchResult)


class EngineNotRunning(KlawError, ConnectionError):
    """Nothing listens on the engine socket."""


class EngineTimeout(KlawError, TimeoutError):
    """The engine accepted the request but did not answer in time."""


class EngineRequestError(KlawError):
    """The engine answered with an `error` (or with something unexpected)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"the engine refused the request ({code}): {message}")
        self.code = code


async def request(paths: KlawPaths, msg: Request, timeout: float = DEFAULT_TIMEOUT) -> Message:
    """Sends one request and returns the engine's reply (an `Error` is returned, not raised).

    Raises `EngineNotRunning` when the socket is missing or refuses, `EngineTimeout`
    after `timeout` seconds, `EngineRequestError` when the reply cannot be read.
    """
    path = paths.socket
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(path)), timeout)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise EngineNotRunning(
            f"the engine is not running: start it with `klaw engine` (no engine at {path})"
        ) from exc
    except TimeoutError as exc:
        raise EngineTimeout(f"the engine did not accept a connection within {timeout:g} s") from exc
    except OSError as exc:
        raise EngineNotRunning(
            f"cannot reach the engine at {path}: {exc.strerror or exc}; start it with `klaw engine`"
        ) from exc
    try:
        writer.write(encode(msg))
        await writer.drain()
        try:
            reply = await asyncio.wait_for(
                _read_reply(LineReader(reader, MAX_ENGINE_LINE_BYTES), msg.id), timeout
            )
        except TimeoutError as exc:
            raise EngineTimeout(
                f"the engine did not answer {msg.type} within {timeout:g} s"
            ) from exc
    except (ConnectionError, BrokenPipeError) as exc:
        raise EngineNotRunning(
            f"the engine closed the connection ({exc}); is it shutting down?"
        ) from exc
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
    return reply


async def _read_reply(lines: LineReader, ref: str) -> Message:
    while True:
        try:
            msg = await lines.message()
        except ProtocolError as exc:
            raise EngineRequestError(exc.code, exc.message) from exc
        if msg is None:
            raise EngineNotRunning("the engine closed the connection without answering")
        if getattr(msg, "id", None) == ref or (isinstance(msg, Error) and msg.ref in (ref, None)):
            return msg
        # Anything else (e.g. a `shutdown` notice) is not our answer: keep reading.


async def _typed(paths: KlawPaths, msg: Request, want: type[_T], timeout: float) -> _T:
    reply = await request(paths, msg, timeout)
    if isinstance(reply, Error):
        raise EngineRequestError(reply.code, reply.message)
    if not isinstance(reply, want):
        raise EngineRequestError("unexpected_message", f"got {reply.type} for {msg.type}")
    return reply


async def status(paths: KlawPaths, timeout: float = DEFAULT_TIMEOUT) -> StatusResult:
    return await _typed(paths, Status(), StatusResult, timeout)


async def sessions(paths: KlawPaths, timeout: float = DEFAULT_TIMEOUT) -> SessionsResult:
    return await _typed(paths, Sessions(), SessionsResult, timeout)


async def memory_search(
    paths: KlawPaths,
    query: str,
    top_k: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    *,
    kind: str | None = None,
    entity: str | None = None,
) -> MemorySearchResult:
    req = MemorySearch(query=query, top_k=top_k, kind=kind, entity=entity)
    return await _typed(paths, req, MemorySearchResult, timeout)


def call(paths: KlawPaths, msg: Request, timeout: float = DEFAULT_TIMEOUT) -> Message:
    """`request` for synchronous callers (typer commands)."""
    return asyncio.run(request(paths, msg, timeout))

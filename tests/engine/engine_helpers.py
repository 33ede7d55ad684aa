"""Helpers for engine tests: an engine running in the test's loop, and a socket peer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from klaw.engine.daemon import run
from klaw.paths import KlawPaths
from klaw.wire.protocol import LineReader, Message, decode, encode

#: Upper bound for any single wait in these tests: generous, so that a loaded machine
#: (a build, another suite) slows them down without failing them.
T = 30.0


@dataclass
class Engine:
    paths: KlawPaths
    stop: asyncio.Event
    task: asyncio.Task[int]


@contextlib.asynccontextmanager
async def running(paths: KlawPaths, **kwargs: Any) -> AsyncIterator[Engine]:
    """Starts `run()` in this loop and stops it (awaiting exit code 0) on the way out."""
    stop = asyncio.Event()
    ready = asyncio.Event()
    task = asyncio.create_task(run(paths, stop=stop, ready=ready, **kwargs))
    waiter = asyncio.create_task(ready.wait())
    done, _ = await asyncio.wait({task, waiter}, timeout=T, return_when=asyncio.FIRST_COMPLETED)
    if waiter not in done:
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        code = task.result() if task.done() else None
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise AssertionError(f"engine did not start (exit code {code})")
    engine = Engine(paths, stop, task)
    try:
        yield engine
    finally:
        stop.set()
        assert await asyncio.wait_for(task, T) == 0


class Peer:
    """One client connection speaking the protocol (a gateway or a CLI)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.lines = LineReader(reader)
        self.writer = writer

    @classmethod
    async def connect(cls, paths: KlawPaths) -> Peer:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(paths.socket)), T)
        return cls(reader, writer)

    async def send(self, msg: BaseModel | bytes) -> None:
        self.writer.write(msg if isinstance(msg, bytes) else encode(msg))
        await self.writer.drain()

    async def recv(self, timeout: float = T) -> Message:
        line = await asyncio.wait_for(self.lines.readline(), timeout)
        assert line is not None, "connection closed by the engine"
        return decode(line)

    async def at_eof(self) -> bool:
        return await asyncio.wait_for(self.lines.readline(), T) is None

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


@contextlib.asynccontextmanager
async def peer(paths: KlawPaths) -> AsyncIterator[Peer]:
    p = await Peer.connect(paths)
    try:
        yield p
    finally:
        await p.close()

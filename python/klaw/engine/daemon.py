"""`klaw engine`: the engine daemon's life cycle (design §2.4, conventions "Daemons").

    lock → memory → socket → serve until stop → shutdown → close memory → release lock

Shutdown follows aiogram's `start_polling`: SIGTERM/SIGINT set an Event; the server
stops accepting, tells the gateway `shutdown`, awaits in-flight messages up to
`shutdown_timeout` (cancelling and logging the rest), closes its connections and
removes the socket; then the store is closed and the lock released, in `finally`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from klaw.engine.server import EngineServer, InboundHandler
from klaw.errors import KlawError, StoreLocked
from klaw.lock import EngineLock
from klaw.paths import KlawPaths

if TYPE_CHECKING:
    from klaw.memory.api import Memory

log = logging.getLogger("klaw.engine")


def _holder(paths: KlawPaths) -> str:
    try:
        return paths.engine_lock.read_text().strip() or "another process"
    except OSError:
        return "another process"


async def run(
    paths: KlawPaths,
    memory_factory: Callable[[], Memory] | None = None,
    handler: InboundHandler | None = None,
    stop: asyncio.Event | None = None,
    shutdown_timeout: float = 60.0,
    *,
    ready: asyncio.Event | None = None,
) -> int:
    """Runs the engine until `stop` is set (or SIGTERM/SIGINT); returns the exit code.

    `memory_factory` is called once the lock is held (in a thread: loading the model
    blocks); without it the engine runs without memory. Signal handlers are installed
    only when `stop` is None. `ready` is set once the socket accepts connections.
    Failures to start (another engine running, socket path taken, memory failing to
    open) are logged on `klaw.engine` and return 1.
    """
    lock = EngineLock(paths.engine_lock)
    try:
        lock.acquire("a second engine")
    except StoreLocked:
        log.error(
            "another engine is already running (%s, lock %s): stop it first "
            "(`systemctl --user stop klaw-engine`) or use that one",
            _holder(paths),
            paths.engine_lock,
        )
        return 1
    loop = asyncio.get_running_loop()
    signals: list[signal.Signals] = []
    memory: Memory | None = None
    server: EngineServer | None = None
    try:
        if memory_factory is not None:
            memory = await asyncio.to_thread(memory_factory)
        server = EngineServer(
            paths, memory=memory, handler=handler, shutdown_timeout=shutdown_timeout
        )
        await server.start()
        if stop is None:
            stop = asyncio.Event()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
                signals.append(sig)
        log.info("engine started (pid %d)", server.pid)
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("engine stopping")
        return 0
    except KlawError as exc:
        log.error("the engine could not start: %s", exc)
        return 1
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        try:
            if server is not None:
                await server.close()
        finally:
            try:
                if memory is not None:
                    memory.close()
            finally:
                lock.release()
                log.info("engine stopped")


def main(paths: KlawPaths | None = None, *, with_memory: bool = True) -> int:
    """Blocking entry point for `klaw engine`: logs to stderr, returns the exit code."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    paths = paths or KlawPaths.from_env()
    factory = functools.partial(open_memory, paths) if with_memory else None
    return asyncio.run(run(paths, factory))


def open_memory(paths: KlawPaths) -> Memory:
    """The engine's memory: klaw.db and the embedding model named in engine.yaml."""
    from klaw.memory.api import Memory

    return Memory.open(paths=paths)

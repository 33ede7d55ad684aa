"""The life cycle both daemons (`klaw engine`, `klaw gateway`) share, around their own
start and stop (conventions "Daemons").

    start (the daemon's) → run_daemon: signals, READY=1, watchdog, serve until stop,
    STOPPING=1 → stop (the daemon's, in its `finally`)

A failure to start is one log line that says what to do (`start_failed`), and exit 1.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

from klaw.errors import KlawError, os_error_line
from klaw.sdnotify import notify, watchdog

__all__ = ["run_daemon", "start_failed"]

T = TypeVar("T")


async def run_daemon(
    serve: Callable[[asyncio.Event], Awaitable[T]], stop: asyncio.Event | None
) -> T:
    """Serves `serve(stop)` once the daemon has started, and returns what it returns.

    Without a `stop` of the caller's (tests pass one), SIGTERM and SIGINT set a new one,
    until `serve` returned. systemd hears READY=1 now, watchdog pings from the loop until
    `stop` (a hung loop stops them), and STOPPING=1 when `serve` returned."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        notify("READY=1")  # systemd (Type=notify): the daemon serves
        pinger = asyncio.create_task(watchdog(stop))
        try:
            return await serve(stop)
        finally:
            notify("STOPPING=1")
            stop.set()
            await pinger
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def start_failed(log: logging.Logger, name: str, exc: KlawError | OSError) -> int:
    """Logs why the daemon `name` could not start (an OSError of its own dirs, read-only,
    full or foreign, as one line with the cure); returns the exit code, 1."""
    reason = os_error_line(exc) if isinstance(exc, OSError) else str(exc)
    log.error("the %s could not start: %s", name, reason)
    return 1

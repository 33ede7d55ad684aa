"""systemd's readiness and watchdog protocol (sd_notify), without libsystemd.

Under a `Type=notify` unit systemd passes `NOTIFY_SOCKET` (a path, or `@name` for an
abstract socket); a daemon sends `READY=1` once it serves, `WATCHDOG=1` at least every
`WATCHDOG_USEC`/2 (systemd restarts it when the pings stop: a hung event loop is caught,
not only a dead process) and `STOPPING=1` when it begins to stop. Without the variable
every call is a no-op, so the daemons run the same by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

__all__ = ["notify", "watchdog", "watchdog_interval"]


def notify(state: str) -> bool:
    """Sends `state` ("READY=1", ...) to systemd; False when not under a notify unit."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            s.sendall(state.encode())
    except OSError:
        return False
    return True


def watchdog_interval() -> float | None:
    """Seconds between pings (half systemd's timeout), or None without a watchdog."""
    usec = os.environ.get("WATCHDOG_USEC", "")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec.isdigit() or int(usec) <= 0 or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2_000_000


async def watchdog(stop: asyncio.Event) -> None:
    """Pings from the event loop until `stop`: a loop that hangs stops the pings."""
    interval = watchdog_interval()
    if interval is None:
        return
    while not stop.is_set():
        notify("WATCHDOG=1")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)

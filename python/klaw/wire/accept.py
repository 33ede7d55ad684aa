"""Klaw's Unix sockets (engine.sock, console.sock): the private bind and the accept loop.

`bind_private_socket` makes a listening socket only its owner can use: mode 600 from
birth (umask, then chmod in case a file system ignores it), in a 700 directory. A file
at the path that is not a socket is never deleted; a socket someone listens on is not
stolen; one nobody listens on (a daemon that did not stop cleanly) is replaced. The
socket remembers its inode, so `unlink` at the end removes it only if it is still this
process's (not a successor's that bound the path since).

asyncio's own server, out of file descriptors (EMFILE), logs a traceback for every
failed accept: measured here, 820 of them in 3 s with 80 clients against a limit of 48,
and the log fills while nothing else can be served. This loop logs one line when it
runs out (and every 30th failure after), then waits 1 s doubling to 8 s, and accepts
again once fds are free. Each connection is handed to `on_connect(reader, writer)` in
a task of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from klaw.retry import Backoff

__all__ = ["AcceptLoop", "PrivateSocket", "bind_private_socket"]

OnConnect = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

# Out of a resource: waiting (for clients to leave) is the only cure.
_EXHAUSTED: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_BACKOFF: Final = Backoff(1.0, 2.0, 8.0)


class PrivateSocket:
    """A listening, non-blocking Unix socket bound at `path` as inode `ino`."""

    def __init__(self, sock: socket.socket, path: Path, ino: int) -> None:
        self.sock = sock
        self.path = path
        self.ino = ino

    def unlink(self) -> None:
        """Removes the socket file if it is still the one bound here."""
        with contextlib.suppress(FileNotFoundError):
            if self.path.lstat().st_ino == self.ino:
                self.path.unlink()


def bind_private_socket(
    path: Path, owner: str, error: Callable[[str], Exception], log: logging.Logger
) -> PrivateSocket:
    """Binds and listens on `path` for `owner` ("engine", "gateway": named in errors and
    the log); any failure is `error(message)`, with a message that says what to do."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise error(f"cannot create {path.parent}: {exc.strerror or exc}") from exc
    _remove_stale(path, owner, error, log)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ino: int | None = None
    try:
        old = os.umask(0o177)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        ino = path.lstat().st_ino
        sock.listen(16)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        if ino is not None:
            PrivateSocket(sock, path, ino).unlink()
        raise error(f"cannot listen on {path}: {exc.strerror or exc}") from exc
    return PrivateSocket(sock, path, ino)


def _remove_stale(
    path: Path, owner: str, error: Callable[[str], Exception], log: logging.Logger
) -> None:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise error(f"{path} exists and is not a socket; move it away and start the {owner} again")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        pass  # nobody listens: a daemon that did not stop cleanly left it behind
    else:
        raise error(f"another process serves {path}; stop it first")
    finally:
        probe.close()
    log.warning("replacing the socket %s left by a %s that did not stop cleanly", path, owner)
    path.unlink(missing_ok=True)


class AcceptLoop:
    """Accepts on a listening, non-blocking Unix socket until `close`."""

    def __init__(self, sock: socket.socket, on_connect: OnConnect, log: logging.Logger) -> None:
        self._sock = sock
        self._on_connect = on_connect
        self._log = log
        self._task: asyncio.Task[None] | None = None
        self._conns: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="klaw-accept")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except OSError as exc:
                failures += 1
                wait = _BACKOFF.delay(failures)
                if failures == 1 or failures % 30 == 0:
                    self._log.warning(
                        "cannot accept connections (%s, %d open); retrying every %.0f s",
                        exc.strerror or exc,
                        len(self._conns),
                        wait,
                    )
                if exc.errno not in _EXHAUSTED:
                    wait = max(wait, 1.0)  # unknown trouble: never spin on it either
                await asyncio.sleep(wait)
                continue
            if failures:
                self._log.info("accepting connections again")
                failures = 0
            task = asyncio.create_task(self._serve(conn))
            self._conns.add(task)
            task.add_done_callback(self._conns.discard)

    async def _serve(self, conn: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_unix_connection(sock=conn)
        except OSError:
            conn.close()
            return
        await self._on_connect(reader, writer)

    def close(self) -> None:
        """Stops accepting (connections being served go on) and closes the socket."""
        if self._task is not None:
            self._task.cancel()
        self._sock.close()

    async def wait_closed(self) -> None:
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

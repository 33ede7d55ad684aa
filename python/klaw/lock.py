"""Process locks: a `flock` per daemon (engine.lock, gateway.lock) in the state dir.

The engine holds it for its whole life; `klaw reindex` takes it too, so a
rebuild never runs under a live engine and two engines never share klaw.db.
The kernel drops the lock when the process dies, so a crash leaves nothing stale.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

from klaw.errors import KlawError, NotWritable, StoreLocked, os_error_line

if TYPE_CHECKING:
    from klaw.paths import KlawPaths


class ProcessLock:
    """A `flock` held for a process's life; the kernel drops it when the process dies.

    `busy(holder, what)` builds the error raised when another process holds it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def busy(self, holder: str, what: str) -> KlawError:
        return StoreLocked(f"{self.path} is held by {holder}; stop it before running {what}")

    def acquire(self, what: str = "this") -> Self:
        """Takes the lock or raises `busy(...)`; `NotWritable` (one line with the cure)
        when the lock file cannot be made: a read-only or foreign state dir."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise NotWritable(os_error_line(exc, exc.filename or self.path)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise self.busy(holder, what) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> Self:
        return self.acquire() if self._fd is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class EngineLock(ProcessLock):
    """The engine's lock on klaw.db: `klaw reindex` and the CLI memory commands take it too."""

    def busy(self, holder: str, what: str) -> KlawError:
        return StoreLocked(
            f"klaw.db is in use by {holder} (lock {self.path}); stop the engine first "
            f"(`systemctl --user stop klaw-engine`) before running {what}"
        )

    def acquire(self, what: str = "the engine") -> Self:
        return super().acquire(what)


@contextlib.contextmanager
def daemons_stopped(paths: KlawPaths, what: str, why: str) -> Iterator[None]:
    """Holds both daemons' locks, so `what` (`klaw restore`, `klaw import`) runs while
    neither runs; the gateway's refusal says `why` it must be stopped."""
    with EngineLock(paths.engine_lock).acquire(what):
        with ProcessLock(paths.gateway_lock).acquire(f"{what} ({why})"):
            yield

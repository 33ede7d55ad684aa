"""Process locks: a `flock` per daemon (engine.lock, gateway.lock) in the state dir.

The engine holds it for its whole life; `klaw reindex` takes it too, so a
rebuild never runs under a live engine and two engines never share klaw.db.
The engine's lock also covers the data dir itself (`EngineLock.of`): a second
engine started with only `XDG_STATE_HOME` changed would otherwise share klaw.db
and scheduler.db with the first.
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
    """The engine's lock on klaw.db: `klaw reindex` and the CLI memory commands take it too.

    With `data_dir` (`EngineLock.of(paths)`) it also holds a `flock` on the data dir
    itself (a directory: no file to back up or leave behind), so the lock holds
    whichever of the state dir and the data dir a second process shares."""

    def __init__(self, path: Path, data_dir: Path | None = None) -> None:
        super().__init__(path)
        self.data_dir = data_dir
        self._data_fd: int | None = None

    @classmethod
    def of(cls, paths: KlawPaths) -> EngineLock:
        return cls(paths.engine_lock, paths.data_dir)

    def busy(self, holder: str, what: str) -> KlawError:
        return StoreLocked(
            f"klaw.db is in use by {holder} (lock {self.path}); stop the engine first "
            f"(`systemctl --user stop klaw-engine`) before running {what}"
        )

    def acquire(self, what: str = "the engine") -> Self:
        super().acquire(what)
        if self.data_dir is not None:
            try:
                self._data_fd = _lock_dir(self.data_dir)
            except BaseException:
                super().release()
                raise
            if self._data_fd is None:
                super().release()
                raise StoreLocked(
                    f"{self.data_dir} (klaw.db, scheduler.db) is in use by an engine started "
                    "with another state dir (XDG_STATE_HOME or KLAW_STATE_DIR); stop it first "
                    f"(`systemctl --user stop klaw-engine`) before running {what}"
                )
        return self

    def release(self) -> None:
        if self._data_fd is not None:
            os.close(self._data_fd)  # closing drops the flock
            self._data_fd = None
        super().release()


def _lock_dir(path: Path) -> int | None:
    """A descriptor holding an exclusive `flock` on directory `path` (made if missing),
    None when another process holds it; `NotWritable` when it cannot be made or opened."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise NotWritable(os_error_line(exc, exc.filename or path)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def daemons_stopped(paths: KlawPaths, what: str, why: str) -> Iterator[None]:
    """Holds both daemons' locks, so `what` (`klaw restore`, `klaw import`) runs while
    neither runs; the gateway's refusal says `why` it must be stopped."""
    with EngineLock.of(paths).acquire(what):
        with ProcessLock(paths.gateway_lock).acquire(f"{what} ({why})"):
            yield

"""Durable file writes: the one copy of "temp file, fsync, rename, fsync the directory".

A crash or power cut at any point leaves either the old file or the new one, never a
mix: the data is written to a temp file beside the target (same filesystem, O_EXCL,
random name, mode 600 by default), fsynced, renamed over the target, and the directory
is fsynced so the rename itself survives. `tempfile` is not imported: it costs CLI
start time.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "atomic_path",
    "atomic_write",
    "atomic_write_at",
    "create_exclusive",
    "ensure_writable_dir",
    "fsync_dir",
    "human_size",
    "is_temp_name",
    "replace_durably",
    "temp_name",
    "temp_path",
]


def fsync_dir(path: Path | str) -> None:
    """fsync a directory, so a rename or a new file in it survives a power cut."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Room for the dot, the random part and ".tmp" within NAME_MAX (255 bytes).
_MAX_NAME_IN_TEMP = 200
_TEMP_NAME = re.compile(r"\..*\.[0-9a-f]{12}\.tmp|\.klaw-[0-9a-f]{12}\.tmp")  # temp_name's


def temp_name(name: str) -> str:
    """A fresh hidden temp file name for `name`, itself a valid name of at most 255 bytes."""
    tag = os.urandom(6).hex()
    if len(os.fsencode(name)) > _MAX_NAME_IN_TEMP:
        return f".klaw-{tag}.tmp"  # a long name plus the suffix would exceed NAME_MAX
    return f".{name}.{tag}.tmp"


def is_temp_name(name: str) -> bool:
    """Whether `name` is one `temp_name` makes: an atomic write in progress (or left by a
    crash), never a file of its own."""
    return _TEMP_NAME.fullmatch(name) is not None


def temp_path(target: Path) -> Path:
    """A fresh hidden temp name beside `target` (same directory, so rename is atomic)."""
    return target.parent / temp_name(target.name)


def _fill(fd: int, payload: bytes, mode: int) -> None:
    """Write all of `payload` to `fd`, set `mode` (the umask may have narrowed it), fsync."""
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view) :]
    os.fchmod(fd, mode)
    os.fsync(fd)


def _temp_with(target: Path, data: bytes | str, mode: int) -> Path:
    """A fresh, fsynced temp file beside `target` holding `data` (str as UTF-8)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = temp_path(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        _fill(fd, payload, mode)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return tmp


def atomic_write(
    path: Path | str,
    data: bytes | str,
    *,
    mode: int = 0o600,
    mkdir: bool = False,
) -> None:
    """Replace `path` with `data` atomically and durably (see the module docstring).

    `str` is written as UTF-8. With `mkdir`, missing parent directories are created.
    On any failure the temp file is removed and the old file is left untouched.
    """
    target = Path(path)
    if mkdir:
        target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_with(target, data, mode)
    try:
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def create_exclusive(path: Path | str, data: bytes | str, *, mode: int = 0o600) -> bool:
    """Create `path` with `data` only if it does not exist, atomically and durably.

    Returns False (and writes nothing) when the file exists. The content is complete
    before the name appears (temp file + link(), which fails on an existing target),
    so a reader or a racing process never sees it half-written.
    """
    target = Path(path)
    tmp = _temp_with(target, data, mode)
    try:
        os.link(tmp, target)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(target.parent)
    return True


def atomic_write_at(dir_fd: int, name: str, data: bytes | str, *, mode: int = 0o600) -> None:
    """`atomic_write` of `name` inside the directory open as `dir_fd`.

    For callers that reached the directory without following symlinks (the file tools):
    every step is relative to `dir_fd`, so the directory cannot be swapped underneath.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = temp_name(name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode, dir_fd=dir_fd)
    try:
        try:
            _fill(fd, payload, mode)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


@contextlib.contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """A temp path beside `path` for code that writes a file by name (a copy, a
    download, a library's `save(path)`); when the block ends without an error the file
    there is fsynced and replaces `path` as `atomic_write` does, else it is removed."""
    target = Path(path)
    tmp = temp_path(target)
    try:
        yield tmp
        replace_durably(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def replace_durably(tmp: Path | str, target: Path | str) -> None:
    """Moves the finished file `tmp` over `target` so that a crash leaves either the
    old file or the whole new one: fsync `tmp`, rename, fsync the directory. Blocking:
    from asyncio, call it in a thread (a large file's fsync takes a while on an SD card)."""
    fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    fsync_dir(Path(target).parent)


def ensure_writable_dir(path: Path) -> None:
    """Makes `path` if missing and checks it can be written; raises `NotWritable` with
    one line naming the cure otherwise (SQLite's own "unable to open database file"
    says neither what nor why)."""
    from klaw.errors import NotWritable, os_error_line

    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        if not os.access(path, os.W_OK | os.X_OK):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(path))
    except OSError as exc:
        raise NotWritable(os_error_line(exc, path)) from None


def human_size(n: int) -> str:
    """1536 → "1.5 KB": sizes as users read them in messages and CLI output."""
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KB", "MB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"

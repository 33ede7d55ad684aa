"""Durable file writes: the one copy of "temp file, fsync, rename, fsync the directory".

A crash or power cut at any point leaves either the old file or the new one, never a
mix: the data is written to a temp file beside the target (same filesystem, O_EXCL,
random name, mode 600 by default), fsynced, renamed over the target, and the directory
is fsynced so the rename itself survives. `tempfile` is not imported: it costs CLI
start time.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["atomic_write", "fsync_dir", "temp_path"]


def fsync_dir(path: Path | str) -> None:
    """fsync a directory, so a rename or a new file in it survives a power cut."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(target: Path) -> Path:
    """A fresh hidden temp name beside `target` (same directory, so rename is atomic)."""
    return target.parent / f".{target.name}.{os.urandom(6).hex()}.tmp"


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
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = temp_path(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)  # the umask may have narrowed it
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)

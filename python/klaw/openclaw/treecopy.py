"""Copying a folder out of an OpenClaw home, confined like the agent's file tools.

Each file is opened through `klaw.confined.Confined` rooted at the folder copied: a
symlink is followed while it stays inside (its target is copied as a file, as
`file_read` would show it); one leading outside is skipped and reported, never read.
A symlink to a directory is not walked (what it points at inside is copied where it
lies), nor are devices, FIFOs and sockets copied. A file already at the destination is
kept, whatever it holds.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from klaw.confined import Confined
from klaw.errors import ToolError

__all__ = ["TreeCopy", "copy_tree"]

_CHUNK = 1 << 20
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class TreeCopy:
    """What a copy did (or, with `dry_run`, would do); paths relative to the source."""

    copied: list[str] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)  # the destination's own file kept
    skipped: list[str] = field(default_factory=list)  # "PATH: why"


def copy_tree(
    src: Path, dst: Path, skip_dirs: Collection[str] = (), *, dry_run: bool = False
) -> TreeCopy:
    """Copies `src` into `dst` (see the module docstring); `skip_dirs` are folder names
    left out wherever they are."""
    out = TreeCopy()
    root = os.path.realpath(src)
    confined = Confined(root)
    for here, dirs, files in os.walk(root):  # followlinks=False: no symlinked folder walked
        rel_dir = os.path.relpath(here, root)
        kept = []
        for name in sorted(dirs):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if name in skip_dirs:
                continue
            if os.path.islink(os.path.join(here, name)):
                out.skipped.append(f"{rel}: a symlink to a folder, not followed")
                continue
            kept.append(name)
        dirs[:] = kept
        for name in sorted(files):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            why = _refusal(root, os.path.join(here, name))
            if why is not None:
                out.skipped.append(f"{rel}: {why}")
                continue
            try:
                fd, _size, _ = confined.open_file(rel)
            except ToolError as exc:  # swapped since it was looked at, or unreadable
                out.skipped.append(f"{rel}: {exc}")
                continue
            with os.fdopen(fd, "rb") as source:
                _copy_one(source, dst / rel, rel, out, dry_run)
    return out


def _refusal(root: str, path: str) -> str | None:
    """Why the file at `path` is not copied (the words the report shows), or None."""
    real = os.path.realpath(path)
    if real != root and not real.startswith(root.rstrip("/") + "/"):
        return "a symlink leading outside, not followed"
    try:
        mode = os.stat(real).st_mode
    except OSError as exc:
        return f"not readable ({exc.strerror or exc})"
    if not stat.S_ISREG(mode):
        return "not a regular file (device, FIFO or socket)"
    return None


def _copy_one(source: BinaryIO, target: Path, rel: str, out: TreeCopy, dry_run: bool) -> None:
    st = os.fstat(source.fileno())
    if os.path.lexists(target):
        if not _same(target, source, st.st_size):
            out.differs.append(rel)
        return
    out.copied.append(rel)
    if dry_run:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(os.open(target, _CREATE, stat.S_IMODE(st.st_mode)), "wb") as sink:
        while chunk := source.read(_CHUNK):
            sink.write(chunk)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


def _same(target: Path, source: BinaryIO, size: int) -> bool:
    """Whether the regular file `target` holds what `source` does, a chunk at a time."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # a symlink, unreadable: not the same file
        return False
    with open(fd, "rb") as mine:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return False
        while chunk := source.read(_CHUNK):
            if mine.read(len(chunk)) != chunk:
                return False
    return True

"""The workspace's memory files (MEMORY.md, memory/**/*.md), reached as the file tools
reach the workspace (`klaw.confined`). A file whose name is not UTF-8 is skipped and
logged (no label could name it); the others are indexed as usual.

A symlink that resolves inside the workspace is followed; one that leads out (to a
host file such as ~/.ssh/id_rsa) is skipped and logged: what `file_read` refuses must
not reach the model through `memory_search` either. The listing leaves such files out
and the read itself is race-free: a file under the workspace is opened through
`Confined`, one component at a time without following a link that leads out, so a
file swapped for a symlink after the listing is refused all the same.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from klaw.confined import Confined
from klaw.errors import InvalidInput, ToolError

__all__ = ["memory_files", "open_for_index"]

log = logging.getLogger("klaw.memory")

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _below(workspace: Path, path: Path) -> str | None:
    """`path` relative to the workspace as written (or its real path), or None."""
    for root in (workspace, workspace.resolve()):
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            continue
    return None


def _inside(real_root: str, path: Path) -> bool:
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip("/") + "/")


def memory_files(workspace: Path) -> list[Path]:
    """MEMORY.md, memory/**/*.md and the bank (bank/**/*.md: entity pages, opinions),
    leaving out (logged) what resolves outside."""
    found: list[Path] = []
    if (workspace / "MEMORY.md").is_file():
        found.append(workspace / "MEMORY.md")
    for folder in ("memory", "bank"):
        if (workspace / folder).is_dir():
            found.extend(sorted(p for p in (workspace / folder).rglob("*.md") if p.is_file()))
    real_root = os.path.realpath(workspace)
    kept = []
    for path in found:
        shown = _below(workspace, path) or str(path)
        if not _inside(real_root, path):
            log.warning("not indexed: %s leads outside the workspace through a symlink", shown)
        elif not _utf8(shown):  # a label the store (and every reader) can take
            shown = os.fsencode(shown).decode("utf-8", "backslashreplace")
            log.warning("not indexed: %s: the name is not valid UTF-8; rename it", shown)
        else:
            kept.append(path)
    return kept


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes of the name, kept as surrogates
        return False
    return True


def open_for_index(workspace: Path, path: Path) -> int:
    """A read-only descriptor of the regular file `path` (the caller closes it). A
    path under the workspace is opened through `Confined` (InvalidInput when it leads
    out); one elsewhere (`klaw memory import` of a folder the owner named) as it is."""
    rel = _below(workspace, path)
    if rel is not None:
        try:
            fd, _, _ = Confined(workspace).open_file(rel)
        except ToolError as exc:
            raise InvalidInput(str(exc)) from None
        return fd
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InvalidInput(f"{path} is not a file")
    return fd

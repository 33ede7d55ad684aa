"""Paths confined to a directory (the workspace), opened race-free.

A path is refused when it is absolute, starts with `~`, is empty (unless the root is
allowed), holds a NUL byte, has a name over 255 bytes or is over 4096 bytes, or climbs
out with `..`. Symlinks inside that point inside are followed; anything that resolves
outside is refused. The check is race-free rather than check-then-open: the path is
resolved with `realpath` and checked, then opened one component at a time from a
descriptor of the root with `O_NOFOLLOW` (a directory or file swapped for a symlink
after the check fails to open), and the opened file's real path is verified through
`/proc/self/fd` once more.

The file tools (`klaw.tools.files`) and the gateway's outgoing files
(`klaw.gateway.outfiles`) use it; it imports nothing heavier than `os`, so the gateway
does not load the engine's tool and LLM layers for it. Errors are `ToolError`s whose
text names paths relative to the root, never the host path.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from klaw.errors import ToolError

__all__ = ["MAX_NAME_BYTES", "MAX_PATH_BYTES", "Confined", "PathRefused"]

MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class PathRefused(ToolError):
    """The path is outside the workspace or otherwise not allowed."""


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


class Confined:
    """A directory whose files are reached only through confined paths."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    # ------------------------------------------------------------- paths

    @staticmethod
    def clean(path: str, *, allow_root: bool = False) -> str:
        """The path normalised to `a/b/c` ('' for the root), or `PathRefused`."""
        if "\x00" in path:
            raise PathRefused("Refused: the path contains a NUL byte")
        if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
            raise PathRefused(f"Refused: the path is longer than {MAX_PATH_BYTES} bytes")
        if not path.strip():
            if allow_root:
                return ""
            raise PathRefused("Refused: the path is empty; give a path relative to the workspace")
        if path.startswith("/"):
            raise PathRefused(
                f"Refused {path!r}: absolute paths are not allowed; "
                "give a path relative to the workspace"
            )
        if path.startswith("~"):
            raise PathRefused(
                f"Refused {path!r}: '~' is not expanded; give a path relative to the workspace"
            )
        parts: list[str] = []
        for part in path.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if not parts:
                    raise PathRefused(f"Refused {path!r}: '..' leads outside the workspace")
                parts.pop()
                continue
            if len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
                raise PathRefused(f"Refused: a name in the path is over {MAX_NAME_BYTES} bytes")
            parts.append(part)
        if not parts and not allow_root:
            raise PathRefused(f"Refused {path!r}: that is the workspace directory itself")
        return "/".join(parts)

    def _root_real(self) -> str:
        real = os.path.realpath(self.root)
        if not os.path.isdir(real):
            raise ToolError("The workspace directory does not exist")
        return real

    def _resolve(self, rel: str) -> tuple[str, list[str]]:
        """(real root, components of the real path below it); refuses escapes via symlinks."""
        root = self._root_real()
        if not rel:
            return root, []
        real = os.path.realpath(os.path.join(root, rel))
        if real == root:
            return root, []
        if not real.startswith(root.rstrip("/") + "/"):
            raise PathRefused(f"Refused {rel!r}: it leads outside the workspace through a symlink")
        return root, os.path.relpath(real, root).split("/")

    @staticmethod
    def _check_fd_inside(fd: int, root: str, shown: str) -> None:
        """Belt and braces: where did the descriptor really end up?"""
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return  # no /proc: the O_NOFOLLOW walk already guarantees it
        if real != root and not real.startswith(root.rstrip("/") + "/"):
            raise PathRefused(f"Refused {shown!r}: it leads outside the workspace")

    def _walk(self, root: str, parts: list[str], shown: str, *, create: bool = False) -> int:
        """A descriptor of the directory `root/parts`, opened without following symlinks."""
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for i, name in enumerate(parts):
                where = "/".join(parts[: i + 1])
                try:
                    nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise ToolError(f"{shown!r} not found: {where!r} does not exist") from None
                    try:
                        os.mkdir(name, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                    nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno == errno.ENOTDIR and _is_symlink(name, fd):
                        exc = OSError(errno.ELOOP, "symlink")  # O_DIRECTORY spoke first
                    raise self._os_error(exc, shown, where) from None
                os.close(fd)
                fd = nfd
            self._check_fd_inside(fd, root, shown)
            return fd
        except BaseException:
            os.close(fd)
            raise

    @staticmethod
    def _os_error(exc: OSError, shown: str, where: str) -> ToolError:
        """An OSError as a message naming workspace paths only (never the host path)."""
        if exc.errno == errno.ELOOP:
            return PathRefused(f"Refused {shown!r}: {where!r} is a symlink that changed under us")
        if exc.errno == errno.ENOTDIR:
            return ToolError(f"Cannot use {shown!r}: {where!r} is not a directory")
        if exc.errno in (errno.EACCES, errno.EPERM):
            return ToolError(f"Permission denied for {shown!r}")
        if exc.errno == errno.ENXIO:
            return PathRefused(f"Refused {shown!r}: not a regular file")
        if exc.errno == errno.ENAMETOOLONG:
            return PathRefused(f"Refused {shown!r}: the name is too long")
        if exc.errno == errno.ENOSPC:
            return ToolError("The disk is full")
        return ToolError(f"Cannot access {shown!r}: {exc.strerror or 'error'}")

    # ------------------------------------------------------------- opening

    def _open_regular(self, root: str, parts: list[str], shown: str) -> tuple[int, int]:
        """(descriptor, size) of the regular file at `parts`, or a ToolError."""
        dfd = self._walk(root, parts[:-1], shown)
        try:
            try:
                fd = os.open(parts[-1], _READ_FLAGS, dir_fd=dfd)
            except FileNotFoundError:
                raise ToolError(f"{shown!r} not found") from None
            except OSError as exc:
                raise self._os_error(exc, shown, "/".join(parts)) from None
        finally:
            os.close(dfd)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise ToolError(f"{shown!r} is a directory; use file_list")
            if not stat.S_ISREG(st.st_mode):
                raise PathRefused(f"Refused {shown!r}: not a regular file (device, FIFO or socket)")
            self._check_fd_inside(fd, root, shown)
            return fd, st.st_size
        except BaseException:
            os.close(fd)
            raise

    def open_file(self, path: str) -> tuple[int, int, str]:
        """(descriptor, size, clean path) of the regular file `path`, opened race-free
        inside the root; the caller closes the descriptor."""
        rel = self.clean(path)
        root, parts = self._resolve(rel)
        if not parts:
            raise ToolError(f"{path!r} is the workspace directory, not a file")
        fd, size = self._open_regular(root, parts, path)
        return fd, size, rel

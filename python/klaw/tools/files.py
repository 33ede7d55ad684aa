"""File tools confined to the workspace: `file_read`, `file_write`, `file_list`.

Every path is relative to the workspace and confined to it by `klaw.confined`
(absolute paths, `~`, `..` out of it and symlinks leading out are refused; the check
and the open are one race-free walk). Only regular files are read or written:
devices, FIFOs (opened non-blocking, so they cannot hang the engine) and sockets are
refused.

`files.maxFileSizeBytes` is enforced both ways, by refusal: a larger file is not
read (the model is told its size), a write or append that would make a file larger
is refused. A read is returned as text; bytes that are not UTF-8 are replaced with
U+FFFD and a note says so, and a file with NUL bytes is refused as binary. Long
files come back a page at a time (`offset`/`limit` in lines) with a note saying how
to continue. Writes are atomic (temp file in the same directory, fsync, rename) and
create missing parent directories, inside the workspace only; nothing is written
under a `.git` directory (hooks there would run on the owner's next git command).
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any, ClassVar

from klaw.confined import Confined, PathRefused
from klaw.fsutil import atomic_write_at
from klaw.memory.versioning import is_memory_path, versioner
from klaw.tools.base import DEFAULT_MAX_RESULT_CHARS, Tool, ToolError

__all__ = ["FileList", "FileRead", "FileWrite", "PathRefused", "Workspace"]

MAX_LIST_ENTRIES = 500


class Workspace(Confined):
    """The workspace directory as the file tools see it; see the module docstring."""

    def __init__(
        self,
        root: Path | str,
        max_file_size: int,
        max_output_chars: int = DEFAULT_MAX_RESULT_CHARS - 300,
    ) -> None:
        super().__init__(root)
        self.max_file_size = max_file_size
        self.max_output_chars = max_output_chars

    # ------------------------------------------------------------- reading

    def _read_bytes(self, fd: int, size: int, shown: str) -> bytes:
        if size > self.max_file_size:
            raise ToolError(
                f"{shown!r} is {size} bytes; files over {self.max_file_size} bytes "
                "(files.maxFileSizeBytes) are not read"
            )
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 65536):
            total += len(chunk)
            if total > self.max_file_size:  # it grew while we read
                raise ToolError(
                    f"{shown!r} is over {self.max_file_size} bytes (files.maxFileSizeBytes)"
                )
            chunks.append(chunk)
        return b"".join(chunks)

    def read(self, path: str, offset: int = 1, limit: int | None = None) -> str:
        """Lines `offset`.. (1-based) of a text file, at most `limit`, paged to fit the output."""
        rel = self.clean(path)
        root, parts = self._resolve(rel)
        if not parts:
            raise ToolError(f"{path!r} is the workspace directory; use file_list")
        fd, size = self._open_regular(root, parts, path)
        try:
            data = self._read_bytes(fd, size, path)
        finally:
            os.close(fd)
        if b"\x00" in data:
            raise ToolError(f"{path!r} looks like a binary file (it contains NUL bytes)")
        notes: list[str] = []
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            text = data.decode("utf-8", errors="replace")
            notes.append(
                f"[note: {path!r} is not valid UTF-8 (first bad byte at offset {exc.start}); "
                "undecodable bytes are shown as U+FFFD]"
            )
        del data
        lines = text.splitlines(keepends=True)
        total = len(lines)
        if total == 0:
            return "\n".join([f"[{path!r} is empty]", *notes])
        if offset > total:
            raise ToolError(f"offset {offset} is past the end: {path!r} has {total} lines")
        budget = self.max_output_chars - 200
        out: list[str] = []
        used = 0
        end = offset - 1
        stop = total if limit is None else min(total, offset - 1 + limit)
        while end < stop and used + len(lines[end]) <= budget:
            out.append(lines[end])
            used += len(lines[end])
            end += 1
        if not out:  # one line longer than the whole budget
            out.append(lines[end][:budget])
            notes.append(f"[line {offset} is {len(lines[end])} characters; only the start shown]")
            end += 1
        body = "".join(out)
        if offset > 1 or end < total:
            more = f"; continue with offset={end + 1}" if end < total else ""
            notes.append(f"[lines {offset}-{end} of {total}{more}]")
        if notes:
            body = body.rstrip("\n") + "\n" + "\n".join(notes)
        return body

    # ------------------------------------------------------------- writing

    def write(self, path: str, content: str, append: bool = False) -> str:
        """Writes (or appends) atomically; see the module docstring for the limits."""
        rel = self.clean(path)
        if ".git" in rel.split("/"):
            raise PathRefused(f"Refused {path!r}: writing inside .git is not allowed")
        data = content.encode("utf-8", errors="replace")  # lone surrogates become "?"
        if len(data) > self.max_file_size:
            raise ToolError(
                f"Refused: the content is {len(data)} bytes; the limit is "
                f"{self.max_file_size} bytes (files.maxFileSizeBytes)"
            )
        root, parts = self._resolve(rel)
        if not parts:
            raise ToolError(f"{path!r} is the workspace directory")
        if ".git" in parts:  # again after symlinks: `g -> .git` must not open a way in
            raise PathRefused(f"Refused {path!r}: writing inside .git is not allowed")
        dfd = self._walk(root, parts[:-1], path, create=True)
        try:
            return self._write_in(dfd, root, parts, path, data, append)
        finally:
            os.close(dfd)

    def _write_in(
        self, dfd: int, root: str, parts: list[str], shown: str, data: bytes, append: bool
    ) -> str:
        name = parts[-1]
        mode = 0o644
        existed = False
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISLNK(st.st_mode):
                raise PathRefused(f"Refused {shown!r}: a symlink appeared at the target")
            if stat.S_ISDIR(st.st_mode):
                raise ToolError(f"{shown!r} is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise PathRefused(f"Refused {shown!r}: not a regular file (device, FIFO or socket)")
            mode = stat.S_IMODE(st.st_mode)
            existed = True
        if append and existed:
            fd, size = self._open_regular(root, parts, shown)
            try:
                old = self._read_bytes(fd, size, shown)
            finally:
                os.close(fd)
            if len(old) + len(data) > self.max_file_size:
                raise ToolError(
                    f"Refused: appending {len(data)} bytes would make {shown!r} "
                    f"{len(old) + len(data)} bytes; the limit is {self.max_file_size} "
                    "bytes (files.maxFileSizeBytes)"
                )
            data = old + data
        try:
            # Relative to the directory reached without following symlinks (see _walk).
            atomic_write_at(dfd, name, data, mode=mode)
        except OSError as exc:
            raise self._os_error(exc, shown, shown) from None
        verb = "Appended to" if append and existed else "Wrote"
        return f"{verb} {shown} ({len(data)} bytes)"

    # ------------------------------------------------------------- listing

    def list(self, path: str = "") -> str:
        """One line per entry: directories end with '/', symlinks with '@', files show a size."""
        rel = self.clean(path, allow_root=True)
        root, parts = self._resolve(rel)
        shown = rel or "."
        fd = self._walk(root, parts, shown)
        rows: list[tuple[int, str, str]] = []
        try:
            with os.scandir(fd) as it:  # entries stat through `fd`: keep it open meanwhile
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    rows.append(_row(e.name, st))
        finally:
            os.close(fd)
        rows.sort()
        header = f"{shown if shown.endswith('/') else shown + '/'} ({len(rows)} entries)"
        if not rows:
            return f"{header}: empty"
        lines = [header + ":", *(r[2] for r in rows[:MAX_LIST_ENTRIES])]
        if len(rows) > MAX_LIST_ENTRIES:
            lines.append(f"[{len(rows) - MAX_LIST_ENTRIES} more entries not shown]")
        return "\n".join(lines)


def _row(name: str, st: os.stat_result) -> tuple[int, str, str]:
    """(sort group, name, line): directories first, then files, symlinks, the rest."""
    if stat.S_ISLNK(st.st_mode):
        return (2, name, f"{name}@  (symlink)")
    if stat.S_ISDIR(st.st_mode):
        return (0, name, f"{name}/")
    if stat.S_ISREG(st.st_mode):
        return (1, name, f"{name}  ({st.st_size} bytes)")
    return (3, name, f"{name}  (special file)")


class FileRead(Tool):
    name = "file_read"
    description = (
        "Read a text file; `path` is relative to the workspace. A long file comes a page "
        "at a time: `offset` (first line, 1-based) and `limit` (lines) read on."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "offset": {"type": "integer", "minimum": 1},
            "limit": {"type": "integer", "minimum": 1},
        },
        "required": ["path"],
        "additionalProperties": False,
    }

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    async def run(self, args: dict[str, Any]) -> str:
        limit = args.get("limit")
        return await asyncio.to_thread(
            self.workspace.read,
            args["path"],
            int(args.get("offset", 1)),
            None if limit is None else int(limit),
        )


class FileWrite(Tool):
    name = "file_write"
    description = (
        "Write a text file in the workspace (replacing it), or append to it with "
        "`append: true`. Parent directories are created. `path` is relative to the workspace."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "file path relative to the workspace"},
            "content": {"type": "string"},
            "append": {"type": "boolean", "description": "append instead of replacing"},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    async def run(self, args: dict[str, Any]) -> str:
        return await asyncio.to_thread(self._write, args)

    def _write(self, args: dict[str, Any]) -> str:
        path, append = str(args["path"]), bool(args.get("append", False))
        if not is_memory_path(path):
            return self.workspace.write(path, args["content"], append)
        # A memory file the agent writes is one commit of versioned memory (memory.git).
        git = versioner(self.workspace.root)
        verb = "append to" if append else "write"
        with git.change([path], f"{verb} {path}", "The agent's file_write in a conversation."):
            return self.workspace.write(path, args["content"], append)


class FileList(Tool):
    name = "file_list"
    description = (
        "List a directory of the workspace (default: the workspace root). Directories end "
        "with '/', symlinks with '@'."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "directory relative to the workspace"},
        },
        "additionalProperties": False,
    }

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    async def run(self, args: dict[str, Any]) -> str:
        return await asyncio.to_thread(self.workspace.list, args.get("path", ""))

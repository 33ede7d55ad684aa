"""`/output`: each chat's files, kept in the workspace under `outputs/<chat>/`.

The sandbox always mounts one staging directory at /output (a keep-alive container
cannot change its mounts per call). Runs are serialised; before one, the chat's
kept files are hard-linked into the staging directory (so a script can read what
the last one wrote, and no other chat's files are there); after it, new and changed
regular files move into the chat's directory and the staging directory is emptied.
Symlinks, FIFOs and devices the code made are dropped: a symlink kept in the
workspace could point the file tools at a host file. Nothing the code deletes is
deleted from the chat's directory: nothing is lost.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from klaw.sandbox.result import OutputFile

__all__ = ["MAX_FILES", "Outputs", "Staged", "chat_dir_name"]

#: Files one run may leave in /output; more are dropped (a million empty files would
#: cost the workspace's inodes and every later run's staging).
MAX_FILES = 1000

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def chat_dir_name(chat_id: str) -> str:
    name = _UNSAFE.sub("_", chat_id).strip(".") or "chat"
    return name[:120]


@dataclass(frozen=True, slots=True)
class Staged:
    chat_id: str
    seen: dict[str, tuple[int, int, int]]  # relative path → (inode, mtime_ns, size)


class Outputs:
    def __init__(
        self, workspace: Path, staging: Path, *, uid: int, gid: int, cap_bytes: int
    ) -> None:
        self.workspace = workspace
        self.root = workspace / "outputs"
        self.staging = staging
        self.uid = uid
        self.gid = gid
        self.cap_bytes = cap_bytes

    def chat_dir(self, chat_id: str) -> Path:
        return self.root / chat_dir_name(chat_id)

    def ensure_staging(self) -> None:
        self.staging.mkdir(parents=True, exist_ok=True)
        os.chmod(self.staging, 0o700)
        if os.getuid() == 0 and self.uid != 0:
            os.chown(self.staging, self.uid, self.gid)

    def _clear(self) -> None:
        if not self.staging.exists():
            return
        for entry in os.scandir(self.staging):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)

    def prepare(self, chat_id: str) -> Staged:
        """An empty staging dir holding links to the chat's kept files."""
        self.ensure_staging()
        self._clear()
        seen: dict[str, tuple[int, int, int]] = {}
        source = self.chat_dir(chat_id)
        if source.is_dir():
            for path in _regular_files(source):
                rel = path.relative_to(source)
                dest = self.staging / rel
                self._mkdirs(dest.parent)
                try:
                    os.link(path, dest)
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                        raise
                    shutil.copy2(path, dest)
                    self._own(dest)
                st = os.stat(dest)
                seen[rel.as_posix()] = (st.st_ino, st.st_mtime_ns, st.st_size)
        return Staged(chat_id, seen)

    def collect(self, staged: Staged) -> tuple[list[OutputFile], list[str]]:
        """Moves the run's new and changed files into the chat's directory.

        Returns (kept files, dropped names): over `cap_bytes` in all or MAX_FILES,
        later files are dropped; symlinks and special files always are.
        """
        kept: list[OutputFile] = []
        dropped: list[str] = []
        dest_root = self.chat_dir(staged.chat_id)
        total = 0
        for dirpath, dirnames, filenames in os.walk(self.staging):
            dirnames.sort()
            for name in sorted(filenames) + [d for d in dirnames if _is_link(dirpath, d)]:
                path = Path(dirpath) / name
                rel = path.relative_to(self.staging).as_posix()
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode):
                    dropped.append(f"{rel} (not a regular file)")
                    continue
                if staged.seen.get(rel) == (st.st_ino, st.st_mtime_ns, st.st_size):
                    continue  # the chat's own file, untouched
                if total + st.st_size > self.cap_bytes or len(kept) >= MAX_FILES:
                    dropped.append(rel)
                    continue
                total += st.st_size
                dest = dest_root / rel
                self._mkdirs_plain(dest.parent)
                if not (dest.exists() and os.stat(dest).st_ino == st.st_ino):
                    _move(path, dest)
                kept.append(OutputFile(rel, st.st_size))
        self._clear()
        return kept, dropped

    def _mkdirs(self, path: Path) -> None:
        """Directories in the staging area, owned by the sandbox's user."""
        missing = []
        while not path.exists():
            missing.append(path)
            path = path.parent
        for p in reversed(missing):
            p.mkdir()
            self._own(p)

    def _own(self, path: Path) -> None:
        if os.getuid() == 0 and self.uid != 0:
            os.chown(path, self.uid, self.gid, follow_symlinks=False)

    @staticmethod
    def _mkdirs_plain(path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)


def _is_link(dirpath: str, name: str) -> bool:
    return os.path.islink(os.path.join(dirpath, name))


def _regular_files(root: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not _is_link(dirpath, d)]
        for name in filenames:
            path = Path(dirpath) / name
            if stat.S_ISREG(os.lstat(path).st_mode):
                out.append(path)
    return out


def _move(src: Path, dest: Path) -> None:
    try:
        os.replace(src, dest)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.copy2(src, dest)
        os.unlink(src)

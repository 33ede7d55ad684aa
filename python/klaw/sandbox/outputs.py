"""`/output`: each chat's files, kept in the workspace under `outputs/<chat>/`.

The sandbox always mounts one staging directory at /output (a keep-alive container
cannot change its mounts per call). Runs are serialised; before one, the chat's
kept files are hard-linked into the staging directory (so a script can read what
the last one wrote, and no other chat's files are there); after it, new and changed
regular files are linked into the chat's directory and the staging directory is
emptied. Nothing the code deletes is deleted from the chat's directory.

The staging tree is the code's: every step treats it as hostile. It is walked
iteratively through directory file descriptors opened with O_NOFOLLOW (a directory
swapped for a symlink leads nowhere), each file is opened with O_NOFOLLOW and
checked with fstat before its inode is linked by descriptor, depth and entry counts
are capped, and directories the code made unreadable are opened up again before
they are emptied. Symlinks, FIFOs and devices are dropped: a symlink kept in the
workspace could point the file tools at a host file. A name that is not UTF-8 is kept
with its odd bytes spelled `\\xff` (it would break every message that carries it).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from klaw.errors import SandboxError
from klaw.sandbox.result import OutputFile

__all__ = ["MAX_CHAT_FILES", "MAX_DEPTH", "MAX_FILES", "Outputs", "Staged", "chat_dir_name"]

#: Files one run may add to a chat's directory; more are dropped (a million empty
#: files would cost the workspace's inodes and every later run's staging).
MAX_FILES = 1000
#: Files a chat's directory may hold in all; new ones beyond are dropped.
MAX_CHAT_FILES = 5000
#: Directory levels below /output that are looked at; deeper entries are dropped.
MAX_DEPTH = 32
#: Entries of the staging tree looked at after a run (files, dirs, links alike).
MAX_ENTRIES = 20_000
#: Directories of the staging tree looked at (each is held open while it is walked).
MAX_DIRS = 256

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def chat_dir_name(chat_id: str) -> str:
    name = _UNSAFE.sub("_", chat_id).strip(".") or "chat"
    return name[:120]


@dataclass(frozen=True, slots=True)
class Staged:
    chat_id: str
    seen: dict[str, tuple[int, int, int]]  # relative path → (inode, mtime_ns, size)
    chat_files: int = 0


@dataclass(slots=True)
class _Walk:
    """Regular files found (relative path, dir fd, name) and what was dropped, and why."""

    files: list[tuple[str, int, str]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


def _walk(root_fd: int, *, limit: int = MAX_ENTRIES) -> _Walk:
    """Every entry below `root_fd`, iteratively, never following a link."""
    out = _Walk()
    stack: list[tuple[int, str, int]] = [(root_fd, "", 0)]
    seen = 0
    while stack:
        dfd, prefix, depth = stack.pop()
        try:
            names = sorted(os.listdir(dfd))
        except OSError as exc:
            out.dropped.append(f"{prefix or '.'} (unreadable: {exc.strerror})")
            continue
        for name in names:
            rel = f"{prefix}{_shown(name)}"
            seen += 1
            if seen > limit:
                out.dropped.append(f"{rel} and the rest (more than {limit} entries)")
                return out
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 > MAX_DEPTH:
                    out.dropped.append(f"{rel}/ (deeper than {MAX_DEPTH} levels)")
                    continue
                if len(out.fds) >= MAX_DIRS:
                    out.dropped.append(f"{rel}/ (more than {MAX_DIRS} directories)")
                    continue
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=dfd)
                except OSError as exc:
                    out.dropped.append(f"{rel}/ (unreadable: {exc.strerror})")
                    continue
                out.fds.append(sub)
                stack.append((sub, f"{rel}/", depth + 1))
            elif stat.S_ISREG(st.st_mode):
                out.files.append((rel, dfd, name))
            else:
                out.dropped.append(f"{rel} (not a regular file)")
    out.files.sort()
    return out


def _shown(name: str) -> str:
    """A name as Klaw keeps and shows it: one that is not UTF-8 (its bytes came back as
    surrogates) gets its odd bytes spelled `\\xff`, so it can be logged, sent to the
    model and named by the file tools."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")
    return name


def _empty(root: int) -> None:
    """Removes everything inside the directory `root` without recursion and with two
    descriptors at most: a subdirectory's own subdirectories are moved up into `root`
    (the tree flattens), what the code locked (chmod 000) is opened up first (its
    owner or root may), files are unlinked, emptied directories removed.

    The names are the code's: a directory moved up takes a `.klaw-flat-N` that no
    entry of `root` has (the code may have made any of them, as file or directory)."""
    serial = 0
    while True:
        names = os.listdir(root)
        if not names:
            return
        for name in names:
            try:
                st = os.stat(name, dir_fd=root, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=root)
                continue
            os.chmod(name, 0o700, dir_fd=root, follow_symlinks=False)
            sub = os.open(name, _DIR_FLAGS, dir_fd=root)
            try:
                for inner in os.listdir(sub):
                    ist = os.stat(inner, dir_fd=sub, follow_symlinks=False)
                    if stat.S_ISDIR(ist.st_mode):
                        # Moving a directory to another parent writes its "..": a
                        # locked one is opened up first (a non-root owner needs it).
                        os.chmod(inner, 0o700, dir_fd=sub, follow_symlinks=False)
                        flat, serial = _free_name(root, serial)
                        os.rename(inner, flat, src_dir_fd=sub, dst_dir_fd=root)
                    else:
                        os.unlink(inner, dir_fd=sub)
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=root)


def _free_name(root: int, serial: int) -> tuple[str, int]:
    """The first `.klaw-flat-N` after `serial` that is not an entry of `root`."""
    while True:
        serial += 1
        name = f".klaw-flat-{serial}"
        try:
            os.stat(name, dir_fd=root, follow_symlinks=False)
        except FileNotFoundError:
            return name, serial


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
        try:
            st = os.lstat(self.staging)
        except FileNotFoundError:
            self.staging.mkdir(parents=True)
            st = os.lstat(self.staging)
        if not stat.S_ISDIR(st.st_mode):  # a symlink put there to redirect /output
            raise SandboxError(f"{self.staging} is not a plain directory: remove it")
        os.chmod(self.staging, 0o700, follow_symlinks=False)
        if os.getuid() == 0 and self.uid != 0:
            os.chown(self.staging, self.uid, self.gid, follow_symlinks=False)

    def _open_staging(self) -> int:
        return os.open(self.staging, _DIR_FLAGS)

    def _clear(self) -> None:
        if not self.staging.exists():
            return
        fd = self._open_staging()
        try:
            _empty(fd)
        except OSError as exc:
            raise SandboxError(
                f"{self.staging} could not be emptied ({exc}); no run starts"
            ) from exc
        finally:
            os.close(fd)

    def prepare(self, chat_id: str) -> Staged:
        """An empty staging dir holding links to the chat's kept files."""
        self.ensure_staging()
        self._clear()
        seen: dict[str, tuple[int, int, int]] = {}
        source = self.chat_dir(chat_id)
        count = 0
        if source.is_dir() and not source.is_symlink():
            for path in _regular_files(source):
                count += 1
                rel = path.relative_to(source)
                dest = self.staging / rel
                self._mkdirs(dest.parent)
                try:
                    os.link(path, dest, follow_symlinks=False)
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                        raise
                    shutil.copy2(path, dest, follow_symlinks=False)
                    self._own(dest)
                st = os.stat(dest, follow_symlinks=False)
                seen[rel.as_posix()] = (st.st_ino, st.st_mtime_ns, st.st_size)
        return Staged(chat_id, seen, count)

    def collect(self, staged: Staged) -> tuple[list[OutputFile], list[str]]:
        """Links the run's new and changed files into the chat's directory; never raises
        for what the code left (each problem becomes a dropped entry with its reason).

        New files count against `cap_bytes`, MAX_FILES and MAX_CHAT_FILES; a kept
        file the run changed in place is the same inode, so it stays (its size was
        bounded by the per-file limit while it was written).
        """
        kept: list[OutputFile] = []
        dest_root = self.chat_dir(staged.chat_id)
        total = 0
        self.ensure_staging()  # the code may have locked /output itself (chmod 000)
        fd = self._open_staging()
        walk = _walk(fd)
        dropped = list(walk.dropped)
        chat_files = staged.chat_files
        named: set[str] = set()
        try:
            for rel, dfd, name in walk.files:
                if rel in named:  # `\xff` as bytes and as four characters
                    dropped.append(f"{rel} (another file has that name)")
                    continue
                named.add(rel)
                try:
                    file_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
                except OSError as exc:
                    dropped.append(f"{rel} ({exc.strerror})")
                    continue
                try:
                    st = os.fstat(file_fd)
                    if not stat.S_ISREG(st.st_mode):
                        dropped.append(f"{rel} (not a regular file)")
                        continue
                    ident = (st.st_ino, st.st_mtime_ns, st.st_size)
                    known = staged.seen.get(rel)
                    if known == ident:
                        continue  # the chat's own file, untouched
                    if known is not None and known[0] == st.st_ino:
                        kept.append(OutputFile(rel, st.st_size))  # changed in place
                        continue
                    if total + st.st_size > self.cap_bytes:
                        dropped.append(f"{rel} (over maxOutputBytes)")
                        continue
                    if len(kept) >= MAX_FILES or (known is None and chat_files >= MAX_CHAT_FILES):
                        dropped.append(f"{rel} (too many files)")
                        continue
                    problem = self._keep(file_fd, dest_root, rel)
                    if problem:
                        dropped.append(f"{rel} ({problem})")
                        continue
                    total += st.st_size
                    chat_files += known is None
                    kept.append(OutputFile(rel, st.st_size))
                finally:
                    os.close(file_fd)
        finally:
            walk.close()
            os.close(fd)
        self._clear()
        return kept, dropped

    def _keep(self, file_fd: int, dest_root: Path, rel: str) -> str | None:
        """Links (or copies) the open file to dest_root/rel; a reason when it cannot."""
        dest = dest_root / rel
        try:
            dest_root.mkdir(parents=True, exist_ok=True)
            parent = dest_root
            for part in Path(rel).parts[:-1]:
                parent = parent / part
                if parent.is_symlink() or (parent.exists() and not parent.is_dir()):
                    return f"{parent.relative_to(dest_root)} is a file in the kept copy"
                parent.mkdir(parents=True, exist_ok=True)
            if dest.is_symlink() or dest.is_dir():
                return "a directory of that name is kept"
            tmp = dest.with_name(f".{dest.name}.klaw-new")
            tmp.unlink(missing_ok=True)
            try:
                # The inode that was checked, not whatever the name points at now:
                # linkat(AT_SYMLINK_FOLLOW) on /proc/self/fd/N (os.link with a dir fd,
                # or CPython calls link(2), which links the magic link itself).
                proc_fd = os.open("/proc/self/fd", _DIR_FLAGS & ~os.O_NOFOLLOW)
                try:
                    os.link(str(file_fd), tmp, src_dir_fd=proc_fd, follow_symlinks=True)
                finally:
                    os.close(proc_fd)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOENT):
                    raise
                with os.fdopen(os.dup(file_fd), "rb") as src, open(tmp, "xb") as out:
                    src.seek(0)
                    shutil.copyfileobj(src, out)
                self._own(tmp)  # a copy stays the sandbox's to change next time
            os.replace(tmp, dest)
        except OSError as exc:
            return exc.strerror or type(exc).__name__
        return None

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


def _regular_files(root: Path) -> Iterator[Path]:
    """The chat's kept files (Klaw wrote them: still, no link is followed)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            if name.endswith(".klaw-new"):
                continue
            path = Path(dirpath) / name
            if stat.S_ISREG(os.lstat(path).st_mode):
                yield path

"""`klaw backup [PATH]`: one archive of the agent, written while the daemons run.

Order matters: the two databases are copied first (SQLite's online backup: each a
consistent snapshot), then the files. The files are the truth and only grow, so what
the snapshots hold is in the copied files too (all but a reply the engine had stored
and the gateway not yet logged). An append-only log is copied up to its
last complete line (the gateway may be writing the next one); every other file as it is
when opened (Klaw replaces those atomically). The archive is written to a temp file
beside PATH and linked into place when complete: PATH is never a partial archive.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import io
import os
import shutil
import sqlite3
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, Final

from klaw.backup.archive import (
    CONFIG_FILES,
    DATABASES,
    MANIFEST,
    Manifest,
    Member,
    Redaction,
    workspace_in_force,
    write_error,
)
from klaw.errors import BackupError, KlawError
from klaw.fsutil import fsync_dir, is_temp_name, temp_name, temp_path
from klaw.paths import KlawPaths

__all__ = ["BackupReport", "default_name", "make_backup"]

_CHUNK: Final = 1 << 20
#: gzip's default level. On a 22 MB test agent: 6.95 MB in 1.5 s; level 9 6.84 MB in 3.7 s,
#: level 1 7.88 MB in 0.4 s.
_LEVEL: Final = 6


@dataclass
class BackupReport:
    path: Path
    size: int = 0
    files: int = 0
    seconds: float = 0.0
    schemas: dict[str, int] = field(default_factory=dict)
    redacted: list[Redaction] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


def default_name(now: datetime) -> str:
    return f"klaw-backup-{now.astimezone(UTC):%Y%m%d-%H%M%S}.tar.gz"


class _Hashing:
    """Reads exactly `size` bytes of `src` for tarfile, hashing them on the way; a file
    that ends early (it shrank while copied) is an error naming it."""

    def __init__(self, src: BinaryIO, size: int, where: Path) -> None:
        self.src = src
        self.left = size
        self.where = where
        self.sha = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        want = self.left if n < 0 else min(n, self.left)
        try:
            data = self.src.read(want)
        except OSError as exc:
            raise BackupError(f"cannot read {self.where}: {exc.strerror or exc}") from None
        if len(data) < want:
            raise BackupError(f"{self.where} shrank while it was copied: run the backup again")
        self.left -= len(data)
        self.sha.update(data)
        return data


def _complete_lines(f: BinaryIO, size: int) -> int:
    """The length of `f`'s first `size` bytes up to and including the last newline."""
    end = size
    while end > 0:
        start = max(0, end - 65536)
        f.seek(start)
        i = f.read(end - start).rfind(b"\n")
        if i >= 0:
            f.seek(0)
            return start + i + 1
        end = start
    f.seek(0)
    return 0


class _Writer:
    def __init__(self, tar: tarfile.TarFile, manifest: Manifest) -> None:
        self.tar = tar
        self.manifest = manifest
        self.files = 0

    def add_bytes(self, name: str, data: bytes, mode: int = 0o600, mtime: float = 0) -> None:
        self._add(name, io.BytesIO(data), len(data), mode, mtime or time.time(), Path(name))

    def add_file(self, name: str, path: Path, *, complete_lines: bool = False) -> bool:
        """Adds the file at `path`; False when it vanished before it could be opened."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return False  # replaced or removed meanwhile: nothing to keep
        except OSError as exc:
            raise BackupError(f"cannot read {path}: {exc.strerror or exc}") from None
        with open(fd, "rb") as f:
            try:
                st = os.fstat(fd)
                size = _complete_lines(f, st.st_size) if complete_lines else st.st_size
            except OSError as exc:
                raise BackupError(f"cannot read {path}: {exc.strerror or exc}") from None
            self._add(name, f, size, st.st_mode, st.st_mtime, path)
        return True

    def _add(
        self, name: str, src: BinaryIO, size: int, mode: int, mtime: float, where: Path
    ) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = size, mode & 0o777, int(mtime)
        reader = _Hashing(src, size, where)
        self.tar.addfile(info, reader)  # tarfile only calls read()
        self.manifest.members.append(Member(name, "file", size, reader.sha.hexdigest()))
        self.files += 1

    def add_dir(self, name: str, path: Path) -> bool:
        """Adds the directory's own entry; False when it vanished meanwhile. A root
        (`data`, `workspace`) may be a symbolic link: its target's mode is kept."""
        try:
            st = os.stat(path) if "/" not in name else os.lstat(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise BackupError(f"cannot read {path}: {exc.strerror or exc}") from None
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, st.st_mode & 0o777, int(st.st_mtime)
        self.tar.addfile(info)
        self.manifest.members.append(Member(name, "dir"))
        return True

    def add_tree(
        self,
        root: Path,
        prefix: str,
        skip: Callable[[str], str | None],
        *,
        complete_lines: bool = False,
    ) -> None:
        """Adds everything under `root` as `prefix/...`, depth first in name order.
        `skip(name)` returns why a member stays out (listed in the report) or None."""
        try:
            entries = sorted(os.scandir(root), key=lambda e: e.name)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise BackupError(f"cannot read the directory {root}: {exc.strerror}") from None
        for entry in entries:
            name = f"{prefix}/{entry.name}"
            if is_temp_name(entry.name):
                continue
            why = skip(name)
            if why is None and entry.is_symlink():
                why = "a symbolic link"
            if why is not None:
                if why:  # "" leaves it out silently
                    self.manifest.left_out.append(f"{name} ({why})")
                continue
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if self.add_dir(name, path):
                    self.add_tree(path, name, skip, complete_lines=complete_lines)
            elif entry.is_file(follow_symlinks=False):
                lines = complete_lines and entry.name.endswith(".jsonl")
                self.add_file(name, path, complete_lines=lines)
            else:
                self.manifest.left_out.append(f"{name} (not a regular file)")


def _snapshot_klaw_db(src: Path, dst: Path) -> int:
    from klaw import _core

    return _core.backup_database(src, dst)


def _snapshot_scheduler_db(src: Path, dst: Path) -> int:
    """scheduler.db through Python's sqlite3, the library that owns it in the engine."""
    source = sqlite3.connect(f"{src.resolve().as_uri()}?mode=rw", uri=True)
    try:
        source.execute("PRAGMA busy_timeout=5000")
        copy = sqlite3.connect(dst)
        try:
            source.backup(copy)  # all pages in one step: one read transaction
            copy.execute("PRAGMA journal_mode=DELETE")
            return int(copy.execute("PRAGMA user_version").fetchone()[0])
        finally:
            copy.close()
    finally:
        source.close()


def _resolve_target(target: Path | None, now: datetime) -> Path:
    if target is None:
        return Path.cwd() / default_name(now)
    target = target.expanduser().absolute()
    if target.is_dir():
        return target / default_name(now)
    return target


def make_backup(paths: KlawPaths, target: Path | None = None) -> BackupReport:
    """Writes the archive (see `klaw.backup`) to `target`: a file name, a directory (a
    dated name inside it) or None (a dated name in the current directory)."""
    from klaw import __version__

    t0 = time.perf_counter()
    now = datetime.now(UTC)
    target = _resolve_target(target, now)
    if target.exists() or target.is_symlink():
        raise BackupError(f"{target} already exists; choose another PATH")
    engine_text = _read_text(paths.engine_config)
    workspace = workspace_in_force(engine_text, paths)
    manifest = Manifest(
        klaw_version=__version__,
        created=now.isoformat(timespec="seconds").replace("+00:00", "Z"),
        workspace=str(workspace),
    )
    tmp = temp_path(target)
    work = target.parent / temp_name(target.name + ".d")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        os.mkdir(work, 0o700)
    except OSError as exc:
        _remove(tmp)
        raise write_error(target, exc) from None
    report = BackupReport(target)
    try:
        with open(fd, "wb", buffering=_CHUNK) as raw:
            with gzip.GzipFile(filename="", mode="wb", compresslevel=_LEVEL, fileobj=raw) as gz:
                with tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                    out = _Writer(tar, manifest)
                    _databases(out, paths, work, target)
                    _config(out, paths, engine_text)
                    _data(out, paths, workspace)
                    _workspace(out, paths, workspace)
                    out.add_bytes(MANIFEST, manifest.to_json())
            raw.flush()
            os.fsync(raw.fileno())
        _place(tmp, target)
        fsync_dir(target.parent)
    except FileExistsError:
        raise BackupError(f"{target} already exists; choose another PATH") from None
    except KlawError:
        raise
    except OSError as exc:
        raise write_error(target, exc) from None
    finally:
        _remove(tmp)
        shutil.rmtree(work, ignore_errors=True)
    report.size = target.stat().st_size
    report.files = out.files
    report.schemas = manifest.schemas
    report.redacted = manifest.redacted
    report.left_out = manifest.left_out
    report.seconds = time.perf_counter() - t0
    return report


def _place(tmp: Path, target: Path) -> None:
    """Moves the finished archive to `target`, never over a file that appeared meanwhile
    (a hard link fails on an existing name; FAT has no hard links: check, then rename)."""
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
            raise
        if target.exists():
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target)) from None
        os.rename(tmp, target)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):  # absent, or on a filesystem that refused it
        path.unlink()


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _databases(out: _Writer, paths: KlawPaths, work: Path, target: Path) -> None:
    for name, src, snapshot in (
        (DATABASES[0], paths.db, _snapshot_klaw_db),
        (DATABASES[1], paths.scheduler_db, _snapshot_scheduler_db),
    ):
        if not src.is_file():
            continue
        copy = work / name
        try:
            out.manifest.schemas[name] = snapshot(src, copy)
        except (KlawError, sqlite3.Error) as exc:
            raise BackupError(
                f"cannot write the backup to {target}: copying {src} failed ({exc})"
            ) from None
        copy.chmod(0o600)
        out.add_file(f"data/{name}", copy)
        copy.unlink()


def _config(out: _Writer, paths: KlawPaths, engine_text: str | None) -> None:
    from klaw.backup.redact import Unsafe, redact

    try:
        present = sorted(p.name for p in paths.config_dir.iterdir())
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BackupError(f"cannot read the directory {paths.config_dir}: {exc.strerror}") from None
    for name in present:
        path = paths.config_dir / name
        if name not in CONFIG_FILES:
            if not is_temp_name(name):
                out.manifest.left_out.append(f"config/{name} (not Klaw's; may hold secrets)")
            continue
        if not name.endswith(".yaml"):
            out.add_file(f"config/{name}", path)
            continue
        text = engine_text if name == "engine.yaml" else _read_text(path)
        if text is None:
            out.manifest.left_out.append(f"config/{name} (not readable as UTF-8 text)")
            continue
        try:
            clean, found = redact(name, text)
        except Unsafe as exc:
            out.manifest.left_out.append(f"config/{name} ({exc}; it may hold secrets)")
            continue
        out.manifest.redacted += found
        out.add_bytes(f"config/{name}", clean.encode("utf-8"), mtime=path.stat().st_mtime)


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _others(paths: KlawPaths, workspace: Path, mine: Path) -> list[Path]:
    """Klaw's other directories nested in `mine` (saved on their own, or not at all)."""
    dirs = [paths.config_dir, paths.data_dir, paths.state_dir, paths.cache_dir, workspace]
    mine = mine.resolve()
    return [d.resolve() for d in dirs if d.resolve() != mine and mine in d.resolve().parents]


def _data(out: _Writer, paths: KlawPaths, workspace: Path) -> None:
    nested = _others(paths, workspace, paths.data_dir)
    root = paths.data_dir

    def skip(name: str) -> str | None:
        rel = name.removeprefix("data/")
        top = rel.split("/", 1)[0]
        if rel in DATABASES:
            return ""  # the snapshots are in the archive already
        if rel == "klaw.db.keyword":
            return "the keyword index: rebuilt from klaw.db when the engine opens it"
        if top.startswith(DATABASES):
            return ""  # -wal, -shm, a reindex in progress
        if rel == "sandbox":
            return "the sandbox's root filesystem: `klaw sandbox build` makes it again"
        if nested and _inside((root / rel).resolve(), nested):
            return "another of Klaw's directories, saved on its own"
        return None

    if root.is_dir() and out.add_dir("data", root):
        out.add_tree(root, "data", skip, complete_lines=True)


def _workspace(out: _Writer, paths: KlawPaths, workspace: Path) -> None:
    nested = _others(paths, workspace, workspace)

    def skip(name: str) -> str | None:
        rel = name.removeprefix("workspace/")
        if rel == ".sandbox-staging":
            return ""
        if nested and _inside((workspace / rel).resolve(), nested):
            return "another of Klaw's directories, saved on its own"
        return None

    if workspace.is_dir() and out.add_dir("workspace", workspace):
        out.add_tree(workspace, "workspace", skip)

"""`klaw restore ARCHIVE`: check the archive whole, then put the agent back.

1. `check_archive` reads every member, hashes it and compares the lot with the manifest
   (the last member): a torn archive (truncated, a bad gzip stream), a changed, missing
   or extra member, a newer backup format or a newer database schema is refused here,
   before anything is written, and so is a scheduler.db row that is not a Klaw job
   (read as the engine reads it: a forged pickle never runs).
2. Both daemons must be stopped: their locks are held to the end.
3. An agent already in place is replaced only with `force`, and kept: the data dir and
   the workspace are renamed to `<dir>.before-restore-<time>`, the config files the
   archive brings are moved into `<config dir>.before-restore-<time>/`.
4. Members are extracted beside their targets (hashed again on the way), then each
   target is swapped in with a rename.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import os
import shutil
import sqlite3
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Final

from klaw.backup.archive import (
    CONFIG_FILES,
    DATABASES,
    MANIFEST,
    Manifest,
    Member,
    check_name,
    check_schema,
    sqlite_user_version,
    supported_schemas,
    workspace_in_force,
)
from klaw.errors import BackupError, KlawError
from klaw.fsutil import fsync_dir, temp_name, temp_path
from klaw.paths import KlawPaths

__all__ = ["Checked", "RestoreReport", "check_archive", "restore_backup"]

_CHUNK: Final = 1 << 20
#: Config files read during the check (for the workspace key) are at most this big.
_CONFIG_MAX: Final = 1 << 20
#: scheduler.db and the files SQLite would fold into it when opened: read before restore.
_SCHEDULER_FILES: Final = ("scheduler.db", "scheduler.db-wal", "scheduler.db-journal")
#: Left in place when the data dir is replaced: made on this machine, not agent state.
_MACHINE_LOCAL: Final = ("sandbox",)


@dataclass
class Checked:
    """An archive that matched its manifest."""

    path: Path
    manifest: Manifest
    files: int = 0
    size: int = 0
    engine_yaml_bytes: bytes | None = None  # where the restored workspace goes

    def engine_yaml(self) -> str | None:
        raw = self.engine_yaml_bytes
        return raw.decode("utf-8", errors="replace") if raw is not None else None


@dataclass
class RestoreReport:
    checked: Checked
    config_dir: Path
    data_dir: Path
    workspace: Path
    kept: list[str] = field(default_factory=list)  # "what → where it was moved"
    reindexed: bool = False
    reindex_error: str | None = None


def _torn(path: Path, exc: BaseException) -> BackupError:
    why = str(exc) or type(exc).__name__
    return BackupError(
        f"{path} is damaged or incomplete ({why}): it cannot be restored; nothing was changed"
    )


_DAMAGE: Final = (tarfile.TarError, EOFError, zlib.error, OSError)


@contextmanager
def _members(path: Path) -> Iterator[Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]]:
    """The archive's members in order, each with its data stream (None for a directory);
    any damage of the gzip or tar stream becomes one BackupError. The gzip stream is
    read to its end, so its trailer (CRC and length) is checked too."""
    try:
        gz = gzip.open(path, "rb")
        tar = tarfile.open(fileobj=gz, mode="r|")
    except FileNotFoundError:
        raise BackupError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise BackupError(f"{path} is a directory, not a backup archive") from None
    except _DAMAGE as exc:
        raise _torn(path, exc) from None

    def walk() -> Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]:
        while True:
            try:
                info = tar.next()
            except _DAMAGE as exc:
                raise _torn(path, exc) from None
            if info is None:
                try:
                    while gz.read(_CHUNK):
                        pass
                except _DAMAGE as exc:
                    raise _torn(path, exc) from None
                return
            if not (info.isreg() or info.isdir()):
                raise BackupError(
                    f"{path}: the member {info.name!r} is a link or a device, "
                    "which no Klaw backup contains; nothing was changed"
                )
            yield info, tar.extractfile(info) if info.isreg() else None

    try:
        yield walk()
    finally:
        tar.close()
        gz.close()


def _read_all(path: Path, stream: IO[bytes], sink: IO[bytes] | None = None) -> tuple[str, int]:
    """(sha256, size) of a member's data, copied to `sink` on the way."""
    sha = hashlib.sha256()
    size = 0
    while True:
        try:
            chunk = stream.read(_CHUNK)
        except _DAMAGE as exc:
            raise _torn(path, exc) from None
        if not chunk:
            return sha.hexdigest(), size
        sha.update(chunk)
        size += len(chunk)
        if sink is not None:
            sink.write(chunk)


def check_archive(path: Path) -> Checked:
    """Reads the whole archive and checks it against its manifest (see the module
    docstring); raises BackupError or SchemaTooNew, writes nothing (but a temporary
    copy of scheduler.db, whose jobs are read as the engine would read them)."""
    path = path.expanduser().absolute()
    with tempfile.TemporaryDirectory(prefix="klaw-restore-check-") as spool:
        return _check_archive(path, Path(spool))


def _check_archive(path: Path, spool: Path) -> Checked:
    seen: dict[str, Member] = {}
    engine_yaml: bytes | None = None
    manifest: Manifest | None = None
    with _members(path) as members:
        for info, stream in members:
            if manifest is not None:
                raise BackupError(
                    f"{path}: {info.name!r} follows the manifest; nothing was changed"
                )
            if info.name == MANIFEST and stream is not None:
                buf = io.BytesIO()
                _read_all(path, stream, buf)
                manifest = Manifest.from_json(buf.getvalue())
                continue
            root, rel = check_name(info.name)
            if info.name in seen:
                raise BackupError(f"{path}: {info.name!r} appears twice; nothing was changed")
            if stream is None:
                seen[info.name] = Member(info.name, "dir")
                continue
            if root == "config" and str(rel) == "engine.yaml" and info.size <= _CONFIG_MAX:
                buf = io.BytesIO()
                digest, size = _read_all(path, stream, buf)
                engine_yaml = buf.getvalue()
            elif root == "data" and str(rel) in _SCHEDULER_FILES:
                with (spool / str(rel)).open("wb") as sink:
                    digest, size = _read_all(path, stream, sink)
            else:
                digest, size = _read_all(path, stream)
            seen[info.name] = Member(info.name, "file", size, digest)
    if manifest is None:
        raise BackupError(
            f"{path} has no {MANIFEST}: it is incomplete or not a Klaw backup; nothing was changed"
        )
    listed = {m.name: m for m in manifest.members}
    for name, member in listed.items():
        got = seen.get(name)
        if got is None:
            raise BackupError(f"{path}: {name} is missing from the archive; nothing was changed")
        if got != member:
            raise BackupError(
                f"{path}: {name} does not match the manifest (altered or damaged); "
                "nothing was changed"
            )
    extra = sorted(set(seen) - set(listed))
    if extra:
        raise BackupError(f"{path}: {extra[0]} is not in the manifest; nothing was changed")
    supported = supported_schemas()
    for name in DATABASES:
        if name in manifest.schemas:
            check_schema(name, manifest.schemas[name], supported)
    if (spool / "scheduler.db").is_file():
        _check_jobs(path, spool / "scheduler.db")
    files = [m for m in manifest.members if m.type == "file"]
    return Checked(path, manifest, len(files), sum(m.size for m in files), engine_yaml)


def _check_jobs(path: Path, db: Path) -> None:
    """scheduler.db's jobs read as the engine will read them: a row that is not a job
    of Klaw's (a pickle made to run code when loaded) refuses the whole archive."""
    from klaw.scheduler.jobstate import UnsafeJobState, check_job_rows

    try:
        check_job_rows(db)
    except UnsafeJobState as exc:
        raise BackupError(
            f"{path}: {exc}. The backup was altered or not made by Klaw: restore "
            "another one; nothing was changed"
        ) from None
    except sqlite3.DatabaseError as exc:
        raise BackupError(
            f"{path}: data/scheduler.db is not a readable database ({exc}); nothing was changed"
        ) from None


def _has_agent(config_dir: Path, data_dir: Path, workspace: Path) -> list[str]:
    """What of an agent is already in place (empty directories do not count)."""
    found = [str(config_dir / n) for n in CONFIG_FILES if (config_dir / n).exists()]
    for d, local in ((data_dir, _MACHINE_LOCAL), (workspace, ())):
        try:
            if any(e.name not in local for e in os.scandir(d)):
                found.append(str(d))
        except FileNotFoundError:
            pass
    return found


def _check_layout(config_dir: Path, data_dir: Path, workspace: Path) -> None:
    dirs = [config_dir.resolve(), data_dir.resolve(), workspace.resolve()]
    for a in dirs:
        for b in dirs:
            if a != b and a in b.parents:
                raise BackupError(
                    f"{b} lies inside {a}: restore replaces the config dir, the data dir and "
                    "the workspace separately; point KLAW_DATA_DIR / KLAW_WORKSPACE (or "
                    "engine.yaml's workspace) at separate directories"
                )


def _extract(checked: Checked, staging: dict[str, Path]) -> None:
    """Writes every member under its root's staging dir, hashing it again: an archive
    that changed since the check is refused (the caller removes the staging dirs)."""
    listed = {m.name: m for m in checked.manifest.members}
    dirs: list[tuple[Path, tarfile.TarInfo]] = []
    with _members(checked.path) as members:
        for info, stream in members:
            if info.name == MANIFEST:
                continue
            root, rel = check_name(info.name)
            dest = staging[root] / rel
            if stream is None:
                dest.mkdir(parents=True, exist_ok=True, mode=0o700)
                dirs.append((dest, info))
                continue
            dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            with open(os.open(dest, flags, 0o600), "wb") as sink:
                digest, size = _read_all(checked.path, stream, sink)
            member = listed.get(info.name)
            if member is None or (member.sha256, member.size) != (digest, size):
                raise BackupError(
                    f"{checked.path} changed while it was restored ({info.name}); "
                    "nothing was changed"
                )
            os.chmod(dest, info.mode & 0o777)
            os.utime(dest, (info.mtime, info.mtime))
    for dest, info in reversed(dirs):  # after their files, which touch their mtime
        os.chmod(dest, info.mode & 0o777)
        os.utime(dest, (info.mtime, info.mtime))


def _check_databases(checked: Checked, data: Path) -> None:
    """The versions in the files themselves, not only the manifest's word for them."""
    supported = supported_schemas()
    for name in DATABASES:
        if (data / name).is_file():
            check_schema(name, sqlite_user_version(data / name), supported)


def restore_backup(
    paths: KlawPaths,
    archive: Path,
    *,
    force: bool = False,
    reindex: bool = False,
    checked: Checked | None = None,
) -> RestoreReport:
    """Restores `archive` into `paths` (see the module docstring)."""
    from klaw.lock import daemons_stopped

    with ExitStack() as held:
        held.enter_context(daemons_stopped(paths, "klaw restore", "it replaces the chat logs"))
        checked = checked or check_archive(archive)
        # A directory that is a symbolic link (a workspace on another disk) is restored
        # where the link points, and the link stays.
        workspace = workspace_in_force(checked.engine_yaml(), paths).resolve()
        paths = dataclasses.replace(
            paths, config_dir=paths.config_dir.resolve(), data_dir=paths.data_dir.resolve()
        )
        report = RestoreReport(checked, paths.config_dir, paths.data_dir, workspace)
        _check_layout(paths.config_dir, paths.data_dir, workspace)
        present = _has_agent(paths.config_dir, paths.data_dir, workspace)
        if present and not force:
            raise BackupError(
                f"an agent is already here ({', '.join(present)}); nothing was changed. "
                "`klaw restore --force` replaces it and keeps the old files beside it "
                "(<dir>.before-restore-<time>)"
            )
        stamp = datetime.now(UTC).strftime("before-restore-%Y%m%d-%H%M%S")
        staging = {
            "config": paths.config_dir / temp_name("restore"),
            "data": temp_path(paths.data_dir),
            "workspace": temp_path(workspace),
        }
        try:
            for d in staging.values():
                d.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                d.mkdir(mode=0o700)
            _extract(checked, staging)
            _check_databases(checked, staging["data"])
            os.sync()  # every extracted file on disk before the renames make them live
            _swap(report, staging, stamp)
        except KlawError as exc:
            if report.kept:
                raise BackupError(f"{exc}; " + _state(report, "")) from None
            raise
        except OSError as exc:
            raise BackupError(
                f"restore failed: {exc}; " + _state(report, "nothing was changed")
            ) from None
        finally:
            for d in staging.values():
                shutil.rmtree(d, ignore_errors=True)
        if reindex:
            _reindex(paths, report)
    return report


def _state(report: RestoreReport, untouched: str) -> str:
    if not report.kept:
        return untouched
    return "the restore stopped half-way; what it replaced was kept: " + "; ".join(report.kept)


def _aside(path: Path, stamp: str) -> Path:
    return path.with_name(f"{path.name}.{stamp}")


def _swap(report: RestoreReport, staging: dict[str, Path], stamp: str) -> None:
    config_dir = report.config_dir
    config_aside = _aside(config_dir, stamp)
    for name in CONFIG_FILES:  # Klaw's config is the backup's, not a mix of both
        target = config_dir / name
        if target.exists():
            config_aside.mkdir(exist_ok=True, mode=0o700)
            target.rename(config_aside / name)
            report.kept.append(f"{target} → {config_aside / name}")
        if (staging["config"] / name).exists():
            (staging["config"] / name).rename(target)
    fsync_dir(config_dir)
    for key, target in (("data", report.data_dir), ("workspace", report.workspace)):
        old = _aside(target, stamp)
        if target.exists():
            if not any(os.scandir(target)):
                target.rmdir()
            else:
                target.rename(old)
                report.kept.append(f"{target} → {old}")
        staging[key].rename(target)
        if key == "data" and old.is_dir():
            for name in _MACHINE_LOCAL:
                if (old / name).exists() and not (target / name).exists():
                    (old / name).rename(target / name)
        fsync_dir(target.parent)


def _reindex(paths: KlawPaths, report: RestoreReport) -> None:
    from klaw.config import load_engine_config
    from klaw.memory.api import rebuild

    try:
        config = load_engine_config(paths.engine_config)
        here = dataclasses.replace(paths, workspace=report.workspace)
        rebuild(here, config, progress=False, lock=False)  # the caller holds the lock
        report.reindexed = True
    except KlawError as exc:
        report.reindex_error = str(exc)

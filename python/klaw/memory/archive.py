"""Old daily logs move to `memory/archive/` (issue 25 item 6; seed autopoiesis §8.6).

A daily log (`memory/YYYY-MM-DD.md`, or `YYYY-MM-DD-slug.md`, directly in `memory/`)
whose day is more than `memory.archive.afterDays` before today (the owner's day) is
moved, name unchanged, to `memory/archive/`. Nothing is deleted or rewritten: the file
is still indexed and searchable (`memory/**/*.md`), its date still comes from its name,
and a citation names where it is now (`memory/archive/2026-01-05.md#L3-L9`). The moves
of one run are one commit of versioned memory. A log the owner has edited and not
committed is left where it is this time (moving it would commit their edit), as is a
log whose name is already taken in the archive; both are logged.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Final

from klaw.memory.versioning import Change, blob_id, versioner

__all__ = ["ARCHIVE_DIR", "ArchiveReport", "archive_logs", "due_logs"]

log = logging.getLogger("klaw.memory")

ARCHIVE_DIR: Final = "memory/archive"
_DAY = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:-[^/]*)?\.md$")


@dataclass
class ArchiveReport:
    moved: list[str] = field(default_factory=list)  # workspace-relative, new paths
    skipped: list[str] = field(default_factory=list)  # "path: why"


def due_logs(workspace: Path, after_days: int, today: date) -> list[Path]:
    """The daily logs in `memory/` older than `after_days` days before `today`, oldest
    first. Symlinks are left alone (they may lead anywhere)."""
    folder = workspace / "memory"
    cutoff = today - timedelta(days=after_days)
    found: list[tuple[str, Path]] = []
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    for entry in entries:
        m = _DAY.match(entry.name)
        if m is None or not entry.is_file(follow_symlinks=False):
            continue
        try:
            day = date.fromisoformat(m.group(1))
        except ValueError:
            continue
        if day < cutoff:
            found.append((entry.name, Path(entry.path)))
    return [p for _, p in sorted(found)]


def archive_logs(
    workspace: Path, after_days: int, today: date, *, dry_run: bool = False
) -> ArchiveReport:
    """Move the due logs to `memory/archive/` (see the module docstring)."""
    report = ArchiveReport()
    if not _stays_inside(workspace, "memory", ARCHIVE_DIR):
        report.skipped.append(
            f"memory/ or {ARCHIVE_DIR}/ leads outside the workspace (a symlink): nothing moved"
        )
        log.warning("not archived: %s", report.skipped[0])
        return report
    git = versioner(workspace)
    # HEAD's blob ids, compared with the files' bytes: no `git status`, which can run
    # the repository's clean filters (a program named in its config)
    tracked = git.head_ids("memory") if git.active else {}
    width = len(next(iter(tracked.values()), "0" * 40))
    moves: list[tuple[Path, Path]] = []
    for path in due_logs(workspace, after_days, today):
        rel = path.relative_to(workspace).as_posix()
        target = workspace / ARCHIVE_DIR / path.name
        if rel in tracked and blob_id(path.read_bytes(), width) != tracked[rel]:
            report.skipped.append(f"{rel}: edited and not committed; commit or revert it first")
        elif target.exists() or target.is_symlink():
            report.skipped.append(f"{rel}: {ARCHIVE_DIR}/{path.name} exists already")
        else:
            moves.append((path, target))
    for line in report.skipped:
        log.info("not archived: %s", line)
    if dry_run or not moves:
        report.moved = [f"{ARCHIVE_DIR}/{src.name}" for src, _ in moves]
        return report
    (workspace / ARCHIVE_DIR).mkdir(parents=True, exist_ok=True)
    changes: list[Change] = []
    for src, dst in moves:
        data = src.read_bytes()
        os.replace(src, dst)  # same filesystem: the file moves whole
        new, old = dst.relative_to(workspace).as_posix(), src.relative_to(workspace).as_posix()
        report.moved.append(new)
        if old in tracked:  # an owner's file git never had stays out of history
            changes += [Change(old, data, None), Change(new, None, data)]
    git.record(
        changes,
        f"archive {len(moves)} daily log{'s' if len(moves) != 1 else ''}",
        f"Daily logs older than {after_days} days (memory.archive.afterDays) move to "
        f"{ARCHIVE_DIR}/, still indexed and searchable.",
    )
    log.info("archived %d daily log(s) to %s", len(moves), ARCHIVE_DIR)
    return report


def _stays_inside(workspace: Path, *rels: str) -> bool:
    """Whether each folder, where it exists, is a real folder of the workspace."""
    root = workspace.resolve()
    for rel in rels:
        path = workspace / rel
        if path.is_symlink() or (path.exists() and not path.resolve().is_relative_to(root)):
            return False
    return True

"""`klaw reindex`, the file side: the report, the saved-facts reader and the swap.

`klaw.memory.api.rebuild` builds into `klaw.db.reindex` beside the live file
(messages and full-text index streamed by the Rust core; archival chunks re-chunked
from the workspace, summaries, saved facts and core memory, embeddings served from
the cache), then `swap_in` renames it over klaw.db, so a crash mid-way leaves the old
database untouched. This module imports nothing from `api` (no import cycle).
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from klaw.fsutil import fsync_dir, replace_durably

log = logging.getLogger("klaw.reindex")


@dataclass
class ReindexReport:
    messages: int = 0
    sessions: int = 0
    summaries: int = 0
    files: int = 0
    chunks: int = 0
    saved_facts: int = 0
    conversation_chunks: int = 0
    skipped: list[tuple[str, int, str]] = field(default_factory=list)
    skipped_count: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


def _keyword_dir(db: Path) -> Path:
    return db.with_name(db.name + ".keyword")


def remove_db_files(db: Path) -> None:
    for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        p.unlink(missing_ok=True)
    shutil.rmtree(_keyword_dir(db), ignore_errors=True)


def read_saved(path: Path, report: ReindexReport | None = None) -> list[dict[str, Any]]:
    """Saved facts, skipping (and reporting) torn or garbage lines."""
    out: list[dict[str, Any]] = []
    if not path.is_file():
        return out
    with path.open("rb") as f:
        for no, raw in enumerate(f, 1):
            try:
                rec = json.loads(raw.decode("utf-8"))
                if not isinstance(rec, dict) or not str(rec.get("text", "")).strip():
                    raise ValueError("not a saved fact")
                out.append(rec)
            except (UnicodeDecodeError, ValueError) as exc:
                if report is not None:
                    report.skipped.append((str(path), no, f"{type(exc).__name__}: {exc}"[:200]))
                    report.skipped_count += 1
    return out


def swap_in(tmp: Path, db: Path) -> None:
    """Atomically replaces `db` (and its keyword index) with the freshly built `tmp`."""
    # The old WAL must never be replayed onto the new file.
    for suffix in ("-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)
        tmp.with_name(tmp.name + suffix).unlink(missing_ok=True)
    replace_durably(tmp, db)
    old_kw = _keyword_dir(db)
    new_kw = _keyword_dir(tmp)
    trash = db.with_name(db.name + ".keyword.old")
    shutil.rmtree(trash, ignore_errors=True)
    if old_kw.exists():
        old_kw.rename(trash)
    if new_kw.exists():
        new_kw.rename(old_kw)
    shutil.rmtree(trash, ignore_errors=True)
    fsync_dir(db.parent)

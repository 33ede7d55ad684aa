"""`klaw reindex`: rebuild klaw.db from files alone.

Builds into `klaw.db.reindex` beside the live file (messages and full-text index
streamed by the Rust core; archival chunks re-chunked from the workspace,
summaries, saved facts and core memory, embeddings served from the cache), then
swaps it in with a rename, so a crash mid-way leaves the old database untouched.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from klaw import _core
from klaw.lock import EngineLock
from klaw.paths import KlawPaths

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.memory.embedding import EmbeddingBackend

log = logging.getLogger("klaw.reindex")


@dataclass
class ReindexReport:
    messages: int = 0
    sessions: int = 0
    summaries: int = 0
    files: int = 0
    chunks: int = 0
    saved_facts: int = 0
    skipped: list[tuple[str, int, str]] = field(default_factory=list)
    skipped_count: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


def _keyword_dir(db: Path) -> Path:
    return db.with_name(db.name + ".keyword")


def _remove_db_files(db: Path) -> None:
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


def rebuild(
    paths: KlawPaths,
    config: EngineConfig,
    *,
    backend: EmbeddingBackend | None = None,
    cache: _core.EmbeddingCache | None = None,
    progress: bool = True,
    lock: bool = True,
) -> ReindexReport:
    """Rebuilds `paths.db`. Raises StoreLocked while the engine holds the database."""
    from klaw.memory.api import Memory, load_backend

    held = EngineLock(paths.engine_lock).acquire("klaw reindex") if lock else None
    try:
        t0 = time.perf_counter()
        backend = backend or load_backend(config, paths)
        cache = cache or _core.EmbeddingCache(str(paths.embeddings_cache))
        tmp = paths.db.with_name(paths.db.name + ".reindex")
        _remove_db_files(tmp)
        paths.db.parent.mkdir(parents=True, exist_ok=True)
        stats = _core.rebuild_messages(
            str(tmp),
            str(paths.data_dir),
            dim=backend.dim,
            default_model=str(config.routing.default),
            progress=progress,
        )
        report = ReindexReport(
            messages=int(stats["messages"]),
            sessions=int(stats["sessions"]),
            summaries=int(stats["summaries"]),
            skipped=list(stats["skipped_samples"]),
            skipped_count=int(stats["skipped"]),
        )
        store = _core.Store(str(tmp), dim=backend.dim)
        mem = Memory(store, backend, cache, paths, config)
        try:
            store.meta_set("embedding_model", backend.model_id)
            ws = mem.index_workspace()
            report.files = len(ws.indexed)
            report.chunks = ws.chunks
            report.errors.extend(ws.errors)
            for imported in mem.imported_paths():
                if imported.exists():
                    report.chunks += mem.import_path(imported).chunks
                else:
                    report.errors.append(f"imported path {imported} no longer exists; skipped")
            for rec in read_saved(paths.saved_memory, report):
                report.chunks += len(mem._index_saved(rec))
                report.saved_facts += 1
        finally:
            store.close()
        _swap(tmp, paths.db)
        report.seconds = time.perf_counter() - t0
        return report
    finally:
        if held is not None:
            held.release()


def _swap(tmp: Path, db: Path) -> None:
    """Atomically replaces `db` (and its keyword index) with the freshly built `tmp`."""
    # The old WAL must never be replayed onto the new file.
    for suffix in ("-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)
        tmp.with_name(tmp.name + suffix).unlink(missing_ok=True)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, db)
    old_kw = _keyword_dir(db)
    new_kw = _keyword_dir(tmp)
    trash = db.with_name(db.name + ".keyword.old")
    shutil.rmtree(trash, ignore_errors=True)
    if old_kw.exists():
        old_kw.rename(trash)
    if new_kw.exists():
        new_kw.rename(old_kw)
    shutil.rmtree(trash, ignore_errors=True)
    dfd = os.open(db.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)

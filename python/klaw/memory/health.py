"""Store health for `klaw doctor`."""

from __future__ import annotations

from pathlib import Path

from klaw import _core
from klaw.errors import KlawError, StoreLocked
from klaw.lock import EngineLock
from klaw.memory.dbfile import check_db_file


def check_store(
    db_path: Path, dim: int | None = None, engine_lock: Path | None = None
) -> list[str]:
    """Problems with klaw.db, each with its fix; empty when healthy or not created yet.

    While an engine holds `engine_lock` the check is skipped: opening the store may
    rebuild its derived keyword index, and the engine is the only writer. `dim` None
    takes the dimension the file records (a model change is not damage).
    """
    if not db_path.exists():
        return []
    if engine_lock is not None:
        try:
            EngineLock(engine_lock).acquire("klaw doctor").release()
        except StoreLocked:
            return []
    try:
        check_db_file(db_path)
        store = _core.Store(str(db_path), dim=dim)
    except KlawError as exc:
        return [f"{exc} — fix: stop the engine and run `klaw reindex`"]
    try:
        return [f"{p} — fix: run `klaw reindex`" for p in store.integrity_check()]
    finally:
        store.close()

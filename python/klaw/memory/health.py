"""Store health for `klaw doctor`."""

from __future__ import annotations

from pathlib import Path

from klaw import _core
from klaw.errors import KlawError


def check_store(db_path: Path, dim: int = 384) -> list[str]:
    """Problems with klaw.db, each with its fix; empty when healthy or not created yet."""
    if not db_path.exists():
        return []
    try:
        store = _core.Store(str(db_path), dim=dim)
    except KlawError as exc:
        return [f"{exc} — fix: stop the engine and run `klaw reindex`"]
    try:
        return [f"{p} — fix: run `klaw reindex`" for p in store.integrity_check()]
    finally:
        store.close()

"""A look at klaw.db's file before SQLite opens it.

SQLite takes a 0-byte file as a new, empty database: a truncated klaw.db (a full disk,
a bad copy) would start as an empty store, every search would find nothing, and
`klaw doctor` would say "ok". Klaw refuses such a file instead, with the cure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from klaw.errors import StoreCorrupt

__all__ = ["check_db_file"]

_HEADER: Final = b"SQLite format 3\x00"


def check_db_file(path: Path) -> None:
    """Raises `StoreCorrupt` when `path` exists but cannot be a klaw.db; a missing file
    is fine (it is created)."""
    try:
        with path.open("rb") as f:
            head = f.read(len(_HEADER))
    except FileNotFoundError:
        return
    if not head:
        wal = path.with_name(path.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            return  # a new database whose first pages are still in the WAL: SQLite's call
        raise StoreCorrupt(
            f"{path} is empty (0 bytes), not a database: run `klaw reindex` to rebuild "
            "it from the files (conversations, memory, summaries)"
        )
    if head != _HEADER:
        raise StoreCorrupt(
            f"{path} is not an SQLite database: run `klaw reindex` to rebuild it from "
            "the files (conversations, memory, summaries)"
        )

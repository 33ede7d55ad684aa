"""A damaged scheduler.db: found, set aside, reported (hostile case 8).

A scheduler.db that SQLite cannot read (truncated by a full SD card, overwritten,
not a database at all) must not take the agent down: chats do not need it. At
engine start the file is checked (`PRAGMA quick_check`); a damaged one is renamed
to `scheduler.db.corrupt-<UTC time>` (with its WAL), kept for the owner, and the
scheduler starts on a fresh file; the log names both files and how to get the jobs
back. `klaw doctor` reports a damaged file and any set-aside copy until the owner
has dealt with it.
"""

from __future__ import annotations

import logging
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

__all__ = ["damage", "restore_hint", "set_aside_copies", "set_aside_if_damaged"]

log = logging.getLogger("klaw.scheduler")

#: SQLite's primary result codes for a file that is not a (readable) database.
_DAMAGED: Final = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB
_ASIDE: Final = ".corrupt-"


def restore_hint(db: Path) -> str:
    """How to get the jobs back: from a backup's scheduler.db, or by adding them again."""
    return (
        "to get your jobs back, stop the engine, copy scheduler.db out of your latest "
        f"backup (`tar -xzOf klaw-backup-….tar.gz data/scheduler.db > {db}`) and start "
        "the engine again; or add them again with `klaw schedule add` (docs/scheduler.md)"
    )


def damage(db: Path) -> str | None:
    """Why `db` is damaged (SQLite's words), or None when it reads (or does not exist).
    Read-only: safe beside a running engine."""
    if not db.exists():
        return None
    try:
        with closing(sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)) as conn:
            rows = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _DAMAGED:
            return str(exc)
        raise  # busy, permissions: not damage; the caller reports it as it is
    problems = [str(r[0]) for r in rows if r[0] != "ok"]
    return "; ".join(problems[:3]) or None


def set_aside_if_damaged(db: Path) -> Path | None:
    """Renames a damaged `db` (and its WAL) to `<db>.corrupt-<time>` so a fresh one can
    be made; returns the new name, None when `db` is sound. Logs what happened and
    how to get the jobs back."""
    why = damage(db)
    if why is None:
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = db.with_name(f"{db.name}{_ASIDE}{stamp}")
    for suffix in ("-wal", "-shm", ""):  # the database last: a crash leaves it findable
        part = db.with_name(db.name + suffix)
        if part.exists():
            part.rename(aside.with_name(aside.name + suffix))
    log.error(
        "%s is damaged (%s): set aside as %s; the scheduler starts on a new, empty "
        "file and chats are not affected. The built-in jobs come back by themselves; %s",
        db,
        why,
        aside,
        restore_hint(db),
    )
    return aside


def set_aside_copies(db: Path) -> list[Path]:
    """The damaged copies of `db` set aside so far (oldest first)."""
    return sorted(
        p for p in db.parent.glob(f"{db.name}{_ASIDE}*") if not p.name.endswith(("-wal", "-shm"))
    )

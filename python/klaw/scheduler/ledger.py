"""The run ledger: one row per (job, due time), in scheduler.db beside APScheduler's
job table; the engine is its only writer. scheduler.db's schema and its migrations
(`PRAGMA user_version`) live here too.

The row is what makes a due time run at most once. It is claimed (`claim`, status
``due``) before APScheduler moves the job to its next time, marked ``running`` just
before the model is woken, and finished with the outcome. After a crash, a ``due``
row never started runs at the next start (nothing lost) and a ``running`` one
becomes ``interrupted`` (never run twice: the model may already have acted).
A row dated in the future (the clock was ahead when it was written) would block its
due time: at start it is re-keyed out of the way (`Ledger.unblock_future`).

Statuses: due, running, ok (delivered or logged), silent (the model said nothing to
report), quiet (the pre-check found nothing: no tokens), capped (over the daily
token cap), missed (due too long ago), skipped (the previous run was still going),
failed, interrupted.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from klaw.errors import SchemaTooNew

__all__ = ["FINAL", "SCHEMA_VERSION", "Ledger", "Run", "iso", "open_scheduler_db"]

FINAL: Final = frozenset(
    {"ok", "silent", "quiet", "capped", "missed", "skipped", "failed", "interrupted"}
)

#: scheduler.db's schema version (`PRAGMA user_version`), for the whole file: the run
#: ledger's tables and the job store's.
SCHEMA_VERSION: Final = 2

# Migration i brings scheduler.db from version i to i + 1, in one transaction. Version
# 0 is a file of Klaw before versions (or APScheduler's SQLAlchemyJobStore): each part
# made its own tables with IF NOT EXISTS, so migration 0 completes whatever is missing.
# Append new steps; never edit a released one.
_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """CREATE TABLE IF NOT EXISTS klaw_runs (
            job TEXT NOT NULL,
            due TEXT NOT NULL,
            status TEXT NOT NULL,
            started TEXT,
            ended TEXT,
            tokens_in INTEGER NOT NULL DEFAULT 0,
            tokens_out INTEGER NOT NULL DEFAULT 0,
            error TEXT,
            PRIMARY KEY (job, due)
        ) WITHOUT ROWID""",
        "CREATE INDEX IF NOT EXISTS klaw_runs_due ON klaw_runs (due)",
        """CREATE TABLE IF NOT EXISTS klaw_job_state (
            job TEXT PRIMARY KEY,
            failing INTEGER NOT NULL DEFAULT 0,  -- the owner was told of a failure
            capped_day TEXT                      -- the day the owner was told of the cap
        ) WITHOUT ROWID""",
        # APScheduler's own table and index, as SQLAlchemyJobStore makes them.
        """CREATE TABLE IF NOT EXISTS apscheduler_jobs (
            id VARCHAR(191) NOT NULL PRIMARY KEY,
            next_run_time FLOAT,
            job_state BLOB NOT NULL
        )""",
        """CREATE INDEX IF NOT EXISTS ix_apscheduler_jobs_next_run_time
            ON apscheduler_jobs (next_run_time)""",
        """CREATE TABLE IF NOT EXISTS apscheduler_jobs_unreadable (
            id TEXT NOT NULL,
            job_state BLOB NOT NULL,
            reason TEXT NOT NULL,
            moved_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
        )""",
    ),
    (
        # What the heartbeat read at its last silent run (scheduler/quiet.py): the
        # next run is skipped while the digest is the same.
        "ALTER TABLE klaw_job_state ADD COLUMN quiet_digest TEXT",
    ),
)
assert len(_MIGRATIONS) == SCHEMA_VERSION


def open_scheduler_db(path: Path) -> sqlite3.Connection:
    """A connection to scheduler.db for the ledger or the job store (each has its own,
    behind its own lock): WAL, every commit fsynced (a claimed run and a job moved on
    survive power loss), the schema migrated to `SCHEMA_VERSION`.

    Raises `SchemaTooNew` for a file written by a newer Klaw; it is left untouched."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        db.execute("PRAGMA busy_timeout=5000")
        version = _version(db, path)  # before anything writes to a newer Klaw's file
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        _migrate(db, path, version)
    except BaseException:
        db.close()
        raise
    return db


def _version(db: sqlite3.Connection, path: Path) -> int:
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"{path} has schema version {version}, newer than this Klaw's "
            f"({SCHEMA_VERSION}): it was written by a newer Klaw; upgrade Klaw "
            "(keep the file: it holds your scheduled jobs)"
        )
    return version


def _migrate(db: sqlite3.Connection, path: Path, version: int) -> None:
    if version == SCHEMA_VERSION:
        return  # the common case, without a write lock
    db.execute("BEGIN IMMEDIATE")  # one migrator at a time: the version is read again
    try:
        for step in _MIGRATIONS[_version(db, path) :]:
            for sql in step:
                db.execute(sql)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def iso(when: datetime) -> str:
    """The ledger's time format: UTC, seconds (sorts as text)."""
    return when.astimezone(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True)
class Run:
    job: str
    due: str
    status: str
    started: str | None
    ended: str | None
    tokens_in: int
    tokens_out: int
    error: str | None


class Ledger:
    """scheduler.db's `klaw_runs`; safe from the loop and from worker threads (one
    connection behind a lock: every call is a short statement)."""

    def __init__(self, path: Path) -> None:
        self._db = open_scheduler_db(path)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def claim(self, job: str, due: datetime) -> bool:
        """Records that `job` is due at `due`; False when that due time has a row."""
        with self._lock:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO klaw_runs (job, due, status) VALUES (?, ?, 'due')",
                (job, iso(due)),
            )
            return cur.rowcount == 1

    def record(self, job: str, due: datetime, status: str, error: str | None = None) -> bool:
        """A run that ends before it starts (missed, skipped); False if the due time
        already has a row."""
        now = iso(datetime.now(UTC))
        with self._lock:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO klaw_runs (job, due, status, started, ended, error) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (job, iso(due), status, now, now, error),
            )
            return cur.rowcount == 1

    def start(self, job: str, due: datetime) -> bool:
        """due → running; False when the row is not `due` (it ran, or was never claimed)."""
        with self._lock:
            cur = self._db.execute(
                "UPDATE klaw_runs SET status = 'running', started = ? "
                "WHERE job = ? AND due = ? AND status = 'due'",
                (iso(datetime.now(UTC)), job, iso(due)),
            )
            return cur.rowcount == 1

    def finish(
        self,
        job: str,
        due: datetime,
        status: str,
        *,
        tokens_in: int = 0,
        tokens_out: int = 0,
        error: str | None = None,
    ) -> None:
        if status not in FINAL:
            raise ValueError(f"not a final status: {status!r}")
        now = iso(datetime.now(UTC))
        with self._lock:
            self._db.execute(
                "UPDATE klaw_runs SET status = ?, ended = ?, started = coalesce(started, ?), "
                "tokens_in = ?, tokens_out = ?, error = ? WHERE job = ? AND due = ?",
                (status, now, now, tokens_in, tokens_out, error, job, iso(due)),
            )

    def unblock_future(self, after: datetime) -> list[Run]:
        """Runs due after `after`: recorded while the clock was ahead (a Pi without a
        hardware clock, a wrong NTP answer) and now in the future, where each would
        block its due time when the real clock gets there. Their due is re-keyed
        `<due>~ahead-<now>` (the history keeps them; the due time is free to run); a
        claimed one becomes `missed`, a running one `interrupted`. Returns them as
        they were."""
        now = datetime.now(UTC)
        note = "recorded while the clock was ahead; this due time runs again"
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                rows = db.execute(
                    "SELECT job, due, status, started, ended, tokens_in, tokens_out, error "
                    "FROM klaw_runs WHERE due > ? AND instr(due, '~') = 0",
                    (iso(after),),
                ).fetchall()
                db.execute(
                    "UPDATE klaw_runs SET due = due || ?, ended = coalesce(ended, ?), "
                    "status = CASE status WHEN 'due' THEN 'missed' "
                    "WHEN 'running' THEN 'interrupted' ELSE status END, "
                    "error = coalesce(error, ?) WHERE due > ? AND instr(due, '~') = 0",
                    (f"~ahead-{now:%Y%m%dT%H%M%SZ}", iso(now), note, iso(after)),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return [Run(*row) for row in rows]

    def unfinished(self) -> tuple[list[Run], list[Run]]:
        """(claimed but never started, started but never finished): a previous
        engine's leftovers, read once at start."""
        runs = self._select("WHERE status IN ('due', 'running') ORDER BY due", ())
        return [r for r in runs if r.status == "due"], [r for r in runs if r.status == "running"]

    def history(self, job: str | None = None, limit: int = 20) -> list[Run]:
        """The newest runs first."""
        if job is None:
            return self._select("ORDER BY due DESC, job LIMIT ?", (limit,))
        return self._select("WHERE job = ? ORDER BY due DESC LIMIT ?", (job, limit))

    def tokens_between(self, job: str, start: datetime, end: datetime) -> int:
        """Tokens (in + out) of `job`'s runs due in [start, end)."""
        with self._lock:
            row = self._db.execute(
                "SELECT coalesce(sum(tokens_in + tokens_out), 0) FROM klaw_runs "
                "WHERE job = ? AND due >= ? AND due < ?",
                (job, iso(start), iso(end)),
            ).fetchone()
        return int(row[0])

    # --- telling the owner once --------------------------------------------

    def set_failing(self, job: str, failing: bool) -> bool:
        """Sets the job's failing flag; True when it changed (tell the owner then)."""
        with self._lock:
            row = self._db.execute(
                "SELECT failing FROM klaw_job_state WHERE job = ?", (job,)
            ).fetchone()
            if bool(row and row[0]) == failing:
                return False
            self._db.execute(
                "INSERT INTO klaw_job_state (job, failing) VALUES (?, ?) "
                "ON CONFLICT (job) DO UPDATE SET failing = excluded.failing",
                (job, int(failing)),
            )
            return True

    def mark_capped(self, job: str, day: str) -> bool:
        """Records that the owner is told of the cap on `day`; False if already told."""
        with self._lock:
            row = self._db.execute(
                "SELECT capped_day FROM klaw_job_state WHERE job = ?", (job,)
            ).fetchone()
            if row is not None and row[0] == day:
                return False
            self._db.execute(
                "INSERT INTO klaw_job_state (job, capped_day) VALUES (?, ?) "
                "ON CONFLICT (job) DO UPDATE SET capped_day = excluded.capped_day",
                (job, day),
            )
            return True

    def quiet_digest(self, job: str) -> str | None:
        """The digest stored by the job's last silent run (None: none, or it spoke since)."""
        with self._lock:
            row = self._db.execute(
                "SELECT quiet_digest FROM klaw_job_state WHERE job = ?", (job,)
            ).fetchone()
        return None if row is None else row[0]

    def set_quiet_digest(self, job: str, digest: str | None) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO klaw_job_state (job, quiet_digest) VALUES (?, ?) "
                "ON CONFLICT (job) DO UPDATE SET quiet_digest = excluded.quiet_digest",
                (job, digest),
            )

    def forget(self, job: str) -> None:
        """A removed job's state (its history stays)."""
        with self._lock:
            self._db.execute("DELETE FROM klaw_job_state WHERE job = ?", (job,))

    def _select(self, where: str, args: tuple[object, ...]) -> list[Run]:
        with self._lock:
            rows = self._db.execute(
                "SELECT job, due, status, started, ended, tokens_in, tokens_out, error "
                f"FROM klaw_runs {where}",
                args,
            ).fetchall()
        return [Run(*row) for row in rows]

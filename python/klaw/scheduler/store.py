"""APScheduler's job store on scheduler.db through the standard library's sqlite3.

Same table as APScheduler's SQLAlchemyJobStore (`apscheduler_jobs`: id, next run
time as a UTC timestamp, the pickled job state), so either store reads the other's
file (the tables are made by scheduler.db's migrations in `klaw.scheduler.ledger`).
Why not SQLAlchemy itself: importing and starting it costs the engine 15.0 MB
of RSS against 1.3 MB for APScheduler alone, over the scheduler's 15 MB budget
(docs/decisions.md). What a job pickles is text: its handler named by reference,
its `JobSpec` as a dict, and Klaw's `CronTrigger` (expression + zone name); rows are
read back by `klaw.scheduler.jobstate`, which builds only those (no row runs code).

One difference on purpose: a job that cannot be restored (a Klaw that no longer
knows its trigger, a damaged row) is moved to `apscheduler_jobs_unreadable` with
the reason and logged, where SQLAlchemyJobStore deletes it: nothing the owner
scheduled disappears without a trace.
"""

from __future__ import annotations

import logging
import pickle
import sqlite3
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from apscheduler.job import Job
from apscheduler.jobstores.base import BaseJobStore, ConflictingIdError, JobLookupError
from apscheduler.util import datetime_to_utc_timestamp, utc_timestamp_to_datetime

from klaw.scheduler.jobstate import load_job_state
from klaw.scheduler.ledger import open_scheduler_db

__all__ = ["SqliteJobStore"]

log = logging.getLogger("klaw.scheduler")


class SqliteJobStore(BaseJobStore):  # type: ignore[misc]
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    # --- life cycle ------------------------------------------------------

    def start(self, scheduler: Any, alias: str) -> None:
        super().start(scheduler, alias)
        self._db = open_scheduler_db(self.path)

    def shutdown(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # --- reads -----------------------------------------------------------

    def lookup_job(self, job_id: str) -> Job | None:
        jobs = self._jobs("WHERE id = ?", (job_id,))
        return jobs[0] if jobs else None

    def get_due_jobs(self, now: datetime) -> list[Job]:
        if self._db is None:  # shut down: a stopping scheduler's thread looks once more
            return []
        return self._jobs("WHERE next_run_time <= ?", (datetime_to_utc_timestamp(now),))

    def get_next_run_time(self) -> datetime | None:
        if self._db is None:
            return None
        row = self._one(
            "SELECT next_run_time FROM apscheduler_jobs WHERE next_run_time IS NOT NULL "
            "ORDER BY next_run_time LIMIT 1",
            (),
        )
        return utc_timestamp_to_datetime(row[0]) if row else None

    def get_all_jobs(self) -> list[Job]:
        jobs = self._jobs("", ())
        self._fix_paused_jobs_sorting(jobs)
        return jobs

    # --- writes ----------------------------------------------------------

    def add_job(self, job: Job) -> None:
        try:
            self._exec(
                "INSERT INTO apscheduler_jobs (id, next_run_time, job_state) VALUES (?, ?, ?)",
                (job.id, datetime_to_utc_timestamp(job.next_run_time), _state(job)),
            )
        except sqlite3.IntegrityError:
            raise ConflictingIdError(job.id) from None

    def update_job(self, job: Job) -> None:
        changed = self._exec(
            "UPDATE apscheduler_jobs SET next_run_time = ?, job_state = ? WHERE id = ?",
            (datetime_to_utc_timestamp(job.next_run_time), _state(job), job.id),
        )
        if changed == 0:
            raise JobLookupError(job.id)

    def remove_job(self, job_id: str) -> None:
        if self._exec("DELETE FROM apscheduler_jobs WHERE id = ?", (job_id,)) == 0:
            raise JobLookupError(job_id)

    def remove_all_jobs(self) -> None:
        self._exec("DELETE FROM apscheduler_jobs", ())

    # --- helpers ---------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("the job store is not started")
        return self._db

    def _exec(self, sql: str, args: tuple[Any, ...]) -> int:
        with self._lock:
            return self._conn().execute(sql, args).rowcount

    def _one(self, sql: str, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        with self._lock:
            row: tuple[Any, ...] | None = self._conn().execute(sql, args).fetchone()
            return row

    def _jobs(self, where: str, args: tuple[Any, ...]) -> list[Job]:
        with self._lock:
            rows = (
                self._conn()
                .execute(
                    f"SELECT id, job_state FROM apscheduler_jobs {where} ORDER BY next_run_time",
                    args,
                )
                .fetchall()
            )
        jobs: list[Job] = []
        for job_id, blob in rows:
            try:
                jobs.append(self._restore(blob))
            except Exception as exc:
                self._set_aside(job_id, blob, f"{type(exc).__name__}: {exc}")
        return jobs

    def _restore(self, blob: bytes) -> Job:
        state = load_job_state(blob)
        state["jobstore"] = self
        job = Job.__new__(Job)
        job.__setstate__(state)
        job._scheduler = self._scheduler
        job._jobstore_alias = self._alias
        return job

    def _set_aside(self, job_id: str, blob: bytes, reason: str) -> None:
        log.error(
            "scheduled job %r cannot be read (%s): moved to apscheduler_jobs_unreadable in %s",
            job_id,
            reason,
            self.path,
        )
        with self._lock:
            db = self._conn()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(
                    "INSERT INTO apscheduler_jobs_unreadable (id, job_state, reason) "
                    "VALUES (?, ?, ?)",
                    (job_id, blob, reason),
                )
                db.execute("DELETE FROM apscheduler_jobs WHERE id = ?", (job_id,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def __repr__(self) -> str:
        return f"<SqliteJobStore {self.path}>"


def _state(job: Job) -> bytes:
    return pickle.dumps(job.__getstate__(), pickle.HIGHEST_PROTOCOL)

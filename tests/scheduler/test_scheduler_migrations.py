"""scheduler.db's schema version: a file from before versions is migrated with its jobs
and runs kept; a file from a newer Klaw is refused by name and left as it is, by the
scheduler and by the engine as a process."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from klaw.errors import SchemaTooNew
from klaw.paths import KlawPaths
from klaw.scheduler.cron import CronTrigger
from klaw.scheduler.jobs import JobSpec
from klaw.scheduler.ledger import SCHEMA_VERSION, Ledger
from klaw.scheduler.service import HANDLER, Scheduler
from klaw.scheduler.store import SqliteJobStore
from scripted_llm import write_engine_yaml

# What Klaw wrote before scheduler.db had a version (user_version 0), verbatim: each
# part ran its own script when it opened the file.
V0_LEDGER = """
CREATE TABLE IF NOT EXISTS klaw_runs (
    job TEXT NOT NULL,
    due TEXT NOT NULL,
    status TEXT NOT NULL,
    started TEXT,
    ended TEXT,
    tokens_in INTEGER NOT NULL DEFAULT 0,
    tokens_out INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    PRIMARY KEY (job, due)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS klaw_runs_due ON klaw_runs (due);
CREATE TABLE IF NOT EXISTS klaw_job_state (
    job TEXT PRIMARY KEY,
    failing INTEGER NOT NULL DEFAULT 0,  -- the owner was told of a failure
    capped_day TEXT                      -- the day the owner was told of the cap
) WITHOUT ROWID;
"""
V0_STORE = """
CREATE TABLE IF NOT EXISTS apscheduler_jobs (
    id VARCHAR(191) NOT NULL PRIMARY KEY,
    next_run_time FLOAT,
    job_state BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_apscheduler_jobs_next_run_time
    ON apscheduler_jobs (next_run_time);
CREATE TABLE IF NOT EXISTS apscheduler_jobs_unreadable (
    id TEXT NOT NULL,
    job_state BLOB NOT NULL,
    reason TEXT NOT NULL,
    moved_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
"""
SPEC = JobSpec(name="weather", cron="0 0 8 ? * MON-FRI", message="Weather", timezone="UTC")
RUN_DUE = "2026-01-05T08:00:00+00:00"


def user_version(db: Path) -> int:
    with closing(sqlite3.connect(db)) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def tables(db: Path) -> set[str]:
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {r[0] for r in rows}


def write_v0(db: Path, *, ledger: bool) -> None:
    """A version-0 scheduler.db: the old scripts, a job stored by APScheduler's own
    SQLAlchemyJobStore (the table layout Klaw's store shares), a finished run."""
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(V0_STORE + (V0_LEDGER if ledger else ""))
        if ledger:
            conn.execute(
                "INSERT INTO klaw_runs (job, due, status, started, ended, tokens_in, tokens_out)"
                " VALUES ('weather', ?, 'ok', ?, ?, 120, 30)",
                (RUN_DUE, RUN_DUE, RUN_DUE),
            )
    aps = BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{db}")}, timezone=UTC
    )
    aps.start(paused=True)
    aps.add_job(
        HANDLER,
        trigger=CronTrigger(SPEC.cron, SPEC.timezone),
        id=SPEC.name,
        name=SPEC.name,
        kwargs=SPEC.to_data(),
    )
    aps.shutdown(wait=False)
    assert user_version(db) == 0


async def _noop(spec: JobSpec, due: datetime) -> None:
    return None


@pytest.mark.parametrize("ledger", [True, False], ids=["whole", "jobs-only"])
async def test_a_file_from_before_versions_is_migrated_and_keeps_jobs_and_runs(
    tmp_path: Path, ledger: bool
) -> None:
    db = tmp_path / "scheduler.db"
    write_v0(db, ledger=ledger)

    scheduler = Scheduler(db, _noop, catch_up=timedelta(hours=1))
    await scheduler.start()
    try:
        (job,) = await scheduler.jobs()
        runs = await scheduler.history("weather")
        await scheduler.add(JobSpec(name="later", cron="0 0 9 * * ?", message="m", timezone="UTC"))
    finally:
        await scheduler.stop()

    assert job.spec == SPEC and job.next_run is not None
    local = job.next_run.astimezone(UTC)
    assert (local.hour, local.minute, local.weekday() < 5) == (8, 0, True)
    assert [(r.status, r.tokens_in, r.tokens_out) for r in runs] == (
        [("ok", 120, 30)] if ledger else []
    )
    assert user_version(db) == SCHEMA_VERSION
    assert {"klaw_runs", "klaw_job_state", "apscheduler_jobs_unreadable"} <= tables(db)
    # Migrated once: opening again changes nothing and finds both jobs.
    again = Scheduler(db, _noop, catch_up=timedelta(hours=1))
    await again.start()
    names = sorted(s.spec.name for s in await again.jobs())
    await again.stop()
    assert names == ["later", "weather"] and user_version(db) == SCHEMA_VERSION


def test_a_new_file_starts_at_the_current_version(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "scheduler.db"
    Ledger(db).close()
    assert user_version(db) == SCHEMA_VERSION == 2
    assert {"klaw_runs", "klaw_job_state", "apscheduler_jobs"} <= tables(db)


def _newer(db: Path, version: int = 99) -> bytes:
    Ledger(db).close()
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(f"PRAGMA user_version = {version}")
    return db.read_bytes()


def test_a_newer_file_is_refused_by_name_with_both_versions_and_left_as_it_is(
    tmp_path: Path,
) -> None:
    db = tmp_path / "scheduler.db"
    before = _newer(db)
    with pytest.raises(SchemaTooNew) as ledger_err:
        Ledger(db)
    store = SqliteJobStore(db)
    with pytest.raises(SchemaTooNew) as store_err:
        store.start(None, "default")
    for err in (ledger_err, store_err):
        text = str(err.value)
        assert str(db) in text and "schema version 99" in text and "(2)" in text
        assert "upgrade Klaw" in text
    assert db.read_bytes() == before


def test_the_engine_refuses_to_start_on_a_newer_scheduler_db(klaw_home: KlawPaths) -> None:
    klaw_home.config_dir.mkdir(parents=True)
    klaw_home.data_dir.mkdir(parents=True)
    write_engine_yaml(klaw_home.engine_config, "http://127.0.0.1:9")
    before = _newer(klaw_home.scheduler_db, 7)
    done = subprocess.run(
        [sys.executable, "-m", "klaw.cli.app", "engine"],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if " ERROR " in ln]
    assert "the engine could not start" in line
    assert f"{klaw_home.scheduler_db} has schema version 7" in line and "(2)" in line
    assert klaw_home.scheduler_db.read_bytes() == before

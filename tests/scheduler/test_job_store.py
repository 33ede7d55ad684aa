"""scheduler.db's job store: APScheduler's own table layout through sqlite3, read and
written both ways with APScheduler's SQLAlchemyJobStore, and a damaged job set
aside with its reason instead of dropped."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from klaw.scheduler.jobs import JobSpec
from klaw.scheduler.service import Scheduler


async def _noop(spec: JobSpec, due: datetime) -> None:
    return None


def _spec(name: str, cron: str = "0 0 8 * * ?") -> JobSpec:
    return JobSpec(name=name, cron=cron, message="m", timezone="Europe/Berlin")


async def test_jobs_round_trip_with_apschedulers_sqlalchemy_store(tmp_path: Path) -> None:
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    db = tmp_path / "scheduler.db"
    ours = Scheduler(db, _noop, catch_up=timedelta(hours=1))
    await ours.start()
    await ours.add(_spec("weather", "0 0 8 ? * MON-FRI"))
    before = {s.spec.name: s.next_run for s in await ours.jobs()}
    await ours.stop()

    theirs = AsyncIOScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{db}")}, timezone=UTC
    )
    theirs.start(paused=True)
    (job,) = theirs.get_jobs()
    assert job.id == "weather" and job.next_run_time == before["weather"]
    assert job.kwargs["cron"] == "0 0 8 ? * MON-FRI"
    theirs.add_job(job.func_ref, trigger=job.trigger, id="added-by-sqlalchemy", kwargs={
        **job.kwargs, "name": "added-by-sqlalchemy"})  # fmt: skip
    theirs.shutdown(wait=False)

    again = Scheduler(db, _noop, catch_up=timedelta(hours=1))
    await again.start()
    names = sorted(s.spec.name for s in await again.jobs())
    await again.stop()
    assert names == ["added-by-sqlalchemy", "weather"]


async def test_a_job_that_cannot_be_read_is_set_aside_with_its_reason(tmp_path: Path) -> None:
    db = tmp_path / "scheduler.db"
    first = Scheduler(db, _noop, catch_up=timedelta(hours=1))
    await first.start()
    await first.add(_spec("good"))
    await first.add(_spec("doomed"))
    await first.stop()
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE apscheduler_jobs SET job_state = ? WHERE id = 'doomed'", (b"\x80junk",)
        )

    again = Scheduler(db, _noop, catch_up=timedelta(hours=1))
    await again.start()
    names = [s.spec.name for s in await again.jobs()]
    await again.stop()
    assert names == ["good"]
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT id, job_state, reason FROM apscheduler_jobs_unreadable"
        ).fetchall()
    assert [(r[0], r[1]) for r in rows] == [("doomed", b"\x80junk")]
    assert rows[0][2].split(":")[0].endswith("Error")  # the exception's name, then its text

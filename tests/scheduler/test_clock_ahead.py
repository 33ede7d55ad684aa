"""A clock that once ran ahead (hostile case 7): one engine start with the clock 13 h
ahead, then a normal one. The heartbeat must not wait 13 h, a daily job must not skip
its next time, and ledger rows dated in the future must not block their due times.

First as the real engine leaves it: `klaw engine` as a process under libfaketime
13 h ahead runs a daily job and stops; then the real engine starts on the right clock.
Then the same state written into a real scheduler.db and the real scheduler started,
without faketime."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import sysconfig
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sched_support import T, engine_running, engine_yaml, klaw, until

from klaw.paths import KlawPaths
from klaw.scheduler.jobs import JobSpec
from klaw.scheduler.ledger import Ledger
from klaw.scheduler.service import Scheduler, store_jobs
from scripted_llm import FakeLLM

AHEAD = timedelta(hours=13)


def _daily_at(when: datetime) -> str:
    """A Quartz expression firing every day at `when`'s time of day (UTC)."""
    return f"{when.second} {when.minute} {when.hour} * * ?"


def _runs(db: Path, job: str) -> list[tuple[str, str]]:
    ledger = Ledger(db)
    try:
        return [(r.due, r.status) for r in ledger.history(job)]
    finally:
        ledger.close()


LIBFAKETIME = Path(f"/usr/lib/{sysconfig.get_config_var('MULTIARCH')}/faketime/libfaketime.so.1")


async def _ahead_engine(ahead: datetime) -> asyncio.subprocess.Process:
    """`klaw engine` as a process whose clock reads `ahead` at its start (libfaketime,
    start-at: independent of whether the test's own clock is faked)."""
    env = dict(
        os.environ,
        TZ="UTC",  # how FAKETIME's time is read
        FAKETIME=f"@{ahead:%Y-%m-%d %H:%M:%S}",
        LD_PRELOAD=str(LIBFAKETIME),
    )
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "klaw.cli.app", "engine",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip


@pytest.mark.skipif(not LIBFAKETIME.exists(), reason="needs libfaketime (apt install faketime)")
async def test_after_an_engine_ran_13_hours_ahead_jobs_keep_their_times(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    """The ahead engine starts 13 h on: a daily job due 6 h from now is 7 h late for it,
    so it runs at once (catch-up) and is moved on a day; the heartbeat gets the next
    hour of the ahead clock."""
    engine_yaml(klaw_home.engine_config, llm.url)
    (klaw_home.workspace / "HEARTBEAT.md").write_text("# Heartbeat\n\n- Check the inbox\n")
    llm.answer('{"silent": true, "reason": "nothing"}')
    now = datetime.now(UTC).replace(microsecond=0)
    due = now + timedelta(hours=6)
    daily = JobSpec(name="daily", cron=_daily_at(due), message="Daily digest", timezone="UTC")
    assert store_jobs(klaw_home.scheduler_db, [daily]) == [(daily, "added")]

    proc = await _ahead_engine(now + AHEAD)
    try:
        await until(
            lambda: [s for _, s in _runs(klaw_home.scheduler_db, "daily")] == ["silent"], 60
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = await asyncio.wait_for(proc.communicate(), T)
        except TimeoutError:
            proc.kill()
            raise
    assert proc.returncode == 0, err.decode()[-2000:]
    assert _runs(klaw_home.scheduler_db, "daily") == [(due.isoformat(), "silent")]

    before = datetime.now(UTC)
    async with engine_running(klaw_home, backend):  # the clock is right again
        rc, out, err = await klaw("schedule", "list", "--json")
        after = datetime.now(UTC)
        assert rc == 0, err
        jobs = {j["name"]: j for j in json.loads(out)["jobs"]}
        heartbeat = datetime.fromisoformat(jobs["heartbeat"]["nextRun"])
        assert before < heartbeat <= after + timedelta(hours=1)  # hourly: within the hour
        assert datetime.fromisoformat(jobs["daily"]["nextRun"]) == due  # not the day after
        rc, out, err = await klaw("schedule", "history", "daily", "--json")
        assert rc == 0, err
        (run,) = json.loads(out)["runs"]
        assert run["due"].startswith(f"{due.isoformat()}~ahead-")  # kept, out of the way


async def _noop(spec: JobSpec, due: datetime) -> None:
    return None


async def test_next_times_and_ledger_rows_from_an_ahead_clock_are_set_right(
    tmp_path: Path,
) -> None:
    """The state an engine 13 h ahead leaves, written with the real store and ledger:
    an hourly job moved on from the ahead hour, a daily job that ran at its ahead due
    time and was moved a day on, and that run in the ledger."""
    db = tmp_path / "scheduler.db"
    now = datetime.now(UTC).replace(microsecond=0)
    ahead = now + AHEAD
    ran = now + timedelta(hours=6)  # the daily due time the ahead engine ran
    hourly = JobSpec(name="hourly", cron="0 0 * * * ?", message="m", timezone="UTC")
    daily = JobSpec(name="daily", cron=_daily_at(ran), message="m", timezone="UTC")
    store_jobs(db, [hourly, daily])
    _as_if_ahead(db, {"hourly": hourly.next_times(1, ahead)[0], "daily": ran + timedelta(1)})
    ledger = Ledger(db)
    assert ledger.claim("daily", ran) and ledger.start("daily", ran)
    ledger.finish("daily", ran, "ok")
    ledger.close()

    scheduler = Scheduler(db, _noop, catch_up=timedelta(hours=12))
    await scheduler.start()
    after = datetime.now(UTC)
    try:
        jobs = {s.spec.name: s.next_run for s in await scheduler.jobs()}
        history = await scheduler.history("daily")
        free = scheduler.ledger.claim("daily", ran)  # what the scheduler does when due
    finally:
        await scheduler.stop()
    assert jobs["hourly"] in {hourly.next_times(1, t)[0] for t in (now, after)}
    assert jobs["daily"] == ran
    assert free
    (kept,) = history
    assert kept.due.startswith(f"{ran.isoformat()}~ahead-") and kept.status == "ok"


def _as_if_ahead(db: Path, next_runs: dict[str, datetime]) -> None:
    """Sets jobs' next run times through APScheduler on Klaw's store, as an engine
    whose clock was ahead would have left them."""
    from apscheduler.schedulers.background import BackgroundScheduler

    from klaw.scheduler.store import SqliteJobStore

    aps = BackgroundScheduler(jobstores={"default": SqliteJobStore(db)}, timezone=UTC)
    aps.start(paused=True)
    try:
        for name, when in next_runs.items():
            aps.modify_job(name, next_run_time=when)
    finally:
        aps.shutdown(wait=False)

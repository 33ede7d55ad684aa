"""Schedules beyond cron: fixed intervals (`every 30m [from T]`) and one time
(`at T`), as OpenClaw's `every` and `at` jobs import and as `schedule_add` takes them:
their fire times, their trigger in scheduler.db across a restart, a one-time job that
runs once and is gone, and clear errors."""

from __future__ import annotations

import asyncio
import pickle
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from klaw.cronexpr import At, CronError, Every, parse_schedule
from klaw.scheduler.cron import CronTrigger
from klaw.scheduler.jobs import JobError, JobSpec
from klaw.scheduler.service import Scheduler

BERLIN = ZoneInfo("Europe/Berlin")


def test_an_interval_counts_from_its_anchor_in_the_jobs_zone() -> None:
    every = parse_schedule("every 1h30m from 2026-03-28T23:00")
    assert isinstance(every, Every) and every.seconds == 5400
    after = datetime(2026, 3, 29, 0, 10, tzinfo=BERLIN)
    times = every.next_times(BERLIN, 3, after)
    # Real time, not wall time: the clocks go forward at 02:00 on 2026-03-29.
    assert [t.astimezone(UTC) for t in times] == [
        datetime(2026, 3, 28, 22, 0, tzinfo=UTC) + timedelta(minutes=90 * n) for n in (1, 2, 3)
    ]
    # Before its anchor the first run is the anchor itself.
    assert every.next_after(datetime(2026, 3, 1, tzinfo=BERLIN), BERLIN) == datetime(
        2026, 3, 28, 23, 0, tzinfo=BERLIN
    )


def test_an_interval_without_anchor_is_aligned_to_the_epoch() -> None:
    every = parse_schedule("every 1h")
    got = every.next_after(datetime(2026, 11, 26, 10, 27, 5, tzinfo=UTC), UTC)
    assert got == datetime(2026, 11, 26, 11, 0, tzinfo=UTC)


def test_a_one_time_schedule_fires_once() -> None:
    at = parse_schedule("at 2026-12-01T09:00")
    assert isinstance(at, At)
    start = datetime(2026, 11, 30, tzinfo=BERLIN)
    assert at.next_times(BERLIN, 3, start) == [datetime(2026, 12, 1, 9, 0, tzinfo=BERLIN)]
    aware = parse_schedule("at 2026-12-01T09:00+00:00")
    assert aware.next_after(start, BERLIN) == datetime(2026, 12, 1, 10, 0, tzinfo=BERLIN)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("every", "every 30m"),
        ("every 30 minutes", "units s, m, h, d"),
        ("every 10s", "at least every 60 seconds"),
        ("every 99999999999999999999d", "at most every 36500 days"),  # was an OverflowError
        ("every 36501d", "at most every 36500 days"),
        ("every 1d from 9999-12-31T23:00", "a year from 1970 to 2199"),
        ("at 0001-01-01T00:00", "a year from 1970 to 2199"),
        ("every 1h from tomorrow", "not an ISO date-time"),
        ("at noon", "not an ISO date-time"),
        ("", "empty schedule"),
    ],
)
def test_bad_schedules_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(CronError, match=says):
        parse_schedule(text)


def test_the_longest_interval_from_the_latest_start_still_has_fire_times() -> None:
    every = parse_schedule("every 36500d from 2199-12-31T23:59")
    assert isinstance(every, Every)
    times = every.next_times(BERLIN, 3, datetime(2026, 1, 1, tzinfo=UTC))
    assert [t.year for t in times] == [2199, 2299, 2399]
    assert every.next_after(datetime(9995, 1, 1, tzinfo=UTC), BERLIN) is None  # none past 9999


def test_the_trigger_pickles_every_kind_as_text() -> None:
    for text in ("every 2h", "at 2026-12-01T09:00", "0 0 8 * * ?"):
        trigger = CronTrigger(text, "Europe/Berlin")
        state = trigger.__getstate__()
        assert state["expr"] == text
        again = pickle.loads(pickle.dumps(trigger))
        now = datetime(2026, 11, 26, tzinfo=UTC)
        assert again.get_next_fire_time(None, now) == trigger.get_next_fire_time(None, now)


async def test_interval_and_one_time_jobs_survive_a_restart_and_the_past_is_refused(
    tmp_path: Path,
) -> None:
    db = tmp_path / "scheduler.db"
    fired: list[str] = []
    done = asyncio.Event()

    async def run(spec: JobSpec, due: datetime) -> None:
        fired.append(spec.name)
        done.set()

    first = Scheduler(db, run, catch_up=timedelta(hours=1))
    await first.start()
    soon = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    await first.add(JobSpec("water", "every 2h", "Water the plants?", "Europe/Berlin"))
    await first.add(JobSpec("call", f"at {soon.isoformat()}", "Call mum", "Europe/Berlin"))
    with pytest.raises(JobError, match="is in the past"):
        await first.add(JobSpec("late", "at 2020-01-01T00:00", "too late", "UTC"))
    await first.stop()

    second = Scheduler(db, run, catch_up=timedelta(hours=1))
    await second.start()
    jobs = {s.spec.name: s for s in await second.jobs()}
    assert set(jobs) == {"water", "call"}
    assert jobs["call"].next_run == soon
    nxt = jobs["water"].next_run
    assert nxt is not None and nxt.timestamp() % 7200 == 0
    await second.stop()


async def test_a_one_time_job_runs_once_and_leaves_the_store(tmp_path: Path) -> None:
    db = tmp_path / "scheduler.db"
    done = asyncio.Event()
    fired: list[datetime] = []

    async def run(spec: JobSpec, due: datetime) -> None:
        fired.append(due)
        done.set()

    sched = Scheduler(db, run, catch_up=timedelta(hours=1))
    await sched.start()
    when = (datetime.now(UTC) + timedelta(seconds=1)).replace(microsecond=0) + timedelta(seconds=1)
    await sched.add(JobSpec("ping", f"at {when.isoformat()}", "ping", "UTC"))
    await asyncio.wait_for(done.wait(), 30)
    for _ in range(200):  # APScheduler drops a trigger with no next time after firing
        if not await sched.jobs():
            break
        await asyncio.sleep(0.01)
    assert await sched.jobs() == []
    history = await sched.history("ping")
    await sched.stop()
    assert fired == [when]
    assert [r.job for r in history] == ["ping"]

"""Never lost, never doubled: real `klaw engine` processes killed with SIGKILL, the
real scheduler.db and run ledger, and the scripted model server counting requests."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sched_support import T, engine_yaml, history, klaw, quartz_at, seconds_ahead, until

from engine_harness import spawn_engine, wait_socket
from klaw.paths import KlawPaths
from klaw.scheduler.jobs import JobSpec
from klaw.scheduler.ledger import Ledger
from klaw.scheduler.service import Scheduler
from scripted_llm import FakeLLM


@contextlib.asynccontextmanager
async def engine_process(paths: KlawPaths) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await spawn_engine()
    try:
        await wait_socket(paths, proc)
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), T)


def asked(llm: FakeLLM, text: str) -> int:
    """How many model requests carried `text` as their last user message."""
    return sum(
        1
        for r in llm.requests
        if [m for m in r["messages"] if m["role"] == "user"][-1]["content"] == text
    )


async def test_downtime_over_four_due_times_gives_one_catch_up_run_after_kill_9(
    klaw_home: KlawPaths, llm: FakeLLM
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    for _ in range(5):
        llm.answer("done")
    due = seconds_ahead(6, 4)
    async with engine_process(klaw_home) as engine:
        rc, _, err = await klaw(
            "schedule", "add", "report", quartz_at(*due), "Write the report", "--tz", "UTC"
        )
        assert rc == 0, err
        engine.send_signal(signal.SIGKILL)  # before the first due time
        await engine.wait()
    # The Pi is off while all four fall due.
    await until(lambda: datetime.now(UTC) > due[-1] + timedelta(seconds=1), timeout=60)
    async with engine_process(klaw_home):
        await until(lambda: asked(llm, "Write the report") == 1)
        await _settled("report")
        runs = await history("report")
        assert [(r["due"], r["status"]) for r in runs] == [(due[-1].isoformat(), "ok")]
        rc, out, _ = await klaw("schedule", "list")
        assert "report" not in out  # no fire time is left: APScheduler dropped it
    assert asked(llm, "Write the report") == 1
    final = await _offline_history(klaw_home, "report")
    assert [(r.due, r.status) for r in final] == [(due[-1].isoformat(), "ok")]


async def _settled(name: str) -> None:
    async def done() -> None:
        while True:
            runs = await history(name)
            if runs and all(r["status"] not in ("due", "running") for r in runs):
                return
            await asyncio.sleep(0.1)

    await asyncio.wait_for(done(), T)


async def _offline_history(paths: KlawPaths, name: str) -> list:  # type: ignore[type-arg]
    ledger = Ledger(paths.scheduler_db)
    try:
        return ledger.history(name)
    finally:
        ledger.close()


async def test_a_run_killed_midway_is_never_run_again_for_that_due_time(
    klaw_home: KlawPaths, llm: FakeLLM
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    llm.hold = asyncio.Event()  # the model "thinks" until released
    async with engine_process(klaw_home) as engine:
        # Counted from now, with the engine up: its start may take seconds on a busy box.
        (due,) = seconds_ahead(5, 1)
        rc, _, err = await klaw(
            "schedule", "add", "backup", quartz_at(due), "Check the backup", "--tz", "UTC"
        )
        assert rc == 0, err
        await asyncio.wait_for(llm.arrived.wait(), T)  # the run is with the model
        engine.send_signal(signal.SIGKILL)
        await engine.wait()
    llm.answer("lost with the killed engine")
    llm.answer("probe done")
    llm.hold.set()
    async with engine_process(klaw_home):
        runs = await history("backup")
        assert [(r["due"], r["status"]) for r in runs] == [(due.isoformat(), "interrupted")]
        assert "not run twice" in runs[0]["error"]
        # Another job runs to the end; the killed one stays at one model request.
        rc, _, err = await klaw("schedule", "add", "probe", "0 0 0 1 1 ? 2099", "Probe")
        assert rc == 0, err
        rc, _, err = await klaw("schedule", "run", "probe")
        assert rc == 0, err
        await _settled("probe")
        assert [r["status"] for r in await history("probe")] == ["ok"]
    assert asked(llm, "Check the backup") == 1


async def test_a_claimed_due_time_that_never_started_runs_at_the_next_start(
    tmp_path: Path,
) -> None:
    """The window between claiming a due time and starting it (a crash there): the
    next start runs it, once."""
    db = tmp_path / "scheduler.db"
    ran: list[tuple[str, datetime]] = []
    current: list[Scheduler] = []

    async def record(spec: JobSpec, due: datetime) -> None:
        # The ledger steps of the engine's JobRunner, without a model.
        ledger = current[-1].ledger
        if ledger.start(spec.name, due):
            ran.append((spec.name, due))
            ledger.finish(spec.name, due, "ok")

    spec = JobSpec(name="nightly", cron="0 0 3 * * ?", message="m", timezone="UTC")
    first = Scheduler(db, record, catch_up=timedelta(hours=12))
    current.append(first)
    await first.start()
    await first.add(spec)
    await first.stop()
    due = datetime(2026, 1, 1, 3, tzinfo=UTC)
    ledger = Ledger(db)
    assert ledger.claim("nightly", due)  # what `_due` writes before the crash
    ledger.close()

    again = Scheduler(db, record, catch_up=timedelta(hours=12))
    current.append(again)
    await again.start()
    await until(lambda: bool(ran))
    await again.stop()
    assert ran == [("nightly", due)]
    third = Scheduler(db, record, catch_up=timedelta(hours=12))
    current.append(third)
    await third.start()  # nothing left over: it does not run a second time
    await third.stop()
    assert ran == [("nightly", due)]

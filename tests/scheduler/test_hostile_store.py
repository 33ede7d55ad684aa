"""scheduler.db as a stranger could have made it: rows whose pickles would run code,
a damaged file, a clock that ran ahead. Real scheduler.db files, the real scheduler
and, where it matters, the real engine with `klaw` as a process."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hostile_jobs import crafted_states, insert_job_row
from sched_support import engine_running, engine_yaml, klaw

from klaw.paths import KlawPaths
from klaw.scheduler.jobs import JobSpec
from klaw.scheduler.service import Scheduler, store_jobs
from scripted_llm import FakeLLM

HOUR = timedelta(hours=1)


async def _noop(spec: JobSpec, due: datetime) -> None:
    return None


def _good(db: Path) -> None:
    spec = JobSpec(name="good", cron="0 0 8 * * ?", message="m", timezone="UTC")
    assert store_jobs(db, [spec]) == [(spec, "added")]


def _unreadable(db: Path) -> list[tuple[str, str]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT id, reason FROM apscheduler_jobs_unreadable").fetchall()


# ------------------------------------------------------------------ pickles that run code


@pytest.mark.parametrize("attack", ["payload", "hidden", "getattr", "func"])
async def test_a_crafted_job_state_is_set_aside_and_never_runs(tmp_path: Path, attack: str) -> None:
    db, marker = tmp_path / "scheduler.db", tmp_path / "ran"
    _good(db)
    insert_job_row(db, "evil", crafted_states(marker)[attack])

    scheduler = Scheduler(db, _noop, catch_up=HOUR)
    await scheduler.start()
    try:
        names = [s.spec.name for s in await scheduler.jobs()]
    finally:
        await scheduler.stop()

    assert names == ["good"]
    assert not marker.exists()
    ((job_id, reason),) = _unreadable(db)
    assert job_id == "evil" and reason.startswith(("UnsafeJobState", "JobError")), reason


async def test_the_engine_starts_on_a_crafted_row_without_running_it(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    engine_yaml(klaw_home.engine_config, llm.url)
    _good(klaw_home.scheduler_db)
    insert_job_row(klaw_home.scheduler_db, "evil", crafted_states(marker)["payload"])
    async with engine_running(klaw_home, backend):
        rc, out, err = await klaw("schedule", "list", "--json")
        assert rc == 0, err
        names = {j["name"] for j in json.loads(out)["jobs"]}
        assert "good" in names and "evil" not in names
    assert not marker.exists()
    assert [r[0] for r in _unreadable(klaw_home.scheduler_db)] == ["evil"]

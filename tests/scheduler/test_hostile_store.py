"""scheduler.db as a stranger could have made it: rows whose pickles would run code,
a damaged file, a clock that ran ahead. Real scheduler.db files, the real scheduler
and, where it matters, the real engine with `klaw` as a process."""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
from contextlib import closing
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hostile_jobs import crafted_states, insert_job_row
from sched_support import (  # noqa: F401 (fixture)
    OWNER,
    FakeTelegram,
    T,
    engine_running,
    engine_yaml,
    gateway_running,
    klaw,
    telegram_fixture,
)

from klaw.paths import KlawPaths
from klaw.scheduler.health import set_aside_copies
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


# ------------------------------------------------------------------ a damaged file


def _damage(db: Path, how: str) -> bytes:
    """scheduler.db truncated to 20,000 bytes (a full SD card) or random bytes."""
    if how == "truncated":
        specs = [
            JobSpec(name=f"job-{i}", cron="0 0 8 * * ?", message="m" * 500, timezone="UTC")
            for i in range(100)
        ]
        store_jobs(db, specs)
        data = db.read_bytes()[:20_000]
    else:
        data = random.Random(8).randbytes(50_000)
        db.parent.mkdir(parents=True)
    db.write_bytes(data)
    return data


@pytest.mark.parametrize("how", ["truncated", "random"])
async def test_a_damaged_scheduler_db_is_set_aside_and_chats_keep_working(
    klaw_home: KlawPaths,
    llm: FakeLLM,
    backend: Any,
    telegram: FakeTelegram,
    caplog: pytest.LogCaptureFixture,
    how: str,
) -> None:
    db = klaw_home.scheduler_db
    engine_yaml(klaw_home.engine_config, llm.url)
    data = _damage(db, how)
    rc, out, _ = await klaw("doctor")
    assert rc == 1 and "Healthy" not in out
    assert f"FAIL  scheduler: {db} is damaged" in out, out

    telegram.add_chat(OWNER)
    llm.answer("Still here.")
    async with engine_running(klaw_home, backend), gateway_running(klaw_home, telegram) as gw:
        await asyncio.wait_for(gw.connected.wait(), T)
        telegram.text(OWNER, "are you there?")
        (reply,) = await telegram.wait_sent(OWNER, 1, T)
        assert reply.visible == "Still here."
        rc, _, err = await klaw("schedule", "add", "tidy", "0 0 3 * * ?", "Tidy the inbox")
        assert rc == 0, err

    (aside,) = set_aside_copies(db)
    assert aside.read_bytes() == data  # kept as it was, for the owner
    logged = [r.getMessage() for r in caplog.records if r.name == "klaw.scheduler"]
    assert any(str(db) in m and str(aside) in m and "tar -xzOf" in m for m in logged), logged
    rc, out, _ = await klaw("doctor")
    assert rc == 1 and "Healthy" not in out
    assert f"FAIL  scheduler: a damaged scheduler.db was set aside as {aside}" in out, out
    assert f"then delete {aside}" in out

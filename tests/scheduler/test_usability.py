"""The scheduler as a new user meets it (issue 24, item 4): job names in any script
with a log folder that two names cannot share, an imported job keeping its name,
`klaw schedule pause|resume` and `paused` in the list, `injectInto` to a chat the
gateway's allowlist admits, and a HEARTBEAT.md without items costing nothing.
Through `klaw` as a process and the real engine, scheduler.db and gateway files."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sched_support import T, engine_running, engine_yaml, history, klaw

from klaw.config import load_engine_config
from klaw.gateway.access import Approvals, PairingCode
from klaw.openclaw.jobs import map_job
from klaw.paths import KlawPaths
from klaw.scheduler.heartbeat import heartbeat_spec, sync_heartbeat
from klaw.scheduler.jobs import HEARTBEAT, JobSpec
from klaw.scheduler.service import Scheduler, store_jobs
from scripted_llm import FakeLLM


async def _jobs() -> dict[str, dict[str, Any]]:
    rc, out, err = await klaw("schedule", "list", "--json")
    assert rc == 0, err
    return {j["name"]: j for j in json.loads(out)["jobs"]}


async def _until(check: Callable[[], Awaitable[bool]]) -> None:
    """Until `check()` holds (asked again every 0.2 s, for at most T)."""
    async with asyncio.timeout(T):
        while not await check():
            await asyncio.sleep(0.2)


# ------------------------------------------------------------------ names in any script


async def test_names_in_any_script_with_one_log_folder_each(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    llm.answer("Сводка готова.")
    async with engine_running(klaw_home, backend):
        for name in ("早报", "новости", "ｗｅａｔｈｅｒ"):
            rc, out, err = await klaw("schedule", "add", name, "0 0 8 * * ?", "Morning news")
            assert rc == 0, err
            assert f"added {name}:" in out
        # Names that differ only in case or width would share a log folder: refused.
        for name, other in (("Новости", "новости"), ("weather", "ｗｅａｔｈｅｒ")):
            rc, _, err = await klaw("schedule", "add", name, "0 0 9 * * ?", "Again")
            assert rc == 1 and f"of the job {other!r}" in err, err
        rc, _, err = await klaw("schedule", "add", "a b", "0 0 9 * * ?", "Again")
        assert rc == 1 and "letters (any script), digits, '-' or '_'" in err

        rc, _, err = await klaw("schedule", "run", "ｗｅａｔｈｅｒ")
        assert rc == 0, err

        async def ran() -> bool:
            return [r["status"] for r in await history("ｗｅａｔｈｅｒ")] == ["ok"]

        await _until(ran)
        assert {"早报", "новости", "ｗｅａｔｈｅｒ"} <= set(await _jobs())
    # Its log is in the folder-safe form of its name.
    assert [p.name for p in klaw_home.conversations.iterdir()] == ["scheduler_weather"]


async def test_an_imported_job_keeps_its_name_as_its_title(tmp_path: Path) -> None:
    label = "Russian words for João (Sundays)"
    job = {
        "id": "c0ffee00-0000-4000-8000-000000000001",
        "name": label,
        "schedule": {"kind": "cron", "expr": "0 9 * * 0", "tz": "Europe/Lisbon"},
        "payload": {"kind": "agentTurn", "message": "Five Russian words for João"},
    }
    taken: set[str] = set()
    mapped = map_job(job, zone="UTC", owner_chat=None, models={}, taken=taken)
    assert mapped.spec is not None, mapped.reason
    assert mapped.spec.name == "russian-words-for-joão-sundays"
    assert mapped.spec.title == label
    chinese = map_job({**job, "id": "x2", "name": "早报"}, zone="UTC", owner_chat=None,
                      models={}, taken=taken)  # fmt: skip
    assert chinese.spec is not None and chinese.spec.name == "早报" and chinese.spec.title is None

    db = tmp_path / "scheduler.db"
    assert [r for _, r in store_jobs(db, [mapped.spec, chinese.spec])] == ["added", "added"]
    scheduler = Scheduler(db, _noop, catch_up=timedelta(hours=1))
    await scheduler.start()
    try:
        shown = {s.spec.name: s.spec.shown for s in await scheduler.jobs()}
    finally:
        await scheduler.stop()
    assert shown == {"russian-words-for-joão-sundays": label, "早报": "早报"}


async def _noop(spec: JobSpec, due: datetime) -> None:
    return None


# ------------------------------------------------------------------ pause and resume


async def test_pause_shows_paused_and_resume_starts_again_from_now(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    async with engine_running(klaw_home, backend):
        rc, _, err = await klaw("schedule", "add", "weather", "0 0 8 * * ?", "Weather")
        assert rc == 0, err
        rc, out, err = await klaw("schedule", "pause", "weather")
        assert rc == 0 and out.strip() == "weather: paused", err
        rc, out, _ = await klaw("schedule", "list")
        line = next(x for x in out.splitlines() if x.startswith("weather"))
        assert line.rstrip().endswith("paused") and "never" not in line
        assert (await _jobs())["weather"]["paused"] is True
        rc, _, err = await klaw("schedule", "pause", "summaries")
        assert rc == 1 and "summarization.enabled" in err
        rc, _, err = await klaw("schedule", "pause", "ghost")
        assert rc == 1 and "no job named 'ghost'" in err
    async with engine_running(klaw_home, backend):  # paused is stored
        assert (await _jobs())["weather"]["paused"] is True
        before = datetime.now().astimezone()
        rc, out, err = await klaw("schedule", "resume", "weather")
        assert rc == 0 and out.startswith("weather: next "), err
        job = (await _jobs())["weather"]
        assert job["paused"] is False
        assert before < datetime.fromisoformat(job["nextRun"]) <= before + timedelta(days=1)


async def test_a_paused_heartbeat_stays_paused_when_heartbeat_md_changes(
    klaw_home: KlawPaths, tmp_path: Path
) -> None:
    config = load_engine_config(klaw_home.engine_config)
    path = klaw_home.workspace / "HEARTBEAT.md"
    path.write_text("- Check the inbox\n")
    scheduler = Scheduler(tmp_path / "scheduler.db", _noop, catch_up=timedelta(hours=1))
    await scheduler.start()
    try:
        assert await sync_heartbeat(scheduler, path, config, "UTC") == "added"
        await scheduler.pause(HEARTBEAT)
        path.write_text("- Check the inbox\n- Check the calendar\n")
        assert await sync_heartbeat(scheduler, path, config, "UTC") == "updated"
        (job,) = [j for j in await scheduler.jobs() if j.spec.name == HEARTBEAT]
    finally:
        await scheduler.stop()
    assert not job.spec.enabled and job.next_run is None
    assert "Check the calendar" in job.spec.message


# ------------------------------------------------------------------ injectInto


async def test_inject_into_takes_a_chat_the_gateways_allowlist_admits(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    klaw_home.gateway_config.write_text(
        "channels:\n  telegram:\n    token: '1:x'\n    allowedChatIds: ['555']\n"
        "  discord:\n    allowedChatIds: ['discord_42']\n"
    )
    async with engine_running(klaw_home, backend):
        for chat in ("telegram_555", "discord_42"):
            rc, _, err = await klaw(
                "schedule", "add", f"to-{chat}", "0 0 8 * * ?", "Hi", "--inject-into", chat
            )
            assert rc == 0, (chat, err)
        rc, _, err = await klaw(
            "schedule", "add", "stranger", "0 0 8 * * ?", "Hi", "--inject-into", "telegram_777"
        )
        assert rc == 1 and "unknown chat 'telegram_777'" in err
        assert "allowlist does not admit it" in err
        # Approved with `klaw pair approve` while the engine runs: admitted at once.
        Approvals(klaw_home.approved_chats).add(
            PairingCode("ABCD2345", "telegram_777", "777", "Ann", "2026-01-01T00:00:00+00:00")
        )
        rc, _, err = await klaw(
            "schedule", "add", "stranger", "0 0 8 * * ?", "Hi", "--inject-into", "telegram_777"
        )
        assert rc == 0, err


# ------------------------------------------------------------------ HEARTBEAT.md


async def test_the_default_heartbeat_md_schedules_nothing_until_it_has_an_item(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)  # kept by init: nothing is overwritten
    rc, out, err = await klaw("init", "--no-model")
    assert rc == 0, err
    heartbeat = klaw_home.workspace / "HEARTBEAT.md"
    assert f"created  {heartbeat}" in out
    async with engine_running(klaw_home, backend):
        assert HEARTBEAT not in await _jobs()
        heartbeat.write_text(heartbeat.read_text() + "\n- Any reminders due in the next hour?\n")

        async def made() -> bool:  # the file is looked at every 2 s
            return HEARTBEAT in await _jobs()

        await _until(made)


@pytest.mark.parametrize(
    ("text", "job"),
    [
        ("Check things now and then. Tell me if anything matters.", False),
        ("# Heartbeat\n\n## Daily\n<!-- - an item in a comment -->\n", False),
        ("```\n- an item in a code block\n```\n", False),
        ("- [ ]\n- \n---\n", False),
        ("Look after me.\n\n- Check the inbox\n", True),
        ("1. Check the inbox\n", True),
        ("- [ ] Water the plants\n", True),
    ],
    ids=["prose", "headings-comments", "fenced", "empty-items", "item", "numbered", "task"],
)
def test_only_a_checklist_with_items_makes_a_heartbeat(
    klaw_home: KlawPaths, text: str, job: bool
) -> None:
    config = load_engine_config(klaw_home.engine_config)
    spec = heartbeat_spec(text, config, "UTC")
    assert (spec is not None) == job
    if spec is not None:
        assert dataclasses.asdict(spec)["kind"] == "heartbeat"


def test_storing_jobs_with_the_engine_stopped_logs_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`klaw import` stores jobs through a paused APScheduler; stopping it woke its
    thread once more on the closed store: "Error getting due jobs … not started"."""
    db = tmp_path / "scheduler.db"
    for i in range(5):
        spec = JobSpec(name=f"job-{i}", cron="0 0 8 * * ?", message="m", timezone="UTC")
        assert store_jobs(db, [spec]) == [(spec, "added")]
    assert [r.getMessage() for r in caplog.records if r.levelname != "INFO"] == []

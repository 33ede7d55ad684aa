"""Scheduled jobs end to end: `klaw schedule` as a process talking to the real engine,
scheduler.db, the pipeline at subagent priority, the scripted model server, the real
gateway delivering to the fake Telegram Bot API, and the run ledger."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from sched_support import (  # noqa: F401 (fixture)
    CHAT,
    OWNER,
    FakeTelegram,
    T,
    engine_running,
    engine_yaml,
    gateway_running,
    history,
    klaw,
    log_lines,
    quartz_at,
    seconds_ahead,
    telegram_fixture,
    until,
)

from klaw.paths import KlawPaths
from scripted_llm import FakeLLM

EVERY_SECOND = "* * * * * ?"


def known_chat(paths: KlawPaths, chat: str = CHAT) -> None:
    """A chat Klaw has talked in (a conversation folder), so injectInto accepts it."""
    (paths.conversations / chat).mkdir(parents=True, exist_ok=True)


def system_prompts(llm: FakeLLM) -> list[str]:
    return [r["messages"][0]["content"] for r in llm.requests]


def last_user(request: dict[str, Any]) -> str:
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


async def test_add_answers_the_next_three_times_and_refuses_bad_jobs_by_name(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    known_chat(klaw_home)
    async with engine_running(klaw_home, backend):
        rc, out, err = await klaw(
            "schedule", "add", "weather", "0 0 8 ? * MON-FRI", "Weather and meetings",
            "--inject-into", CHAT, "--json",
        )  # fmt: skip
        assert rc == 0, err
        got = json.loads(out)
        times = [datetime.fromisoformat(t) for t in got["nextTimes"]]
        assert len(times) == 3
        berlin = ZoneInfo("Europe/Berlin")  # scheduler.timezone
        for t in times:
            local = t.astimezone(berlin)
            assert (local.hour, local.minute, local.second) == (8, 0, 0)
            assert local.weekday() < 5
            assert local.utcoffset() == t.utcoffset()  # shown in the job's zone
        assert times == sorted(times) and times[0] > datetime.now(UTC)

        rc, out, _ = await klaw("schedule", "list")
        assert rc == 0 and "weather" in out and "0 0 8 ? * MON-FRI" in out and CHAT in out

        refusals = {
            ("dup", "0 0 8 * * ?", "--model", "nope/x"): "unknown model 'nope/x'",
            ("weather", "0 0 9 * * ?"): "a job named 'weather' exists",
            ("badcron", "0 0 8 ? * 2W"): "field 6 (day-of-week) '2W'",
            ("quartz", "0 0 8 * * MON"): "exactly one of day-of-month",
            ("stranger", "0 8 * * *", "--inject-into", "telegram_999"): "unknown chat",
            ("Bad Name", "0 8 * * *"): "job name 'Bad Name'",
            ("heartbeat", "0 8 * * *"): "kept for the job made from HEARTBEAT.md",
            ("tz", "0 8 * * *", "--tz", "Mars/Olympus"): "unknown time zone 'Mars/Olympus'",
            ("never", "0 0 30 2 *"): "never fires",
        }
        for (name, cron, *opts), expected in refusals.items():
            rc, out, err = await klaw("schedule", "add", name, cron, "msg", *opts)
            assert rc == 1, (name, out)
            assert expected in err, (name, err)
        rc, _, err = await klaw("schedule", "remove", "ghost")
        assert rc == 1 and "no job named 'ghost'" in err

        rc, out, _ = await klaw("schedule", "list", "--json")
        names = sorted(j["name"] for j in json.loads(out)["jobs"])
        assert names == ["reflect", "summaries", "weather"]
        rc, out, err = await klaw("schedule", "remove", "weather")
        assert rc == 0 and "removed weather" in out
    # The engine is down: the CLI says so instead of hanging or tracing back.
    rc, _, err = await klaw("schedule", "list")
    assert rc == 1 and "the engine is not running" in err


async def test_a_job_runs_as_a_subagent_and_reaches_the_owner_through_the_gateway(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, telegram: FakeTelegram
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    known_chat(klaw_home)
    llm.answer('{"silent": true, "reason": "nothing new"}')  # first run: quiet
    llm.answer("Rain at 8, take an umbrella.")  # second run: worth telling
    for _ in range(50):  # later runs, until the job is removed: quiet again
        llm.answer('{"silent": true, "reason": "nothing new"}')
    telegram.add_chat(OWNER)
    async with engine_running(klaw_home, backend), gateway_running(klaw_home, telegram) as gw:
        await asyncio.wait_for(gw.connected.wait(), T)
        rc, _, err = await klaw(
            "schedule", "add", "rain", EVERY_SECOND, "Check the forecast", "--inject-into", CHAT
        )
        assert rc == 0, err
        (sent,) = await telegram.wait_sent(OWNER, 1, T)
        rc, _, err = await klaw("schedule", "remove", "rain")
        assert rc == 0, err
        assert sent.visible == "Rain at 8, take an umbrella."
        runs = await history("rain")
    statuses = [r["status"] for r in reversed(runs)]
    assert statuses[:2] == ["silent", "ok"], runs
    assert all(r["tokensIn"] == 10 and r["tokensOut"] == 3 for r in runs[-2:])
    # Each run was a subagent turn: the job's message, in its own chat, never the owner's.
    assert [last_user(r) for r in llm.requests[:2]] == ["Check the forecast"] * 2
    assert all("Rain at 8" not in json.dumps(r) for r in llm.requests[:1])
    # The delivered result is in the owner's chat log (written by the gateway) and in
    # klaw.db under that chat, so the main session sees it.
    owner_log = log_lines(klaw_home, CHAT)
    assert [r["content"] for r in owner_log] == ["Rain at 8, take an umbrella."]
    assert owner_log[0]["meta"]["source"] == "scheduler"
    assert owner_log[0]["meta"]["task_name"] == "rain"
    # The job's own log: its task, then each reply (silent ones too).
    job_log = log_lines(klaw_home, "scheduler_rain")
    assert [r["role"] for r in job_log[:4]] == ["user", "assistant", "user", "assistant"]
    assert job_log[1]["content"].startswith('{"silent": true')
    assert not list(klaw_home.outbox.glob("*.json"))


async def test_a_result_made_while_the_gateway_is_down_is_delivered_when_it_is_back(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, telegram: FakeTelegram
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    known_chat(klaw_home)
    llm.answer("Your parcel arrived.")
    telegram.add_chat(OWNER)
    async with engine_running(klaw_home, backend):
        due = seconds_ahead(2, 1)
        rc, _, err = await klaw(
            "schedule", "add", "parcel", quartz_at(*due), "Check the parcel",
            "--inject-into", CHAT, "--tz", "UTC",
        )  # fmt: skip
        assert rc == 0, err
        await until(lambda: len(list(klaw_home.outbox.glob("*.json"))) == 1)
        assert [r["status"] for r in await history("parcel")] == ["ok"]
        async with gateway_running(klaw_home, telegram):
            (sent,) = await telegram.wait_sent(OWNER, 1, T)
            await until(lambda: not list(klaw_home.outbox.glob("*.json")))
    assert sent.visible == "Your parcel arrived."
    assert [r["content"] for r in log_lines(klaw_home, CHAT)] == ["Your parcel arrived."]
    assert len(telegram.sent_to(OWNER)) == 1

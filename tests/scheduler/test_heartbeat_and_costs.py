"""HEARTBEAT.md as a job, silent vs loud delivery through the real gateway, subagent
priority against an interactive reply, pre-checks, daily token caps, failures told
once, and adding/removing jobs while jobs fire and chats are busy."""

from __future__ import annotations

import asyncio
import json
from typing import Any

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
    telegram_fixture,
    until,
)

from klaw.engine.pipeline import LEAN_TOOLS
from klaw.paths import KlawPaths
from scripted_llm import FakeLLM, call

EVERY_SECOND = "* * * * * ?"
SILENT = '{"silent": true, "reason": "checked mail and calendar"}'


def user_texts(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


async def jobs() -> list[str]:
    """The jobs listed, besides the built-in nightly `summaries` and `reflect`."""
    rc, out, err = await klaw("schedule", "list", "--json")
    assert rc == 0, err
    return [j["name"] for j in json.loads(out)["jobs"] if j["name"] not in ("summaries", "reflect")]


async def test_heartbeat_follows_the_file_stays_quiet_when_silent_and_speaks_when_not(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, telegram: FakeTelegram
) -> None:
    engine_yaml(
        klaw_home.engine_config,
        llm.url,
        heartbeat={"cron": EVERY_SECOND, "injectInto": CHAT, "skipUnchanged": "false"},
    )  # every run wakes the model here (test_heartbeat_quiet.py has the skipping)
    checklist = "# Checks\n\n- Anything from the bank in the mail?\n- Meetings in the next hour?\n"
    (klaw_home.workspace / "AGENTS.md").write_text("# Agents\n\nGROUP-CHAT-ETIQUETTE rules.\n")
    (klaw_home.workspace / "MEMORY.md").write_text("# Memory\n\n- LONG-TERM-NOTE of the owner\n")
    skill = klaw_home.workspace / "skills" / "weather"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: weather\ndescription: FORECAST-DESCRIPTION for any city\n---\nBody\n"
    )
    telegram.add_chat(OWNER)
    llm.answer("Noted.")  # the owner's own chat first
    llm.answer(SILENT)
    llm.answer("```json\n" + SILENT + "\n```")  # fenced: still silent
    llm.answer("The bank wrote: your card expires on Friday.")
    for _ in range(60):
        llm.answer(SILENT)
    async with engine_running(klaw_home, backend), gateway_running(klaw_home, telegram) as gw:
        await asyncio.wait_for(gw.connected.wait(), T)
        telegram.text(OWNER, "My PIN is 4711, keep it secret")
        (noted,) = await telegram.wait_sent(OWNER, 1, T)
        assert noted.visible == "Noted."
        (klaw_home.workspace / "HEARTBEAT.md").write_text(checklist)
        (_, loud) = await telegram.wait_sent(OWNER, 2, T)
        assert loud.visible == "The bank wrote: your card expires on Friday."
        assert "heartbeat" in await jobs()

        (klaw_home.workspace / "HEARTBEAT.md").unlink()
        await _until_jobs(lambda names: "heartbeat" not in names)
        (klaw_home.workspace / "HEARTBEAT.md").write_text("- Water the plants\n")
        await _until_jobs(lambda names: "heartbeat" in names)
        _, out, _ = await klaw("schedule", "list", "--json")
        (hb,) = [j for j in json.loads(out)["jobs"] if j["name"] == "heartbeat"]
        assert "Water the plants" in hb["message"] and hb["kind"] == "heartbeat"
        assert (await klaw("schedule", "remove", "heartbeat"))[0] == 0
    heartbeat_requests = [r for r in llm.requests if "HEARTBEAT.md" in user_texts(r)[-1]]
    assert len(heartbeat_requests) >= 3
    first = heartbeat_requests[0]
    # Its own context: the checklist and the silent instruction, never the owner's chat.
    assert "Anything from the bank" in user_texts(first)[-1]
    assert '{"silent": true' in user_texts(first)[-1]
    assert all("4711" not in json.dumps(r) for r in heartbeat_requests)
    # Lean by construction: no AGENTS.md nor MEMORY.md, skills by name only, a small
    # tool set.
    owner_request = json.dumps(llm.requests[0])
    assert "GROUP-CHAT-ETIQUETTE" in owner_request and "FORECAST-DESCRIPTION" in owner_request
    lean = json.dumps(first)
    assert "GROUP-CHAT-ETIQUETTE" not in lean and "FORECAST-DESCRIPTION" not in lean
    # MEMORY.md, within its share, in the owner's chat; the checklist run goes without.
    assert "LONG-TERM-NOTE" in owner_request and "LONG-TERM-NOTE" not in lean
    assert "- weather" in first["messages"][0]["content"]
    tools = {t["function"]["name"] for t in first["tools"]}
    # The whole lean set, each schema sent, whether `tools.eager` folds it elsewhere or not.
    assert tools == LEAN_TOOLS and "memory_core_update" not in tools and "file_write" not in tools
    # Only the loud result reached the owner's log; silent ones stay in the job's log.
    contents = [r["content"] for r in log_lines(klaw_home, CHAT)]
    assert contents == [
        "My PIN is 4711, keep it secret",
        "Noted.",
        "The bank wrote: your card expires on Friday.",
    ]
    # Runs due while the previous one still went are "skipped" (a loaded machine).
    statuses = [r["status"] for r in reversed(await _offline(klaw_home))]
    assert [s for s in statuses if s != "skipped"][:3] == ["silent", "silent", "ok"]


async def _until_jobs(predicate: Any) -> None:
    async def loop() -> None:
        while not predicate(await jobs()):
            await asyncio.sleep(0.1)

    await asyncio.wait_for(loop(), T)


async def _offline(paths: KlawPaths) -> list[dict[str, Any]]:
    from klaw.scheduler.ledger import Ledger

    ledger = Ledger(paths.scheduler_db)
    try:
        return [{"status": r.status} for r in ledger.history("heartbeat", 100)]
    finally:
        ledger.close()


async def test_a_slow_subagent_delays_an_interactive_reply_by_one_model_call_at_most(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, telegram: FakeTelegram
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url, maxConcurrentLlm=1)
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    telegram.add_chat(OWNER)
    llm.hold = asyncio.Event()
    llm.answer(None, [call("c1", "current_time", "{}")])  # the subagent's first round
    llm.answer("Hello!")  # the owner's reply: next in line, before the subagent's 2nd round
    llm.answer(SILENT)  # the subagent's last round
    async with engine_running(klaw_home, backend), gateway_running(klaw_home, telegram) as gw:
        await asyncio.wait_for(gw.connected.wait(), T)
        rc, _, err = await klaw("schedule", "add", "research", "0 0 0 1 1 ? 2099", "Research")
        assert rc == 0, err
        rc, _, err = await klaw("schedule", "run", "research")
        assert rc == 0, err
        await asyncio.wait_for(llm.arrived.wait(), T)  # the subagent holds the one slot
        telegram.text(OWNER, "hi")
        await _until_status(lambda c: c.get("llm_waiting", 0) >= 1)  # the owner waits
        llm.hold.set()
        (reply,) = await telegram.wait_sent(OWNER, 1, T)
        await until(lambda: len(llm.requests) == 3)
    assert reply.visible == "Hello!"
    assert [user_texts(r)[-1] for r in llm.requests] == ["Research", "hi", "Research"]
    assert llm.requests[2]["messages"][-1]["role"] == "tool"  # the subagent went on after


async def _until_status(predicate: Any) -> None:
    async def loop() -> None:
        while True:
            rc, out, err = await klaw("status", "--json")
            assert rc == 0, err
            if predicate(json.loads(out)["counts"]):
                return
            await asyncio.sleep(0.05)

    await asyncio.wait_for(loop(), T)


async def test_pre_checks_cost_nothing_when_quiet_and_failures_are_told_once(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, telegram: FakeTelegram
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    telegram.add_chat(OWNER)
    async with engine_running(klaw_home, backend), gateway_running(klaw_home, telegram) as gw:
        await asyncio.wait_for(gw.connected.wait(), T)
        rc, _, err = await klaw(
            "schedule", "add", "quiet", EVERY_SECOND, "Look", "--precheck", "test -e nothing-here",
            "--inject-into", CHAT,
        )  # fmt: skip
        assert rc == 0, err
        rc, _, err = await klaw(
            "schedule", "add", "broken", EVERY_SECOND, "Look", "--precheck",
            "echo 'mail server unreachable' >&2; exit 3", "--inject-into", CHAT,
        )  # fmt: skip
        assert rc == 0, err

        async def enough() -> None:
            while True:
                quiet = [r["status"] for r in await history("quiet")]
                broken = [r["status"] for r in await history("broken")]
                if quiet.count("quiet") >= 3 and broken.count("failed") >= 3:
                    return
                await asyncio.sleep(0.2)

        await asyncio.wait_for(enough(), T)
        for name in ("quiet", "broken"):
            assert (await klaw("schedule", "remove", name))[0] == 0
        broken_runs = await history("broken")
        told = await telegram.wait_sent(OWNER, 1, T)
    assert llm.requests == []  # no run woke the model: zero tokens
    assert all(r["tokensIn"] == 0 for r in broken_runs)
    failed = [r for r in broken_runs if r["status"] == "failed"]  # newest may still run
    assert "exited with status 3: mail server unreachable" in failed[0]["error"]
    assert len(told) == 1  # once, not on every failing run
    assert "Scheduled job 'broken' failed" in told[0].visible


async def test_a_daily_token_cap_rests_the_job_and_says_so_once(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, telegram: FakeTelegram
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    telegram.add_chat(OWNER)
    for _ in range(10):
        llm.answer(SILENT)  # 10 + 3 tokens each (the fake's usage)
    async with engine_running(klaw_home, backend), gateway_running(klaw_home, telegram) as gw:
        await asyncio.wait_for(gw.connected.wait(), T)
        rc, _, err = await klaw(
            "schedule", "add", "capped", EVERY_SECOND, "Look", "--daily-token-cap", "20",
            "--inject-into", CHAT,
        )  # fmt: skip
        assert rc == 0, err

        async def capped_thrice() -> None:
            while [r["status"] for r in await history("capped")].count("capped") < 3:
                await asyncio.sleep(0.2)

        await asyncio.wait_for(capped_thrice(), T)
        assert (await klaw("schedule", "remove", "capped"))[0] == 0
        told = await telegram.wait_sent(OWNER, 1, T)
        runs = await history("capped")
    ran = [r for r in runs if r["status"] == "silent"]
    assert len(ran) == 2 and len(llm.requests) == 2  # 13, then 26 ≥ 20: resting
    assert len(told) == 1 and "daily cap is 20" in told[0].visible


async def test_jobs_are_added_and_removed_while_jobs_fire_and_chats_are_busy(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, telegram: FakeTelegram
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    telegram.add_chat(OWNER)
    for _ in range(400):
        llm.answer(SILENT)
    async with engine_running(klaw_home, backend), gateway_running(klaw_home, telegram) as gw:
        await asyncio.wait_for(gw.connected.wait(), T)
        for i in range(3):  # jobs firing all along
            rc, _, err = await klaw("schedule", "add", f"tick{i}", EVERY_SECOND, "tick")
            assert rc == 0, err
        for i in range(10):
            telegram.text(OWNER, f"message {i}")

        async def churn(i: int) -> None:
            rc, _, err = await klaw("schedule", "add", f"churn{i}", "0 0 8 * * ?", "x")
            assert rc == 0, err
            rc, _, err = await klaw("schedule", "remove", f"churn{i}")
            assert rc == 0, err

        await asyncio.wait_for(asyncio.gather(*(churn(i) for i in range(8))), 120)
        assert sorted(await jobs()) == ["tick0", "tick1", "tick2"]
        await telegram.wait_sent(OWNER, 1, T)  # the owner was answered meanwhile
        for i in range(3):
            assert (await klaw("schedule", "remove", f"tick{i}"))[0] == 0
        assert await jobs() == []
        runs = await history(None)
    assert {r["status"] for r in runs} <= {"silent", "ok", "skipped", "running", "due"}

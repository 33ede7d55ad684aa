"""The model's side: `schedule_add`, `schedule_list`, `schedule_remove` and
`subagent_spawn` as tool calls from a real turn (scripted model server), with their
results and refusals as the model sees them, and jobs landing in scheduler.db."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from sched_support import T, engine_running, engine_yaml, history, klaw

from klaw.paths import KlawPaths
from klaw.wire.protocol import Inbound, Outbound, new_id
from scripted_llm import FakeLLM, call, offered

CHAT = "telegram_100"


async def say(server: Any, text: str) -> list[Any]:
    got: list[Any] = []

    async def reply(msg: Any) -> None:
        got.append(msg)

    msg = Inbound(id=new_id(), ts=datetime.now(UTC), channel="telegram", chat_id=CHAT, content=text)
    await server.handler.handle(msg, reply)
    return got


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_the_model_schedules_lists_and_removes_jobs_and_hears_why_when_refused(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url, maxToolCallRounds=5)
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    add = {"name": "friday", "cron": "0 0 18 ? * 6L", "message": "Remind me to pay rent"}
    llm.answer(None, [call("c1", "schedule_add", json.dumps(add))])
    bad = {"name": "oops", "cron": "0 0 18 ? * 6W", "message": "x"}
    llm.answer(None, [call("c2", "schedule_add", json.dumps(bad))])
    llm.answer(None, [call("c3", "schedule_list", "{}")])
    llm.answer("Done: the last Friday of each month at 18:00.")
    llm.answer(None, [call("c4", "schedule_remove", json.dumps({"name": "friday"}))])
    llm.answer(None, [call("c5", "schedule_remove", json.dumps({"name": "friday"}))])
    llm.answer("Removed.")
    async with engine_running(klaw_home, backend) as server:
        out = [
            m for m in await say(server, "Remind me on the last Friday") if isinstance(m, Outbound)
        ]
        assert out[-1].content == "Done: the last Friday of each month at 18:00."
        rc, listed, err = await klaw("schedule", "list", "--json")
        assert rc == 0, err
        (job,) = [j for j in json.loads(listed)["jobs"] if j["name"] == "friday"]
        # injectInto defaults to the chat that asked; the zone to scheduler.timezone.
        assert job["injectInto"] == CHAT and job["timezone"] == "Europe/Berlin"
        await say(server, "Forget the rent reminder")
        rc, listed, err = await klaw("schedule", "list", "--json")
        assert "friday" not in [j["name"] for j in json.loads(listed)["jobs"]]
    added, refused, listing = (tool_results(r)[-1] for r in llm.requests[1:4])
    assert added.startswith("Scheduled 'friday' (0 0 18 ? * 6L, Europe/Berlin)")
    assert "Next runs: Fri" in added and added.count("Fri ") == 3
    assert "field 6 (day-of-week) '6W'" in refused
    assert "- friday: '0 0 18 ? * 6L' (Europe/Berlin)" in listing
    removed, missing = (tool_results(r)[-1] for r in llm.requests[5:7])
    assert removed == "Removed 'friday' (0 0 18 ? * 6L)."
    assert "no job named 'friday'" in missing


async def test_subagent_spawn_answers_at_once_and_the_result_follows(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    spawn = {"name": "research", "message": "Compare three heat pumps", "injectInto": CHAT}
    llm.answer(None, [call("s1", "subagent_spawn", json.dumps(spawn))])
    llm.answer("I started the comparison; I will send it when it is ready.")
    llm.answer("Heat pump comparison: A is quietest, B cheapest, C most efficient.")
    async with engine_running(klaw_home, backend) as server:
        got = await say(server, "Compare heat pumps for me, take your time")
        assert [m.content for m in got if isinstance(m, Outbound)] == [
            "I started the comparison; I will send it when it is ready."
        ]

        async def finished() -> None:
            while not any(r["status"] == "ok" for r in await history("research")):
                await asyncio.sleep(0.1)

        await asyncio.wait_for(finished(), T)
        # No gateway here: the result waits in the outbox, addressed to the chat.
        (pending,) = list(klaw_home.outbox.glob("*.json"))
        push = json.loads(pending.read_text())
        assert push["chatId"] == CHAT and push["content"].startswith("Heat pump comparison")
    spawned = llm.requests[2]
    assert [m["content"] for m in spawned["messages"] if m["role"] == "user"] == [
        "Compare three heat pumps"
    ]
    assert "subagent_spawn" not in offered(spawned)


async def test_the_model_cannot_remove_the_built_in_jobs(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url, maxToolCallRounds=5)
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    (klaw_home.workspace / "HEARTBEAT.md").write_text("- [ ] Check the boiler pressure\n")
    for i, name in enumerate(("heartbeat", "summaries")):
        llm.answer(None, [call(f"r{i}", "schedule_remove", json.dumps({"name": name}))])
    llm.answer("I cannot remove those.")
    async with engine_running(klaw_home, backend) as server:
        await say(server, "Stop all your background jobs")
        rc, listed, err = await klaw("schedule", "list", "--json")
        assert rc == 0, err
        names = {j["name"] for j in json.loads(listed)["jobs"]}
    assert {"heartbeat", "summaries"} <= names  # still there
    heartbeat, summaries = (tool_results(r)[-1] for r in llm.requests[1:3])
    assert "'heartbeat' is a built-in job, made from HEARTBEAT.md's checklist" in heartbeat
    assert "'summaries' is a built-in job, made from engine.yaml's `summarization`" in summaries

"""Budgets through the real pipeline and router against a local fake provider that
reports usage: chats and jobs running at once stop at the cap, overshooting it by at
most one call per LLM slot; a chat over budget gets a one-line notice (and the
offline model's answer when configured); the spend survives a restart."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from test_pipeline import Outbox, inbound

from klaw.config import load_engine_config
from klaw.engine.pipeline import Pipeline
from klaw.lanes import SUBAGENT
from klaw.llm.router import Router
from klaw.memory import Memory
from klaw.paths import KlawPaths
from klaw.spend import Spend
from klaw.spend.log import Call, read_spend
from klaw.wire.protocol import Outbound
from scripted_llm import FakeLLM, write_engine_yaml

T = 20.0
SLOTS = 2
USAGE = {"prompt_tokens": 5000, "completion_tokens": 100}  # what the fake reports per call
CALL_COST = 5100 * 10 / 1e6  # at 10 USD per million tokens in and out: 0.051


def engine_yaml(path: Path, url: str, budget: str) -> Path:
    write_engine_yaml(path, url, maxConcurrentLlm=SLOTS)
    text = path.read_text()
    priced = "    maxTokens: 512\n    price: {input: 10, output: 10, currency: USD}\n"
    text = text.replace("    maxTokens: 512\n", priced, 1)
    # A second provider at the same server: on 127.0.0.1, so free (the offline model).
    text = text.replace(
        "models:\n",
        f"  local:\n    type: openai-compatible\n    endpoint: {url}/v1\nmodels:\n"
        "  local/tiny:\n    contextBudget: 16000\n",
        1,
    )
    path.write_text(text + budget)
    return path


def answers(llm: FakeLLM, n: int, text: str = "ok") -> None:
    for _ in range(n):
        llm.answer(text)
        llm.replies[-1][1]["usage"] = dict(USAGE)


@pytest.fixture
async def engine(
    tmp_path: Path, klaw_home: KlawPaths, memory: Memory, llm: FakeLLM
) -> AsyncIterator[Any]:
    made: list[Pipeline] = []

    def make(budget: str) -> Pipeline:
        config = load_engine_config(engine_yaml(tmp_path / "engine.yaml", llm.url, budget))
        pipeline = Pipeline(
            config, klaw_home, memory, Router(config, spend=Spend(config, klaw_home.spend))
        )
        made.append(pipeline)
        return pipeline

    yield make
    for pipeline in made:
        await asyncio.wait_for(pipeline.aclose(), T)
        await asyncio.wait_for(pipeline.router.aclose(), T)


def logged(paths: KlawPaths) -> list[Call]:
    from datetime import UTC, datetime, timedelta

    today = datetime.now(UTC).date()
    entries = read_spend(paths.spend, today - timedelta(days=2), today + timedelta(days=2))
    return [e for e in entries if isinstance(e, Call)]


async def test_parallel_chats_and_jobs_stop_at_the_cap_within_one_call_per_slot(
    engine: Any, llm: FakeLLM, klaw_home: KlawPaths
) -> None:
    cap = 0.2
    pipeline = engine(f"budget:\n  daily: {cap}\n  currency: USD\n")
    answers(llm, 30)
    llm.hold = asyncio.Event()  # requests wait until both slots hold one
    replies: list[Outbox] = []

    async def chat(i: int) -> None:
        out = Outbox()
        replies.append(out)
        await pipeline.handle(inbound(f"m{i}", "hello", chat=f"telegram_{i}"), out)

    async def job(i: int) -> None:
        out = Outbox()
        replies.append(out)
        msg = inbound(f"j{i}", "run the job", chat=f"scheduler_job{i}")
        await pipeline.handle(msg, out, priority=SUBAGENT, source=f"job:job{i}")

    turns = [chat(i) for i in range(8)] + [job(i) for i in range(4)]
    running = asyncio.gather(*turns)

    async def both_slots_busy() -> None:
        while len(llm.requests) < SLOTS:
            llm.arrived.clear()
            await llm.arrived.wait()

    await asyncio.wait_for(both_slots_busy(), T)
    llm.hold.set()
    await asyncio.wait_for(running, T)

    calls = logged(klaw_home)
    spent = sum(c.cost or 0 for c in calls)
    assert len(calls) == len(llm.requests)  # every call that was made is on the log
    assert spent >= cap  # the cap was reached...
    assert spent <= cap + SLOTS * CALL_COST + 1e-9  # ...and passed by at most a call per slot
    sent = [o.sent[-1] for o in replies]
    assert all(isinstance(r, Outbound) for r in sent)
    refused = [r for r in sent if isinstance(r, Outbound) and r.meta.get("error") == "budget_spent"]
    assert len(refused) == 12 - len(calls)
    assert all(r.content.startswith("💸 Today's budget of 0.2000 USD is spent") for r in refused)
    assert all(r.line_type == "notice" for r in refused)
    assert {c.source for c in calls} <= {f"chat:telegram_{i}" for i in range(8)} | {
        f"job:job{i}" for i in range(4)
    }
    assert sum(bool(r.meta.get("first_notice")) for r in refused) == 1  # told once a day
    answered = [r for r in sent if isinstance(r, Outbound) and r not in refused]
    assert all(r.meta["cost"] == {"USD": pytest.approx(CALL_COST)} for r in answered)


async def test_a_chat_over_budget_gets_the_notice_and_the_offline_models_answer(
    engine: Any, llm: FakeLLM
) -> None:
    pipeline = engine("budget:\n  daily: 0\n  offlineModel: local/tiny\n")
    llm.answer("the offline model speaking")
    out = Outbox()
    await asyncio.wait_for(pipeline.handle(inbound("m1", "hello"), out), T)
    reply = out.sent[-1]
    assert isinstance(reply, Outbound)
    notice, _, answer = reply.content.partition("\n\n")
    assert notice.startswith("💸 Today's budget of 0.0000 USD is spent")
    assert answer == "the offline model speaking"
    assert [r["model"] for r in llm.requests] == ["tiny"]

    job = Outbox()  # a job is not answered offline: its run is capped
    msg = inbound("j1", "run", chat="scheduler_news")
    await asyncio.wait_for(pipeline.handle(msg, job, priority=SUBAGENT, source="job:news"), T)
    assert isinstance(job.sent[-1], Outbound) and job.sent[-1].meta["error"] == "budget_spent"
    assert len(llm.requests) == 1


async def test_the_spend_survives_a_restart(
    engine: Any, llm: FakeLLM, klaw_home: KlawPaths
) -> None:
    budget = "budget:\n  perSource:\n    'chat:*': 0.05\n"
    first = engine(budget)
    answers(llm, 3)
    out = Outbox()
    await asyncio.wait_for(first.handle(inbound("m1", "hello"), out), T)  # 0.051 spent
    await asyncio.wait_for(first.router.aclose(), T)
    again = engine(budget)  # a new engine: the meter is rebuilt from the spend log
    await asyncio.wait_for(again.handle(inbound("m2", "again"), out), T)
    reply = out.sent[-1]
    assert isinstance(reply, Outbound) and reply.meta["error"] == "budget_spent"
    assert "The daily budget of chat:telegram_1 (0.0500 USD) is spent" in reply.content
    assert len(llm.requests) == 1
    line = json.loads(next(klaw_home.spend.iterdir()).read_text().splitlines()[0])
    assert line["source"] == "chat:telegram_1" and line["cost"] == pytest.approx(CALL_COST)


async def test_background_calls_are_recorded_with_their_source(
    engine: Any, llm: FakeLLM, klaw_home: KlawPaths
) -> None:
    from klaw.scheduler.ports import BackgroundRequest

    pipeline = engine("")
    answers(llm, 2)
    for request in (BackgroundRequest("sum up", "rows"), BackgroundRequest("x", "y", "reflect")):
        assert await asyncio.wait_for(pipeline.complete_background(request, "fake/m"), T) == "ok"
    assert [(c.source, c.cost) for c in logged(klaw_home)] == [
        ("summary", pytest.approx(CALL_COST)),
        ("reflect", pytest.approx(CALL_COST)),
    ]


async def test_local_models_are_not_capped(
    tmp_path: Path, llm: FakeLLM, klaw_home: KlawPaths
) -> None:
    from klaw.llm.types import LlmRequest, Message

    path = engine_yaml(tmp_path / "engine.yaml", llm.url, "budget:\n  daily: 0\n")
    path.write_text(path.read_text().replace("default: fake/m", "default: local/tiny"))
    config = load_engine_config(path)
    llm.answer("free")
    async with Router(config, spend=Spend(config, klaw_home.spend)) as router:
        request = LlmRequest([Message.user("hi")])
        response = await asyncio.wait_for(router.complete(request, source="chat:x"), T)
    assert response.content == "free" and response.budget_note is None
    assert [(c.model, c.cost) for c in logged(klaw_home)] == [("local/tiny", 0.0)]


async def test_a_budget_spent_between_tool_rounds_ends_the_turn_with_the_notice(
    engine: Any, llm: FakeLLM, memory: Memory
) -> None:
    from scripted_llm import call

    pipeline = engine("budget:\n  daily: 0.05\n")
    llm.answer(None, [call("c1", "current_time", "{}")])
    llm.replies[-1][1]["usage"] = dict(USAGE)  # 0.051: over the cap after this call
    out = Outbox()
    await asyncio.wait_for(pipeline.handle(inbound("m1", "what time is it?"), out), T)
    reply = out.sent[-1]
    assert isinstance(reply, Outbound) and reply.meta["error"] == "budget_spent"
    assert reply.meta["cost"] == {"USD": pytest.approx(CALL_COST)}
    assert [r.meta.get("tool") for r in reply.records] == [None, "current_time"]
    assert len(llm.requests) == 1  # the second round was never asked
    roles = [r.role for r in memory.store.recent_messages("telegram_1", None, 10)]
    assert roles == ["user", "assistant", "tool", "assistant"]

"""A job over its spend cap, in the real engine with the real gateway: its runs are
recorded `capped` without a model call, the owner is told once, and `klaw budget` and
`klaw usage --cost` (separate processes) show what was spent; a restarted engine keeps
the job resting."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
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
    telegram_fixture,
)

from klaw.paths import KlawPaths
from scripted_llm import FakeLLM

EVERY_SECOND = "* * * * * ?"
SILENT = '{"silent": true, "reason": "nothing new"}'
COST = 13 * 1000 / 1e6  # the fake's 10 + 3 tokens at 1000 USD per million


def priced(paths: KlawPaths, url: str, budget: str = "perSource:\n    'job:*': 0.02") -> Path:
    """engine.yaml with `fake/m` priced and `budget` (a 0.02 USD daily cap per job)."""
    path = engine_yaml(paths.engine_config, url)
    text = path.read_text().replace(
        "    maxTokens: 512\n",
        "    maxTokens: 512\n    price: {input: 1000, output: 1000, currency: USD}\n",
        1,
    )
    path.write_text(f"{text}budget:\n  {budget}\n")
    return path


async def capped_runs(n: int) -> list[dict[str, Any]]:
    while True:
        runs = await history("pricey")
        if [r["status"] for r in runs].count("capped") >= n:
            return runs
        await asyncio.sleep(0.2)


async def test_a_job_over_its_cap_rests_and_the_owner_is_told_once(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, telegram: FakeTelegram
) -> None:
    priced(klaw_home, llm.url)
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    telegram.add_chat(OWNER)
    for _ in range(10):
        llm.answer(SILENT)
    async with engine_running(klaw_home, backend), gateway_running(klaw_home, telegram) as gw:
        await asyncio.wait_for(gw.connected.wait(), T)
        rc, _, err = await klaw(
            "schedule", "add", "pricey", EVERY_SECOND, "Look", "--inject-into", CHAT
        )
        assert rc == 0, err
        runs = await asyncio.wait_for(capped_runs(3), T)
        assert (await klaw("schedule", "remove", "pricey"))[0] == 0
        told = await telegram.wait_sent(OWNER, 1, T)
        telegram.command(OWNER, "status")
        sent = await telegram.wait_sent(OWNER, 2, T)
    assert len(sent) == 2  # told once, then /status
    assert "Spent today 0.0260 USD, this month 0.0260 USD" in sent[-1].visible
    assert [r["status"] for r in runs].count("silent") == 2  # 0.013, then 0.026 ≥ 0.02
    assert len(llm.requests) == 2
    capped = [r for r in runs if r["status"] == "capped"]
    assert "The daily budget of job:pricey (0.0200 USD) is spent" in capped[0]["error"]
    assert "Scheduled job 'pricey' rests" in told[0].visible

    rc, out, err = await klaw("budget", "--json")
    assert rc == 0, err
    cap = json.loads(out)["caps"][0]
    assert cap["scope"] == "job:*" and cap["sources"] == {"job:pricey": pytest.approx(2 * COST)}
    assert cap["left"] == 0
    rc, out, err = await klaw("usage", "--cost", "--by", "source", "--json")
    assert rc == 0, err
    group = json.loads(out)["groups"]["job:pricey"]
    assert group["calls"] == 2 and group["cost"] == {"USD": pytest.approx(2 * COST)}

    # A new engine reads the day's spend back: the job still rests, without a call.
    async with engine_running(klaw_home, backend):
        before = [r["status"] for r in await history("pricey")].count("capped")
        rc, _, err = await klaw("schedule", "add", "pricey", EVERY_SECOND, "Look")
        assert rc == 0, err
        await asyncio.wait_for(capped_runs(before + 1), T)
        assert (await klaw("schedule", "remove", "pricey"))[0] == 0
    assert len(llm.requests) == 2


async def test_a_reflect_run_over_budget_is_capped_not_failed(
    klaw_home: KlawPaths, memory: Any, llm: FakeLLM
) -> None:
    from test_reflect import DAY1, write_logs

    from klaw.config import load_engine_config
    from klaw.engine.pipeline import Pipeline
    from klaw.llm.router import Router
    from klaw.scheduler.reflect import Reflector
    from klaw.spend import Spend

    config = load_engine_config(priced(klaw_home, llm.url, "daily: 0"))
    router = Router(config, spend=Spend(config, klaw_home.spend))
    pipeline = Pipeline(config, klaw_home, memory, router)
    write_logs(klaw_home.workspace, ("2026-03-02.md", DAY1))
    try:
        got = await asyncio.wait_for(Reflector(config, klaw_home, memory, pipeline).run(None), T)
    finally:
        await pipeline.aclose()
        await router.aclose()
    assert got.spent and got.error is not None and "budget" in got.error
    assert llm.requests == []

"""The model's clock names the day in the owner's zone, like current_time, jobs and logs."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from klaw.config import load_engine_config
from klaw.engine.pipeline import Pipeline
from klaw.llm.router import Router
from klaw.memory import Memory
from klaw.paths import KlawPaths
from klaw.wire.protocol import Inbound, Outbound
from scripted_llm import FakeLLM, write_engine_yaml

T = 10.0
# 12:00 UTC on New Year's Eve is already 02:00 on New Year's Day at UTC+14.
NOON_UTC = datetime(2026, 12, 31, 12, 0, tzinfo=UTC)


async def _system_prompt(
    tmp_path: Path, home: KlawPaths, memory: Memory, llm: FakeLLM, zone: str | None
) -> str:
    path = write_engine_yaml(tmp_path / "engine.yaml", llm.url)
    if zone:
        with path.open("a", encoding="utf-8") as f:
            f.write(f"scheduler:\n  timezone: {zone}\n")
    config = load_engine_config(path)
    router = Router(config)
    pipeline = Pipeline(config, home, memory, router, now=lambda: NOON_UTC)
    sent: list[object] = []

    async def out(msg: object) -> None:
        sent.append(msg)

    llm.answer("ok")
    msg = Inbound(id="m1", channel="telegram", chat_id="telegram_1", ts=NOON_UTC, content="hi")
    try:
        await asyncio.wait_for(pipeline.handle(msg, out), T)
    finally:
        await asyncio.wait_for(pipeline.aclose(), T)
        await asyncio.wait_for(router.aclose(), T)
    assert isinstance(sent[-1], Outbound)
    return str(llm.requests[-1]["messages"][0]["content"])


async def test_the_context_names_the_owners_day(
    tmp_path: Path, klaw_home: KlawPaths, memory: Memory, llm: FakeLLM
) -> None:
    system = await _system_prompt(tmp_path, klaw_home, memory, llm, "Pacific/Kiritimati")
    assert "Date: 2027-01-01 (Friday)" in system
    assert "Time: 02:00 (Pacific/Kiritimati, UTC+14:00)" in system

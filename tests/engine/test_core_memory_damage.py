"""A damaged core_memory.json: chats keep working, the owner is told once, no host path
reaches a chat, the file is left for the owner to fix, and `klaw doctor` names it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from klaw.cli.app import main
from klaw.cli.testing import CliRunner
from klaw.engine.pipeline import CORE_MEMORY_NOTICE, Pipeline
from klaw.llm.router import Router
from klaw.memory import Memory
from klaw.paths import KlawPaths
from klaw.wire.protocol import Command, Error, Inbound, Outbound
from scripted_llm import FakeLLM, call, engine_config

T = 10.0
DAMAGED = b'{"user": {"name": "Ann"'  # torn JSON, as after a bad hand edit


class Outbox:
    def __init__(self) -> None:
        self.sent: list[Outbound | Error] = []

    async def __call__(self, msg: Outbound | Error) -> None:
        self.sent.append(msg)


@pytest.fixture
async def pipeline(
    tmp_path: Path, klaw_home: KlawPaths, memory: Memory, llm: FakeLLM
) -> AsyncIterator[Pipeline]:
    config = engine_config(tmp_path, llm.url)
    router = Router(config)
    pipe = Pipeline(config, klaw_home, memory, router)
    yield pipe
    await asyncio.wait_for(pipe.aclose(), T)
    await asyncio.wait_for(router.aclose(), T)


def inbound(msg_id: str, text: str) -> Inbound:
    return Inbound(
        id=msg_id, channel="telegram", chat_id="telegram_1", ts=datetime.now(UTC), content=text
    )


def texts(sent: list[Outbound | Error]) -> list[str]:
    return [m.content if isinstance(m, Outbound) else m.message for m in sent]


def damage(paths: KlawPaths) -> None:
    paths.core_memory.parent.mkdir(parents=True, exist_ok=True)
    paths.core_memory.write_bytes(DAMAGED)


async def test_chat_answers_without_core_memory_and_the_owner_is_told_once(
    pipeline: Pipeline, klaw_home: KlawPaths, llm: FakeLLM
) -> None:
    damage(klaw_home)
    llm.answer("first answer")
    llm.answer("second answer")
    out = Outbox()
    await asyncio.wait_for(pipeline.handle(inbound("m1", "hello"), out), T)
    await asyncio.wait_for(pipeline.handle(inbound("m2", "again"), out), T)

    notice, first, second = out.sent
    assert isinstance(notice, Outbound) and notice.line_type == "notice"
    assert notice.content == CORE_MEMORY_NOTICE and notice.answers == []
    assert isinstance(first, Outbound) and first.answers == ["m1"]
    assert isinstance(second, Outbound) and second.answers == ["m2"]
    assert "## Core Memory" not in llm.requests[0]["messages"][0]["content"]
    assert klaw_home.core_memory.read_bytes() == DAMAGED  # kept for the owner to fix
    for text in texts(out.sent):
        assert str(klaw_home.data_dir) not in text and "/" + "core_memory" not in text


async def test_core_memory_tools_fail_without_a_host_path_and_keep_the_file(
    pipeline: Pipeline, klaw_home: KlawPaths, llm: FakeLLM
) -> None:
    damage(klaw_home)
    args = json.dumps({"section": "user", "key": "city", "value": "Oslo"})
    llm.answer(None, [call("c1", "memory_core_update", args)])
    llm.answer("could not save")
    out = Outbox()
    await asyncio.wait_for(pipeline.handle(inbound("m1", "remember Oslo"), out), T)

    tool_result = llm.requests[1]["messages"][-1]
    assert tool_result["role"] == "tool"
    assert "core_memory.json is not valid core memory" in tool_result["content"]
    assert str(klaw_home.data_dir) not in tool_result["content"]
    assert klaw_home.core_memory.read_bytes() == DAMAGED


async def test_memory_command_says_so_without_a_path(
    pipeline: Pipeline, klaw_home: KlawPaths
) -> None:
    damage(klaw_home)
    out = Outbox()
    cmd = Command(
        id="c1", channel="telegram", chat_id="telegram_1", ts=datetime.now(UTC), name="memory"
    )
    await asyncio.wait_for(pipeline.handle(cmd, out), T)
    [reply] = texts(out.sent)
    assert reply.startswith("Core memory cannot be read") and "klaw doctor" in reply
    assert str(klaw_home.data_dir) not in reply


def test_doctor_fails_on_a_damaged_file(klaw_home: KlawPaths) -> None:
    damage(klaw_home)
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 1
    line = next(x for x in result.stdout.splitlines() if "core memory:" in x)
    assert "FAIL" in line and str(klaw_home.core_memory) in line
    assert "klaw memory edit" in result.stdout


def test_doctor_accepts_a_good_file(klaw_home: KlawPaths) -> None:
    klaw_home.core_memory.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.core_memory.write_text('{"user": {"name": "Ann"}, "agent": {}}')
    result = CliRunner().invoke(main, ["doctor"])
    line = next(x for x in result.stdout.splitlines() if "core memory:" in x)
    assert "FAIL" not in line

"""The answered watermark is on disk before the reply goes out, and fsynced after it:
the fsyncs are not on the reply's path, and none is skipped."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from klaw.engine.answered import LOG_NAME, AnsweredMarks
from klaw.engine.pipeline import Pipeline
from klaw.llm.router import Router
from klaw.memory import Memory
from klaw.paths import KlawPaths
from klaw.wire.protocol import Error, Inbound, Outbound
from scripted_llm import FakeLLM, engine_config

T = 30.0
CHAT = "telegram_7"


def _fsyncs(monkeypatch: pytest.MonkeyPatch, under: Path) -> list[str]:
    """Paths fsynced under `under` (files and folders), in order."""
    seen: list[str] = []
    real = os.fsync

    def fsync(fd: Any) -> None:
        path = os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
        if path.startswith(str(under)):
            seen.append(path)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


@pytest.fixture
async def pipeline(
    tmp_path: Path, klaw_home: KlawPaths, memory: Memory, llm: FakeLLM
) -> AsyncIterator[Pipeline]:
    config = engine_config(tmp_path, llm.url, debounceMs=0)
    router = Router(config)
    pipe = Pipeline(config, klaw_home, memory, router)
    yield pipe
    await asyncio.wait_for(pipe.aclose(), T)
    await asyncio.wait_for(router.aclose(), T)


async def _until_fsynced(synced: list[str], wanted: set[str]) -> None:
    """Waits (at most T) until every path of `wanted` was fsynced."""
    deadline = asyncio.get_running_loop().time() + T
    while not wanted <= set(synced):
        assert asyncio.get_running_loop().time() < deadline, sorted(wanted - set(synced))
        await asyncio.sleep(0.01)


async def test_the_mark_is_written_before_the_reply_and_fsynced_after_it(
    pipeline: Pipeline, klaw_home: KlawPaths, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = klaw_home.answered / CHAT
    synced = _fsyncs(monkeypatch, klaw_home.answered)
    at_reply: dict[str, Any] = {}

    async def reply(out: Outbound | Error) -> None:
        assert isinstance(out, Outbound)
        # What a gateway that dies now, and an engine restarted after it, would find.
        at_reply["mark"] = AnsweredMarks(klaw_home.answered).covers(CHAT, "0")
        at_reply["fsynced"] = list(synced)

    llm.answer("hello back")
    msg = Inbound(id="m1", channel="telegram", chat_id=CHAT, ts=datetime.now(UTC), content="hi")
    await asyncio.wait_for(pipeline.handle(msg, reply), T)
    assert at_reply == {"mark": True, "fsynced": []}
    wanted = {str(folder / LOG_NAME), str(folder)}
    wanted.add(str(klaw_home.answered))  # the chat's folder is new
    await _until_fsynced(synced, wanted)  # the background fsync, without a shutdown


def test_sync_covers_every_chat_written_and_each_file_once(
    klaw_home: KlawPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sync()` with no chat (the pipeline's shutdown) fsyncs every pending write."""
    synced = _fsyncs(monkeypatch, klaw_home.answered)
    marks = AnsweredMarks(klaw_home.answered)
    now = datetime.now(UTC)
    for chat in ("telegram_1", "discord_2"):
        for n in range(2):
            out = Outbound(ts=now, channel="telegram", chat_id=chat, content="x", answers=[f"m{n}"])
            marks.record(out, f"2026-01-01T00:00:0{n}Z")
    assert synced == []
    marks.sync()
    root = klaw_home.answered
    assert sorted(synced) == sorted(
        [str(root / c / LOG_NAME) for c in ("telegram_1", "discord_2")]
        + [str(root / c) for c in ("telegram_1", "discord_2")]
        + [str(root)] * 2
    )
    synced.clear()
    marks.sync()
    assert synced == []  # nothing written since
    assert AnsweredMarks(root).reply_for("discord_2", "m1") is not None


async def test_replies_in_quick_succession_all_get_their_fsync(
    pipeline: Pipeline, klaw_home: KlawPaths, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One fsync worker at a time takes whatever was written meanwhile: none is left."""
    synced = _fsyncs(monkeypatch, klaw_home.answered)
    chats = ("telegram_1", "telegram_2")

    async def reply(out: Outbound | Error) -> None:
        assert isinstance(out, Outbound)

    def message(chat: str, n: int) -> Inbound:
        return Inbound(
            id=f"{chat}-{n}", channel="telegram", chat_id=chat, ts=datetime.now(UTC), content="x"
        )

    for n in range(3):
        for _ in chats:
            llm.answer(f"answer {n}")
        turns = (pipeline.handle(message(chat, n), reply) for chat in chats)
        await asyncio.wait_for(asyncio.gather(*turns), T)
    root = klaw_home.answered
    wanted = {str(root / c / LOG_NAME) for c in chats} | {str(root / c) for c in chats}
    await _until_fsynced(synced, wanted)
    # Each reply appends to its chat's file: the worker runs until none is left unsynced.
    deadline = asyncio.get_running_loop().time() + T
    while pipeline.answered.unsynced():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)

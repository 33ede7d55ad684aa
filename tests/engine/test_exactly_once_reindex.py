"""Exactly-once survives `klaw reindex`: the answered watermarks are files, not klaw.db
rows, so a message redelivered after a rebuild gets its kept reply, not a second turn."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from klaw.config import EngineConfig
from klaw.engine.answered import KEPT_REPLIES, AnsweredMarks
from klaw.engine.pipeline import Pipeline
from klaw.gateway.logbook import LogBook
from klaw.llm.router import Router
from klaw.memory import Memory
from klaw.memory.api import rebuild
from klaw.paths import KlawPaths
from klaw.wire.loglines import inbound_line, outbound_line
from klaw.wire.protocol import Error, Inbound, Outbound
from klaw.wire.record import to_iso
from scripted_llm import FakeLLM, engine_config

T = 10.0
CHAT = "telegram_1"


def hello() -> Inbound:
    return Inbound(id="m1", channel="telegram", chat_id=CHAT, ts=datetime.now(UTC), content="hi")


async def answer_once(
    paths: KlawPaths, config: EngineConfig, backend: Any, msg: Inbound
) -> list[Outbound | Error]:
    """One engine life: open memory, handle `msg`, close; what it sent back."""
    sent: list[Outbound | Error] = []

    async def reply(out: Outbound | Error) -> None:
        sent.append(out)

    memory = Memory.open(paths=paths, config=config, backend=backend)
    router = Router(config)
    try:
        pipeline = Pipeline(config, paths, memory, router)
        await asyncio.wait_for(pipeline.handle(msg, reply), T)
        await pipeline.aclose()
    finally:
        await router.aclose()
        memory.close()
    return sent


async def test_a_redelivery_after_reindex_gets_the_kept_reply(
    tmp_path: Path, klaw_home: KlawPaths, backend: Any, llm: FakeLLM
) -> None:
    config = engine_config(tmp_path, llm.url, debounceMs=0)
    book = LogBook(klaw_home.conversations)  # the gateway logs what passes it
    msg = hello()
    book.write(CHAT, [inbound_line(msg)])
    llm.answer("hello back")
    (first,) = await answer_once(klaw_home, config, backend, msg)
    assert isinstance(first, Outbound) and first.answers == ["m1"]
    book.write(CHAT, [outbound_line(first)])

    report = await asyncio.to_thread(rebuild, klaw_home, config, backend=backend, progress=False)
    assert report is not None

    # The gateway never saw the reply acknowledged (it died), so it sends m1 again.
    (again,) = await answer_once(klaw_home, config, backend, msg)
    assert len(llm.requests) == 1  # no second turn
    assert isinstance(again, Outbound) and again.id == first.id  # the gateway drops it


async def test_without_the_kept_reply_the_redelivery_is_settled_as_a_duplicate(
    tmp_path: Path, klaw_home: KlawPaths, backend: Any, llm: FakeLLM
) -> None:
    config = engine_config(tmp_path, llm.url, debounceMs=0)
    book = LogBook(klaw_home.conversations)
    msg = hello()
    book.write(CHAT, [inbound_line(msg)])
    llm.answer("hello back")
    (first,) = await answer_once(klaw_home, config, backend, msg)
    assert isinstance(first, Outbound)
    # Later replies pushed it out of the kept ones; the watermark still covers m1.
    marks = AnsweredMarks(klaw_home.answered)
    later = to_iso(datetime.now(UTC) + timedelta(seconds=1)) or ""
    for n in range(KEPT_REPLIES):
        marks.record(first.model_copy(update={"id": f"r{n}", "answers": [f"x{n}"]}), later)
    assert marks.reply_for(CHAT, "m1") is None
    await asyncio.to_thread(rebuild, klaw_home, config, backend=backend, progress=False)
    (again,) = await answer_once(klaw_home, config, backend, msg)
    assert len(llm.requests) == 1
    assert isinstance(again, Error) and again.code == "duplicate" and again.ref == "m1"


def test_a_damaged_mark_is_logged_and_read_as_nothing_answered(
    klaw_home: KlawPaths, caplog: Any
) -> None:
    folder = klaw_home.answered / CHAT
    folder.mkdir(parents=True)
    (folder / "mark.json").write_text('{"ts": 5, "n"')
    marks = AnsweredMarks(klaw_home.answered)
    assert marks.mark(CHAT) == {}
    assert not marks.covers(CHAT, "2026-01-01T00:00:00Z")
    assert "damaged" in caplog.text


def test_a_slot_holding_a_newer_reply_is_never_resent_for_an_older_message(
    klaw_home: KlawPaths,
) -> None:
    marks = AnsweredMarks(klaw_home.answered)
    out = Outbound(ts=datetime.now(UTC), channel="telegram", chat_id=CHAT, content="x")
    out = out.model_copy(update={"answers": ["m2"]})
    folder = klaw_home.answered / CHAT
    folder.mkdir(parents=True)
    # The mark still says slot 0 answered m1; the slot was already overwritten by m2's.
    (folder / "mark.json").write_text(json.dumps({"ts": "", "n": 1, "slots": {"0": ["m1"]}}))
    (folder / "0.json").write_text(out.model_dump_json())
    assert marks.reply_for(CHAT, "m1") is None

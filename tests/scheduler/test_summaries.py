"""Background summaries end to end: the real engine and pipeline, the scripted model
server, summaries/ files, klaw.db's summaries table, archival memory, the context of
the next turn, the nightly job, and `klaw reindex` rebuilding the table."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sched_support import T, engine_running, engine_yaml, history, klaw, until

from klaw.config import load_engine_config
from klaw.memory import Memory
from klaw.memory.rows import StoredMessage
from klaw.memory.summaries import newest_summary, segment_summary
from klaw.paths import KlawPaths
from klaw.scheduler.summaries import SYSTEM
from klaw.wire.protocol import Inbound, Outbound, new_id
from scripted_llm import FakeLLM

CHAT = "telegram_100"


def is_summary_request(request: dict[str, Any]) -> bool:
    return request["messages"][0]["content"] == SYSTEM


async def say(server: Any, text: str, chat: str = CHAT) -> Outbound:
    got: list[Any] = []

    async def reply(msg: Any) -> None:
        got.append(msg)

    msg = Inbound(id=new_id(), ts=datetime.now(UTC), channel="telegram", chat_id=chat, content=text)
    await server.handler.handle(msg, reply)
    (out,) = [m for m in got if isinstance(m, Outbound)]
    return out


async def test_every_n_messages_a_summary_is_written_indexed_used_and_reindexed(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url, summarization={"everyMessages": 4})
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    llm.answer("The shed needs 40 planks.")
    llm.answer("Timber comes Thursday.")
    llm.answer("- Alex builds a garden shed: 40 planks of larch, timber due Thursday.")
    llm.answer("Noted.")
    folder = klaw_home.summaries / CHAT
    async with engine_running(klaw_home, backend) as server:
        await say(server, "How many planks for the shed?")
        assert newest_summary(folder) is None  # 2 messages: not yet
        await say(server, "When does the larch timber arrive?")
        await until(lambda: newest_summary(folder) is not None)
        await until(lambda: len(llm.requests) == 3)
        covered = newest_summary(folder)
        assert covered is not None
        assert covered.path.name.endswith("_msg_001_004.md")
        assert covered.to_ordinal == 4
        assert "40 planks of larch" in covered.text
        # The summarizer saw the four messages, and nothing else of the log.
        summary_request = llm.requests[2]
        assert is_summary_request(summary_request)
        transcript = summary_request["messages"][1]["content"]
        assert "How many planks" in transcript and "Timber comes Thursday." in transcript
        # The next turn gets it before its window.
        await say(server, "Remind me what we planned")
        system = llm.requests[3]["messages"][0]["content"]
        assert "40 planks of larch" in system and "Earlier in This Conversation" in system
        # It is searchable in archival memory.
        rc, out, err = await klaw("memory", "search", "larch planks garden shed", "--json")
        assert rc == 0, err
        hits = json.loads(out)
        assert any("40 planks of larch" in h["content"] for h in hits)
        assert any(h["citation"].startswith("summaries/telegram_100/") for h in hits)
    # The table and the index come back from the files.
    config = load_engine_config(klaw_home.engine_config)
    mem = Memory.open(paths=klaw_home, config=config, backend=backend)
    try:
        before = dict(mem.store.stats())["summaries"]
    finally:
        mem.close()
    assert before == 1
    rc, out, err = await klaw("reindex", "--no-progress")
    assert rc == 0, err
    mem = Memory.open(paths=klaw_home, config=config, backend=backend)
    try:
        assert dict(mem.store.stats())["summaries"] == 1
        hits = mem.search("larch planks garden shed", top_k=5)
    finally:
        mem.close()
    assert any("40 planks of larch" in h.content for h in hits)  # indexed again from the file


async def test_the_next_summary_continues_the_numbering_and_folds_in_the_last(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url, summarization={"everyMessages": 2})
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    llm.answer("ok one")
    llm.answer("- First summary: Jana's birthday is on 3 May.")
    llm.answer("ok two")
    llm.answer("- Jana's birthday 3 May; cake ordered at Ovocny bar.")
    folder = klaw_home.summaries / CHAT
    async with engine_running(klaw_home, backend) as server:
        await say(server, "Jana's birthday is 3 May")
        await until(lambda: newest_summary(folder) is not None)
        await until(lambda: len(llm.requests) == 2)
        await say(server, "I ordered the cake")
        await until(lambda: (c := newest_summary(folder)) is not None and c.to_ordinal == 4)
    names = sorted(p.name for p in folder.iterdir())
    assert [n[11:] for n in names] == ["msg_001_002.md", "msg_003_004.md"]
    second = llm.requests[3]
    assert is_summary_request(second)
    transcript = second["messages"][1]["content"]
    assert "First summary: Jana's birthday" in transcript  # folded in
    assert "Jana's birthday is 3 May" not in transcript.split("to summarize:")[1]  # covered


def _summary_file(folder: Path, name: str, first: datetime, last: datetime, text: str) -> Path:
    iso = "%Y-%m-%dT%H:%M:%SZ"
    path = folder / name
    path.write_text(
        f"# Summary of {CHAT}\n_{first.strftime(iso)} – {last.strftime(iso)}, 2 messages, "
        f"to m_{last.second}._\n\n{text}\n"
    )
    return path


def test_the_newest_summary_is_the_highest_ordinal_and_its_messages_tell_its_segment(
    tmp_path: Path,
) -> None:
    folder = tmp_path / CHAT
    folder.mkdir()
    t0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    s = timedelta(seconds=1)
    _summary_file(folder, "2026-11-20_msg_001_002.md", t0, t0 + s, "- first two")
    newest = _summary_file(
        folder, "2026-11-20_msg_003_004.md", t0 + 2 * s, t0 + 3 * s, "- all four"
    )
    # Restored from a backup, copied, or written before the clock was set: its file
    # time is older than the other's and than the segment, and that must not matter.
    past = (datetime.now(UTC) - timedelta(days=400)).timestamp()
    os.utime(newest, (past, past))
    covered = newest_summary(folder)
    assert covered is not None and covered.path == newest and covered.to_ordinal == 4
    since = (t0 + 2 * s).strftime("%Y-%m-%dT%H:%M:%SZ")  # the segment began with message 3
    assert segment_summary(tmp_path, CHAT, since) == newest.read_text().strip()
    assert segment_summary(tmp_path, CHAT, None) == newest.read_text().strip()
    after_new = (t0 + 4 * s).strftime("%Y-%m-%dT%H:%M:%SZ")  # /new after message 4
    assert segment_summary(tmp_path, CHAT, after_new) is None


async def test_a_summary_with_an_old_file_time_is_still_used_and_folded_in(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url, summarization={"everyMessages": 2})
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    llm.answer("ok one")
    llm.answer("- First summary: the boat is moored at pier 7.")
    llm.answer("ok two")
    llm.answer("- Boat at pier 7; new sail ordered.")
    folder = klaw_home.summaries / CHAT
    async with engine_running(klaw_home, backend) as server:
        await say(server, "The boat is at pier 7")
        await until(lambda: len(llm.requests) == 2 and newest_summary(folder) is not None)
        first = newest_summary(folder)
        assert first is not None
        # As after a restore, or a clock set late: the file looks older than the chat.
        past = (datetime.now(UTC) - timedelta(days=400)).timestamp()
        os.utime(first.path, (past, past))
        await say(server, "I ordered a new sail")
        await until(lambda: (c := newest_summary(folder)) is not None and c.to_ordinal == 4)
    assert "First summary: the boat" in llm.requests[2]["messages"][0]["content"]  # used
    second = llm.requests[3]
    assert is_summary_request(second)
    assert "First summary: the boat" in second["messages"][1]["content"]  # folded in


async def test_a_backlog_of_hundreds_is_summarized_oldest_first_and_none_is_lost(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url, summarization={"everyMessages": 50})
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    # 450 messages waiting (summaries were off, or no model answered for a while).
    start = datetime.now(UTC) - timedelta(days=1)
    said = [
        StoredMessage(
            id=f"old{i:03d}",
            channel="telegram",
            chat_id=CHAT,
            role="user" if i % 2 == 0 else "assistant",
            content=f"note number {i}",
            created_at=(start + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        for i in range(450)
    ]
    config = load_engine_config(klaw_home.engine_config)
    with Memory.open(paths=klaw_home, config=config, backend=backend) as mem:
        mem.store.insert_messages(said)
        mem.store.upsert_session(CHAT, "fake/m", said[0].created_at, said[0].created_at)
        # Already in the conversation index (klaw.memory.conversations' watermark):
        # embedding 450 messages is not what this test is about.
        head = dict(mem.store.chat_heads())[CHAT]
        mem.store.meta_set(f"conversation_rowid:{CHAT}", str(head))
    llm.answer("Noted.")
    for part in ("first", "second", "third"):
        llm.answer(f"- The {part} part of the notes.")
    folder = klaw_home.summaries / CHAT
    async with engine_running(klaw_home, backend) as server:
        await say(server, "One more note")  # 452 waiting: 200, 200 and 52 (over 50)
        await until(lambda: (c := newest_summary(folder)) is not None and c.to_ordinal == 452)
    names = sorted(p.name[11:] for p in folder.iterdir())
    assert names == ["msg_001_200.md", "msg_201_400.md", "msg_401_452.md"]
    asked = [r["messages"][1]["content"] for r in llm.requests if is_summary_request(r)]
    assert len(asked) == 3
    summarized = [
        line.split("] ", 1)[1]
        for text in asked
        for line in text.split("The conversation to summarize:\n")[1].splitlines()
    ]
    notes = [f"{r.role}: {r.content}" for r in said]
    assert summarized == [*notes, "user: One more note", "assistant: Noted."]  # each once
    assert "The first part" in asked[1] and "The second part" in asked[2]  # folded in


async def test_with_openclaw_on_a_summary_is_written_back_to_the_daily_log(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url, summarization={"everyMessages": 2})
    with klaw_home.engine_config.open("a") as f:
        f.write("compatibility:\n  openclaw:\n    enabled: true\n")
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    llm.answer("Fine.")
    llm.answer("- The gate code changed to 4411.")
    async with engine_running(klaw_home, backend) as server:
        await say(server, "The gate code is 4411 now")
        await until(lambda: newest_summary(klaw_home.summaries / CHAT) is not None)
        logs = klaw_home.workspace / "memory"
        await until(lambda: any("gate code changed" in p.read_text() for p in logs.glob("*.md")))
    (daily,) = logs.glob("*.md")
    assert f"## Conversation summary ({CHAT}, " in daily.read_text()


async def test_the_nightly_job_summarizes_chats_left_over_and_skips_quiet_ones(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url, summarization={"everyMessages": 50})
    for chat in (CHAT, "telegram_200"):
        (klaw_home.conversations / chat).mkdir(parents=True)
    for i in range(3):
        llm.answer(f"reply {i}")
    llm.answer("- Busy chat: three questions about the boiler.")
    async with engine_running(klaw_home, backend) as server:
        for i in range(3):
            await say(server, f"Boiler question {i}")  # 6 messages: below 50, at the minimum
        assert newest_summary(klaw_home.summaries / CHAT) is None
        rc, out, err = await klaw("schedule", "list", "--json")
        assert rc == 0, err
        (job,) = [j for j in json.loads(out)["jobs"] if j["name"] == "summaries"]
        assert job["cron"] == "0 30 3 * * ?" and job["kind"] == "summaries"
        rc, _, err = await klaw("schedule", "run", "summaries")
        assert rc == 0, err

        async def done() -> None:
            while not any(r["status"] == "ok" for r in await history("summaries")):
                await asyncio.sleep(0.1)

        await asyncio.wait_for(done(), T)
        rc, _, err = await klaw("schedule", "add", "summaries", "0 8 * * *", "x")
        assert rc == 1 and "kept for background summaries" in err
    assert newest_summary(klaw_home.summaries / CHAT) is not None
    assert newest_summary(klaw_home.summaries / "telegram_200") is None  # nothing said there
    assert sum(is_summary_request(r) for r in llm.requests) == 1

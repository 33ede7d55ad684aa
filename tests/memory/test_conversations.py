"""Past conversations as memory: rounds indexed per chat, searched only from that chat,
rebuilt by `klaw reindex`, time words narrowing by date (real model, real klaw.db)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime

import pytest

from klaw import _core
from klaw.config import load_engine_config
from klaw.memory import Memory
from klaw.memory.api import rebuild
from klaw.memory.conversations import ConversationIndexer, chat_source
from klaw.paths import KlawPaths
from klaw.tools.base import ToolError
from klaw.tools.memory_tools import ConversationSearch, MemorySearch

TALK = [
    ("user", "We should plan the trip to Lisbon in May, flights are cheap then", "2026-03-02"),
    ("assistant", "Good idea. I will remember that you want Lisbon in May.", "2026-03-02"),
    ("user", "Моя машина снова в ремонте, сломалась коробка передач", "2026-03-20"),
    ("assistant", "Сочувствую. Сколько стоит ремонт коробки?", "2026-03-20"),
    ("user", "我下周二要去看牙医，补牙", "2026-04-07"),
    ("assistant", "好的，我记下了：下周二看牙医。", "2026-04-07"),
    ("user", "What should I cook tonight?", "2026-04-16"),
    ("assistant", "How about a mushroom risotto?", "2026-04-16"),
]


def message(
    chat: str, n: int, role: str, text: str, day: str, kind: str | None = None
) -> _core.Message:
    return _core.Message(
        id=f"{chat}-{n:03d}",
        channel="telegram",
        chat_id=chat,
        role=role,
        content=text,
        created_at=f"{day}T10:{n:02d}:00Z",
        kind=kind,
    )


def store_talk(memory: Memory, chat: str, talk: list[tuple[str, str, str]] = TALK) -> None:
    memory.store.insert_messages([message(chat, n, *t) for n, t in enumerate(talk)])


def test_rounds_are_found_by_meaning_in_any_language_with_a_citation(memory: Memory) -> None:
    store_talk(memory, "telegram_1")
    assert memory.index_conversations() == 8  # four rounds: the user's words, the reply
    hits = memory.search_conversation("telegram_1", "проблемы с автомобилем")
    assert "коробка передач" in hits[0].content
    # The round comes back whole: the question and the reply that answered it.
    assert (
        hits[0].content.startswith("user: Моя машина")
        and "assistant: Сочувствую" in hits[0].content
    )
    assert hits[0].source == "chat:telegram_1"
    assert hits[0].citation == "chat:telegram_1 2026-03-20 msg telegram_1-002…telegram_1-003"
    assert (
        "Lisbon" in memory.search_conversation("telegram_1", "vacation plans Portugal")[0].content
    )
    assert "牙医" in memory.search_conversation("telegram_1", "看牙医")[0].content


def test_a_chat_never_finds_another_chats_past_nor_does_archival_search(memory: Memory) -> None:
    store_talk(memory, "telegram_1")
    store_talk(
        memory,
        "telegram_2",
        [
            ("user", "The garage code is 4711", "2026-03-01"),
            ("assistant", "Noted, garage code 4711.", "2026-03-01"),
        ],
    )
    memory.save("Lisbon trip budget is 900 euros")
    memory.index_conversations()
    own = memory.search_conversation("telegram_1", "garage code 4711", top_k=10)
    assert all(h.source == "chat:telegram_1" for h in own)
    assert not any("4711" in h.content for h in own)
    assert "4711" in memory.search_conversation("telegram_2", "garage code")[0].content
    # Archival search (memory_search) sees notes and saved facts, never chat rounds.
    archival = memory.search("Lisbon trip", top_k=10)
    assert archival and all(not h.source.startswith("chat:") for h in archival)
    assert not any("4711" in h.content for h in memory.search("garage code 4711", top_k=10))


def test_a_round_waits_for_its_reply_and_is_indexed_once(memory: Memory) -> None:
    chat = "telegram_1"
    memory.store.insert_messages(
        [message(chat, 0, "user", "Remind me: the boiler service is due", "2026-03-01")]
    )
    assert memory.index_conversations() == 0  # no reply yet: the round is still open
    memory.store.insert_messages(
        [
            message(chat, 1, "user", "/status", "2026-03-01", kind="command"),
            message(chat, 2, "assistant", "Boiler service noted for March.", "2026-03-01"),
        ]
    )
    assert memory.index_conversations() == 2  # the question and the reply, apart
    assert memory.index_conversations() == 0  # the watermark: nothing twice
    hit = memory.search_conversation(chat, "boiler")[0]
    assert "user: Remind me" in hit.content and "assistant: Boiler service" in hit.content
    assert "/status" not in hit.content  # commands are not memory
    # A later reply with no new question is a round of its own.
    memory.store.insert_messages(
        [message(chat, 3, "assistant", "A scheduled reminder: boiler!", "2026-03-02")]
    )
    assert memory.index_conversations() == 1
    assert len(memory.search_conversation(chat, "boiler", top_k=10)) == 2


def test_more_messages_than_one_batch(memory: Memory) -> None:
    chat = "telegram_9"
    rows = [
        _core.Message(
            id=f"{chat}-{n:05d}",
            channel="telegram",
            chat_id=chat,
            role="user" if n % 2 == 0 else "assistant",
            content=f"note {n} about topic{n % 11}",
            created_at="2026-01-05T10:00:00Z",
        )
        for n in range(1203)
    ]
    memory.store.insert_messages(rows)
    # 601 full rounds; the last user message (1202) has no reply yet.
    assert memory.index_conversations() == 1202  # a chunk for each side
    assert memory.index_conversations() == 0
    assert memory.stats()["memory_chunks"] >= 1202


def test_reindex_rebuilds_conversation_memory_from_the_logs(
    klaw_home: KlawPaths, backend: object
) -> None:
    d = klaw_home.conversations / "telegram_1"
    d.mkdir(parents=True)
    lines = [
        {
            "id": f"m{n}",
            "ts": f"{day}T09:00:0{n}Z",
            "role": role,
            "content": text,
            "meta": {"channel": "telegram", "chat_id": "1"},
        }
        for n, (role, text, day) in enumerate(TALK)
    ]
    (d / "2026-03-02.jsonl").write_text(
        "\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n"
    )
    report = rebuild(
        klaw_home, load_engine_config(klaw_home.engine_config), backend=backend, progress=False
    )  # type: ignore[arg-type]
    assert report.conversation_chunks == 8
    mem = Memory.open(
        paths=klaw_home, config=load_engine_config(klaw_home.engine_config), backend=backend
    )  # type: ignore[arg-type]
    try:
        hit = mem.search_conversation("telegram_1", "car gearbox repair")[0]
        assert "коробка" in hit.content and hit.citation.endswith("msg m2…m3")
        assert mem.index_conversations() == 0  # the rebuilt watermark is current
    finally:
        mem.close()


async def test_the_engine_indexer_works_in_the_background(memory: Memory) -> None:
    indexer = ConversationIndexer(
        memory.store, memory.backend, memory.cache, memory.config, delay_s=0
    )
    stop = asyncio.Event()
    task = asyncio.create_task(indexer.run(stop))
    await asyncio.wait_for(indexer.idle.wait(), 30)  # caught up (nothing to do)
    store_talk(memory, "telegram_1")
    indexer.notify("telegram_1")
    assert not indexer.idle.is_set()
    await asyncio.wait_for(indexer.idle.wait(), 60)
    assert indexer.indexed == 8
    assert "Lisbon" in memory.search_conversation("telegram_1", "Lisbon")[0].content
    stop.set()
    await asyncio.wait_for(task, 10)


def fixed(now: str) -> Callable[[], datetime]:
    return lambda: datetime.fromisoformat(now)


async def test_time_words_narrow_past_conversations(memory: Memory) -> None:
    store_talk(memory, "telegram_1")
    memory.index_conversations()
    # "Now" is Thursday 2026-04-23: last week = 13-19 April, last month = March.
    tool = ConversationSearch(memory, "telegram_1", fixed("2026-04-23T12:00:00+00:00"), "UTC")
    out = await tool.run({"query": "what did we talk about last week"})
    assert "risotto" in out and "Lisbon" not in out and "牙医" not in out
    out = await tool.run({"query": "о чём мы говорили в прошлом месяце"})
    assert "Lisbon" in out and "коробка" in out and "risotto" not in out
    out = await tool.run({"query": "上个月我们聊了什么"})
    assert "Lisbon" in out and "risotto" not in out
    # Nothing at that time: said so, and results from any date follow.
    out = await tool.run({"query": "what did we discuss last year"})
    assert out.startswith("Nothing from 'last year'") and "Lisbon" in out
    # Explicit bounds win over the words.
    out = await tool.run({"query": "last week", "since": "2026-03-01", "until": "2026-03-03"})
    assert "Lisbon" in out and "risotto" not in out


async def test_memory_search_puts_notes_of_that_time_first_but_keeps_undated_facts(
    memory: Memory,
) -> None:
    memory.save("Dentist: Dr. Novak, filling done", created_at="2026-03-10T09:00:00Z")
    memory.save("Dentist: Dr. Okafor, cleaning", created_at="2026-04-15T09:00:00Z")
    tool = MemorySearch(memory, fixed("2026-04-23T12:00:00+00:00"), "UTC")
    out = await tool.run({"query": "dentist visit last month"})
    first = out.split("\n\n")[0]
    assert "Novak" in first  # March first ...
    assert "Okafor" in out  # ... and the other still listed after it
    # Past messages are not reachable through memory_search, even by naming the source.
    with pytest.raises(ToolError, match="conversation_search"):
        await tool.run({"query": "x", "source": chat_source("telegram_1")})

"""Auto-recall (klaw.memory.recall): the entities a message names bring their page and
facts into the context, with no model call; through a real pipeline and the scripted
model, what was injected is in the request and in the turn's record."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

from klaw.config import EngineConfig
from klaw.config.engine import AutoRecallConfig
from klaw.engine.pipeline import Pipeline
from klaw.llm.router import Router
from klaw.memory import Memory
from klaw.memory.bank import PageFact, new_page, with_fact, write_page
from klaw.memory.recall import Recall
from klaw.paths import KlawPaths
from klaw.wire.protocol import Command, Error, Inbound, Outbound
from scripted_llm import FakeLLM, engine_config

T = 10.0

MARCH_2 = """# Monday

## Retain
- W(a=home) @Anna: Lives in Berlin, near Tempelhof.
- O(c=0.8) @Peter: Prefers concise replies on WhatsApp.
- B @Жоау: Helped me move the piano up to the fourth floor.
"""
MARCH_9 = "## Retain\n- W(a=home) @Anna: Moved to Lisbon with her cat.\n"


def _workspace(ws: Path) -> None:
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    (ws / "memory/2026-03-02.md").write_text(MARCH_2)
    (ws / "memory/2026-03-09.md").write_text(MARCH_9)


def _recall(ws: Path, **kw: object) -> Recall:
    return Recall(ws, AutoRecallConfig(similarity=False, **kw))  # type: ignore[arg-type]


def test_facts_are_recalled_by_their_mentions_before_any_page(tmp_path: Path) -> None:
    _workspace(tmp_path)
    got = _recall(tmp_path).for_messages(["How is Anna doing these days?"])
    assert got.tier == 1 and got.entities == ("Anna",)
    assert "Moved to Lisbon" in got.text
    # The newer fact about Anna's home replaces the older one.
    assert "Berlin" not in got.text
    assert got.items == ("memory/2026-03-09.md#L2",)
    assert 0 < got.tokens <= 600


def test_names_match_across_inflections_and_scripts_through_a_page(tmp_path: Path) -> None:
    _workspace(tmp_path)
    page = new_page("Anna")
    page.aliases = ["Анна", "安娜"]
    page.summary = "An old friend from university."
    write_page(tmp_path, page)
    recall = _recall(tmp_path)
    for message in ("Анной вчера говорили", "我昨天见了安娜", "Anna's cat is ill", "@anna"):
        got = recall.for_messages([message])
        assert got.entities == ("Anna",), message
        assert "bank/entities/anna.md" in got.items
        assert "An old friend" in got.text and "Lisbon" in got.text


def test_nothing_named_nothing_injected(tmp_path: Path) -> None:
    _workspace(tmp_path)
    recall = _recall(tmp_path)
    for message in ("hello", "what time is it?", "annals of history", ""):
        assert recall.for_messages([message]).text == "", message


def test_the_budget_holds(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    bullets = "\n".join(
        f"- W @Anna: Fact number {i} about Anna and her long day." for i in range(50)
    )
    (tmp_path / "memory/2026-03-02.md").write_text("## Retain\n" + bullets + "\n")
    got = _recall(tmp_path, max_tokens=80).for_messages(["Anna?"])
    assert 0 < got.tokens <= 80
    assert got.text.count("Fact number") >= 1


def test_superseded_facts_on_a_page_are_not_recalled(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory/2026-03-02.md").write_text("## Retain\n- W @Bo: Works at the bakery.\n")
    recall = _recall(tmp_path)
    fact = recall.known()[0].facts[0]
    page = new_page("Bo")
    page.history = [
        PageFact(fact.id, "2026-03-02", "W", fact.content, fact.citation, "2026-03-05", "x")
    ]
    write_page(
        tmp_path, with_fact(page, PageFact("x", "2026-03-05", "W", "Quit.", "memory/x.md#L1"))
    )
    recall.refresh()
    assert "bakery" not in recall.for_messages(["Bo called"]).text


def test_disabled_recalls_nothing(tmp_path: Path) -> None:
    _workspace(tmp_path)
    assert _recall(tmp_path, enabled=False).for_messages(["Anna?"]).text == ""


def test_similarity_finds_a_fact_no_name_points_to(memory: Memory, klaw_home: KlawPaths) -> None:
    ws = klaw_home.workspace
    _workspace(ws)
    memory.index_workspace()
    recall = Recall(ws, AutoRecallConfig(min_similarity=0.3), memory)
    got = recall.for_messages(["who helped me carry the piano upstairs to the fourth floor?"])
    assert got.tier == 2
    assert "memory/2026-03-02.md#L6" in got.items


async def test_the_turn_gets_the_block_and_its_record_names_it(
    tmp_path: Path, klaw_home: KlawPaths, memory: Memory, llm: FakeLLM
) -> None:
    _workspace(klaw_home.workspace)
    config = engine_config(tmp_path, llm.url, debounceMs=0)
    router = Router(config)
    pipeline = Pipeline(config, klaw_home, memory, router)
    sent: list[Outbound | Error] = []

    async def reply(out: Outbound | Error) -> None:
        sent.append(out)

    async def turn(n: int, text: str, chat: str = "telegram_1") -> str:
        llm.answer("ok")
        msg = Inbound(
            id=f"m{n}", channel="telegram", chat_id=chat, ts=datetime.now(UTC), content=text
        )
        await asyncio.wait_for(pipeline.handle(msg, reply), T)
        return str(llm.requests[-1]["messages"][0]["content"])

    try:
        system = await turn(1, "Did Anna like Lisbon?")
        assert "## Recalled From Memory" in system and "Moved to Lisbon" in system
        out = sent[-1]
        assert isinstance(out, Outbound)
        assert out.meta["recalled"] == ["memory/2026-03-09.md#L2"]
        # The stored reply row carries it too (what /memory shows).
        rows = memory.store.recent_messages("telegram_1", None, 5)
        meta = json.loads(next(r for r in rows if r.role == "assistant").metadata or "{}")
        assert meta["recalled"] == ["memory/2026-03-09.md#L2"]
        shown = await pipeline.commands.execute(
            Command(
                id="c1",
                channel="telegram",
                chat_id="telegram_1",
                ts=datetime.now(UTC),
                name="memory",
            ),
            "fake/m",
            "",
            duplicate=False,
        )
        assert "Auto-recall put into the last turn:\n- memory/2026-03-09.md#L2" in shown.content
        system = await turn(2, "thanks!")
        assert "Recalled From Memory" not in system
        assert "recalled" not in (sent[-1].meta if isinstance(sent[-1], Outbound) else {})
    finally:
        await pipeline.aclose()
        await router.aclose()


async def test_groups_get_no_recall(
    tmp_path: Path, klaw_home: KlawPaths, memory: Memory, llm: FakeLLM
) -> None:
    from klaw.wire.protocol import InboundMeta

    _workspace(klaw_home.workspace)
    config: EngineConfig = engine_config(tmp_path, llm.url, debounceMs=0)
    router = Router(config)
    pipeline = Pipeline(config, klaw_home, memory, router)

    async def reply(out: Outbound | Error) -> None:
        pass

    try:
        llm.answer("ok")
        msg = Inbound(
            id="g1",
            channel="telegram",
            chat_id="telegram_-100",
            ts=datetime.now(UTC),
            content="Anna is here",
            meta=InboundMeta(group=True, sender="x"),
        )
        await asyncio.wait_for(pipeline.handle(msg, reply), T)
        assert "Recalled From Memory" not in str(llm.requests[-1]["messages"][0]["content"])
    finally:
        await pipeline.aclose()
        await router.aclose()

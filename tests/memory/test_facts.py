"""Retained facts in klaw.db: indexed from daily logs, filtered by kind and entity with
line citations, superseded by newer facts, rebuilt equal by `klaw reindex`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from klaw.config import load_engine_config
from klaw.errors import InvalidInput
from klaw.memory import Memory
from klaw.memory.api import rebuild
from klaw.memory.facts import attribute_of, supersessions
from klaw.memory.retain import parse_retain
from klaw.paths import KlawPaths
from klaw.tools.memory_tools import MemorySearch


def write_log(paths: KlawPaths, day: str, text: str) -> Path:
    path = paths.workspace / "memory" / f"{day}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


BERLIN = """# 2026-01-10

Met Anna for coffee; she talked about her flat.

## Retain
- W @Anna: Anna lives in Berlin, in a flat near the Spree.
- O(c=0.9) @Anna: Anna prefers tea to coffee.
- B @Klaw: I booked the train tickets to Prague.
"""

LISBON = """# 2026-03-02

## Retain
- W @Anna: Anna moved to Lisbon in February and rents a flat in Alfama.
- W @Жоау: Жоау works at the harbour office.
"""


def rows(mem: Memory) -> list[tuple[Any, ...]]:
    """Every fact row without its chunk id (which a rebuild renumbers)."""
    return [
        (
            r.fact_id,
            r.kind,
            r.confidence,
            r.attribute,
            r.day,
            r.start_day,
            r.end_day,
            r.created_at,
            r.content,
            r.path,
            r.line,
            r.end_line,
            tuple(r.entities),
            r.superseded_by,
        )
        for r in mem.store.facts()
    ]


def test_facts_are_indexed_and_filtered_by_kind_and_entity_with_line_citations(
    memory: Memory,
) -> None:
    write_log(memory.paths, "2026-01-10", BERLIN)
    memory.index_workspace()
    facts = memory.store.facts()
    assert [(f.kind, f.line, f.entities) for f in facts] == [
        ("world", 6, ["Anna"]),
        ("opinion", 7, ["Anna"]),
        ("experience", 8, ["Klaw"]),
    ]
    assert facts[1].confidence == 0.9
    hits = memory.search("what does she drink", kind="opinion")
    assert [h.citation for h in hits] == ["memory/2026-01-10.md#L7-L7"]
    hits = memory.search("where does she live", entity="@anna")
    assert {h.citation for h in hits} == {
        "memory/2026-01-10.md#L6-L6",
        "memory/2026-01-10.md#L7-L7",
    }
    assert memory.search("tickets", kind="world", entity="Klaw") == []
    # A plain search returns the log's chunks, never the fact rows themselves.
    plain = memory.search("Anna lives in Berlin")
    assert plain and all(h.citation.startswith("memory/2026-01-10.md#L1-") for h in plain)
    with pytest.raises(InvalidInput, match="unknown fact kind"):
        memory.search("x", kind="gossip")


def test_entity_names_match_across_inflections_scripts_and_accents(memory: Memory) -> None:
    write_log(
        memory.paths,
        "2026-02-01",
        "## Retain\n- W @Анна: Анна купила велосипед.\n- W @João: João plays the guitar.\n"
        '- W @"张伟": 张伟 is learning to sail.\n- W @"Anna Schmidt": Anna Schmidt teaches.\n',
    )
    memory.index_workspace()

    def lines(entity: str) -> list[int]:
        return sorted(h.start_line or 0 for h in memory.search("что", entity=entity))

    assert lines("Анны") == [2]  # an inflected form meets the same stem
    assert lines("joao") == [3]  # accents folded
    assert lines("张伟") == [4]
    assert lines("Schmidt") == [5]
    assert lines("Nobody") == []


def test_a_newer_fact_supersedes_an_older_one_and_comes_first(
    memory: Memory, klaw_home: KlawPaths
) -> None:
    write_log(klaw_home, "2026-01-10", BERLIN)
    write_log(klaw_home, "2026-03-02", LISBON)
    memory.index_workspace()
    by_line = {(f.path, f.line): f for f in memory.store.facts()}
    berlin = by_line[("memory/2026-01-10.md", 6)]
    lisbon = by_line[("memory/2026-03-02.md", 4)]
    assert berlin.superseded_by == lisbon.fact_id
    assert lisbon.superseded_by is None
    assert by_line[("memory/2026-01-10.md", 7)].superseded_by is None  # tea: no home fact
    # Filtered: the newer fact first, the older kept as history.
    hits = memory.search("Anna lives in Berlin flat", entity="Anna")
    cites = [h.citation for h in hits]
    assert cites.index("memory/2026-03-02.md#L4-L4") < cites.index("memory/2026-01-10.md#L6-L6")
    # Unfiltered: the log chunk holding the old fact gets the newer fact above it.
    hits = memory.search("Anna lives in Berlin near the Spree", top_k=3)

    def holding(path: str, line: int) -> int:
        return next(
            i
            for i, h in enumerate(hits)
            if h.source == path and (h.start_line or 0) <= line <= (h.end_line or 0)
        )

    assert holding("memory/2026-03-02.md", 4) < holding("memory/2026-01-10.md", 6)
    # The same marks from the parsed bullets alone (what entity pages use).
    parsed = [
        f
        for day, text in (("2026-01-10", BERLIN), ("2026-03-02", LISBON))
        for f in parse_retain(text, f"memory/{day}.md")
    ]
    assert supersessions(parsed) == {berlin.fact_id: lisbon.fact_id}
    # Removing the newer log makes the old fact current again.
    (klaw_home.workspace / "memory" / "2026-03-02.md").unlink()
    memory.index_workspace()
    assert all(f.superseded_by is None for f in memory.store.facts())


async def test_memory_search_tool_takes_the_filters_and_says_what_is_superseded(
    memory: Memory, klaw_home: KlawPaths
) -> None:
    write_log(klaw_home, "2026-01-10", BERLIN)
    write_log(klaw_home, "2026-03-02", LISBON)
    memory.index_workspace()
    tool = MemorySearch(memory)
    out = await tool.run({"query": "where does Anna live", "entity": "Anna"})
    assert "memory/2026-03-02.md#L4-L4" in out
    assert "superseded by memory/2026-03-02.md#L4 (2026-03-02)" in out
    out = await tool.run({"query": "tea", "kind": "opinion"})
    assert out.count("[") >= 1 and "memory/2026-01-10.md#L7-L7" in out


def test_a_repeated_value_is_no_update() -> None:
    assert attribute_of("Anna lives in Berlin.", None) == "home"
    assert attribute_of("Anna works at the bakery.", None) == "job"
    assert attribute_of("Her favourite colour is green.", None) == "favourite colour"
    assert attribute_of("Anna likes tea.", None) is None
    assert attribute_of("anything", "home") == "home"


def test_the_same_value_said_again_supersedes_nothing(memory: Memory) -> None:
    write_log(memory.paths, "2026-01-10", "## Retain\n- W @Anna: Anna lives in Berlin.\n")
    write_log(memory.paths, "2026-02-10", "## Retain\n- W @Anna: Anna still lives in Berlin.\n")
    memory.index_workspace()
    assert [f.superseded_by for f in memory.store.facts()] == [None, None]


def test_reindex_rebuilds_equal_fact_rows(klaw_home: KlawPaths, backend: Any) -> None:
    write_log(klaw_home, "2026-01-10", BERLIN)
    write_log(klaw_home, "2026-03-02", LISBON)
    config = load_engine_config(klaw_home.engine_config)
    with Memory.open(paths=klaw_home, config=config, backend=backend) as mem:
        # One file at a time, the newer first: the marks must not depend on the order.
        mem.index_file(klaw_home.workspace / "memory" / "2026-03-02.md")
        mem.index_file(klaw_home.workspace / "memory" / "2026-01-10.md")
        before = rows(mem)
    assert any(r[-1] is not None for r in before)
    rebuild(klaw_home, config, backend=backend, progress=False)
    with Memory.open(paths=klaw_home, config=config, backend=backend) as mem:
        assert rows(mem) == before


def test_an_edit_replaces_the_facts_of_its_log(memory: Memory) -> None:
    path = write_log(memory.paths, "2026-01-10", BERLIN)
    memory.index_workspace()
    path.write_text(BERLIN.replace("- O(c=0.9) @Anna: Anna prefers tea to coffee.\n", ""))
    memory.index_workspace()
    assert [f.line for f in memory.store.facts()] == [6, 7]
    assert memory.search("tea", kind="opinion") == []
    path.write_text("# 2026-01-10\n\nNo retain section any more.\n")
    memory.index_workspace()
    assert memory.store.facts() == []
    assert memory.search("Berlin", entity="Anna") == []


def test_hostile_bullets_are_indexed_with_their_limits(memory: Memory) -> None:
    many = " ".join(f"@E{i}" for i in range(10_000))
    write_log(
        memory.paths,
        "2026-01-10",
        "## Retain\n"
        f"- W {many}: a crowd\n"
        "- O(c=2.5) @Anna: likes tea\n"
        '- W @"../../etc/passwd" @"..": a path trick\n'
        f"- W @Big: {'long ' * 100_000}\n",
    )
    report = memory.index_workspace()
    assert report.errors == []
    facts = memory.store.facts()
    assert len(facts) == 4
    assert len(facts[0].entities) == 16
    assert facts[1].confidence is None and facts[1].kind == "opinion"
    assert facts[2].entities == ["../../etc/passwd"]  # "..": no letter, no entity
    assert len(facts[3].content) <= 2000
    assert [h.start_line for h in memory.search("path trick", entity="etc passwd")] == [4]

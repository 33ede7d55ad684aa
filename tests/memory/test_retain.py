"""Retain bullets in daily logs: parsing (tolerant, hostile input) and appending."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from klaw.memory.retain import (
    MAX_ENTITIES,
    MAX_FACT_CHARS,
    RetainRefused,
    append_retain,
    entity_key,
    entity_slug,
    parse_bullet,
    parse_retain,
)

SOURCE = "memory/2026-02-24.md"

LOG = """# 2026-02-24

Owner prose with @NotRetained in it.

## Retain
- W @Peter: Currently in Marrakech (2025-11-27..2025-12-01) for Andy's birthday.
- B @warelay: I fixed the crash
  by wrapping the handlers in try/catch.
- O(c=0.95) @Peter: Prefers concise replies.
- W(a=home) @Anna: Moved to Lisbon yesterday.
- S: Planned the trip with @"Anna Schmidt" and @Жоау; mail anna@example.com.
- just a line without a prefix
```
- W @Code: inside a fence, no fact
```

## Other
- W @Later: another section, no fact
"""


def test_the_seed_format_is_read_with_kinds_entities_times_and_lines() -> None:
    facts = parse_retain(LOG, SOURCE)
    got = [(f.kind, f.entities, f.line, f.end_line) for f in facts]
    assert got == [
        ("world", ("Peter",), 6, 6),
        ("experience", ("warelay",), 7, 8),
        ("opinion", ("Peter",), 9, 9),
        ("world", ("Anna",), 10, 10),
        ("observation", ("Anna Schmidt", "Жоау"), 11, 11),
        (None, (), 12, 12),
    ]
    peter, warelay, opinion, anna, _obs, plain = facts
    assert (peter.start, peter.end) == ("2025-11-27", "2025-12-01")  # the range it names
    assert (warelay.start, warelay.end) == ("2026-02-24", "2026-02-24")  # the log's day
    assert warelay.content.endswith("by wrapping the handlers in try/catch.")
    assert opinion.confidence == 0.95
    assert anna.attribute == "home"
    assert (anna.start, anna.end) == ("2026-02-23", "2026-02-23")  # "yesterday" of the log
    assert plain.content == "just a line without a prefix"
    assert anna.citation == "memory/2026-02-24.md#L10"
    assert warelay.citation == "memory/2026-02-24.md#L7-L8"
    assert all(f.problem is None for f in facts)


def test_ids_are_stable_across_whitespace_case_and_an_archive_move() -> None:
    a = parse_bullet("W @Anna:  moved to Lisbon.", source=SOURCE, line=3)
    b = parse_bullet("w @anna: Moved   to LISBON.".replace("w @", "W @"), source=SOURCE, line=9)
    c = parse_bullet("W @Anna: moved to Lisbon.", source="memory/archive/2026-02-24.md", line=3)
    assert a.id == b.id == c.id
    other_day = parse_bullet("W @Anna: moved to Lisbon.", source="memory/2026-02-25.md", line=3)
    assert other_day.id != a.id


def test_a_bullet_written_twice_is_one_fact() -> None:
    text = "## Retain\n- W @A: same\n- W @A: same\n"
    assert [f.line for f in parse_retain(text, SOURCE)] == [2]


@pytest.mark.parametrize(
    ("bullet", "problem"),
    [
        ("O(c=high) @Peter: likes tea", "confidence 'high'"),
        ("O(c=1.5) @Peter: likes tea", "confidence '1.5'"),
        ("O(c=nan) @Peter: likes tea", "confidence 'nan'"),
        ("O(c=-0.1) @Peter: likes tea", "confidence '-0.1'"),
        ("O(x=1) @Peter: likes tea", "unknown option 'x=1'"),
    ],
)
def test_a_malformed_confidence_keeps_the_fact_and_names_the_problem(
    bullet: str, problem: str
) -> None:
    fact = parse_bullet(bullet, source=SOURCE, line=1)
    assert fact.kind == "opinion"
    assert fact.confidence is None
    assert fact.problem is not None and problem in fact.problem
    assert fact.content == "@Peter: likes tea"


def test_a_huge_bullet_is_cut_and_says_so() -> None:
    fact = parse_bullet("W @Big: " + "word " * 400_000, source=SOURCE, line=1)
    assert len(fact.content) <= MAX_FACT_CHARS
    assert fact.problem is not None and "cut at" in fact.problem


def test_ten_thousand_entities_keep_the_first_few() -> None:
    bullet = "W " + " ".join(f"@E{i}" for i in range(10_000)) + ": crowd"
    started = time.perf_counter()
    fact = parse_bullet(bullet, source=SOURCE, line=1)
    assert len(fact.entities) == MAX_ENTITIES
    assert fact.entities[0] == "E0"
    assert fact.problem is not None and "entities" in fact.problem
    assert time.perf_counter() - started < 30  # linear, not quadratic (generous)


@pytest.mark.parametrize(
    "name", ["../../etc/passwd", "..", "/etc/shadow", "a/../../b", "\x00x", "...", "C:\\x"]
)
def test_path_tricks_in_names_never_make_a_path(name: str) -> None:
    fact = parse_bullet(f'W @"{name}": tricky', source=SOURCE, line=1)
    for entity in fact.entities:
        slug = entity_slug(entity)
        assert slug and "/" not in slug and "\\" not in slug and "\x00" not in slug
        assert slug not in (".", "..") and not slug.startswith(".")
    # Unquoted, a mention starts with a letter or digit: `@../x` is no mention.
    assert parse_bullet("W @../../etc: x", source=SOURCE, line=1).entities == ()


def test_mentions_need_a_boundary_and_names_compare_loosely() -> None:
    fact = parse_bullet(
        "W @Anna: wrote to anna@example.com about @The-Castle.", source=SOURCE, line=1
    )
    assert fact.entities == ("Anna", "The-Castle")
    assert entity_key("João") == entity_key("joao")
    assert entity_key("The-Castle") == entity_key("the castle")


def test_append_creates_the_log_and_never_writes_the_same_fact_twice(tmp_path: Path) -> None:
    written = append_retain(tmp_path, "2026-02-24", ["W @Anna: Moved to Lisbon.", "  "])
    assert written == ["- W @Anna: Moved to Lisbon."]
    path = tmp_path / "memory" / "2026-02-24.md"
    assert path.read_text() == "# 2026-02-24\n\n## Retain\n\n- W @Anna: Moved to Lisbon.\n"
    assert append_retain(tmp_path, "2026-02-24", ["W @Anna:  moved to Lisbon."]) == []
    assert [f.kind for f in parse_retain(path.read_text(), SOURCE)] == ["world"]


def test_append_leaves_owner_text_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "memory" / "2026-02-24.md"
    path.parent.mkdir()
    owner = "# my day\n\n## Retain\n- W @Anna: lives in Berlin.\n\n## Later\nprose, no newline"
    path.write_text(owner)
    append_retain(tmp_path, "2026-02-24", ["W @Anna: lives in Berlin.", "- B @Bob: met."])
    text = path.read_text()
    assert text.startswith(owner)
    assert text[len(owner) :] == "\n\n## Retain\n\n- B @Bob: met.\n"
    append_retain(tmp_path, "2026-02-24", ["S: more"])  # the last section is Retain now
    assert path.read_text().endswith("- B @Bob: met.\n- S: more\n")
    assert [f.line for f in parse_retain(path.read_text(), SOURCE)] == [4, 11, 12]


def test_append_refuses_a_log_that_leads_out_of_the_workspace(tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("host file\n")
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    os.symlink(outside, ws / "memory" / "2026-02-24.md")
    with pytest.raises(RetainRefused, match=r"memory/2026-02-24\.md"):
        append_retain(ws, "2026-02-24", ["W @A: x"])
    assert outside.read_text() == "host file\n"
    ws2 = tmp_path / "ws2"
    ws2.mkdir()
    os.symlink(tmp_path, ws2 / "memory")
    with pytest.raises(RetainRefused, match="outside the workspace"):
        append_retain(ws2, "2026-02-25", ["W @A: x"])
    assert not (tmp_path / "2026-02-25.md").exists()
    with pytest.raises(ValueError):
        append_retain(ws, "../../etc/passwd", ["W @A: x"])

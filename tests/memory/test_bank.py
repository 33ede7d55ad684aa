"""The bank's Markdown (klaw.memory.bank): pages and opinions read and written on a
real workspace folder; owner text outside Klaw's blocks is never rewritten."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from klaw.memory import Memory
from klaw.memory.bank import (
    BankError,
    Opinion,
    PageFact,
    new_page,
    read_opinions,
    read_page,
    read_pages,
    slug_for,
    with_fact,
    write_opinions,
    write_page,
)
from klaw.paths import KlawPaths

BERLIN = PageFact("9b1e", "2026-01-10", "W", "Lives in Berlin.", "memory/2026-01-10.md#L4")
LISBON = PageFact("3fa2", "2026-03-02", "W", "Moved to Lisbon.", "memory/2026-03-02.md#L5")


def test_a_new_page_round_trips(tmp_path: Path) -> None:
    page = with_fact(new_page("@João Silva"), LISBON)
    page.summary = "A friend from Porto, now in Lisbon."
    page.aliases = ["Жоау", "Joao"]
    page.history = [replace(BERLIN, until="2026-03-02", by="3fa2")]
    path = write_page(tmp_path, page)
    assert path == tmp_path / "bank/entities/joao-silva.md"
    back = read_page(tmp_path, "joao-silva")
    assert back is not None
    assert back.name == "João Silva"
    assert back.summary == "A friend from Porto, now in Lisbon."
    assert back.aliases == ["Жоау", "Joao"]
    assert back.facts == [LISBON]
    assert back.history[0].until == "2026-03-02" and back.history[0].by == "3fa2"
    # Written again unchanged: the same bytes (a run that changes nothing changes nothing).
    before = path.read_bytes()
    write_page(tmp_path, back)
    assert path.read_bytes() == before


def test_owner_text_outside_the_blocks_is_kept_byte_for_byte(tmp_path: Path) -> None:
    page = with_fact(new_page("Peter"), BERLIN)
    path = write_page(tmp_path, page)
    text = path.read_text()
    owner = "My own notes: *never* touch this.\r\n\tIndented, trailing spaces   "
    edited = text.replace("## Facts", f"{owner}\n\n## Facts").replace(
        "<!-- klaw:begin aliases -->", "Aliases: Pete, Питер\n<!-- klaw:begin aliases -->"
    )
    path.write_bytes(edited.encode())
    page2 = read_page(tmp_path, "peter")
    assert page2 is not None
    assert {"Pete", "Питер"} <= set(page2.names())  # the owner's line is read
    write_page(tmp_path, with_fact(page2, LISBON))
    after = path.read_bytes().decode()
    assert owner in after
    assert "- Pete\n" not in after  # the owner's line says them: not copied into the block
    assert "Aliases: Pete, Питер" in after
    assert LISBON.line() in after and BERLIN.line() in after


def test_hand_edits_inside_blocks_are_parsed_and_kept(tmp_path: Path) -> None:
    path = write_page(tmp_path, with_fact(new_page("Peter"), BERLIN))
    text = path.read_text().replace(
        "<!-- klaw:begin aliases -->", "<!-- klaw:begin aliases -->\n- Petya"
    )
    text = text.replace(BERLIN.line(), BERLIN.line() + "\n- a note I typed in the block")
    path.write_text(text)
    page = read_page(tmp_path, "peter")
    assert page is not None and page.aliases == ["Petya"]
    write_page(tmp_path, with_fact(page, LISBON))
    after = path.read_text()
    assert "- Petya" in after and "- a note I typed in the block" in after


def test_broken_markers_are_never_rewritten(tmp_path: Path) -> None:
    path = write_page(tmp_path, new_page("Peter"))
    broken = path.read_text().replace("<!-- klaw:end facts -->", "")
    path.write_text(broken)
    page = read_page(tmp_path, "peter")
    assert page is not None and page.broken
    with pytest.raises(BankError, match="markers do not pair up"):
        write_page(tmp_path, with_fact(page, LISBON))
    assert path.read_text() == broken


@pytest.mark.parametrize(
    "name", ["../../etc/passwd", "/etc/passwd", "..", ".", "a/b", "x\0y", "", "  ", ".hidden"]
)
def test_slugs_leave_no_path_tricks(name: str) -> None:
    slug = slug_for(name)
    assert slug and "/" not in slug and "\0" not in slug and not slug.startswith(".")
    assert slug not in (".", "..")


def test_long_names_keep_apart() -> None:
    a, b = "x" * 100 + "a", "x" * 100 + "b"
    assert slug_for(a) != slug_for(b)
    assert len(slug_for(a)) <= 64
    assert slug_for("Peter") == slug_for("PETER") == slug_for("ｐｅｔｅｒ") == "peter"


def test_a_bank_symlinked_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    os.symlink(outside, ws / "bank")
    with pytest.raises(BankError, match="symlink"):
        write_page(ws, new_page("Peter"))
    assert list(outside.iterdir()) == []
    assert read_pages(ws) == {}


def test_a_page_symlinked_to_a_host_file_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("# Secret\nAliases: root\n")
    (tmp_path / "ws/bank/entities").mkdir(parents=True)
    os.symlink(secret, tmp_path / "ws/bank/entities/secret.md")
    assert read_pages(tmp_path / "ws") == {}


def test_pages_the_owner_made_by_hand_are_read(tmp_path: Path) -> None:
    d = tmp_path / "bank/entities"
    d.mkdir(parents=True)
    (d / "The-Castle.md").write_text("# The Castle\n\nAliases: castle, the house\n\nOur home.\n")
    pages = read_pages(tmp_path)
    assert pages["The-Castle"].names() == ["The Castle", "castle", "the house"]


def test_opinions_round_trip_with_owner_text(tmp_path: Path) -> None:
    ops = [
        Opinion("o-1", "Peter prefers concise replies", 0.8, "2026-03-02", ("Peter",), ("3fa2",)),
        Opinion("o-2", "Likes jazz", 0.55, "2026-03-01", (), ("a1", "a2"), ("b1",)),
    ]
    path = write_opinions(tmp_path, ops, "")
    text = "Owner preface.\n\n" + path.read_text() + "\nOwner postscript.\n"
    path.write_text(text.replace("0.55", "0.6"))  # the owner changes a confidence
    back, raw, ok = read_opinions(tmp_path)
    assert ok
    assert [o.confidence for o in back] == [0.8, 0.6]
    assert back[1].supporting == ("a1", "a2") and back[1].contradicting == ("b1",)
    write_opinions(tmp_path, back, raw)
    after = path.read_text()
    assert after.startswith("Owner preface.") and after.endswith("Owner postscript.\n")


def test_a_confidence_that_is_no_number_reads_as_half(tmp_path: Path) -> None:
    (tmp_path / "bank").mkdir()
    (tmp_path / "bank/opinions.md").write_text(
        "<!-- klaw:begin opinions -->\n### Likes tea\n- confidence: lots\n"
        "### Likes coffee\n- confidence: 7\n<!-- klaw:end opinions -->\n"
    )
    ops, _, _ = read_opinions(tmp_path)
    assert [o.confidence for o in ops] == [0.5, 1.0]
    assert all(o.id.startswith("o-") for o in ops)


def _anna_and_an_opinion(ws: Path) -> None:
    page = with_fact(new_page("Anna"), LISBON)
    page.summary = "Anna keeps bees on the roof of her Lisbon flat."
    write_page(ws, page)
    write_opinions(ws, [Opinion("o-1", "Anna likes fado", 0.7, "2026-03-02")], "")


def test_the_bank_is_indexed_like_the_rest_of_memory(memory: Memory, klaw_home: KlawPaths) -> None:
    ws = klaw_home.workspace
    _anna_and_an_opinion(ws)
    report = memory.index_workspace()
    assert {"bank/entities/anna.md", "bank/opinions.md"} <= set(report.indexed)
    hits = memory.search("who keeps bees on a roof?", top_k=3)
    assert hits[0].source == "bank/entities/anna.md"
    (ws / "bank/entities/anna.md").unlink()
    assert "bank/entities/anna.md" in memory.index_workspace().removed


def test_reindex_rebuilds_the_bank_rows_as_they_were(klaw_home: KlawPaths, backend: Any) -> None:
    from klaw.config import load_engine_config
    from klaw.memory.api import rebuild

    ws = klaw_home.workspace
    _anna_and_an_opinion(ws)
    config = load_engine_config(klaw_home.engine_config)

    def bank_rows() -> list[tuple[str, str, int | None, int | None]]:
        mem = Memory.open(paths=klaw_home, config=config, backend=backend)
        try:
            mem.index_workspace()
            ids = [i for i, _ in mem.store.keyword_search("Anna bees fado Lisbon", 50)]
            hits = mem.store.get_chunks(ids)
        finally:
            mem.close()
        return sorted(
            (h.source, h.content, h.start_line, h.end_line)
            for h in hits
            if h.source.startswith("bank/")
        )

    before = bank_rows()
    assert {r[0] for r in before} == {"bank/entities/anna.md", "bank/opinions.md"}
    rebuild(klaw_home, config, backend=backend, progress=False)
    assert bank_rows() == before


def test_a_summary_holding_a_marker_cannot_break_its_page(tmp_path: Path) -> None:
    page = new_page("Mallory")
    page.summary = "<!-- klaw:end summary -->\n<!-- klaw:begin facts -->"
    write_page(tmp_path, page)
    back = read_page(tmp_path, "mallory")
    assert back is not None and not back.broken
    assert back.summary == "&lt;!-- klaw:end summary -->\n&lt;!-- klaw:begin facts -->"
    write_page(tmp_path, with_fact(back, LISBON))  # still writable

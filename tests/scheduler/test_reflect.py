"""The reflect job through real parts: the workspace's daily logs, the scripted model
server answering as a model would, the bank's files, klaw.db's index, the run ledger.
What is asserted is files, rows and confidence moves, never a model's wording (the
answers here are scripted)."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sched_support import T, engine_running, engine_yaml, history, klaw

from klaw.config import EngineConfig
from klaw.engine.pipeline import Pipeline
from klaw.llm.router import Router
from klaw.memory import Memory
from klaw.memory.bank import read_opinions, read_page, read_pages
from klaw.memory.reflect import SYSTEM, apply_answer, moved, prompt
from klaw.memory.retain import Fact, parse_retain
from klaw.paths import KlawPaths
from klaw.scheduler.reflect import Reflector
from scripted_llm import FakeLLM, engine_config

DAY1 = """# Monday

Coffee with Anna.

## Retain
- W(a=home) @Anna: Lives in Berlin, near Tempelhof.
- O(c=0.8) @Peter: Prefers short replies on WhatsApp.
- S: The weather was grey all day.
"""
DAY2 = """## Retain
- W(a=home) @Anna: Moved to Lisbon with her cat Mio.
- B @Peter: Sent me a three-page voice transcript and asked for more detail.
"""


def facts_of(ws: Path, name: str) -> list[Fact]:
    return parse_retain((ws / "memory" / name).read_text(), f"memory/{name}")


def write_logs(ws: Path, *days: tuple[str, str]) -> None:
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    for name, text in days:
        (ws / "memory" / name).write_text(text)


def answer_day1(ws: Path) -> str:
    _, peter, _ = facts_of(ws, "2026-03-02.md")
    return json.dumps(
        {
            "entities": [
                {"name": "Anna", "summary": "A friend in Berlin.", "aliases": ["Анна", "Peter"]},
                {"name": "Nobody", "summary": "made up"},
            ],
            "opinions": [
                {"id": None, "statement": "Peter prefers short replies", "supports": [peter.id]},
                {"id": None, "statement": "Invented", "supports": ["0000deadbeef"]},
            ],
        }
    )


class Rig:
    """A real pipeline (the BackgroundTurns port) and a Reflector over it."""

    def __init__(self, config: EngineConfig, paths: KlawPaths, memory: Memory) -> None:
        self.router = Router(config)
        self.pipeline = Pipeline(config, paths, memory, self.router)
        self.reflector = Reflector(config, paths, memory, self.pipeline)

    async def close(self) -> None:
        await self.pipeline.aclose()
        await self.router.aclose()


@pytest.fixture
async def rig(tmp_path: Path, klaw_home: KlawPaths, memory: Memory, llm: FakeLLM) -> Any:
    r = Rig(engine_config(tmp_path, llm.url), klaw_home, memory)
    yield r
    await r.close()


def reflect_requests(llm: FakeLLM) -> list[Any]:
    return [r for r in llm.requests if r["messages"][0]["content"] == SYSTEM]


async def test_a_run_writes_pages_and_opinions_from_the_new_facts_only(
    rig: Rig, klaw_home: KlawPaths, memory: Memory, llm: FakeLLM
) -> None:
    ws = klaw_home.workspace
    write_logs(ws, ("2026-03-02.md", DAY1))
    llm.answer(answer_day1(ws))
    got = await rig.reflector.run()
    assert got.error is None and got.calls == 1 and got.tokens_in > 0 and got.tokens_out > 0
    anna = read_page(ws, "anna")
    assert anna is not None
    assert anna.summary == "A friend in Berlin."
    assert anna.aliases == ["Анна"]  # "Peter" names another entity: left out
    assert [f.text for f in anna.facts] == ["@Anna: Lives in Berlin, near Tempelhof."]
    assert anna.facts[0].source == "memory/2026-03-02.md#L6"
    assert set(read_pages(ws)) == {"anna", "peter"}  # no page for "Nobody"
    opinions, _, _ = read_opinions(ws)
    (opinion,) = opinions  # the invented fact id made nothing
    assert opinion.confidence == 0.8  # as the fact states it
    peter_fact = facts_of(ws, "2026-03-02.md")[1]
    assert opinion.supporting == (peter_fact.id,)
    assert any("Nobody" in d for d in got.dropped)
    # The bank is indexed.
    assert any(h.source == "bank/entities/anna.md" for h in memory.search("Anna Berlin", top_k=5))
    # Only what changed is sent: the grey weather (no entity) never, day 1 not again.
    sent = reflect_requests(llm)[0]["messages"][1]["content"]
    assert "Tempelhof" in sent and "grey" not in sent
    write_logs(ws, ("2026-03-09.md", DAY2))
    anna2, peter2 = facts_of(ws, "2026-03-09.md")
    llm.answer(
        json.dumps(
            {
                "entities": [{"name": "Anna", "summary": "A friend, now in Lisbon."}],
                "opinions": [
                    {"id": opinion.id, "contradicts": [peter2.id], "clear_contradiction": True}
                ],
            }
        )
    )
    got = await rig.reflector.run()
    sent = reflect_requests(llm)[1]["messages"][1]["content"]
    assert (
        "Lisbon" in sent
        and "Prefers short replies" not in sent.split("Opinions:")[0].split("New facts:")[-1]
    )
    anna = read_page(ws, "anna")
    assert anna is not None
    # Same attribute (home), newer day: Berlin is history with its date, not gone.
    assert [f.id for f in anna.facts] == [anna2.id]
    (old,) = anna.history
    assert old.text.endswith("Tempelhof.") and old.until == "2026-03-09" and old.by == anna2.id
    (opinion2,) = read_opinions(ws)[0]
    # One contradicting fact: a small step, however clear the model calls it.
    assert opinion2.confidence == 0.75 and opinion2.contradicting == (peter2.id,)
    # Nothing new: no model call, nothing written.
    before = (ws / "bank/entities/anna.md").read_bytes()
    calls = len(llm.requests)
    got = await rig.reflector.run()
    assert got.calls == 0 and len(llm.requests) == calls
    assert (ws / "bank/entities/anna.md").read_bytes() == before


async def test_hand_edits_survive_a_run(rig: Rig, klaw_home: KlawPaths, llm: FakeLLM) -> None:
    ws = klaw_home.workspace
    write_logs(ws, ("2026-03-02.md", DAY1))
    llm.answer(answer_day1(ws))
    await rig.reflector.run()
    page = ws / "bank/entities/anna.md"
    owner = "My notes: Anna hates early calls.\r\nDo not change this line.   \n"
    text = page.read_text().replace("## Facts", owner + "\n## Facts")
    text = text.replace("<!-- klaw:begin aliases -->", "<!-- klaw:begin aliases -->\n- Annie")
    page.write_bytes(text.encode())
    ops = ws / "bank/opinions.md"
    ops.write_text("My preface.\n\n" + ops.read_text().replace("0.80", "0.60"))
    write_logs(ws, ("2026-03-09.md", DAY2))
    _, peter2 = facts_of(ws, "2026-03-09.md")
    opinion = read_opinions(ws)[0][0]
    llm.answer(json.dumps({"opinions": [{"id": opinion.id, "supports": [peter2.id]}]}))
    await rig.reflector.run()
    after = page.read_bytes().decode()
    assert owner in after and "- Annie" in after
    assert "Moved to Lisbon" in after
    (op,) = read_opinions(ws)[0]
    assert op.confidence == 0.65  # from the owner's 0.60, one small step
    assert ops.read_text().startswith("My preface.")


async def test_a_bad_answer_writes_nothing_and_the_facts_stay_new(
    rig: Rig, klaw_home: KlawPaths, llm: FakeLLM
) -> None:
    ws = klaw_home.workspace
    write_logs(ws, ("2026-03-02.md", DAY1))
    llm.answer("Sure! Here are the updates: Anna lives in Berlin.")
    got = await rig.reflector.run()
    assert got.error is not None and "not JSON" in got.error
    assert not (ws / "bank").exists()
    llm.answer(answer_day1(ws))
    got = await rig.reflector.run()
    assert got.error is None and (ws / "bank/entities/anna.md").is_file()


async def test_a_run_killed_midway_leaves_files_whole_and_its_redo_ends_the_same(
    tmp_path: Path,
    rig: Rig,
    klaw_home: KlawPaths,
    llm: FakeLLM,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ws = klaw_home.workspace
    write_logs(ws, ("2026-03-02.md", DAY1))
    (ws / "bank/entities").mkdir(parents=True)
    (ws / "bank/entities/anna.md").write_text("# Anna\n\nOwner's page.\n")
    real_replace = os.replace
    calls = 0

    def killed(src: Any, dst: Any, **kw: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:  # the second file of the run: the process dies here
            raise KeyboardInterrupt
        real_replace(src, dst, **kw)

    llm.answer(answer_day1(ws))
    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        await rig.reflector.run()
    monkeypatch.setattr(os, "replace", real_replace)
    # Every file is whole: parsed, no temp files left, the owner's text there.
    left = sorted(p.name for p in (ws / "bank").rglob("*"))
    assert not [n for n in left if n.endswith(".tmp")]
    for page in read_pages(ws).values():
        assert not page.broken
    assert "Owner's page." in (ws / "bank/entities/anna.md").read_text()
    state = rig.reflector.load_state()
    assert state["running"]["attempt"] == 1 and state["reflected"] == []
    # The redo (the engine's next start runs it) ends where one clean run ends.
    llm.answer(answer_day1(ws))
    got = await rig.reflector.run()
    assert got.error is None
    assert rig.reflector.load_state()["running"] is None
    redone = {p.name: p.read_text() for p in (ws / "bank").rglob("*.md")}
    clean_ws = tmp_path / "clean"
    write_logs(clean_ws, ("2026-03-02.md", DAY1))
    (clean_ws / "bank/entities").mkdir(parents=True)
    (clean_ws / "bank/entities/anna.md").write_text("# Anna\n\nOwner's page.\n")
    clean_home = replace(klaw_home, workspace=clean_ws, data_dir=tmp_path / "clean-data")
    clean = Reflector(rig.reflector.config, clean_home, None, rig.pipeline)
    llm.answer(answer_day1(ws))
    await clean.run()
    assert {p.name: p.read_text() for p in (clean_ws / "bank").rglob("*.md")} == redone


def test_confidence_moves_in_small_steps_unless_a_clear_contradiction_repeats() -> None:
    assert moved(0.8, new_support=1, new_contra=0, all_support=2, all_contra=0, clear=False) == 0.85
    assert moved(0.8, new_support=5, new_contra=0, all_support=6, all_contra=0, clear=False) == 0.9
    assert moved(0.95, new_support=3, new_contra=0, all_support=3, all_contra=0, clear=True) == 1.0
    # Clear but alone: small.
    assert moved(0.8, new_support=0, new_contra=1, all_support=1, all_contra=1, clear=True) == 0.75
    # Repeated but not called clear: small.
    assert moved(0.8, new_support=0, new_contra=3, all_support=1, all_contra=3, clear=False) == 0.7
    # Clear, repeated, outnumbering: a large step, at most 0.3.
    assert moved(0.8, new_support=0, new_contra=2, all_support=1, all_contra=2, clear=True) == 0.5
    assert moved(0.8, new_support=0, new_contra=5, all_support=0, all_contra=5, clear=True) == 0.5
    # Clear, repeated, but the support is as large: small.
    assert moved(0.8, new_support=0, new_contra=2, all_support=2, all_contra=2, clear=True) == 0.7


def test_evidence_already_listed_moves_nothing_again(tmp_path: Path) -> None:
    write_logs(tmp_path, ("2026-03-02.md", DAY1))
    _, peter, _ = facts_of(tmp_path, "2026-03-02.md")
    from klaw.memory.bank import Opinion

    op = Opinion("o-1", "Peter prefers short replies", 0.8, "2026-03-02", ("Peter",), (peter.id,))
    answer = {"opinions": [{"id": "o-1", "supports": [peter.id]}]}
    out = apply_answer(
        answer, touched=[], opinions=[op], new=[peter], known={peter.id: peter}, today="2026-03-03"
    )
    assert out.opinions == [op] and not out.opinions_changed


async def test_the_nightly_job_is_scheduled_quiet_when_nothing_is_new_and_redone_after_a_kill(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    ws = klaw_home.workspace
    write_logs(ws, ("2026-03-02.md", DAY1))
    # A run that a kill interrupted (its state, as the killed run left it).
    state = klaw_home.memory_dir / "reflect.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"reflected": [], "running": {"attempt": 1, "started": "x"}}))
    llm.answer(answer_day1(ws))
    async with engine_running(klaw_home, backend):

        async def ok_runs() -> list[dict[str, Any]]:
            return [r for r in await history("reflect") if r["status"] == "ok"]

        async def wait_runs(n: int, status: str) -> None:
            while sum(r["status"] == status for r in await history("reflect")) < n:
                await asyncio.sleep(0.1)

        await asyncio.wait_for(wait_runs(1, "ok"), T)  # redone at start
        assert (ws / "bank/entities/anna.md").is_file()
        (run,) = await ok_runs()
        assert run["tokensIn"] > 0 and run["tokensOut"] > 0
        rc, out, err = await klaw("schedule", "list", "--json")
        assert rc == 0, err
        (job,) = [j for j in json.loads(out)["jobs"] if j["name"] == "reflect"]
        assert job["kind"] == "reflect" and job["cron"] == "0 0 4 * * ?"
        calls = len(llm.requests)
        rc, _, err = await klaw("schedule", "run", "reflect")
        assert rc == 0, err
        await asyncio.wait_for(wait_runs(1, "quiet"), T)
        assert len(llm.requests) == calls  # nothing new: no model call
        rc, _, err = await klaw("schedule", "add", "reflect", "0 8 * * *", "x")
        assert rc == 1 and "kept for the bank" in err
    assert json.loads(state.read_text())["running"] is None


def test_short_ids_in_the_answer_are_read_back_and_made_up_ones_dropped(tmp_path: Path) -> None:
    write_logs(tmp_path, ("2026-03-02.md", DAY1), ("2026-03-09.md", DAY2))
    berlin, peter, _ = facts_of(tmp_path, "2026-03-02.md")
    lisbon, _ = facts_of(tmp_path, "2026-03-09.md")
    anna = [("Anna", None, [berlin, lisbon])]
    text = prompt("2026-03-10", anna, [], [])
    assert f"[{berlin.id[:6]}]" in text and berlin.id not in text  # a third of the tokens
    answer = {
        "entities": [
            {"name": "Anna", "superseded": [{"old": berlin.id[:6], "new": lisbon.id[:6]}]}
        ],
        "opinions": [
            {"id": None, "statement": "x", "supports": [peter.id[:6], "abcdef", "12"]},
        ],
    }
    known = {f.id: f for f in (berlin, lisbon, peter)}
    out = apply_answer(
        answer, touched=anna, opinions=[], new=[berlin, lisbon, peter], known=known, today="t"
    )
    (page,) = out.pages.values()
    assert [f.id for f in page.facts] == [lisbon.id] and page.history[0].by == lisbon.id
    (op,) = out.opinions
    assert op.supporting == (peter.id,)


async def test_hostile_names_make_pages_inside_the_bank_only(
    tmp_path: Path, rig: Rig, klaw_home: KlawPaths, llm: FakeLLM
) -> None:
    ws = klaw_home.workspace
    many = " ".join(f"@n{i}" for i in range(10_000))
    write_logs(
        ws,
        (
            "2026-03-02.md",
            '## Retain\n- W @"../../../tmp/evil": a path.\n- W @".." and @"a/b\\\\c": dots.\n'
            f"- W {many}: ten thousand names.\n",
        ),
    )
    names = ["../../../tmp/evil", "..", "a/b\\c", *(f"n{i}" for i in range(20))]
    llm.answer(json.dumps({"entities": [{"name": n, "summary": "x"} for n in names]}))
    got = await rig.reflector.run()
    assert got.error is None
    made = sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*") if p.is_file())
    pages = [m for m in made if m.startswith("bank/")]
    assert all(m.startswith("bank/entities/") and m.count("/") == 2 for m in pages)
    assert not any(part.startswith(".") for m in pages for part in m.split("/"))
    assert "bank/entities/tmp-evil.md" in pages and "bank/entities/n0.md" in pages
    assert len(pages) <= 3 + 16  # the facts keep 16 of 10,000 names (klaw.memory.retain)
    assert not (tmp_path / "evil").exists() and not Path("/tmp/evil").exists()

"""Prompt tokens per turn that memory costs, after a year (issue 25 items 6, 10).

A workspace of a year of daily logs holding 2,000 retained facts about 300 people, a
bank page for each and 60 opinions, a MEMORY.md grown by a year of durable facts (40
curated lines and 183 written back), persona files of OpenClaw's template sizes and
core memory. For 40 user messages, each naming one or two of those people: the system
prompt's memory parts (persona files, core memory, MEMORY.md, auto-recall) as
`assemble_context` builds them with engine.yaml's defaults (memory.prompt: MEMORY.md's
share 1200, all of it 5000; auto-recall tier 1, 600) in a 32k context, beside what
injecting MEMORY.md and the bank whole costs (what peers do). The time to assemble a
turn is what pytest-benchmark reports for each; the tokens are in `extra_info` and
printed.

Bar: Klaw's memory parts stay within memory.prompt.maxTokens on every turn, and the
whole-file injection costs at least 10 times more.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from klaw.config import load_engine_config
from klaw.engine.context import ContextInput, assemble_context, model_limits
from klaw.memory.bank import Opinion, PageFact, new_page, render_opinions, with_fact, write_page
from klaw.memory.recall import Recall
from klaw.memory.rows import count_tokens_batch
from smoke import SMOKE, scaled

FACTS = scaled(2000, 200)
DAYS = 365
FIRST = "Anna Boris Chen Dana Emil Farah Greta Hugo Ines Jonas Kira Luca Mira Nils Olga".split()
LAST = "Berg Costa Dietz Engel Fuchs Gold Haas Igel Jung Klein Lang Moser Novak Ott Pohl".split()
PEOPLE = [f"{f} {ln}" for f in FIRST for ln in LAST][: scaled(300, 40)]
PERSONA = {"SOUL.md": 420, "IDENTITY.md": 195, "AGENTS.md": 2000, "TOOLS.md": 220, "USER.md": 140}
MESSAGES = scaled(40, 5)
MEMORY_PARTS = ("SOUL.md", "IDENTITY.md", "AGENTS.md", "TOOLS.md", "USER.md", "core_memory")


def _filler(tokens: int, rng: random.Random) -> str:
    """Prose of about `tokens` tokens by Klaw's counter."""
    words = "the owner likes clear short answers and careful notes about plans".split()
    out: list[str] = []
    while count_tokens_batch([" ".join(out)])[0] < tokens:
        out.extend(rng.choice(words) for _ in range(20))
    return " ".join(out)


@pytest.fixture(scope="module")
def year(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = random.Random(25)
    ws = tmp_path_factory.mktemp("year-ws")
    for name, tokens in PERSONA.items():
        (ws / name).write_text(f"# {name}\n\n{_filler(tokens, rng)}\n")
    (ws / "memory").mkdir()
    start = date(2025, 11, 27)
    per_day: dict[int, list[str]] = {}
    pages = {p: new_page(p) for p in PEOPLE}
    for i in range(FACTS):
        d = rng.randrange(DAYS)
        who = rng.choice(PEOPLE)
        kind = rng.choice("WWWBBO")
        prefix = "O(c=0.7)" if kind == "O" else kind
        text = f'@"{who}" {rng.choice(["moved to", "visited", "likes", "works on"])} thing {i}'
        per_day.setdefault(d, []).append(f"- {prefix} {text}.")
        day = (start + timedelta(days=d)).isoformat()
        line = 5 + len(per_day[d])
        fact = PageFact(f"{i:08x}", day, kind, text, f"memory/{day}.md#L{line}")
        pages[who] = with_fact(pages[who], fact)
    for d in range(DAYS):
        day = (start + timedelta(days=d)).isoformat()
        body = "\n".join(per_day.get(d, []))
        (ws / "memory" / f"{day}.md").write_text(
            f"# {day}\n\n- 09:00 a note of the day\n\n## Retain\n{body}\n"
        )
    for page in pages.values():
        write_page(ws, page)
    opinions = [
        Opinion(f"o{i}", f"{rng.choice(PEOPLE)} prefers option {i}", 0.6, "2026-11-01")
        for i in range(60)
    ]
    (ws / "bank" / "opinions.md").write_text(render_opinions(opinions))
    curated = "".join(f"- A curated note of the owner's, number {i}.\n" for i in range(40))
    durable = "".join(f"- A durable fact written back on day {i}.\n" for i in range(0, DAYS, 2))
    (ws / "MEMORY.md").write_text(f"# MEMORY.md\n\n{curated}\n## Written back\n\n{durable}")
    return ws


def _messages() -> list[str]:
    rng = random.Random(7)
    out = []
    for _ in range(MESSAGES):
        named = rng.sample(PEOPLE, rng.choice((1, 2)))
        out.append(f"What do you remember about {' and '.join(named)}? We meet tomorrow.")
    return out


CONFIG = load_engine_config(Path("/nonexistent/engine.yaml"))  # the defaults
# memory.prompt's defaults, in a 32k context with a 4k reply: the context budget cuts
# nothing here (the default model's 12k with maxTokens 8192 leaves 2.6k for all input).
LIMITS = replace(
    model_limits(CONFIG, CONFIG.routing.default), context_budget=32_000, max_tokens=4096
)


def _klaw_turn(ws: Path, recall: Recall, message: str) -> dict[str, int]:
    limits = LIMITS
    recalled = recall.for_messages([message]).text
    ctx = assemble_context(
        ContextInput.from_limits(
            limits,
            workspace=ws,
            core_memory="User:\n- name: Mara\n- city: Prague\n- job: nurse",
            summary=None,
            window=[],
            now=datetime(2026, 11, 27, 9, 0, tzinfo=UTC),
            channel="telegram",
            recalled=recalled,
        )
    )
    return ctx.report.tokens


def _whole(ws: Path) -> int:
    texts = [(ws / name).read_text() for name in PERSONA]
    texts.append((ws / "MEMORY.md").read_text())
    texts += [p.read_text() for p in sorted((ws / "bank").rglob("*.md"))]
    texts.append("User:\n- name: Mara\n- city: Prague\n- job: nurse")
    return sum(count_tokens_batch(texts))


RESULTS: dict[str, list[int]] = {}


@pytest.mark.benchmark(group="prompt-memory-year")
def test_prompt_memory_klaw(benchmark: Any, year: Path) -> None:
    cfg = CONFIG
    recall = Recall(year, cfg.memory.auto_recall, None)
    recall.refresh()  # what it knows, read now (an engine reads it in the background)
    messages = _messages()
    totals = []
    for m in messages:
        tokens = _klaw_turn(year, recall, m)
        memory = sum(tokens.get(k, 0) for k in (*MEMORY_PARTS, "MEMORY.md", "recall"))
        assert tokens.get("recall", 0) > 0, m  # the people named are recalled
        totals.append(memory)
        parts = {k: tokens.get(k, 0) for k in (*MEMORY_PARTS, "MEMORY.md", "recall")}
    RESULTS["klaw"] = totals
    it = iter(messages * 1000)
    benchmark(lambda: _klaw_turn(year, recall, next(it)))
    benchmark.extra_info["memory_tokens_p50"] = statistics.median(totals)
    benchmark.extra_info["memory_tokens_max"] = max(totals)
    print(f"\nklaw: memory prompt tokens p50 {statistics.median(totals)}, max {max(totals)}")
    print(f"klaw: the last turn's parts {parts}")
    if not SMOKE:
        assert max(totals) <= cfg.memory.prompt.max_tokens + 100  # section headings


@pytest.mark.benchmark(group="prompt-memory-year")
def test_prompt_memory_whole_files(benchmark: Any, year: Path) -> None:
    whole = benchmark(_whole, year)
    benchmark.extra_info["memory_tokens"] = whole
    print(f"\nwhole MEMORY.md and bank: {whole} tokens every turn")
    klaw = RESULTS.get("klaw")
    if klaw and not SMOKE:
        assert whole >= 10 * statistics.median(klaw)

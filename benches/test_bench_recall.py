"""Auto-recall per turn, and the reflect job's tokens per day of logs (issue 25 item 10).

A workspace of a year: 2,000 entity pages (`bank/entities/`, each a summary and ten
facts) and 20,000 retained facts in 365 daily logs, indexed in a real klaw.db (its
chunks carry random unit vectors: the scan costs the same whatever the numbers; the
message is embedded by the real model). Bars: auto-recall p50 ≤ 10 ms per turn with
no model call; a message naming nothing known costs microseconds (tier 1 only).
Beside it, in the same run: `memory_search` for the same message (what the model
would have to ask for with a tool call), and a turn with memory empty.

Reflect: the prompt of one night for one day of logs (its ~55 new facts and the pages
they touch), in tokens, against sending that day's logs and those pages whole.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from klaw import _core
from klaw.config import EngineConfig
from klaw.config.engine import AutoRecallConfig
from klaw.memory.api import Memory
from klaw.memory.bank import PageFact, new_page, render_page, write_page
from klaw.memory.logfacts import FactFiles
from klaw.memory.recall import Recall
from klaw.memory.reflect import SYSTEM, prompt
from klaw.paths import KlawPaths
from smoke import SMOKE, scaled

#: Building the year's klaw.db is one indexed file at a time (~0.1 s each here: 2,365).
pytestmark = pytest.mark.timeout(1800)

PAGES = scaled(2_000, 200)
DAYS = scaled(365, 30)
FACTS = scaled(20_000, 2_000)
FIRST = [
    "Anna",
    "Peter",
    "João",
    "Mira",
    "Oleg",
    "Lena",
    "Tomás",
    "Yuki",
    "Ravi",
    "Sofia",
    "Ines",
    "Karl",
    "Noor",
    "Emil",
    "Zofia",
    "Hugo",
    "Aiko",
    "Lars",
    "Dana",
    "Omar",
]
LAST = [
    f"{a}{b}"
    for a in ("Ber", "Kos", "Val", "Mor", "Tan", "Lin", "Dub", "Sch", "Pav", "Fer")
    for b in ("ger", "ova", "ez", "ris", "aka", "dqvist", "ois", "midt", "lov", "reira")
]
VERBS = [
    "moved to",
    "started working at",
    "booked a trip to",
    "bought a flat in",
    "joined a choir in",
    "is learning Portuguese in",
    "opened a bakery in",
]
PLACES = ["Lisbon", "Berlin", "Porto", "Kyoto", "Tbilisi", "Prague", "Oslo", "Valencia"]
MESSAGES_NAMED = [
    "How is {n} doing these days?",
    "Remind me what {n} told me about the new job",
    "I'm meeting {n} tomorrow, anything I should remember?",
]
MESSAGES_PLAIN = [
    "hi!",
    "thanks, that helps",
    "what's the weather like tomorrow morning?",
    "can you summarise this article for me please",
]


def _names() -> list[str]:
    return [f"{f} {last}" for last in LAST for f in FIRST][:PAGES]


@pytest.fixture(scope="module")
def year(tmp_path_factory: pytest.TempPathFactory) -> tuple[KlawPaths, list[str]]:
    """The workspace (pages and logs) and the names of its entities."""
    root = tmp_path_factory.mktemp("recall")
    paths = KlawPaths(root / "c", root / "d", root / "s", root / "k", root / "ws")
    ws = paths.workspace
    (ws / "memory").mkdir(parents=True)
    rng = random.Random(7)
    names = _names()
    days = [f"2025-{1 + d // 31 % 12:02d}-{1 + d % 28:02d}" for d in range(DAYS)]
    days = sorted(set(days))
    per_day: dict[str, list[str]] = {d: [] for d in days}
    facts_of: dict[str, list[PageFact]] = {n: [] for n in names}
    for i in range(FACTS):
        name = names[i % len(names)]
        day = days[rng.randrange(len(days))]
        text = f"@{name.replace(' ', '_')}: {rng.choice(VERBS)} {rng.choice(PLACES)} (note {i})."
        per_day[day].append(f"- W {text}")
    for day, bullets in per_day.items():
        (ws / "memory" / f"{day}.md").write_text(
            f"# {day}\n\nA day.\n\n## Retain\n" + "\n".join(bullets) + "\n"
        )
    for facts in FactFiles(ws).read().values():
        for f in facts:
            for e in f.entities:
                facts_of.setdefault(e.replace("_", " "), []).append(
                    PageFact(f.id, f.day or "?", "W", f.content, f.citation)
                )
    for name in names:
        page = new_page(name)
        first, last = name.split()
        page.aliases = [f"{first[:3]}{last}"]  # a nickname of its own
        page.summary = f"{name} is a friend; last heard of in {rng.choice(PLACES)}."
        page.facts = facts_of.get(name, [])[:10]
        write_page(ws, page)
    return paths, names


@pytest.fixture(scope="module")
def memory(year: tuple[KlawPaths, list[str]], backend: Any) -> Any:
    """A real klaw.db holding the year's files as chunks (random unit vectors)."""
    paths, _ = year
    paths.data_dir.mkdir(parents=True, exist_ok=True)
    paths.cache_dir.mkdir(parents=True, exist_ok=True)
    config = EngineConfig()
    store = _core.Store(str(paths.data_dir / "klaw.db"), dim=backend.dim, threads=2)
    cache = _core.EmbeddingCache(str(paths.cache_dir / "embeddings.db"))
    rng = np.random.default_rng(3)
    files = sorted((paths.workspace / "memory").glob("*.md")) + sorted(
        (paths.workspace / "bank/entities").glob("*.md")
    )
    for path in files:
        label = path.relative_to(paths.workspace).as_posix()
        chunks = _core.chunk_markdown(path.read_text(), 400, 80)
        new = [
            _core.NewChunk(
                content=c.text,
                chunk_hash=h,
                start_line=c.start_line,
                end_line=c.end_line,
                heading=None,
            )
            for c, h in zip(chunks, _core.text_hashes([c.text for c in chunks]), strict=True)
        ]
        vecs = rng.standard_normal((len(new), backend.dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        store.replace_file(label, label, label, 0.0, 0, "2025-06-01T00:00:00Z", new, vecs.tobytes())
    mem = Memory(store, backend, cache, paths, config)
    yield mem
    mem.close()


def _messages(names: list[str]) -> list[str]:
    rng = random.Random(5)
    named = [
        rng.choice(MESSAGES_NAMED).format(
            n=rng.choice(names).split()[0] + " " + rng.choice(names).split()[1]
        )
        for _ in range(30)
    ]
    return [m for pair in zip(named, itertools.cycle(MESSAGES_PLAIN)) for m in pair]


def _p50(benchmark: Any) -> float:
    stats = benchmark.stats.stats if benchmark.stats else None
    return float(stats.median) if stats else 0.0


@pytest.fixture(scope="module")
def recall(year: Any, memory: Any) -> Recall:
    """Auto-recall over the year, built once (the first read parses 20,000 bullets)."""
    paths, _ = year
    r = Recall(paths.workspace, AutoRecallConfig(), memory)
    r.refresh()
    assert len(r.known()) >= PAGES
    return r


@pytest.mark.benchmark(group="auto-recall")
def test_auto_recall_klaw(benchmark: Any, year: Any, recall: Recall) -> None:
    """Tiers 1 and 2 (the message embedded, the index scanned), under 600 tokens."""
    _, names = year
    msgs = itertools.cycle(_messages(names))
    got = benchmark(lambda: recall.for_messages([next(msgs)]))
    assert got.tokens <= 600
    named = recall.for_messages(["How is Anna Berger doing these days?"])
    assert "Anna Berger" in named.entities and named.tokens <= 600
    benchmark.extra_info["known_entities"] = len(recall.known())
    benchmark.extra_info["tokens_named"] = named.tokens
    if not SMOKE:
        assert _p50(benchmark) <= 0.010


@contextlib.contextmanager
def _names_only(recall: Recall) -> Iterator[None]:
    """`recall` with memory.autoRecall.similarity false for the block."""
    config, recall.config = recall.config, AutoRecallConfig(similarity=False)
    try:
        yield
    finally:
        recall.config = config


@pytest.mark.benchmark(group="auto-recall")
def test_auto_recall_names_only(benchmark: Any, year: Any, recall: Recall) -> None:
    """Tier 1 alone (memory.autoRecall.similarity: false): no model at all."""
    _, names = year
    msgs = itertools.cycle(_messages(names))
    with _names_only(recall):
        benchmark(lambda: recall.for_messages([next(msgs)]))


@pytest.mark.benchmark(group="auto-recall")
def test_auto_recall_nothing_named(benchmark: Any, recall: Recall) -> None:
    """Tier 1 on a message naming nothing known: what a turn costs with similarity off
    (with it on, a message of three words or more also costs one query embedding)."""
    msgs = itertools.cycle(MESSAGES_PLAIN)
    with _names_only(recall):
        got = benchmark(lambda: recall.for_messages([next(msgs)]))
    assert got.text == ""
    if not SMOKE:
        assert _p50(benchmark) <= 0.0002


@pytest.mark.benchmark(group="auto-recall")
def test_auto_recall_empty_memory(benchmark: Any, tmp_path: Path) -> None:
    """No bank, no facts: the engine-overhead case."""
    recall = Recall(tmp_path, AutoRecallConfig())
    got = benchmark(lambda: recall.for_messages(["How is Anna Berger doing these days?"]))
    assert got.text == ""
    if not SMOKE:
        assert _p50(benchmark) <= 0.00005


@pytest.mark.benchmark(group="auto-recall")
def test_memory_search_baseline(benchmark: Any, year: Any, memory: Any) -> None:
    """Baseline: one hybrid memory search per message (a tool call's search)."""
    _, names = year
    msgs = itertools.cycle(_messages(names))
    benchmark(lambda: memory.search(next(msgs), top_k=5))


@pytest.mark.benchmark(group="reflect-tokens")
def test_reflect_tokens_per_day_of_logs(benchmark: Any, year: Any) -> None:
    """One night's prompt for one day of logs, against that day's logs and the pages
    it touches sent whole (extra_info: tokens of each)."""
    paths, _ = year
    ws = paths.workspace
    from klaw.memory.bank import read_pages
    from klaw.scheduler.reflect import _touched

    by_source = FactFiles(ws).read()
    day, facts = max(by_source.items(), key=lambda kv: len(kv[1]))
    pages = read_pages(ws)

    def build() -> str:
        touched = _touched(facts, pages)
        return SYSTEM + prompt("2026-01-01", touched, [], [])

    text = benchmark(build)
    touched = _touched(facts, pages)
    whole = (ws / day).read_text() + "".join(render_page(p) for _, p, _ in touched if p)
    ours, naive = _core.count_tokens_batch([text, whole])
    benchmark.extra_info.update(
        {"facts": len(facts), "pages": len(touched), "tokens": ours, "tokens_whole": naive}
    )
    per_fact = statistics.mean([ours / max(1, len(facts))])
    benchmark.extra_info["tokens_per_fact"] = round(per_fact, 1)
    assert ours < naive

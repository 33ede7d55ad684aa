"""Retained facts (issue 25 item 10): filtered search latency and index growth.

A year of daily logs (365 files, each one chunk) with 20,000 facts about 2,000
entities (10 each, four kinds), in a real `_core.Store` with random unit vectors
(384 dims; the query embedding is not what is measured here, see test_bench_search).

- filtered search: `fact_ids` (the entity's terms, or a kind) and the hybrid search
  restricted to those ids, beside the plain hybrid search of the same store and
  query (the baseline, same run);
- index growth: klaw.db + keyword index bytes per fact (extra_info), and the time to
  store one day's facts (`replace_facts`, 55 facts) beside re-indexing that day's
  log chunks (`replace_file`), its baseline.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from klaw import _core

DIM = 384
ENTITIES = 2000
FACTS = 20_000
DAYS = 365
KINDS = ["world", "experience", "opinion", "observation"]
WORDS = "tea coffee garden shed larch bike lisbon berlin harbour office train ticket".split()


def _unit(rng: np.random.Generator, n: int) -> bytes:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v.tobytes()


def _day(i: int) -> str:
    return f"2026-{1 + i // 31 % 12:02d}-{1 + i % 28:02d}"


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _size(db: Path) -> int:
    files = [db, db.with_name(db.name + "-wal")]
    return sum(f.stat().st_size for f in files if f.exists()) + _dir_bytes(
        db.with_name(db.name + ".keyword")
    )


@pytest.fixture(scope="module")
def fact_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, dict[str, int]]]:
    rng = np.random.default_rng(7)
    pick = random.Random(7)
    db = tmp_path_factory.mktemp("facts") / "klaw.db"
    store = _core.Store(str(db), dim=DIM)
    per_day = FACTS // DAYS + 1
    labels = [f"memory/d{i:03d}-{_day(i)}.md" for i in range(DAYS)]
    for i, label in enumerate(labels):
        chunk = _core.NewChunk(content=f"log of day {i} " + " ".join(WORDS), chunk_hash=label)
        store.replace_file(
            label, label, label, 0.0, 1, f"{_day(i)}T00:00:00Z", [chunk], _unit(rng, 1)
        )
    store.close()
    store = _core.Store(str(db), dim=DIM)
    before = _size(db)
    n = 0
    for i, label in enumerate(labels):
        facts = []
        for j in range(min(per_day, FACTS - n)):
            e = (n + j) % ENTITIES
            name = f"Person{e}"
            facts.append(
                _core.NewFact(
                    fact_id=f"{i}-{j}",
                    content=f"@{name}: " + " ".join(pick.choice(WORDS) for _ in range(3)),
                    created_at=f"{_day(i)}T00:00:00Z",
                    line=3 + j,
                    end_line=3 + j,
                    kind=KINDS[(n + j) % 4],
                    day=_day(i),
                    start_day=_day(i),
                    end_day=_day(i),
                    entities=[(name, _core.analyze(name.lower()))],
                )
            )
        store.replace_facts(label, facts, _unit(rng, len(facts)))
        n += len(facts)
    store.close()
    store = _core.Store(str(db), dim=DIM)
    growth = {"facts": n, "bytes_before": before, "bytes_after": _size(db)}
    yield store, growth
    store.close()


def _queries() -> Iterator[tuple[bytes, str, int]]:
    rng = np.random.default_rng(11)
    for i in itertools.count():
        yield _unit(rng, 1), WORDS[i % len(WORDS)], (i * 37) % ENTITIES


PARAMS = _core.SearchParams(top_k=10, candidates=20, recency=0.2)


@pytest.mark.benchmark(group="facts-filtered-search")
def test_entity_filtered_search(benchmark: Any, fact_store: Any) -> None:
    store, _ = fact_store
    qs = _queries()

    def run() -> Any:
        qv, text, e = next(qs)
        ids = store.fact_ids([], [_core.analyze(f"person{e}", True)])
        return store.search(qv, text, PARAMS, ids=ids)

    hits = benchmark(run)
    assert 0 < len(hits) <= 10


@pytest.mark.benchmark(group="facts-filtered-search")
def test_kind_filtered_search(benchmark: Any, fact_store: Any) -> None:
    store, _ = fact_store
    qs = _queries()

    def run() -> Any:
        qv, text, _ = next(qs)
        return store.search(qv, text, PARAMS, ids=store.fact_ids(["opinion"], []))

    assert len(benchmark(run)) == 10


@pytest.mark.benchmark(group="facts-filtered-search")
def test_plain_search_baseline(benchmark: Any, fact_store: Any) -> None:
    """The same store and queries without a filter (facts hidden): the baseline."""
    store, _ = fact_store
    qs = _queries()

    def run() -> Any:
        qv, text, _ = next(qs)
        return store.search(qv, text, PARAMS)

    assert len(benchmark(run)) == 10


def _day_facts(k: int) -> list[Any]:
    return [
        _core.NewFact(
            fact_id=f"g{i}",
            content=f"@Person{i}: lives in town {i}",
            created_at="2026-12-01T00:00:00Z",
            line=3 + i,
            end_line=3 + i,
            kind="world",
            entities=[(f"Person{i}", _core.analyze(f"person{i}"))],
        )
        for i in range(k)
    ]


@pytest.mark.benchmark(group="facts-index-day")
def test_index_growth_and_a_days_facts(benchmark: Any, fact_store: Any) -> None:
    store, growth = fact_store
    per_fact = (growth["bytes_after"] - growth["bytes_before"]) / growth["facts"]
    benchmark.extra_info.update(growth, bytes_per_fact=round(per_fact))
    rng = np.random.default_rng(3)
    label = "memory/d000-" + _day(0) + ".md"
    facts = _day_facts(55)
    vectors = _unit(rng, len(facts))
    benchmark(lambda: store.replace_facts(label, facts, vectors))


@pytest.mark.benchmark(group="facts-index-day")
def test_a_days_chunks_baseline(benchmark: Any, fact_store: Any) -> None:
    """Re-indexing one log's chunks (55 of them): what a file change costs already."""
    store, _ = fact_store
    rng = np.random.default_rng(5)
    label = "memory/d001-" + _day(1) + ".md"
    chunks = [
        _core.NewChunk(content=f"chunk {i} of the log", chunk_hash=f"h{i}") for i in range(55)
    ]
    vectors = _unit(rng, len(chunks))
    benchmark(
        lambda: store.replace_file(
            label, label, "x", 0.0, 1, "2026-01-02T00:00:00Z", chunks, vectors
        )
    )

"""Hybrid and vector search over 100k chunks: Klaw vs the Python stack.

Bars (issues #2, #11): hybrid p50 ≤ 20 ms with the query embedding (multilingual-e5
small) and the fusion (convex + recency) included, and ≥ 10× the Python pipeline;
vector top-10 p50 ≤ 10 ms with recall@10 ≥ 0.99 against exact float search. There is
no reranker (no multilingual cross-encoder ships on PyPI): nothing to report apart.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import pytest

import corpus
from klaw import _core

QUERIES = corpus.QUERIES


def fts_or(q: str) -> str:
    words = [w for w in re.split(r"\W+", q) if w]
    return " OR ".join(f'"{w}"' for w in words)


@pytest.mark.benchmark(group="hybrid-100k")
def test_hybrid_klaw(benchmark: Any, klaw_store: Any, backend: Any) -> None:
    qs = itertools.cycle(QUERIES)
    params = _core.SearchParams(top_k=10, candidates=20, recency=0.2)

    def run() -> Any:
        q = next(qs)
        return klaw_store.search(backend.embed_query(q), q, params)

    hits = benchmark(run)
    assert len(hits) == 10


@pytest.mark.benchmark(group="hybrid-100k")
def test_hybrid_rrf_wave1(benchmark: Any, klaw_store: Any, backend: Any) -> None:
    """The wave-1 fusion (equal-weight RRF) on the same store and model."""
    qs = itertools.cycle(QUERIES)
    params = _core.SearchParams(top_k=10, fusion="rrf", vector_weight=1, keyword_weight=1)

    def run() -> Any:
        q = next(qs)
        return klaw_store.search(backend.embed_query(q), q, params)

    assert len(benchmark(run)) == 10


def _fusions() -> dict[str, dict[str, Any]]:
    """The fusion before issue 25 item 8, the one that ships (engine.yaml's defaults
    with the default model's weights) and the score-aware option on those weights."""
    from klaw.config import SearchConfig
    from klaw.memory.models.registry import DEFAULT_MODEL, model_spec

    spec, s = model_spec(DEFAULT_MODEL), SearchConfig()
    return {
        "before": {
            "fusion": "convex",
            "vector_weight": 0.7,
            "keyword_weight": 0.3,
            "keyword_pivot": 4,
        },
        "shipped": {
            "fusion": s.fusion,
            "vector_weight": spec.vector_weight,
            "keyword_weight": spec.keyword_weight,
            "keyword_pivot": spec.keyword_pivot,
        },
        "peaked": {
            "fusion": "peaked",
            "vector_weight": spec.vector_weight,
            "keyword_weight": spec.keyword_weight,
            "keyword_pivot": spec.keyword_pivot,
        },
    }


@pytest.mark.benchmark(group="fusion-100k")
@pytest.mark.parametrize("fusion", ["before", "shipped", "peaked"])
def test_fusion_klaw(benchmark: Any, klaw_store: Any, backend: Any, fusion: str) -> None:
    """Store.search with the queries embedded beforehand (what the fusion itself adds to
    the two legs): the fusion before issue 25 beside the one that ships and the
    score-aware option, recency 0.2."""
    qs = itertools.cycle([(q, backend.embed_query(q)) for q in QUERIES])
    params = _core.SearchParams(top_k=10, candidates=20, recency=0.2, **_fusions()[fusion])

    def run() -> Any:
        q, v = next(qs)
        return klaw_store.search(v, q, params)

    assert len(benchmark(run)) == 10


@pytest.mark.benchmark(group="query-embed")
def test_query_embed_klaw(benchmark: Any, backend: Any) -> None:
    """The query embedding alone: the part of a hybrid search the model costs."""
    qs = itertools.cycle(QUERIES)
    benchmark(lambda: backend.embed_query(next(qs)))


@pytest.mark.benchmark(group="hybrid-100k")
def test_hybrid_baseline(benchmark: Any, baseline_db: Any, py_embed: Any) -> None:
    qs = itertools.cycle(QUERIES)

    def run() -> list[tuple[Any, ...]]:
        q = next(qs)
        qv = py_embed([q])[0].astype(np.float32).tobytes()
        vec = [
            r[0]
            for r in baseline_db.execute(
                "SELECT rowid FROM vec WHERE embedding MATCH ? AND k = 20 ORDER BY distance", (qv,)
            )
        ]
        kw = [
            r[0]
            for r in baseline_db.execute(
                "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT 20", (fts_or(q),)
            )
        ]
        scores: dict[int, float] = {}
        for lst in (vec, kw):
            for rank, i in enumerate(lst, 1):
                scores[i] = scores.get(i, 0.0) + 1 / (60 + rank)
        top = sorted(scores, key=lambda i: -scores[i])[:10]
        marks = ",".join("?" * len(top))
        return baseline_db.execute(
            f"SELECT id, content, source, created_at FROM chunks WHERE id IN ({marks})", top
        ).fetchall()

    rows = benchmark(run)
    assert len(rows) == 10


def _queries(data100k: Any, n: int = 50) -> np.ndarray:
    _, vecs = data100k
    rng = np.random.default_rng(11)
    noise = rng.standard_normal((n, vecs.shape[1])).astype(np.float32)
    q = vecs[rng.integers(0, len(vecs), n)] + 0.3 * noise
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.benchmark(group="vector-100k")
def test_vector_klaw(benchmark: Any, klaw_store: Any, data100k: Any) -> None:
    _, vecs = data100k
    qs = _queries(data100k)
    # recall@10 against exact float search (numpy, brute force).
    found = 0
    for q in qs:
        exact = set((np.argsort(-(vecs @ q))[:10] + 1).tolist())
        found += len(exact & {i for i, _ in klaw_store.vector_search(q.tobytes(), 10)})
    recall = found / (10 * len(qs))
    benchmark.extra_info["recall@10"] = recall
    it = itertools.cycle(qs)
    benchmark(lambda: klaw_store.vector_search(next(it).tobytes(), 10))
    assert recall >= 0.99


@pytest.mark.benchmark(group="vector-100k")
def test_vector_baseline_sqlite_vec(benchmark: Any, baseline_db: Any, data100k: Any) -> None:
    it = itertools.cycle(_queries(data100k))
    benchmark.pedantic(
        lambda: baseline_db.execute(
            "SELECT rowid, distance FROM vec WHERE embedding MATCH ? AND k = 10 ORDER BY distance",
            (next(it).tobytes(),),
        ).fetchall(),
        rounds=15,
    )


@pytest.mark.benchmark(group="vector-100k")
def test_vector_baseline_numpy(benchmark: Any, data100k: Any) -> None:
    _, vecs = data100k
    it = itertools.cycle(_queries(data100k))
    benchmark(lambda: np.argpartition(-(vecs @ next(it)), 10)[:10])


@pytest.mark.benchmark(group="keyword-100k")
def test_keyword_klaw_tantivy(benchmark: Any, klaw_store: Any) -> None:
    qs = itertools.cycle(QUERIES)
    benchmark(lambda: klaw_store.keyword_search(next(qs), 20))


@pytest.mark.benchmark(group="keyword-100k")
def test_keyword_baseline_fts5(benchmark: Any, baseline_db: Any) -> None:
    qs = itertools.cycle(QUERIES)
    benchmark.pedantic(
        lambda: baseline_db.execute(
            "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT 20", (fts_or(next(qs)),)
        ).fetchall(),
        rounds=20,
    )

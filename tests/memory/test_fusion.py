"""The score-aware ("peaked") fusion of Store.search on small fixed lists.

Vectors are built with chosen cosines to the query (q = axis 0; a chunk at cosine c is
c·e0 + sqrt(1 - c²)·e_i), so each list's shape is known: a flat list (its next
candidates score close to its best) and a peaked one (its best stands alone).
"""

from __future__ import annotations

import math

import pytest

from klaw import _core
from klaw.config import SearchConfig
from klaw.memory.models.registry import DEFAULT_MODEL, model_spec

DIM = 384


def at_cosine(c: float, axis: int) -> list[float]:
    v = [0.0] * DIM
    v[0], v[axis] = c, math.sqrt(1 - c * c)
    return v


def fill(store: _core.Store, rows: list[tuple[str, float]]) -> None:
    """One chunk per (text, cosine to the query); ids 1, 2, ... in order."""
    vectors = b"".join(_core.pack_f32(at_cosine(c, n + 1)) for n, (_, c) in enumerate(rows))
    chunks = [_core.NewChunk(content=t, chunk_hash=t) for t, _ in rows]
    store.add_chunks("manual", None, "2026-01-01T00:00:00Z", chunks, vectors)


QUERY = _core.pack_f32([1.0] + [0.0] * (DIM - 1))


def top(store: _core.Store, text: str, **kw: object) -> int:
    return store.search(QUERY, text, _core.SearchParams(top_k=5, **kw))[0].id  # type: ignore[arg-type]


def test_a_peaked_keyword_list_outweighs_a_flat_vector_list(store: _core.Store) -> None:
    # Vectors barely tell the chunks apart (0.80 / 0.79 ...); only chunk 5 has the word.
    fill(
        store,
        [
            ("notes about the garden", 0.80),
            ("notes about the kitchen", 0.79),
            ("notes about the garage", 0.79),
            ("notes about the attic", 0.79),
            ("the zeppelin museum ticket", 0.60),
        ],
    )
    # Convex 0.7/0.3 keeps the vector list's best first: the keyword's best is its worst.
    assert top(store, "zeppelin", fusion="convex") == 1
    # Peaked: the keyword list (one hit) is fully peaked, the vector one nearly flat.
    assert top(store, "zeppelin", fusion="peaked") == 5


def test_a_peaked_vector_list_outweighs_a_flat_keyword_list(store: _core.Store) -> None:
    # Both words are in every chunk, so BM25 barely tells them apart (the shortest
    # first); only the vectors single one out (chunk 5).
    fill(
        store,
        [
            ("a note on the week", 0.30),
            ("a note on the week, again", 0.31),
            ("a note on the week, once more", 0.31),
            ("a note on the week, one more", 0.31),
            ("a note on the week and the passport renewal at the town hall", 0.90),
            ("a note on the week, the last", 0.31),
        ],
    )
    prior = {"vector_weight": 0.3, "keyword_weight": 0.7}
    # A keyword-heavy prior with plain convex lets the flat keyword list decide.
    assert top(store, "week note", fusion="convex", **prior) == 1
    assert top(store, "week note", fusion="peaked", **prior) == 5


def test_peaked_is_convex_when_one_list_is_empty(store: _core.Store) -> None:
    fill(store, [("alpha", 0.9), ("beta", 0.5), ("gamma", 0.1)])
    got = store.search(QUERY, "nothingmatches", _core.SearchParams(top_k=3, fusion="peaked"))
    # The vector list alone, scaled to the full weight (0.7 + 0.3): min-max 1, 0.5, 0.
    assert [h.id for h in got] == [1, 2, 3]
    assert [h.score for h in got] == pytest.approx([1.0, 0.5, 0.0], abs=1e-5)


def test_the_fusion_name_is_checked() -> None:
    assert _core.SearchParams(fusion="peaked").fusion == "peaked"
    with pytest.raises(Exception, match="peaked, convex or rrf"):
        _core.SearchParams(fusion="borda")


def shipped(**kw: object) -> _core.SearchParams:
    """What memory_search runs with engine.yaml's defaults and the default model."""
    s, spec = SearchConfig(), model_spec(DEFAULT_MODEL)
    return _core.SearchParams(
        top_k=5,
        fusion=s.fusion,
        vector_weight=spec.vector_weight,
        keyword_weight=spec.keyword_weight,
        keyword_pivot=spec.keyword_pivot,
        **kw,  # type: ignore[arg-type]
    )


def test_the_shipped_fusion_lets_the_keyword_list_decide_up_to_eight_terms(
    store: _core.Store,
) -> None:
    fill(
        store,
        [
            ("boiler service booked", 0.90),
            ("the boiler engineer Kowalski fixed the boiler pressure valve", 0.50),
            ("groceries for the week", 0.30),
            ("a walk by the river", 0.52),
        ],
    )
    short = "boiler Kowalski"
    before = _core.SearchParams(top_k=5, vector_weight=0.7, keyword_weight=0.3, keyword_pivot=4)
    # 0.7 / 0.3 kept the vector list's best first; 0.5 / 0.5 lets the chunk that holds
    # both words win (its cosine is mid-list).
    assert store.search(QUERY, short, before)[0].id == 1
    assert store.search(QUERY, short, shipped())[0].id == 2
    # Past 8 distinct terms, keyword weight moves to the vectors (wk·8/terms stays).
    long = "when did the boiler engineer Kowalski come round and what did he say about it"
    assert len(set(_core.analyze(long, query=True))) > 8
    assert store.search(QUERY, long, shipped())[0].id == 1

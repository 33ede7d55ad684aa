"""The Rust store through `klaw._core`: vectors, keywords, hybrid RRF, filters, messages."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from klaw import _core
from klaw.errors import InvalidInput, StoreCorrupt, StoreError


def vec(i: int, dim: int = 384) -> list[float]:
    """A deterministic unit vector pointing mostly along axis i."""
    v = [0.01 * ((i * 7 + j * 13) % 5) for j in range(dim)]
    v[i % dim] = 1.0
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def pack(*vs: list[float]) -> bytes:
    return b"".join(_core.pack_f32(v) for v in vs)


def chunk(text: str, h: str = "") -> _core.NewChunk:
    return _core.NewChunk(content=text, chunk_hash=h or text)


def add(store: _core.Store, texts: list[str], start: int = 0, **kw: str) -> list[int]:
    src = kw.get("source", "manual")
    ts = kw.get("created_at", "2026-01-01T00:00:00Z")
    vectors = pack(*(vec(start + i) for i in range(len(texts))))
    return store.add_chunks(src, None, ts, [chunk(t) for t in texts], vectors)


def test_vector_search_returns_top_k_ordered(store: _core.Store) -> None:
    add(store, [f"note {i}" for i in range(30)])
    res = store.vector_search(_core.pack_f32(vec(5)), k=7)
    assert len(res) == 7
    assert res[0][0] == 6  # ids start at 1
    assert res[0][1] == pytest.approx(1.0, abs=1e-5)
    scores = [s for _, s in res]
    assert scores == sorted(scores, reverse=True)
    assert all(-1.0 <= s <= 1.0001 for s in scores)


def test_search_on_empty_index_returns_nothing(store: _core.Store) -> None:
    assert store.vector_search(_core.pack_f32(vec(1)), k=5) == []
    assert store.keyword_search("anything", k=5) == []
    assert store.search(_core.pack_f32(vec(1)), "anything") == []


def test_vector_of_wrong_dimension_is_rejected(store: _core.Store) -> None:
    with pytest.raises(InvalidInput, match="dimension"):
        store.vector_search(_core.pack_f32([0.1] * 100), k=3)
    with pytest.raises(InvalidInput, match="vectors of dimension 384"):
        store.add_chunks(
            "manual", None, "2026-01-01T00:00:00Z", [chunk("x")], _core.pack_f32([1.0] * 10)
        )
    with pytest.raises(InvalidInput, match="float32"):
        store.vector_search(b"\x00\x01\x02", k=3)
    with pytest.raises(InvalidInput, match="NaN"):
        store.add_chunks(
            "manual", None, "2026-01-01T00:00:00Z", [chunk("x")], _core.pack_f32([math.nan] * 384)
        )
    with pytest.raises(InvalidInput, match="ISO"):
        store.add_chunks("manual", None, "yesterday", [chunk("x")], _core.pack_f32(vec(1)))
    assert store.count_chunks() == 0


def test_keyword_search_languages_and_ranking(store: _core.Store) -> None:
    add(
        store,
        [
            "The dentist appointment is on Friday at 10",
            "Dentist dentist dentist: remember to floss",
            "Нужно проверить настройки памяти на сервере",
            "我下周二要去看医生",
            "Bread recipe with rye flour",
        ],
    )
    exact = store.keyword_search("appointment", k=5)
    assert [i for i, _ in exact] == [1]
    ranked = store.keyword_search("dentist", k=5)
    assert [i for i, _ in ranked] == [2, 1]  # more occurrences rank higher
    assert ranked[0][1] > ranked[1][1]
    assert [i for i, _ in store.keyword_search("память", k=5)] == [3]  # another case form
    assert [i for i, _ in store.keyword_search("医生", k=5)] == [4]  # word inside a sentence
    assert [i for i, _ in store.keyword_search("recipes", k=5)] == [5]  # plural → stem
    assert store.keyword_search("zebra", k=5) == []


RRF: dict[str, Any] = {"fusion": "rrf", "vector_weight": 1.0, "keyword_weight": 1.0}


def test_hybrid_rrf_fuses_both_lists(store: _core.Store) -> None:
    add(store, ["alpha keyword here", "beta text", "gamma keyword"])
    # Query vector closest to chunk 2; keyword matches 1 and 3.
    hits = store.search(
        _core.pack_f32(vec(1)), "keyword", _core.SearchParams(top_k=10, candidates=20, **RRF)
    )
    ids = [h.id for h in hits]
    assert set(ids) == {1, 2, 3}
    top = hits[0]
    # The vector list ranks 2 first; the keyword list ranks 1 or 3 first: everything has
    # the form sum(1/(60 + rank)), so scores are bounded by 2/61.
    assert all(h.score <= 2 / 61 + 1e-12 for h in hits)
    both = [h for h in hits if h.id in (1, 3)]
    assert max(b.score for b in both) > 1 / 61  # in both lists beats one list's best
    assert top.id in (1, 3)


def test_rrf_exact_scores_and_top_k(store: _core.Store) -> None:
    add(store, [f"common word {i}" for i in range(15)])
    hits = store.search(_core.pack_f32(vec(0)), "nomatchhere", _core.SearchParams(top_k=3, **RRF))
    assert len(hits) == 3  # keyword list empty → vector only
    assert hits[0].id == 1 and hits[0].score == pytest.approx(1 / 61)
    assert hits[1].score == pytest.approx(1 / 62)
    # No vector → keyword only.
    hits = store.search(None, "word", _core.SearchParams(top_k=4, **RRF))
    assert len(hits) == 4 and hits[0].score == pytest.approx(1 / 61)
    hits = store.search(
        _core.pack_f32(vec(0)), "common", _core.SearchParams(top_k=2, rrf_k=10.0, **RRF)
    )
    assert hits[0].score == pytest.approx(2 / 11)  # first in both lists with k=10
    with pytest.raises(InvalidInput, match="fusion"):
        _core.SearchParams(fusion="borda")


def test_convex_fusion_weights_normalised_scores_and_recency(store: _core.Store) -> None:
    add(store, ["alpha keyword here", "beta text", "gamma keyword"])
    q = _core.pack_f32(vec(1))  # nearest to chunk 2; the keyword matches 1 and 3
    hits = store.search(q, "keyword", _core.SearchParams(top_k=3))  # convex 0.7 / 0.3 by default
    # Each list's best scores 1 after min-max: chunk 2 gets the vector weight.
    assert hits[0].id == 2 and hits[0].score == pytest.approx(0.7, abs=1e-6)
    assert all(0 <= h.score <= 1 + 1e-9 for h in hits)
    # Keyword only (weight 0 on vectors): a chunk the words do not match is not found.
    kw = store.search(
        q, "keyword", _core.SearchParams(top_k=3, vector_weight=0.0, keyword_weight=1.0)
    )
    assert [h.id for h in kw][:2] in ([1, 3], [3, 1]) and kw[-1].score == 0.0


def test_recency_puts_the_newer_of_two_close_candidates_first(store: _core.Store) -> None:
    add(store, ["my phone number is 111"], 0, created_at="2025-01-01T00:00:00Z")
    add(store, ["my phone number is 222"], 1, created_at="2026-06-01T00:00:00Z")
    q = _core.pack_f32(vec(0))  # the vector prefers the old note
    assert store.search(q, "phone number", _core.SearchParams(top_k=2))[0].content.endswith("111")
    newer = _core.SearchParams(top_k=2, recency=1.0)
    assert store.search(q, "phone number", newer)[0].content.endswith("222")


def test_conversation_chunks_only_answer_a_search_naming_their_chat(store: _core.Store) -> None:
    add(store, ["the garage code is 4711"], 0, source="chat:telegram_1")
    add(store, ["the garage has two bikes"], 1)
    q = _core.pack_f32(vec(0))
    top5 = _core.SearchParams(top_k=5)
    for hits in (
        [h.id for h in store.search(q, "garage code 4711", top5)],
        [i for i, _ in store.vector_search(q, k=5)],
        [i for i, _ in store.keyword_search("garage code 4711", k=5)],
    ):
        assert hits == [2]
    mine = store.search(q, "garage code", top5, source="chat:telegram_1")
    assert [h.content for h in mine] == ["the garage code is 4711"]
    assert store.search(q, "garage code", top5, source="chat:telegram_2") == []


def test_filters_since_until_source(store: _core.Store) -> None:
    add(store, ["old note about taxes"], 0, created_at="2025-01-01T00:00:00Z")
    add(store, ["new note about taxes"], 1, created_at="2026-06-01T00:00:00Z", source="MEMORY.md")
    q = _core.pack_f32(vec(0))
    assert [h.content for h in store.search(q, "taxes", since="2026-01-01")] == [
        "new note about taxes"
    ]
    assert [h.content for h in store.search(q, "taxes", until="2025-12-31T23:59:59Z")] == [
        "old note about taxes"
    ]
    assert [h.source for h in store.search(q, "taxes", source="MEMORY.md")] == ["MEMORY.md"]
    assert store.search(q, "taxes", source="nowhere") == []
    with pytest.raises(InvalidInput, match="since"):
        store.search(q, "taxes", since="last tuesday")


def test_replace_file_and_remove_file(store: _core.Store) -> None:
    chunks = [
        _core.NewChunk(content="line one", chunk_hash="a", start_line=1, end_line=1, heading="H"),
        _core.NewChunk(content="line two", chunk_hash="b", start_line=2, end_line=2, heading="H"),
    ]
    ids = store.replace_file(
        "MEMORY.md",
        "MEMORY.md",
        "h1",
        1.0,
        10,
        "2026-01-01T00:00:00Z",
        chunks,
        pack(vec(1), vec(2)),
    )
    assert len(ids) == 2 and (
        lambda f: f is not None and (f.hash, f.mtime, f.size) == ("h1", 1.0, 10)
    )(store.file_state("MEMORY.md"))
    new = store.replace_file(
        "MEMORY.md", "MEMORY.md", "h2", 2.0, 5, "2026-01-01T00:00:00Z", chunks[:1], pack(vec(3))
    )
    assert store.count_chunks() == 1
    hit = store.get_chunks(new)[0]
    assert (hit.source, hit.start_line, hit.end_line, hit.heading) == ("MEMORY.md", 1, 1, "H")
    assert store.keyword_search("two", k=5) == []
    assert store.remove_file("MEMORY.md") == 1
    assert store.count_chunks() == 0 and store.file_state("MEMORY.md") is None
    assert store.integrity_check() == []


def test_messages_insert_is_idempotent_and_searchable(store: _core.Store) -> None:
    rows = [
        _core.Message(
            id="m1",
            channel="telegram",
            chat_id="telegram_1",
            role="user",
            content="hello about the garden",
            created_at="2026-01-01T10:00:00Z",
        ),
        _core.Message(
            id="m2",
            channel="telegram",
            chat_id="telegram_1",
            role="assistant",
            content="the garden needs water",
            metadata='{"model":"x"}',
            created_at="2026-01-01T10:00:01Z",
        ),
    ]
    assert store.insert_messages(rows) == 2
    assert store.insert_messages(rows) == 0  # redelivery is harmless
    assert store.count_messages() == 2
    assert [m.id for m in store.search_messages("garden")] == ["m1", "m2"] or [
        m.id for m in store.search_messages("garden")
    ] == ["m2", "m1"]
    assert [m.id for m in store.search_messages("water")] == ["m2"]
    assert store.search_messages("!!!") == []
    assert [m.id for m in store.recent_messages("telegram_1", limit=1)] == ["m2"]
    assert [m.id for m in store.recent_messages("telegram_1", since="2026-01-01T10:00:01Z")] == [
        "m2"
    ]


def test_sessions_and_meta(store: _core.Store) -> None:
    store.upsert_session("c1", "glm/glm-5", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")
    store.upsert_session(
        "c1", "deepseek/deepseek-chat", "2026-01-02T00:00:00Z", "2026-01-02T00:00:00Z"
    )
    session = store.get_session("c1")
    assert session is not None
    assert (session.model, session.segment_start, session.created_at) == (
        "deepseek/deepseek-chat",
        "2026-01-02T00:00:00Z",
        "2026-01-01T00:00:00Z",
    )
    assert store.get_session("nope") is None
    store.meta_set("k", "v")
    assert store.meta_get("k") == "v"


def test_persistence_and_keyword_index_self_heals(tmp_path: Path) -> None:
    db = tmp_path / "klaw.db"
    s = _core.Store(str(db))
    add(s, ["persistent fact about bicycles"])
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.count_chunks()
    # Losing the derived keyword index is harmless: it is rebuilt from the table.
    import shutil

    shutil.rmtree(tmp_path / "klaw.db.keyword")
    s = _core.Store(str(db))
    assert [i for i, _ in s.keyword_search("bicycles", k=3)] == [1]
    assert s.vector_search(_core.pack_f32(vec(0)), k=1)[0][0] == 1
    s.close()


def test_corrupted_database_is_reported(tmp_path: Path) -> None:
    db = tmp_path / "klaw.db"
    db.write_bytes(b"this is not a database" * 1000)
    with pytest.raises(StoreCorrupt, match="klaw reindex"):
        _core.Store(str(db))


def test_dimension_mismatch_is_explained(tmp_path: Path) -> None:
    _core.Store(str(tmp_path / "klaw.db"), dim=384).close()
    with pytest.raises(InvalidInput, match="reindex"):
        _core.Store(str(tmp_path / "klaw.db"), dim=768)


def test_int8_index_recall_matches_exact_float_search(store: _core.Store) -> None:
    import random

    rnd = random.Random(7)
    n = 2000
    vs = []
    for _ in range(n):
        v = [rnd.gauss(0, 1) for _ in range(384)]
        norm = math.sqrt(sum(x * x for x in v))
        vs.append([x / norm for x in v])
    store.add_chunks(
        "manual", None, "2026-01-01T00:00:00Z", [chunk(f"c{i}") for i in range(n)], pack(*vs)
    )
    found = total = 0
    for qi in range(20):
        q = _core.pack_f32(vs[qi * 37])
        exact = {i for i, _ in store.vector_search_exact(q, k=10)}
        approx = {i for i, _ in store.vector_search(q, k=10)}
        found += len(exact & approx)
        total += 10
    assert found / total >= 0.99

"""Re-indexing an edited memory file: one `_core.index_document` call (chunk, hash,
embed through the cache, replace; no GIL) against the same steps driven from Python
one crossing at a time (chunk_markdown, text_hashes, embed_cached per batch,
replace_file), which is how `Memory.index_file` worked before.

The embedding cache is warm (the note was indexed before and one paragraph changed),
so what is measured is the work around the model: a cold run is dominated by the
model itself, the same in both. No bar: the figure sits beside its baseline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import corpus
from klaw import _core
from smoke import scaled

PARAGRAPHS = scaled(2000, 40)
CHUNK_SIZE, OVERLAP, BATCH = 400, 80, 16


@pytest.fixture(scope="module")
def note() -> str:
    paras = corpus.texts(PARAGRAPHS, seed=11, words=60)
    return "\n\n".join(f"## Day {i}\n\n{p}" for i, p in enumerate(paras))


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory, backend: Any, note: str) -> Any:
    """A store and a cache that already hold every chunk of `note`."""
    root = tmp_path_factory.mktemp("index")
    store = _core.Store(str(root / "klaw.db"), dim=backend.dim)
    cache = _core.EmbeddingCache(str(root / "embeddings.db"))
    _index_once(store, cache, backend, note, "memory/warmup.md")
    yield store, cache
    store.close()


def _index_once(store: Any, cache: Any, backend: Any, text: str, path: str) -> int:
    stored, _ = _core.index_document(
        store,
        backend.embedder,
        cache,
        backend.model_id,
        path=path,
        source=path,
        hash=str(hash(text)),
        mtime=1.0,
        size=len(text),
        created_at="2026-02-24T00:00:00Z",
        text=text,
        chunk_size=CHUNK_SIZE,
        chunk_overlap=OVERLAP,
        batch_size=BATCH,
        cancel=_core.CancelFlag(),
    )
    return stored


def _python_steps(store: Any, cache: Any, backend: Any, text: str, path: str) -> int:
    chunks = _core.chunk_markdown(text, CHUNK_SIZE, OVERLAP)
    texts = [c.text for c in chunks]
    hashes = _core.text_hashes(texts)
    parts = []
    for i in range(0, len(texts), BATCH):
        vecs, _ = _core.embed_cached(
            backend.embedder, cache, backend.model_id, texts[i : i + BATCH]
        )
        parts.append(vecs)
    rows = [
        _core.NewChunk(
            content=c.text,
            chunk_hash=h,
            start_line=c.start_line,
            end_line=c.end_line,
            heading=" > ".join(c.heading_path) or None,
        )
        for c, h in zip(chunks, hashes, strict=True)
    ]
    ids = store.replace_file(
        path, path, str(hash(text)), 1.0, len(text), "2026-02-24T00:00:00Z", rows, b"".join(parts)
    )
    return len(ids)


@pytest.mark.benchmark(group="index-warm-note")
def test_index_document_klaw(benchmark: Any, warm: Any, backend: Any, note: str) -> None:
    store, cache = warm
    n = benchmark.pedantic(
        lambda: _index_once(store, cache, backend, note, "memory/k.md"), rounds=5
    )
    assert n == len(_core.chunk_markdown(note, CHUNK_SIZE, OVERLAP))


@pytest.mark.benchmark(group="index-warm-note")
def test_index_document_python_steps(benchmark: Any, warm: Any, backend: Any, note: str) -> None:
    store, cache = warm
    n = benchmark.pedantic(
        lambda: _python_steps(store, cache, backend, note, "memory/p.md"), rounds=5
    )
    assert n == len(_core.chunk_markdown(note, CHUNK_SIZE, OVERLAP))


def test_both_ways_store_the_same_rows(warm: Any, backend: Any, note: str, tmp_path: Path) -> None:
    store, cache = warm
    _index_once(store, cache, backend, note, "memory/same-k.md")
    _python_steps(store, cache, backend, note, "memory/same-p.md")
    top = _core.SearchParams(top_k=200)
    k = store.search(None, "Day 3", top, source="memory/same-k.md")
    p = store.search(None, "Day 3", top, source="memory/same-p.md")
    assert [(h.content, h.start_line, h.end_line, h.heading) for h in k] == [
        (h.content, h.start_line, h.end_line, h.heading) for h in p
    ]

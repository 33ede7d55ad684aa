"""`_core.index_document`: a document is chunked, embedded through the cache and
stored in one call without the GIL; a set cancel flag stops it before anything is
written."""

from __future__ import annotations

import pytest

from klaw import _core
from klaw.errors import Cancelled
from klaw.memory import Memory
from klaw.memory.embedding import OnnxBackend

TEXT = (
    "# Trips\n\n## Lisbon\n\nHotel in Alfama, tram 28 to the castle.\n\n"
    "## Porto\n\nPort cellars in Gaia.\n"
)


def _index(
    memory: Memory, text: str, cancel: _core.CancelFlag, path: str = "memory/t.md"
) -> tuple[int, int]:
    backend = memory.backend
    assert isinstance(backend, OnnxBackend)
    return _core.index_document(
        memory.store,
        backend.embedder,
        memory.cache,
        backend.model_id,
        path=path,
        source=path,
        hash="h-" + str(len(text)),
        mtime=1.0,
        size=len(text),
        created_at="2026-02-24T00:00:00Z",
        text=text,
        chunk_size=12,
        chunk_overlap=0,
        batch_size=2,
        cancel=cancel,
    )


def test_one_call_indexes_a_document_like_the_python_steps(memory: Memory) -> None:
    stored, hits = _index(memory, TEXT, _core.CancelFlag())
    expected = _core.chunk_markdown(TEXT, 12, 0)
    assert stored == len(expected) >= 2 and hits == 0
    state = memory.store.file_state("memory/t.md")
    assert state is not None and state.hash == f"h-{len(TEXT)}"
    found = memory.search("castle tram", top_k=1)
    assert found[0].source == "memory/t.md" and "tram 28" in found[0].content
    assert found[0].heading == "Trips > Lisbon"
    # The same text again: every embedding comes from the cache, rows are replaced.
    count = memory.store.count_chunks()
    again, hits = _index(memory, TEXT, _core.CancelFlag())
    assert (again, hits) == (stored, stored)
    assert memory.store.count_chunks() == count


def test_a_set_flag_stops_it_before_anything_is_written(memory: Memory) -> None:
    flag = _core.CancelFlag()
    flag.set()
    with pytest.raises(Cancelled):
        _index(memory, TEXT, flag)
    assert memory.store.file_state("memory/t.md") is None
    assert memory.store.count_chunks() == 0

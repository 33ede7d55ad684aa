"""The public memory API with the real model, real klaw.db and the real cache."""

from __future__ import annotations

import json
import resource
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from klaw import _core
from klaw.config import load_engine_config
from klaw.errors import InvalidInput
from klaw.memory import Hit, Memory
from klaw.memory.embedding import OnnxBackend
from klaw.paths import KlawPaths

NOTES = """# Home

## Network

The home wifi network is called Lighthouse and the password is on the fridge.

## Health

- Dentist appointment on 2026-03-14 at 10:00 with Dr. Novak.
- Allergic to penicillin.

## Hardware

```bash
docker run --rm -it klaw-sandbox:latest
```

The Raspberry Pi 5 in the garage runs Home Assistant.
"""


def test_embedding_is_a_unit_vector_and_semantic(backend: OnnxBackend) -> None:
    import numpy as np

    texts = ["The cat sits on the mat", "A kitten rests on a rug", "Quarterly tax filing deadline"]
    v = np.frombuffer(backend.embed_batch(texts), dtype=np.float32).reshape(3, -1)
    assert v.shape == (3, backend.dim)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    sims = v @ v.T
    # E5's cosines sit high for any two texts; what matters is the margin.
    assert sims[0, 1] > sims[0, 2] + 0.1
    # Batch equals one-by-one.
    single = np.frombuffer(backend.embed_batch([texts[2]]), dtype=np.float32)
    assert np.allclose(single, v[2], atol=1e-5)


def test_save_then_search_cites_the_source(memory: Memory, klaw_home: KlawPaths) -> None:
    ids = memory.save("My passport number is stored in the blue folder", source="manual")
    assert len(ids) == 1
    memory.save("Buy oat milk and rye bread", created_at="2026-02-01T09:00:00Z")
    hits = memory.search("where is my passport?")
    assert isinstance(hits[0], Hit)
    assert "passport" in hits[0].content
    assert hits[0].source == "manual" and hits[0].citation == "manual"
    assert hits[0].score > 0
    saved = [json.loads(line) for line in klaw_home.saved_memory.read_text().splitlines()]
    assert saved[0]["text"].startswith("My passport")
    with pytest.raises(InvalidInput):
        memory.save("   ")
    with pytest.raises(InvalidInput):
        memory.search("")
    with pytest.raises(InvalidInput):
        memory.search("passport", top_k=0)


def test_index_file_lines_are_right_and_unchanged_files_skipped(
    memory: Memory, klaw_home: KlawPaths
) -> None:
    path = klaw_home.workspace / "MEMORY.md"
    path.write_text(NOTES)
    n = memory.index_file(path)
    assert n >= 1
    assert memory.index_file(path) == 0  # same hash → skipped
    hits = memory.search("wifi password", top_k=3)
    top = hits[0]
    assert top.source == "MEMORY.md"
    lines = NOTES.splitlines()
    assert top.start_line is not None and top.end_line is not None
    assert top.content == "\n".join(lines[top.start_line - 1 : top.end_line])
    assert top.citation == f"MEMORY.md#L{top.start_line}-L{top.end_line}"

    path.write_text(NOTES.replace("Lighthouse", "Seagull"))
    assert memory.index_file(path) >= 1
    assert memory.store.count_chunks() == n  # old chunks replaced, not added
    assert "Seagull" in memory.search("wifi network name", top_k=1)[0].content


def test_a_hit_as_json_has_its_fields_and_citation(memory: Memory, klaw_home: KlawPaths) -> None:
    """`klaw memory search --json` prints `to_dict()`: the keys in the order they always
    had, the citation last."""
    (klaw_home.workspace / "MEMORY.md").write_text(NOTES)
    memory.index_file(klaw_home.workspace / "MEMORY.md")
    top = memory.search("wifi password", top_k=1)[0]
    d = top.to_dict()
    assert list(d) == [
        "content",
        "source",
        "start_line",
        "end_line",
        "created_at",
        "score",
        "id",
        "chat_id",
        "heading",
        "citation",
    ]
    assert d == {
        "content": top.content,
        "source": "MEMORY.md",
        "start_line": top.start_line,
        "end_line": top.end_line,
        "created_at": top.created_at,
        "score": top.score,
        "id": top.id,
        "chat_id": None,
        "heading": top.heading,
        "citation": f"MEMORY.md#L{top.start_line}-L{top.end_line}",
    }
    assert json.loads(json.dumps(d)) == d


def test_index_workspace_indexes_daily_logs_and_forgets_deleted(
    memory: Memory, klaw_home: KlawPaths
) -> None:
    ws = klaw_home.workspace
    (ws / "memory").mkdir()
    (ws / "MEMORY.md").write_text(NOTES)
    (ws / "memory" / "2026-02-24.md").write_text("Met Anna about the garden project.\n")
    r = memory.index_workspace()
    assert sorted(r.indexed) == ["MEMORY.md", "memory/2026-02-24.md"]
    hit = memory.search("garden project with Anna", top_k=1)[0]
    assert hit.source == "memory/2026-02-24.md"
    # Dated by the file name: the start of that day in the owner's zone (none is set in
    # this config: the host's zone).
    start = datetime(2026, 2, 24).astimezone().astimezone(UTC)
    assert hit.created_at == start.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert memory.search("garden", since="2026-02-25") == [] or all(
        h.source != "memory/2026-02-24.md" for h in memory.search("garden", since="2026-02-25")
    )
    r = memory.index_workspace()
    assert r.indexed == [] and sorted(r.unchanged) == ["MEMORY.md", "memory/2026-02-24.md"]
    (ws / "memory" / "2026-02-24.md").unlink()
    r = memory.index_workspace()
    assert r.removed == ["memory/2026-02-24.md"]
    assert all(h.source != "memory/2026-02-24.md" for h in memory.search("garden project"))


def test_search_filters(memory: Memory) -> None:
    memory.save("Paid the electricity bill", created_at="2025-05-01T00:00:00Z")
    memory.save("Paid the water bill", source="finance", created_at="2026-05-01T00:00:00Z")
    assert {h.content for h in memory.search("bill", since="2026-01-01")} == {"Paid the water bill"}
    assert {h.content for h in memory.search("bill", until="2025-12-31")} == {
        "Paid the electricity bill"
    }
    assert {h.source for h in memory.search("bill", source="finance")} == {"finance"}


def test_multilingual_recall(memory: Memory) -> None:
    memory.save("Нужно улучшить работу памяти у агента на Raspberry Pi")
    memory.save("我下周二要去看医生，别忘了带病历")
    memory.save("Grocery list: apples, cheese, coffee")
    assert "памяти" in memory.search("память", top_k=1)[0].content
    assert "医生" in memory.search("医生", top_k=1)[0].content
    assert "coffee" in memory.search("shopping list", top_k=1)[0].content


def test_cache_means_rebuild_reembeds_nothing(
    memory: Memory, klaw_home: KlawPaths, backend: OnnxBackend
) -> None:
    (klaw_home.workspace / "MEMORY.md").write_text(NOTES)
    memory.index_workspace()
    cached = memory.cache.count(backend.model_id)
    assert cached >= 1
    texts = [h.content for h in memory.store.get_chunks(list(range(1, 50)))]
    _, hits = backend.embed_cached(memory.cache, texts)
    assert hits == len(texts)  # every chunk comes from the cache
    assert memory.cache.count(backend.model_id) == cached


class RenamedBackend(OnnxBackend):
    """The same network under another model id: what a model upgrade looks like."""


def test_model_change_reembeds_everything(klaw_home: KlawPaths, backend: OnnxBackend) -> None:
    from klaw.config import load_engine_config

    cfg = load_engine_config(klaw_home.engine_config)
    (klaw_home.workspace / "MEMORY.md").write_text(NOTES)
    with Memory.open(paths=klaw_home, config=cfg, backend=backend) as mem:
        mem.index_workspace()
        mem.save("a saved fact about kayaks")
        chunks = mem.store.count_chunks()
    other = RenamedBackend(backend.embedder, backend.model_id + "-v2")
    with Memory.open(paths=klaw_home, config=cfg, backend=other) as mem:
        assert mem.store.meta_get("embedding_model") == other.model_id
        assert mem.cache.count(other.model_id) == chunks  # every chunk embedded again
        assert "kayaks" in mem.search("kayak", top_k=1)[0].content


def test_huge_file_is_refused_without_reading_it(memory: Memory, tmp_path: Path) -> None:
    big = tmp_path / "huge.md"
    with big.open("wb") as f:
        f.truncate(50 * 1024 * 1024)  # sparse 50 MB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(InvalidInput, match="MiB"):
        memory.index_file(big)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert (after - before) < 20 * 1024  # KiB: it was never loaded


def test_invalid_utf8_markdown_is_indexed_with_replacement(
    memory: Memory, klaw_home: KlawPaths, caplog: pytest.LogCaptureFixture
) -> None:
    p = klaw_home.workspace / "MEMORY.md"
    p.write_bytes(b"Valid start about telescopes.\n\xff\xfe broken bytes\nValid end.\n")
    assert memory.index_file(p) == 1
    assert "UTF-8" in caplog.text
    assert "telescopes" in memory.search("telescope", top_k=1)[0].content


def test_missing_file_is_a_clear_error(memory: Memory, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read"):
        memory.index_file(tmp_path / "nope.md")


def test_core_memory_is_searchable(memory: Memory, klaw_home: KlawPaths) -> None:
    from klaw.memory import CoreMemory

    cm = CoreMemory(klaw_home.core_memory)
    cm.update("user", "favourite_tea", "Da Hong Pao oolong")
    memory.index_workspace()
    assert memory.search("favourite tea", top_k=1)[0].source == "core_memory.json"


async def test_asearch_runs_off_the_loop(memory: Memory) -> None:
    memory.save("The boat is moored at pier 7")
    hits = await memory.asearch("where is the boat moored")
    assert "pier 7" in hits[0].content


def test_store_is_only_opened_through_core(memory: Memory) -> None:
    assert isinstance(memory.store, _core.Store)


def test_a_memory_file_too_big_to_index_is_said_out_loud(
    memory: Memory, klaw_home: KlawPaths, caplog: pytest.LogCaptureFixture
) -> None:
    """Finding 10: a 50 MB memory/*.md used to be skipped without a word."""
    notes = klaw_home.workspace / "memory"
    notes.mkdir(exist_ok=True)
    big = notes / "huge.md"
    with big.open("wb") as f:  # sparse: 17 MiB on paper, nothing on disk
        f.truncate(17 * 1024 * 1024)
    (notes / "small.md").write_text("# Small\n\nThe spare key is under the mat.\n")
    with caplog.at_level("WARNING", logger="klaw.memory"):
        report = memory.index_workspace()
    assert "memory/small.md" in report.indexed
    (error,) = report.errors
    assert "huge.md" in error and "not indexed" in error
    assert any(
        "not indexed" in r.getMessage() and "huge.md" in r.getMessage() for r in caplog.records
    )


def test_a_daily_log_is_dated_from_the_start_of_the_owners_day(
    klaw_home: KlawPaths, backend: Any
) -> None:
    """At UTC+14 the owner's 24th starts at 10:00 UTC on the 23rd: a search `since` the
    owner's 24th finds that day's log, whatever the host's zone."""
    klaw_home.engine_config.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.engine_config.write_text("scheduler:\n  timezone: Pacific/Kiritimati\n")
    config = load_engine_config(klaw_home.engine_config)
    mem = Memory.open(paths=klaw_home, config=config, backend=backend)
    try:
        (klaw_home.workspace / "memory").mkdir()
        (klaw_home.workspace / "memory" / "2026-02-24.md").write_text("Met Anna at noon.\n")
        mem.index_workspace()
        hit = mem.search("Anna", top_k=1)[0]
        assert hit.created_at == "2026-02-23T10:00:00Z"
    finally:
        mem.close()

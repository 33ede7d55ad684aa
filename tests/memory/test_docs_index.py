"""The documentation index: where the docs come from, when they are (re)indexed, search."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

import klaw
from klaw import _core
from klaw.config import load_engine_config
from klaw.errors import InvalidInput
from klaw.memory import Memory
from klaw.memory.api import rebuild
from klaw.memory.docs import (
    DOCS_META_KEY,
    MAX_DOC_BYTES,
    DocFile,
    Docs,
    DocSource,
    docs_stamp,
    ensure_docs_indexed,
    resolve_doc_ref,
)
from klaw.paths import KlawPaths

REPO_DOCS = Path(klaw.__file__).resolve().parents[2] / "docs"

GARDEN = """# Garden

Notes for the allotment.

## Watering

Water the tomatoes every morning before nine, twice on hot days.

## Pests

Aphids on the roses: spray them with soapy water, or bring ladybirds.
"""
TELEGRAM = """# Telegram setup

## Bot token

Create a bot with BotFather and paste its token into gateway.yaml under telegram.token.
"""
BACKUP = """# Backups

Copy the data directory to an external drive every night with rsync.
"""


@pytest.fixture
def docs_dir(tmp_path: Path) -> Path:
    d = tmp_path / "docs"
    (d / "guides").mkdir(parents=True)
    (d / "garden.md").write_text(GARDEN)
    (d / "guides" / "telegram.md").write_text(TELEGRAM)
    (d / "backup.md").write_text(BACKUP)
    return d


def test_a_checkout_serves_its_docs_folder_live() -> None:
    source = DocSource.default()
    assert source.root == REPO_DOCS
    names = [f.path for f in source.files()]
    assert names == sorted(p.relative_to(REPO_DOCS).as_posix() for p in REPO_DOCS.rglob("*.md"))
    assert "memory.md" in names and all(n.endswith(".md") for n in names)


def test_the_extension_bundles_every_doc_of_the_checkout() -> None:
    bundled = [name for name, _ in _core.bundled_docs()]
    on_disk = sorted(p.name for p in REPO_DOCS.glob("*.md"))
    assert bundled == on_disk, (
        "docs/ and the docs compiled into klaw._core differ: list every docs/*.md in "
        "BUNDLED in rust/klaw-py/src/docs.rs and rebuild (maturin develop)"
    )
    source = DocSource.bundled()
    assert source.root is None and source.origin.startswith("bundled")
    memory_md = source.get("memory")
    assert memory_md.path == "memory.md" and memory_md.title == "Memory"


def test_titles_and_sections() -> None:
    page = DocFile("x.md", "intro\n## Two\ntext\n```\n# not a heading\n```\n# One\n### Deep\n")
    assert page.title == "One"
    assert page.headings() == [(2, "Two"), (1, "One"), (3, "Deep")]
    assert DocFile("guides/no-heading.md", "just text").title == "no-heading"
    garden = DocFile("garden.md", GARDEN)
    assert garden.section_lines("Pests") == (9, 11)
    assert garden.section_lines("watering") == (5, 8)
    assert garden.section_lines("garden") == (1, 11)
    assert garden.section_lines("weeds") is None


def test_refs_resolve_to_pages_and_lines(docs_dir: Path) -> None:
    source = DocSource.from_dir(docs_dir)
    assert [f.path for f in source.files()] == ["backup.md", "garden.md", "guides/telegram.md"]
    page, start, end = resolve_doc_ref(source, "garden.md#L7-L9")
    assert (page.path, start, end) == ("garden.md", 7, 9)
    assert resolve_doc_ref(source, "guides/telegram")[1:] == (None, None)
    assert resolve_doc_ref(source, "./garden.md#pests")[1:] == (9, 11)
    assert resolve_doc_ref(source, "garden.md#L4")[1:] == (4, 4)
    with pytest.raises(InvalidInput, match=r"no section 'Weeds'.*Watering"):
        resolve_doc_ref(source, "garden.md#Weeds")


def test_the_directory_source_serves_only_its_own_markdown(docs_dir: Path) -> None:
    outside = docs_dir.parent / "secret.md"
    outside.write_text("# Secret\n\npassword=hunter2\n")
    (docs_dir / "leak.md").symlink_to(outside)
    (docs_dir / "notes.txt").write_text("not a doc")
    (docs_dir / "huge.md").write_bytes(b"# Huge\n" + b"x" * MAX_DOC_BYTES)
    source = DocSource.from_dir(docs_dir)
    names = [f.path for f in source.files()]
    assert names == ["backup.md", "garden.md", "guides/telegram.md"]
    for bad in ("../secret.md", "/etc/passwd", "guides/../../secret.md", "..\\secret.md"):
        with pytest.raises(InvalidInput, match=r"outside the documentation|not a docs path"):
            source.get(bad)
    for hidden in ("leak.md", "notes.txt", "huge.md", "nothing.md"):
        with pytest.raises(InvalidInput, match="No documentation page"):
            source.get(hidden)
    with pytest.raises(InvalidInput, match="empty"):
        source.get("  ")
    assert DocSource.from_dir(docs_dir / "missing").files() == []


def test_indexed_once_then_only_when_the_content_changes(memory: Memory, docs_dir: Path) -> None:
    source = DocSource.from_dir(docs_dir)
    first = ensure_docs_indexed(memory, source)
    assert first.indexed and first.files == 3 and first.chunks >= 3
    assert memory.store.count_docs() == first.chunks
    stamp = json.loads(memory.store.meta_get(DOCS_META_KEY) or "{}")
    assert stamp["version"] == klaw.__version__ and stamp["model"] == memory.backend.model_id
    assert memory.store.integrity_check() == []

    again = ensure_docs_indexed(memory, source)
    assert not again.indexed and again.chunks == first.chunks and again.stamp == first.stamp

    (docs_dir / "backup.md").write_text(BACKUP + "\nKeep two copies, one off site.\n")
    edited = ensure_docs_indexed(memory, source)
    assert edited.indexed and edited.stamp != first.stamp
    assert edited.cache_hits >= 1  # the unchanged chunks came from the embedding cache
    assert not ensure_docs_indexed(memory, source).indexed

    (docs_dir / "garden.md").unlink()
    fewer = ensure_docs_indexed(memory, source)
    assert fewer.indexed and fewer.files == 2
    assert all(h.path != "garden.md" for h in Docs(memory, source).search("aphids roses", 10))


def test_a_new_klaw_version_reindexes(
    memory: Memory, docs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = DocSource.from_dir(docs_dir)
    assert ensure_docs_indexed(memory, source).indexed
    monkeypatch.setattr(klaw, "__version__", "99.0.0")
    upgraded = ensure_docs_indexed(memory, source)
    assert upgraded.indexed and upgraded.cache_hits == upgraded.chunks
    hit = memory.store.search_docs(None, "aphids", _core.SearchParams(top_k=1))[0]
    assert hit.version == "99.0.0" and hit.file == "garden.md"
    assert not ensure_docs_indexed(memory, source).indexed
    assert ensure_docs_indexed(memory, source, force=True).indexed


def test_the_stamp_covers_version_model_chunking_and_text() -> None:
    files = [DocFile("a.md", "# A\n")]
    base = docs_stamp(files, "m1", 400, 80)
    assert docs_stamp(files, "m1", 400, 80) == base
    assert docs_stamp(files, "m2", 400, 80) != base
    assert docs_stamp(files, "m1", 300, 80) != base
    assert docs_stamp([DocFile("a.md", "# B\n")], "m1", 400, 80) != base
    assert docs_stamp([DocFile("b.md", "# A\n")], "m1", 400, 80) != base


def test_search_finds_the_right_page_and_section(memory: Memory, docs_dir: Path) -> None:
    docs = Docs(memory, DocSource.from_dir(docs_dir))
    assert memory.store.count_docs() == 0
    # The first search indexes an empty index itself.
    hits = docs.search("how do I get rid of the bugs on my roses?", 3)
    # A small page is one chunk: cited by its lines, under its top heading.
    assert hits[0].path == "garden.md" and hits[0].section == "Garden"
    assert hits[0].citation == "garden.md#L1-L11"
    assert docs.search("where does the BotFather token go", 1)[0].path == "guides/telegram.md"
    assert docs.search("nightly copy to an external disk", 1)[0].path == "backup.md"
    assert docs.search("rsync", 1)[0].path == "backup.md"  # keyword half
    with pytest.raises(InvalidInput):
        docs.search("  ")
    with pytest.raises(InvalidInput):
        docs.search("x", 0)


def test_the_real_docs_answer_questions_about_klaw(memory: Memory) -> None:
    docs = Docs(memory)
    report = docs.ensure_indexed()
    assert report.indexed and report.files == len(list(REPO_DOCS.rglob("*.md")))
    assert report.seconds < 120
    hits = docs.search("how are tokens counted without the real tokenizer?", 3)
    assert "token-counting.md" in [h.path for h in hits]
    hits = docs.search("what is stored in core memory", 3)
    assert "memory.md" in [h.path for h in hits]


def test_concurrent_callers_index_once(memory: Memory, docs_dir: Path) -> None:
    source = DocSource.from_dir(docs_dir)
    reports = []
    threads = [
        threading.Thread(target=lambda: reports.append(ensure_docs_indexed(memory, source)))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.indexed for r in reports) == [False, False, True]


def test_klaw_reindex_leaves_the_docs_to_the_next_start(
    memory: Memory, klaw_home: KlawPaths, backend: object, docs_dir: Path
) -> None:
    source = DocSource.from_dir(docs_dir)
    n = ensure_docs_indexed(memory, source).chunks
    memory.close()
    rebuild(klaw_home, load_engine_config(klaw_home.engine_config), backend=backend, progress=False)  # type: ignore[arg-type]
    mem = Memory.open(
        paths=klaw_home, config=load_engine_config(klaw_home.engine_config), backend=backend
    )  # type: ignore[arg-type]
    try:
        assert mem.store.count_docs() == 0 and mem.store.meta_get(DOCS_META_KEY) is None
        again = ensure_docs_indexed(mem, source)
        assert again.indexed and again.chunks == n and again.cache_hits == n
    finally:
        mem.close()

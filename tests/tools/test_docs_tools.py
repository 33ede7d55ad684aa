"""docs_list / docs_read / docs_search through the registry, on a real klaw.db and model."""

from __future__ import annotations

from pathlib import Path

import pytest

from klaw.memory import Memory
from klaw.memory.docs import Docs, DocSource
from klaw.tools import ToolRegistry
from klaw.tools.docs import DocsList, DocsRead, DocsSearch

ALPHA = "# Alpha guide\n\n" + "".join(
    f"## Step {i}\n\nDo thing number {i} with the alpha lever.\n\n" for i in range(1, 41)
)
SCHEDULER = """# Scheduler

Klaw runs recurring jobs from HEARTBEAT.md.

## Cron syntax

Each job has a five-field cron expression such as `0 9 * * 1-5` for weekday mornings.
"""


@pytest.fixture
def docs_dir(tmp_path: Path) -> Path:
    d = tmp_path / "docs"
    (d / "guides").mkdir(parents=True)
    (d / "alpha.md").write_text(ALPHA)
    (d / "guides" / "scheduler.md").write_text(SCHEDULER)
    (tmp_path / "secret.md").write_text("# Secret\n\ntoken=abc\n")
    (d / "link.md").symlink_to(tmp_path / "secret.md")
    (d / "notes.txt").write_text("not documentation")
    return d


@pytest.fixture
def docs(memory: Memory, docs_dir: Path) -> Docs:
    return Docs(memory, DocSource.from_dir(docs_dir))


@pytest.fixture
def reg(docs: Docs) -> ToolRegistry:
    return ToolRegistry([DocsList(docs), DocsRead(docs, max_chars=1200), DocsSearch(docs)])


def test_schemas(reg: ToolRegistry) -> None:
    assert reg.names() == ["docs_list", "docs_read", "docs_search"]
    for schema in reg.schemas():
        assert schema.parameters["type"] == "object" and schema.description


async def test_list_shows_pages_titles_and_sections(reg: ToolRegistry) -> None:
    res = await reg.dispatch("docs_list", {})
    assert not res.is_error
    lines = res.content.splitlines()
    assert lines[0] == "Klaw documentation (2 pages):"
    assert lines[1].startswith("- alpha.md: Alpha guide (")
    assert "Step 1; Step 2" in lines[2] and "+28 more" in lines[2]
    assert lines[3].startswith("- guides/scheduler.md: Scheduler (")
    assert lines[4] == "  sections: Cron syntax"
    assert "link.md" not in res.content and "notes.txt" not in res.content


async def test_list_without_docs(memory: Memory, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    res = await DocsList(Docs(memory, DocSource.from_dir(empty))).run({})
    assert res == "No documentation is installed."


async def test_read_whole_page_section_and_citation(reg: ToolRegistry) -> None:
    res = await reg.dispatch("docs_read", {"path": "guides/scheduler.md"})
    assert not res.is_error and res.content == SCHEDULER.rstrip("\n")
    res = await reg.dispatch("docs_read", {"path": "guides/scheduler"})
    assert res.content == SCHEDULER.rstrip("\n")
    res = await reg.dispatch("docs_read", {"path": "guides/scheduler.md#cron-syntax"})
    assert res.content.startswith("## Cron syntax\n") and "five-field" in res.content
    assert res.content.endswith("[guides/scheduler.md: lines 5-7 of 7]")
    res = await reg.dispatch("docs_read", {"path": "alpha.md#L3-L4"})
    assert res.content == "## Step 1\n[alpha.md: lines 3-4 of 162; continue with offset=5]"
    res = await reg.dispatch("docs_read", {"path": "alpha.md#Step 40"})
    assert res.content.startswith("## Step 40\n") and res.content.endswith("of 162]")


async def test_read_pages_a_long_page(reg: ToolRegistry) -> None:
    res = await reg.dispatch("docs_read", {"path": "alpha.md"})
    assert not res.is_error and len(res.content) <= 1200
    assert res.content.startswith("# Alpha guide\n")
    note = res.content.splitlines()[-1]
    assert note.startswith("[alpha.md: lines 1-") and "continue with offset=" in note
    nxt = int(note.rsplit("=", 1)[1].rstrip("]"))
    res = await reg.dispatch("docs_read", {"path": "alpha.md", "offset": nxt, "limit": 2})
    assert res.content.endswith(
        f"[alpha.md: lines {nxt}-{nxt + 1} of 162; continue with offset={nxt + 2}]"
    )
    res = await reg.dispatch("docs_read", {"path": "alpha.md", "offset": 500})
    assert res.is_error and "past the end" in res.content and "162 lines" in res.content


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../secret.md", "outside the documentation"),
        ("/etc/passwd", "outside the documentation"),
        ("guides/../../secret.md", "outside the documentation"),
        ("..\\secret.md", "not a docs path"),
        ("link.md", "No documentation page 'link.md'. Pages: alpha.md, guides/scheduler.md"),
        ("notes.txt", "No documentation page"),
        ("missing.md", "No documentation page"),
        ("alpha.md#Step 99", "alpha.md has no section 'Step 99'"),
    ],
)
async def test_read_refuses_anything_but_a_listed_page(
    reg: ToolRegistry, path: str, message: str
) -> None:
    res = await reg.dispatch("docs_read", {"path": path})
    assert res.is_error and message in res.content
    assert "token=abc" not in res.content


async def test_read_arguments_are_validated(reg: ToolRegistry) -> None:
    assert (await reg.dispatch("docs_read", {})).is_error
    assert (await reg.dispatch("docs_read", {"path": ""})).is_error
    assert (await reg.dispatch("docs_read", {"path": "alpha.md", "offset": 0})).is_error


async def test_search_cites_snippets_that_docs_read_accepts(reg: ToolRegistry) -> None:
    res = await reg.dispatch("docs_search", {"query": "how do I write a cron schedule?"})
    assert not res.is_error
    first = res.content.split("\n\n[2]")[0]
    assert first.startswith("[1] guides/scheduler.md#L1-L7 — Scheduler (score ")
    assert "five-field cron expression" in first
    citation = first.split()[1]
    res = await reg.dispatch("docs_read", {"path": citation})
    assert res.content == SCHEDULER.rstrip("\n")


async def test_search_top_k_and_errors(reg: ToolRegistry) -> None:
    res = await reg.dispatch("docs_search", {"query": "alpha lever", "top_k": 1})
    assert res.content.startswith("[1] alpha.md#L") and "[2]" not in res.content
    assert (await reg.dispatch("docs_search", {"query": "x", "top_k": 0})).is_error
    assert (await reg.dispatch("docs_search", {"query": "x", "top_k": 21})).is_error
    res = await reg.dispatch("docs_search", {"query": "   "})
    assert res.is_error and "must not be empty" in res.content


async def test_search_with_no_docs(memory: Memory, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    res = await DocsSearch(Docs(memory, DocSource.from_dir(empty))).run({"query": "cron"})
    assert res.startswith("Nothing in the documentation matches 'cron'")

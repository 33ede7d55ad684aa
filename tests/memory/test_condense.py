"""The condense proposal for a MEMORY.md over its share of the prompt (issue 25 item 6):
real files, a real git repository, the real token counter."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from klaw.memory.condense import (
    PROPOSAL_FILE,
    CondenseError,
    apply_proposal,
    propose,
    read_proposal,
    write_proposal,
)
from klaw.memory.rows import count_tokens_batch
from klaw.memory.versioning import versioner


def big_memory_md(sections: int = 6, items: int = 40) -> str:
    parts = ["# MEMORY.md\n\nCurated by the owner.\n"]
    for s in range(sections):
        parts.append(f"\n## Topic {s}\n\n")
        parts.extend(
            f"- Topic {s} fact {i}: the owner noted something worth keeping, item {i}.\n"
            for i in range(items)
        )
    return "".join(parts)


def test_the_proposal_is_extractive_and_within_the_target(tmp_path: Path) -> None:
    data = big_memory_md().encode()
    p = propose(data, 400, count_tokens_batch, "2026-11-27", tmp_path)
    assert p.needed and p.tokens_before > 400 >= p.tokens_after
    owner_lines = set(data.decode().splitlines())
    for line in (p.condensed + p.moved).splitlines():
        if line and not line.startswith(("_Condensed by Klaw", "# MEMORY.md: entries moved")):
            assert line.lstrip("#") in {x.lstrip("#") for x in owner_lines}, line
    # every section keeps its first entries: round-robin, first entries first
    for s in range(6):
        assert f"Topic {s} fact 0:" in p.condensed
        assert f"## Topic {s}" in p.condensed
    # nothing lost: each entry is in the new file or in what moves out
    for s in range(6):
        for i in range(40):
            assert f"Topic {s} fact {i}:" in p.condensed + p.moved
    assert p.archive_path == "memory/archive/MEMORY-2026-11-27.md"
    small = propose(b"# MEMORY.md\n- one\n", 400, count_tokens_batch, "2026-11-27", tmp_path)
    assert not small.needed


def test_repeated_entries_are_kept_once(tmp_path: Path) -> None:
    text = (
        "# M\n\n"
        + "- the same fact\n" * 30
        + "".join(f"- fact {i} " * 20 + "\n" for i in range(30))
    )
    p = propose(text.encode(), 200, count_tokens_batch, "2026-11-27", tmp_path)
    assert p.condensed.count("- the same fact") == 1


def git(ws: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ws), *args], capture_output=True, text=True, check=True
    ).stdout


def test_apply_writes_both_files_in_one_commit_and_refuses_a_stale_proposal(
    tmp_path: Path,
) -> None:
    ws = tmp_path
    (ws / "MEMORY.md").write_text(big_memory_md())
    vg = versioner(ws)
    vg.setting = True
    assert vg.active  # memory.git: true initialised the repository
    data = (ws / "MEMORY.md").read_bytes()
    write_proposal(ws, propose(data, 400, count_tokens_batch, "2026-11-27", ws))
    # the owner edits the proposal before accepting it: their version is what applies
    proposal = (ws / PROPOSAL_FILE).read_text()
    (ws / PROPOSAL_FILE).write_text(proposal.replace("Curated by the owner.", "Curated."))
    paths = apply_proposal(ws)
    assert vg.flush(30)
    assert paths == ["MEMORY.md", "memory/archive/MEMORY-2026-11-27.md"]
    assert not (ws / PROPOSAL_FILE).exists()
    assert "Curated.\n" in (ws / "MEMORY.md").read_text()
    assert "Topic 5 fact 39" in (ws / "memory/archive/MEMORY-2026-11-27.md").read_text()
    [entry, _baseline] = vg.log_entries()
    assert entry.subject == "memory: condense MEMORY.md"
    assert sorted(entry.paths) == paths
    assert git(ws, "status", "--porcelain") == ""
    # a proposal made before the owner's next edit is refused, nothing written
    write_proposal(ws, propose(big_memory_md().encode(), 400, count_tokens_batch, "x", ws))
    before = (ws / "MEMORY.md").read_text()
    with pytest.raises(CondenseError, match="changed since the proposal"):
        apply_proposal(ws)
    assert (ws / "MEMORY.md").read_text() == before


def test_a_proposal_without_its_markers_or_pointing_outside_is_refused(tmp_path: Path) -> None:
    (tmp_path / "MEMORY.md").write_text("x\n")
    (tmp_path / PROPOSAL_FILE).write_text("just text\n")
    with pytest.raises(CondenseError, match="markers are missing"):
        read_proposal(tmp_path)
    from klaw.memory.condense import digest

    source = digest(b"x\n")
    (tmp_path / PROPOSAL_FILE).write_text(
        f"<!-- klaw condense: proposal for MEMORY.md {source} -->\nnew\n"
        "<!-- klaw condense: what follows moves to ../../etc/passwd -->\nmoved\n"
    )
    with pytest.raises(CondenseError, match="must be under memory/archive/"):
        apply_proposal(tmp_path)
    assert (tmp_path / "MEMORY.md").read_text() == "x\n"


def test_nightly_upkeep_archives_and_proposes_once_per_text(tmp_path: Path) -> None:
    from datetime import date

    from klaw.config import load_engine_config
    from klaw.memory.upkeep import nightly_upkeep

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2025-01-02.md").write_text("# old day\n")
    (ws / "MEMORY.md").write_text(big_memory_md())
    cfg_path = tmp_path / "engine.yaml"
    cfg_path.write_text("memory:\n  prompt:\n    memoryMdTokens: 400\n")
    cfg = load_engine_config(cfg_path)
    first = nightly_upkeep(ws, cfg, date(2026, 11, 27))
    assert first.archived == 1 and first.proposal == ws / PROPOSAL_FILE
    assert (ws / "memory" / "archive" / "2025-01-02.md").is_file()
    assert nightly_upkeep(ws, cfg, date(2026, 11, 28)).proposal is None  # one is waiting
    (ws / "MEMORY.md").write_text(big_memory_md(7))  # the owner edited it meanwhile
    assert nightly_upkeep(ws, cfg, date(2026, 11, 29)).proposal is not None
    assert read_proposal(ws) is not None
    assert (ws / "MEMORY.md").read_text() == big_memory_md(7)  # never applied here


def test_apply_refuses_an_archive_folder_leading_outside(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "memory" / "archive").symlink_to(outside)
    original = big_memory_md()
    (ws / "MEMORY.md").write_text(original)
    write_proposal(ws, propose(original.encode(), 400, count_tokens_batch, "2026-11-27", ws))
    with pytest.raises(CondenseError, match="leads outside the workspace"):
        apply_proposal(ws)
    assert list(outside.iterdir()) == [] and (ws / "MEMORY.md").read_text() == original

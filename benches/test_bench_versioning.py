"""Versioned memory: what a commit costs per memory write (issue 25 items 7, 10).

A workspace of a year of daily logs, 200 bank pages and MEMORY.md in a git repository.
One memory write is the OpenClaw write-back's append of a saved fact to the day's log
(one O_APPEND write and an fsync). Measured in the same run:

- baseline: the write alone (versioning off);
- writer: the write wrapped in `MemoryGit.change`, what the writer's thread pays (the
  file read before and after, and the queueing; the commit runs on the worker);
- commit: the write and its commit done synchronously (`commit_now`), what the worker
  spends per write: eleven git calls (HEAD, its version of the file, the blob, the tree
  on a private index, the commit, the ref, the filter drivers, the owner's index).

Bar: the writer's extra cost is within 2 ms at p50 (a reply never waits for git).
"""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest

from klaw.memory.versioning import Change, MemoryGit
from klaw.openclaw.writeback import _append as append
from smoke import SMOKE, scaled

DAYS = scaled(365, 20)
PAGES = scaled(200, 10)
WRITER_BAR_MS = 2.0

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="git is not installed",
)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("versioned-ws")
    (ws / "memory").mkdir()
    (ws / "bank" / "entities").mkdir(parents=True)
    for d in range(DAYS):
        day = f"2025-{d // 28 % 12 + 1:02d}-{d % 28 + 1:02d}-{d}"
        (ws / "memory" / f"{day}.md").write_text(
            f"# {day}\n\n" + "".join(f"- 09:{i:02d} a line of the day's log\n" for i in range(30))
        )
    for p in range(PAGES):
        (ws / "bank" / "entities" / f"person-{p}.md").write_text(f"# Person {p}\n\n- a fact\n" * 5)
    (ws / "MEMORY.md").write_text("# MEMORY.md\n\n" + "- a durable fact\n" * 100)
    MemoryGit(ws, enabled=True).init()
    return ws


def _append(path: Path, text: bytes) -> None:
    """The write-back's own append (one O_APPEND write and an fsync)."""
    append(path, text.decode())


LOG = "memory/2026-11-27.md"


@pytest.mark.benchmark(group="memory-write")
def test_write_baseline(benchmark: Any, workspace: Path) -> None:
    path = workspace / "memory" / "baseline.md"
    benchmark(_append, path, b"- 09:30 a saved fact\n")


@pytest.mark.benchmark(group="memory-write")
def test_write_with_commit_queued(benchmark: Any, workspace: Path) -> None:
    git = MemoryGit(workspace)
    path = workspace / LOG

    def write() -> None:
        with git.change([path], "write back a saved fact", "bench"):
            _append(path, b"- 09:30 a saved fact\n")

    benchmark(write)
    assert git.flush(600)


@pytest.mark.benchmark(group="memory-write")
def test_write_and_commit(benchmark: Any, workspace: Path) -> None:
    git = MemoryGit(workspace)
    path = workspace / LOG

    def write_and_commit() -> None:
        before = path.read_bytes() if path.exists() else None
        _append(path, b"- 09:31 a saved fact\n")
        git.commit_now([Change(LOG, before, path.read_bytes())], "memory: bench\n")

    benchmark.pedantic(write_and_commit, rounds=scaled(30, 2), iterations=1)
    assert (
        subprocess.run(
            ["git", "-C", str(workspace), "status", "--porcelain", "--", LOG],
            capture_output=True,
            text=True,
        ).stdout
        == ""
    )


def test_writer_pays_no_commit(workspace: Path) -> None:
    """The writer's p50 with versioning on against off, in one loop (not timed by
    pytest-benchmark: a ratio of two medians measured side by side)."""
    import time

    git = MemoryGit(workspace)
    path, other = workspace / LOG, workspace / "memory" / "plain.md"
    on, off = [], []
    for _ in range(scaled(60, 3)):
        t = time.perf_counter()
        _append(other, b"- x\n")
        off.append(time.perf_counter() - t)
        t = time.perf_counter()
        with git.change([path], "x"):
            _append(path, b"- x\n")
        on.append(time.perf_counter() - t)
    assert git.flush(600)
    extra = (statistics.median(on) - statistics.median(off)) * 1000
    print(f"\nwriter's extra cost p50: {extra:.3f} ms")
    if not SMOKE:
        assert extra < WRITER_BAR_MS

"""The memory watcher outlives odd file names in the workspace (hostile 14): a file
name that is not UTF-8 in /output made watchfiles raise, the watcher ended for good,
and later MEMORY.md edits were not indexed until a restart; such a name under memory/
made every indexing pass fail (the store takes UTF-8 labels only)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator

import pytest

from klaw.memory import IndexReport, Memory
from klaw.memory.watch import MemoryWatcher
from klaw.paths import KlawPaths


async def _indexed(reports: asyncio.Queue[IndexReport], source: str) -> None:
    while source not in (await asyncio.wait_for(reports.get(), 60)).indexed:
        pass


@contextlib.asynccontextmanager
async def _watching(
    memory: Memory,
) -> AsyncIterator[tuple[MemoryWatcher, asyncio.Queue[IndexReport], asyncio.Task[None]]]:
    """A running watcher, its reports and its task; stopped at the end."""
    reports: asyncio.Queue[IndexReport] = asyncio.Queue()
    watcher = MemoryWatcher(memory, debounce_ms=100, on_indexed=reports.put_nowait)
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        yield watcher, reports, task
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_a_non_utf8_file_name_does_not_stop_memory_edits_being_indexed(
    memory: Memory, klaw_home: KlawPaths, caplog: pytest.LogCaptureFixture
) -> None:
    ws = klaw_home.workspace
    (ws / "MEMORY.md").write_text("The bicycle lock code is 4821.\n")
    # Watched from the start, as the sandbox's staging folder is: the watch is on it
    # when the file appears (a folder made at once with its file can hide the file).
    out = os.fsencode(ws / "outputs" / "telegram_1")
    os.makedirs(out)
    caplog.set_level(logging.WARNING, logger="klaw.memory.watch")
    async with _watching(memory) as (watcher, reports, task):
        await _indexed(reports, "MEMORY.md")
        # What a script's `open(b"/output/\xff\xfe.txt", "w")` leaves in the workspace.
        with open(out + b"/\xff\xfe.txt", "wb") as f:
            f.write(b"x")
        deadline = asyncio.get_running_loop().time() + 60
        while watcher.failures == 0:  # the watch meets the name and fails
            assert asyncio.get_running_loop().time() < deadline, "the watch never saw the file"
            await asyncio.sleep(0.05)
        assert not task.done()
        failed = [r.getMessage() for r in caplog.records if r.name == "klaw.memory.watch"]
        assert any(
            "the workspace memory watch failed" in m
            and "decode path" in m
            and "watching again" in m
            for m in failed
        ), failed

        (ws / "MEMORY.md").write_text("The bicycle lock code is 1234.\n")
        await _indexed(reports, "MEMORY.md")
        assert "1234" in memory.search("bicycle lock code", top_k=1)[0].content
        # The watch that was started again sees the next edit as it happens.
        (ws / "memory").mkdir()
        (ws / "memory" / "2026-03-01.md").write_text("Booked a table at Mirabelle.\n")
        await _indexed(reports, "memory/2026-03-01.md")
        assert not task.done()


async def test_a_memory_note_whose_name_is_not_utf8_is_skipped_and_the_rest_indexed(
    memory: Memory, klaw_home: KlawPaths, caplog: pytest.LogCaptureFixture
) -> None:
    ws = klaw_home.workspace
    (ws / "memory").mkdir()
    (ws / "MEMORY.md").write_text("The bicycle lock code is 4821.\n")
    caplog.set_level(logging.WARNING, logger="klaw.memory")
    async with _watching(memory) as (_, reports, task):
        await _indexed(reports, "MEMORY.md")
        with open(os.fsencode(ws / "memory") + b"/\xff-llamas.md", "wb") as f:
            f.write(b"Notes about llamas.\n")
        (ws / "memory" / "2026-03-01.md").write_text("Booked a table at Mirabelle.\n")
        await _indexed(reports, "memory/2026-03-01.md")
        (ws / "MEMORY.md").write_text("The bicycle lock code is 1234.\n")
        await _indexed(reports, "MEMORY.md")
        assert "1234" in memory.search("bicycle lock code", top_k=1)[0].content
        assert [f.path for f in memory.store.list_files() if "llamas" in f.path] == []
        assert "not indexed: memory/\\xff-llamas.md: the name is not valid UTF-8" in caplog.text
        assert not task.done()

"""Workspace edits are picked up while running (watch + debounce), not only at start."""

from __future__ import annotations

import asyncio

from klaw.memory import IndexReport, Memory
from klaw.memory.watch import MemoryWatcher
from klaw.paths import KlawPaths


async def test_watcher_reindexes_changed_memory_files(memory: Memory, klaw_home: KlawPaths) -> None:
    ws = klaw_home.workspace
    (ws / "MEMORY.md").write_text("The bicycle lock code is 4821.\n")
    reports: asyncio.Queue[IndexReport] = asyncio.Queue()
    watcher = MemoryWatcher(memory, debounce_ms=100, on_indexed=reports.put_nowait)
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        first = await asyncio.wait_for(reports.get(), 30)
        assert first.indexed == ["MEMORY.md"]  # indexed at start
        await asyncio.wait_for(watcher.ready.wait(), 30)
        (ws / "memory").mkdir()
        (ws / "memory" / "2026-03-01.md").write_text("Booked a table at Mirabelle for Friday.\n")
        report = await asyncio.wait_for(reports.get(), 30)
        while "memory/2026-03-01.md" not in report.indexed:
            report = await asyncio.wait_for(reports.get(), 30)
        hits = await memory.asearch("restaurant reservation Mirabelle", top_k=1)
        assert hits[0].source == "memory/2026-03-01.md"
        # A new nested directory with a file written at once (before a watch on the
        # directory can exist) is still picked up.
        (ws / "memory" / "trips" / "2026").mkdir(parents=True)
        (ws / "memory" / "trips" / "2026" / "lisbon.md").write_text("Hotel in Alfama.\n")
        report = await asyncio.wait_for(reports.get(), 30)
        while "memory/trips/2026/lisbon.md" not in report.indexed:
            report = await asyncio.wait_for(reports.get(), 30)
        # Files outside MEMORY.md / memory/ don't trigger indexing.
        (ws / "notes.txt").write_text("ignored")
        (ws / "MEMORY.md").write_text("The bicycle lock code is 1234.\n")
        report = await asyncio.wait_for(reports.get(), 30)
        while "MEMORY.md" not in report.indexed:
            report = await asyncio.wait_for(reports.get(), 30)
        assert "1234" in memory.search("bicycle lock code", top_k=1)[0].content
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)

"""Picks up workspace memory edits while running: watch + debounce → re-index.

The engine runs `MemoryWatcher.run` as a task; each debounced batch of changes
to MEMORY.md or memory/*.md triggers `Memory.index_workspace` in a thread, which
re-chunks only the files whose hash changed and forgets deleted ones.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from klaw.errors import Cancelled
from klaw.memory.api import IndexReport, Memory

log = logging.getLogger("klaw.memory.watch")


class MemoryWatcher:
    def __init__(
        self,
        memory: Memory,
        debounce_ms: int = 1000,
        on_indexed: Callable[[IndexReport], None] | None = None,
    ) -> None:
        self.memory = memory
        self.debounce_ms = debounce_ms
        self.on_indexed = on_indexed
        self.ready = asyncio.Event()

    def _relevant(self, path: str) -> bool:
        p = Path(path)
        ws = self.memory.paths.workspace.resolve()
        try:
            rel = p.resolve().relative_to(ws)
        except ValueError:
            return False
        parts = rel.parts
        return rel.as_posix() == "MEMORY.md" or (
            len(parts) >= 2 and parts[0] == "memory" and p.suffix == ".md"
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Watches until `stop` is set. Indexes once at start so nothing is missed."""
        from watchfiles import awatch

        ws = self.memory.paths.workspace
        ws.mkdir(parents=True, exist_ok=True)
        try:
            report = await asyncio.to_thread(self.memory.index_workspace)
        except Cancelled:
            log.info("indexing cancelled: memory is closing")
            return
        if self.on_indexed:
            self.on_indexed(report)
        watcher = awatch(
            ws,
            stop_event=stop,
            debounce=self.debounce_ms,
            step=50,
            watch_filter=lambda _change, path: self._relevant(path),
            yield_on_timeout=False,
        )
        self.ready.set()
        async for changes in watcher:
            log.info("workspace memory changed (%d paths); re-indexing", len(changes))
            try:
                report = await asyncio.to_thread(self.memory.index_workspace)
            except Cancelled:
                log.info("re-indexing cancelled: memory is closing")
                return
            except Exception:  # a bad file must not kill the watcher
                log.exception("re-indexing the workspace failed")
                continue
            if self.on_indexed:
                self.on_indexed(report)

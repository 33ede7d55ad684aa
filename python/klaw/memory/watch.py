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

# How often the watch wakes when nothing changes; the first wake-up starts indexing.
_WATCH_POLL_MS = 500


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
        # Directories count (`memory/`, `memory/trips/`: no suffix): a file written at
        # once into a new directory can land before the watch on that directory
        # exists, so its own event is lost and only the directory's is seen.
        return rel.as_posix() == "MEMORY.md" or (
            len(parts) >= 1 and parts[0] == "memory" and p.suffix in (".md", "")
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Watches until `stop` is set. Indexes once the watch is in place, so a change
        made at any moment after `run` starts is seen (by that pass or by the watch)."""
        from watchfiles import awatch

        ws = self.memory.paths.workspace
        ws.mkdir(parents=True, exist_ok=True)
        # awatch installs its inotify watch before it first waits; the first thing it
        # yields (an empty set after a short timeout, or changes) proves the watch is
        # live. Indexing before that would miss a file written in between.
        watcher = awatch(
            ws,
            stop_event=stop,
            debounce=self.debounce_ms,
            step=50,
            watch_filter=lambda _change, path: self._relevant(path),
            rust_timeout=_WATCH_POLL_MS,
            yield_on_timeout=True,
        )
        first = True
        async for changes in watcher:
            if not changes and not first:
                continue  # the periodic timeout tick
            if first:
                first = False
            else:
                log.info("workspace memory changed (%d paths); re-indexing", len(changes))
            try:
                report = await asyncio.to_thread(self.memory.index_workspace)
            except Cancelled:
                log.info("indexing cancelled: memory is closing")
                return
            except Exception:  # a bad file must not kill the watcher
                log.exception("indexing the workspace failed")
                continue
            finally:
                self.ready.set()
            if self.on_indexed:
                self.on_indexed(report)

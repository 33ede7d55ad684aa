"""Picks up workspace memory edits while running: watch + debounce → re-index.

The engine runs `MemoryWatcher.run` as a task; each debounced batch of changes
to MEMORY.md or memory/*.md triggers `Memory.index_workspace` in a thread, which
re-chunks only the files whose hash changed and forgets deleted ones.

The watch covers the whole workspace, where code_execute's files land too, and
watchfiles gives up on a name it cannot decode (a non-UTF-8 file name in /output)
or on a lost inotify watch. So a failed watch is logged and started again after a
back-off (1 s, doubling to a minute; back to 1 s after a minute of watching), and
each new watch begins with an indexing pass: no edit made meanwhile is missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

from klaw.errors import Cancelled
from klaw.memory.api import IndexReport, Memory

log = logging.getLogger("klaw.memory.watch")

# How often the watch wakes when nothing changes; the first wake-up starts indexing.
_WATCH_POLL_MS = 500
#: Back-off between watches that failed: from RETRY_S, doubling up to RETRY_MAX_S;
#: a watch that lived HEALTHY_S before failing starts the back-off afresh.
RETRY_S = 1.0
RETRY_MAX_S = 60.0
HEALTHY_S = 60.0


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
        self.failures = 0  # watches that failed and were started again

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
            len(parts) >= 1 and parts[0] in ("memory", "bank") and p.suffix in (".md", "")
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Watches until `stop` is set, starting the watch again when it fails."""
        delay = RETRY_S
        while not stop.is_set():
            started = time.monotonic()
            try:
                if await self._watch(stop):
                    return
            except Exception as exc:  # whatever watchfiles raised: watch again
                self.failures += 1
                if time.monotonic() - started >= HEALTHY_S:
                    delay = RETRY_S
                log.warning(
                    "the workspace memory watch failed (%s); watching again in %.0f s",
                    _describe(exc),
                    delay,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                delay = min(delay * 2, RETRY_MAX_S)

    async def _watch(self, stop: asyncio.Event) -> bool:
        """One watch, until `stop` is set (False) or memory closes (True). Indexes once
        the watch is in place, so a change made at any moment after it starts is seen
        (by that pass or by the watch). Raises whatever the watch fails with."""
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
                return True
            except Exception:  # a bad file must not kill the watcher
                log.exception("indexing the workspace failed")
                continue
            finally:
                self.ready.set()
            if self.on_indexed:
                self.on_indexed(report)
        return False


def _describe(exc: BaseException) -> str:
    """The errors inside an exception group (awatch raises from a task group)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"

"""The gateway's conversation logs: the only writer of interactive JSONL (§2.4, §5.2).

`LogBook.write(chat_id, lines)` appends the lines whose ids are not in their day
file yet, so a redelivered Telegram update, a re-sent buffered message or a re-sent
engine reply never writes a second line. The ids of a day file are read once, on
first use, and then kept up to date in memory.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from klaw.wire.logfile import JsonlWriter, iter_jsonl
from klaw.wire.loglines import to_record
from klaw.wire.protocol import LogLine
from klaw.wire.record import Record

__all__ = ["LogBook"]

log = logging.getLogger("klaw.gateway")

_MAX_CACHED_FILES = 256


class LogBook:
    def __init__(self, root: Path) -> None:
        self.writer = JsonlWriter(root)
        self._ids: dict[Path, set[str]] = {}
        # Inbound and outbound are logged from worker threads: one lock keeps a day
        # file's id set from being loaded twice and losing an id.
        self._lock = threading.RLock()

    def _known(self, path: Path) -> set[str]:
        ids = self._ids.get(path)
        if ids is None:
            if len(self._ids) >= _MAX_CACHED_FILES:
                self._ids.pop(next(iter(self._ids)))
            ids = {str(r.get("id")) for r in iter_jsonl(path)} if path.exists() else set()
            self._ids[path] = ids
        return ids

    def has(self, chat_id: str, line: LogLine) -> bool:
        record = to_record(line)
        with self._lock:
            return record.id in self._known(self.writer.path_for(chat_id, record))

    def write(self, chat_id: str, lines: Sequence[LogLine]) -> int:
        """Appends the new ones among `lines`, in order; returns how many were written."""
        with self._lock:
            return self._write(chat_id, lines)

    def _write(self, chat_id: str, lines: Sequence[LogLine]) -> int:
        fresh: list[Record] = []
        for line in lines:
            record = to_record(line)
            known = self._known(self.writer.path_for(chat_id, record))
            if record.id in known or any(r.id == record.id for r in fresh):
                continue
            fresh.append(record)
        if fresh:
            self.writer.append_many(chat_id, fresh)
            for record in fresh:
                self._known(self.writer.path_for(chat_id, record)).add(record.id)
        return len(fresh)

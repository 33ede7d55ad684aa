"""Conversation logs: append-only JSONL, one message a line (design §5.2).

Layout: ``conversations/{chat_id}/YYYY-MM-DD.jsonl``, one file per chat per UTC day,
the day taken from the record's ``ts``. A line is one JSON object::

    {"id": "msg_001", "ts": "2026-02-24T14:30:00Z", "role": "user", "content": "Hi",
     "type": "session_break", "meta": {"channel": "telegram", "chat_id": "123456"}}

``type`` is omitted for ordinary messages. The files are the source of truth; klaw.db
is an index rebuilt from them, so readers here are tolerant: a torn last line (power
cut), a garbage line, a non-object, a line missing required fields or with invalid
UTF-8 is skipped and reported, never fatal. Which lines are messages is decided by
one validator in Rust (``klaw_core::record``), the same ``klaw reindex`` applies: an
integer ``id`` is read as its text and structured ``content`` as its JSON text.

Writer policy (``JsonlWriter``): every line goes out in one ``os.write`` on an
``O_APPEND`` descriptor (under ``flock``), then ``fsync`` (``fsync="always"``, the
default). A personal agent writes a few messages a minute, so durability wins over
throughput; a power cut can at worst leave a torn last line, which readers skip and
the next append seals off with a newline so it never swallows a good record.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from klaw._core import check_log_line
from klaw.errors import InvalidInput
from klaw.fsutil import fsync_dir
from klaw.wire.record import (
    REQUIRED_FIELDS,
    ROLES,
    TYPES,
    Record,
    encode_record,
    new_message_id,
    validate_chat_id,
)

__all__ = [
    "REQUIRED_FIELDS",
    "ROLES",
    "TYPES",
    "JsonlRead",
    "JsonlTailer",
    "JsonlWriter",
    "LogEntry",
    "Record",
    "SkippedLine",
    "chat_files",
    "encode_record",
    "iter_conversations",
    "iter_jsonl",
    "list_chats",
    "new_message_id",
    "read_jsonl",
    "tail_records",
    "validate_chat_id",
]

_DAY_FILE = re.compile(r"^\d{4}-\d{2}-\d{2}\.jsonl$")


def _as_record(record: Record | Mapping[str, Any]) -> Record:
    return record if isinstance(record, Record) else Record.from_dict(record)


class JsonlWriter:
    """Appends records to ``{root}/{chat_id}/YYYY-MM-DD.jsonl``.

    Policy: each line is written with a single ``os.write`` on an ``O_APPEND``
    descriptor under an exclusive ``flock``, so appends from several writers never
    interleave mid-line, and a reader that consumes only newline-terminated lines
    (``JsonlTailer``, ``klaw logs -f``) never acts on half a line. With ``fsync="always"``
    (default) every call ends with ``fsync`` (and the directory is fsynced when a new
    day file appears): durability over throughput, since a personal agent writes few
    messages. ``fsync="never"`` leaves flushing to the OS (tests, bulk imports).

    A power cut can leave a torn last line without its newline. Before appending we
    check the file's last byte and, if it is not a newline, start with one, so the torn
    fragment stays a line of its own (skipped by readers) and the new record is intact.

    One writer per file is the design (the Gateway for interactive chats), but other
    writers are safe too: the lock is taken per append and released on close.
    """

    def __init__(self, root: Path, fsync: Literal["always", "never"] = "always") -> None:
        if fsync not in ("always", "never"):
            raise InvalidInput(f"fsync must be 'always' or 'never', not {fsync!r}")
        self.root = Path(root)
        self.fsync = fsync
        self._lock = threading.Lock()

    def path_for(self, chat_id: str, record: Record | Mapping[str, Any]) -> Path:
        return self.root / validate_chat_id(chat_id) / f"{_as_record(record).day}.jsonl"

    def append(self, chat_id: str, record: Record | Mapping[str, Any]) -> Path:
        """Append one record; return the file it went to."""
        rec = _as_record(record)
        path = self.path_for(chat_id, rec)
        line = encode_record(rec)
        with self._lock:
            self._write(path, line)
        return path

    def append_many(
        self, chat_id: str, records: Iterable[Record | Mapping[str, Any]]
    ) -> list[Path]:
        """Append several records: all are validated first, then one write and one
        fsync per day file. Returns the files written, in first-use order."""
        validate_chat_id(chat_id)
        batches: dict[Path, list[bytes]] = {}
        for record in records:
            rec = _as_record(record)
            batches.setdefault(self.path_for(chat_id, rec), []).append(encode_record(rec))
        with self._lock:
            for path, lines in batches.items():
                self._write(path, b"".join(lines))
        return list(batches)

    def _write(self, path: Path, data: bytes) -> None:
        chat_dir = path.parent
        new_dir = not chat_dir.is_dir()
        if new_dir:
            chat_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            # The lock makes "check the last byte, then append" one step against other
            # writers (threads or processes): without it, a write still in flight looks
            # like a torn line and would be "sealed" with a spurious blank line.
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # seal a torn last line (see class docstring)
            view = memoryview(data)
            while view:  # regular files write fully; loop only for ENOSPC-style short writes
                written = os.write(fd, view)
                view = view[written:]
            if self.fsync == "always":
                os.fsync(fd)
        finally:
            os.close(fd)
        if self.fsync == "always" and (new_dir or size == 0):
            fsync_dir(chat_dir)
            if new_dir:
                fsync_dir(chat_dir.parent)


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class SkippedLine:
    """A line that is not a usable record; ``line_no`` counts from 1."""

    path: Path
    line_no: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line_no}: {self.reason}"


@dataclass(slots=True)
class JsonlRead:
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[SkippedLine] = field(default_factory=list)


OnSkip = Callable[[SkippedLine], None]


def _check_line(raw: bytes) -> tuple[int, dict[str, Any]] | str:
    """``(ts_us, record)`` for the line in ``raw``, or the reason it is skipped.

    The rules are Rust's (``klaw_core::record``), the same ``klaw reindex`` applies, so
    every reader agrees on which lines are messages. ``raw`` keeps its newline: a line
    without one that fails is reported as a torn last line.
    """
    line = check_log_line(raw)
    if isinstance(line, str):
        return line
    record: dict[str, Any] = {
        "id": line.id,
        "ts": line.ts,
        "role": line.role,
        "content": line.content,
    }
    if line.kind is not None:
        record["type"] = line.kind
    # Rust checked that meta is a JSON object; Python's parser accepts all such text.
    record["meta"] = {} if line.meta is None else json.loads(line.meta)
    return line.ts_us, record


def _iter_lines(
    path: Path, on_skip: OnSkip | None, end: int | None
) -> Iterator[tuple[int, int, dict[str, Any]]]:
    with open(path, "rb") as fh:
        remaining = end
        line_no = 0
        while True:
            if remaining is None:
                raw = fh.readline()
            elif remaining <= 0:
                break
            else:
                raw = fh.readline(remaining)
                remaining -= len(raw)
            if not raw:
                break
            line_no += 1
            result = _check_line(raw)
            if isinstance(result, str):
                if on_skip is not None:
                    on_skip(SkippedLine(path, line_no, result))
                continue
            yield line_no, result[0], result[1]


def iter_jsonl(path: Path, on_skip: OnSkip | None = None) -> Iterator[dict[str, Any]]:
    """Stream the records of one file in constant memory (one line at a time).

    The file is read in binary and each line decoded strictly as UTF-8. Lines that
    are not records are passed to ``on_skip`` (if given) and left out. A last line
    without a newline is accepted if it is a complete record (the cut fell exactly
    before the newline), else reported as torn.
    """
    for _, _, record in _iter_lines(Path(path), on_skip, None):
        yield record


def read_jsonl(path: Path) -> JsonlRead:
    """Read a whole file: the records plus every skipped line with its reason."""
    result = JsonlRead()
    result.records.extend(iter_jsonl(path, result.skipped.append))
    return result


def list_chats(root: Path) -> list[str]:
    """Chat ids that have a log directory under ``root``, sorted."""
    if not root.is_dir():
        return []
    chats = []
    for entry in root.iterdir():
        if entry.is_dir():
            try:
                chats.append(validate_chat_id(entry.name))
            except InvalidInput:
                continue  # not ours (e.g. a hidden dir)
    return sorted(chats)


def chat_files(root: Path, chat_id: str) -> list[Path]:
    """The day files of one chat, oldest first (names are ISO dates, so they sort)."""
    chat_dir = root / validate_chat_id(chat_id)
    if not chat_dir.is_dir():
        return []
    return sorted(p for p in chat_dir.iterdir() if _DAY_FILE.match(p.name) and p.is_file())


def _all_files(root: Path, chat_id: str | None) -> list[tuple[str, str, Path]]:
    """(day, chat, path) for every day file, sorted by day then chat."""
    chats = [chat_id] if chat_id is not None else list_chats(root)
    files = [(p.stem, chat, p) for chat in chats for p in chat_files(root, chat)]
    files.sort()
    return files


def iter_conversations(
    root: Path, chat_id: str | None = None, on_skip: OnSkip | None = None
) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Yield ``(path, record)`` over all chats (or one), day by day in file order.

    Files are ordered by day, then chat id, so each chat's messages keep their order
    and the whole stream is chronological at day granularity.
    """
    for _, _, path in _all_files(Path(root), chat_id):
        for record in iter_jsonl(path, on_skip):
            yield path, record


class LogEntry(NamedTuple):
    chat_id: str
    path: Path
    line_no: int
    record: dict[str, Any]
    ts_us: int  # record["ts"] as Unix microseconds, for ordering across time zones


def _sort_key(entry: LogEntry) -> tuple[int, str, str, int]:
    return (entry.ts_us, entry.path.stem, entry.chat_id, entry.line_no)


def tail_records(
    root: Path,
    chat_id: str | None,
    n: int,
    on_skip: OnSkip | None = None,
    *,
    upto: Mapping[Path, int] | None = None,
) -> list[LogEntry]:
    """The last ``n`` records of one chat (or of all chats merged by ``ts``), oldest
    first. Reads newest day files first and stops once older days cannot matter;
    memory is O(n). ``upto`` limits how many bytes of a file are read (used by
    ``JsonlTailer`` so that tail and follow neither miss nor repeat a line).
    """
    if n <= 0:
        return []
    files = _all_files(Path(root), chat_id)
    by_day: dict[str, list[tuple[str, Path]]] = {}
    for day, chat, path in files:
        by_day.setdefault(day, []).append((chat, path))
    found: list[LogEntry] = []
    for day in sorted(by_day, reverse=True):
        for chat, path in by_day[day]:
            end = None if upto is None else upto.get(path, 0)
            last: deque[LogEntry] = deque(maxlen=n)
            for line_no, ts_us, record in _iter_lines(path, on_skip, end):
                last.append(LogEntry(chat, path, line_no, record, ts_us))
            found.extend(last)
        # Files are named by the UTC day of their records, so once n records are in
        # hand from this day or later, nothing older can be among the last n.
        if len(found) >= n:
            break
    found.sort(key=_sort_key)
    return found[-n:]


class JsonlTailer:
    """Follow conversation files as they grow (``klaw logs --follow``).

    Remembers, per file, the offset just past its last complete line; ``poll()``
    returns records from lines completed since. New day files and (when following all
    chats) new chat directories are picked up, which handles the midnight rollover.
    A partial line is left for the next poll, so a line is never reported half-written.
    """

    def __init__(self, root: Path, chat_id: str | None = None) -> None:
        self.root = Path(root)
        self.chat_id = chat_id
        self._offsets: dict[Path, int] = {}
        self._line_nos: dict[Path, int] = {}
        for _, _, path in _all_files(self.root, chat_id):
            offset, lines = _complete_prefix(path)
            self._offsets[path] = offset
            self._line_nos[path] = lines

    @property
    def offsets(self) -> dict[Path, int]:
        """Where following starts: pass as ``upto`` to ``tail_records``."""
        return dict(self._offsets)

    def poll(self, on_skip: OnSkip | None = None) -> list[LogEntry]:
        out: list[LogEntry] = []
        for _, chat, path in _all_files(self.root, self.chat_id):
            offset = self._offsets.get(path, 0)
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            if size < offset:  # truncated or replaced: an append-only log should not
                offset, self._line_nos[path] = 0, 0
            if size == offset:
                continue
            with open(path, "rb") as fh:
                fh.seek(offset)
                chunk = fh.read(size - offset)
            cut = chunk.rfind(b"\n") + 1
            line_no = self._line_nos.get(path, 0)
            # split on b"\n" only, like readline(): bytes.splitlines would also cut at \r
            for raw in chunk[:cut].split(b"\n")[:-1]:
                line_no += 1
                result = _check_line(raw + b"\n")
                if isinstance(result, str):
                    if on_skip is not None:
                        on_skip(SkippedLine(path, line_no, result))
                    continue
                out.append(LogEntry(chat, path, line_no, result[1], result[0]))
            self._offsets[path] = offset + cut
            self._line_nos[path] = line_no
        out.sort(key=_sort_key)
        return out


def _complete_prefix(path: Path) -> tuple[int, int]:
    """(offset past the last newline, number of complete lines) of a file."""
    offset = lines = 0
    with open(path, "rb") as fh:
        while block := fh.read(1 << 16):
            lines += block.count(b"\n")
            last = block.rfind(b"\n")
            if last >= 0:
                offset = fh.tell() - len(block) + last + 1
    return offset, lines

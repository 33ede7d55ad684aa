"""Chat summaries as files: the one reader and writer of `summaries/` (design §3.3–3.4).

Layout: ``summaries/{chat_id}/YYYY-MM-DD_msg_A_B.md``, where A..B number the chat's
summarized messages (each file continues where the previous one stopped) and the day
is the owner's day of its last message::

    # Summary of telegram_100, messages 1-50
    _2026-02-24T14:30:00Z – 2026-02-24T18:02:11Z, 50 messages, to 0193a…._

    - the summary, in Markdown

The second line states the times of the first and last messages covered and the id
of the last, so what a summary covers is read back from the files alone (klaw.db's
`summaries` table is an index that `klaw reindex` rebuilds from them).

One rule for "the newest summary": the highest ordinal (B), never a file time, which
a restore, a copy or a clock set late can move. It belongs to the current segment
when its first message does: one from before `/new` is left out of the context and
not folded into the next. What waits (`Backlog`) is every user and assistant message
of the segment after the newest summary's last one, oldest first: however many wait,
none is skipped, so the numbering counts every message summarized.

The same model call also extracts retained facts (issue 25 item 1): its answer may end
with a `=== RETAIN ===` line and bullets in the retain format; `split_answer` takes
them apart and `retain_extracted` appends the valid ones to the day's log
(klaw.memory.retain) and indexes it.

Who decides when to summarize, and asks a model, is klaw.scheduler.summaries.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Final

from klaw.fsutil import atomic_write
from klaw.memory.retain import append_retain

if TYPE_CHECKING:
    from klaw._core import Store
    from klaw.memory.api import Memory
    from klaw.memory.rows import StoredMessage

__all__ = [
    "MAX_RETAIN_BULLETS",
    "MAX_SUMMARY_BYTES",
    "RETAIN_MARK",
    "Backlog",
    "Covered",
    "backlog",
    "newest_summary",
    "retain_extracted",
    "segment_summary",
    "split_answer",
    "write_summary",
]

log = logging.getLogger("klaw.memory")

MAX_SUMMARY_BYTES: Final = 16 * 1024  # more could never fit beside the window
#: Rows read at once; a backlog larger than this is walked in log order instead.
WINDOW: Final = 400
PAGE: Final = 500

#: The line between the summary and the retain bullets in the model's answer.
RETAIN_MARK: Final = "=== RETAIN ==="
#: Bullets taken from one answer (the prompt asks for at most five).
MAX_RETAIN_BULLETS: Final = 12
_MARK = re.compile(r"^\s*(?:=+\s*RETAIN\s*=+|#+\s*Retain)\s*$", re.I | re.M)

_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})_msg_(\d+)_(\d+)\.md$")
_TS = r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z)"
_COVERS = re.compile(rf"^_{_TS} – {_TS}, \d+ messages?, to (\S+)\._$", re.M)


@dataclass(frozen=True, slots=True)
class Covered:
    """A summary file: its path, last ordinal, the messages it covers, its text."""

    path: Path
    to_ordinal: int
    from_ts: str  # the first message covered ("" when the file does not say)
    to_ts: str
    to_id: str  # the last message covered (times have whole seconds: ids tell apart)
    text: str

    def of_segment(self, segment_start: str) -> bool:
        """Whether it summarizes the segment that began at `segment_start` (ISO UTC).

        Told by the messages it covers, never by the file's mtime: a restored or
        copied file, or a clock set after the file was written (a Pi has no clock
        of its own), must not move a summary into or out of a segment.
        """
        return bool(self.from_ts) and self.from_ts >= segment_start


def newest_summary(folder: Path) -> Covered | None:
    """The summary with the highest ordinal in `folder` (None when there is none)."""
    best: tuple[int, Path] | None = None
    try:
        names = [p for p in folder.iterdir() if p.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return None
    for p in names:
        m = _NAME.match(p.name)
        if m and (best is None or int(m.group(3)) > best[0]):
            best = (int(m.group(3)), p)
    if best is None:
        return None
    text = best[1].read_text(encoding="utf-8", errors="replace")
    covers = _COVERS.search(text)
    return Covered(
        path=best[1],
        to_ordinal=best[0],
        from_ts=covers.group(1) if covers else "",
        to_ts=covers.group(2) if covers else "",
        to_id=covers.group(3) if covers else "",
        text=text,
    )


def segment_summary(root: Path, chat_id: str, segment_start: str | None) -> str | None:
    """The text of the chat's newest summary when it belongs to the segment that
    began at `segment_start` (ISO UTC; None: the chat has one segment): what the
    context puts before the window."""
    newest = newest_summary(root / chat_id)
    if newest is None or not newest.of_segment(segment_start or ""):
        return None
    text = newest.text.encode()[:MAX_SUMMARY_BYTES].decode("utf-8", "replace").strip()
    return text or None


def _talk(row: StoredMessage) -> bool:
    return row.kind is None and row.role in ("user", "assistant")


class Backlog:
    """The user and assistant messages of a chat's segment that no summary covers
    yet, oldest first, in log order; `take` hands them out a batch at a time.

    `previous` is the newest summary (whatever its segment: the numbering goes on
    from it) and `fold` the one to fold into the next summary (the newest, when it
    belongs to this segment). Read in a worker thread: it reads klaw.db.
    """

    def __init__(self, store: Store, chat_id: str, segment: str, previous: Covered | None) -> None:
        self.store = store
        self.chat_id = chat_id
        self.segment = segment
        self.previous = previous
        self._since = max(segment, previous.to_ts) if previous is not None else segment
        self._rows: deque[StoredMessage] | None = None  # the whole backlog, when it fits
        self._walk: int | None = None  # the rowid walked to, when it does not
        self._later_than = ""  # walking without the last covered id: later times only

    @property
    def fold(self) -> Covered | None:
        previous = self.previous
        return previous if previous is not None and previous.of_segment(self.segment) else None

    def covered(self, summary: Covered) -> None:
        """`summary` was written from the messages taken last."""
        self.previous = summary

    def take(self, n: int) -> list[StoredMessage]:
        """The next `n` messages waiting (fewer: that is all of them)."""
        if self._rows is None and self._walk is None:
            self._open()
        if self._rows is not None:
            return [self._rows.popleft() for _ in range(min(n, len(self._rows)))]
        return self._walk_on(n)

    def _open(self) -> None:
        rows = self.store.recent_messages(self.chat_id, self._since or None, WINDOW)
        if len(rows) < WINDOW:  # every row of the segment since `_since` is here
            previous = self.previous
            if previous is not None:
                ids = [r.id for r in rows]
                if previous.to_id in ids:  # what follows it in log order
                    rows = rows[ids.index(previous.to_id) + 1 :]
                else:
                    rows = [r for r in rows if r.created_at > previous.to_ts]
            self._rows = deque(r for r in rows if _talk(r))
            return
        # More wait than one read holds: walk the chat in log order from the last
        # message covered (or, without it, from the start, by time).
        self._walk = 0
        if self.previous is None:
            return
        self._later_than = self.previous.to_ts
        after = 0
        while self.previous.to_id and (
            page := self.store.messages_after(self.chat_id, after, PAGE)
        ):
            found = [rowid for rowid, row in page if row.id == self.previous.to_id]
            if found:
                self._walk, self._later_than = found[0], ""
                return
            after = page[-1][0]

    def _walk_on(self, n: int) -> list[StoredMessage]:
        assert self._walk is not None
        out: list[StoredMessage] = []
        while len(out) < n:
            page = self.store.messages_after(self.chat_id, self._walk, PAGE)
            if not page:
                break
            for rowid, row in page:
                self._walk = rowid
                if self._waiting(row):
                    out.append(row)
                    if len(out) == n:
                        break
        return out

    def _waiting(self, row: StoredMessage) -> bool:
        return row.created_at >= self._since and row.created_at > self._later_than and _talk(row)


def backlog(memory: Memory, root: Path, chat_id: str) -> Backlog:
    """What waits to be summarized in `chat_id` (reads klaw.db: call it in a thread)."""
    session = memory.store.get_session(chat_id)
    segment = session.segment_start if session is not None else ""
    return Backlog(memory.store, chat_id, segment, newest_summary(root / chat_id))


def write_summary(
    memory: Memory,
    root: Path,
    previous: Covered | None,
    rows: list[StoredMessage],
    text: str,
    zone: tzinfo | None,
) -> Covered:
    """Writes the summary of `rows` (the messages after `previous`), records it in
    klaw.db and indexes it into archival memory; returns it. `zone` names the day
    (the owner's; None: the host's)."""
    chat_id = rows[0].chat_id
    first = (previous.to_ordinal if previous else 0) + 1
    last = first + len(rows) - 1
    width = max(3, len(str(last)))
    folder = root / chat_id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_day(rows[-1].created_at, zone)}_msg_{first:0{width}d}_{last:0{width}d}.md"
    body = (
        f"# Summary of {chat_id}, messages {first}-{last}\n"
        f"_{rows[0].created_at} – {rows[-1].created_at}, {len(rows)} messages, "
        f"to {rows[-1].id}._\n\n"
        f"{text}\n"
    )
    atomic_write(path, body)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    memory.store.add_summary(
        chat_id, f"msg_{first:0{width}d}", f"msg_{last:0{width}d}", str(path), now
    )
    memory.index_file(path)
    return Covered(path, last, rows[0].created_at, rows[-1].created_at, rows[-1].id, body)


def _day(ts: str, zone: tzinfo | None) -> str:
    """The day of an ISO UTC time in `zone`."""
    try:
        when = datetime.fromisoformat(ts)
    except ValueError:  # not a time: the file still needs a name
        return ts[:10]
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(zone).date().isoformat()


def split_answer(answer: str) -> tuple[str, list[str] | None]:
    """(the summary, the retain bullets) of a summarizer's answer; the bullets are
    None when the answer has no `=== RETAIN ===` part (an empty list: it has one
    without bullets)."""
    m = _MARK.search(answer)
    if m is None:
        return answer.strip(), None
    bullets = [
        line.strip()[1:].strip()
        for line in answer[m.end() :].splitlines()
        if line.strip()[:1] in ("-", "*", "+")
    ]
    return answer[: m.start()].strip(), bullets


def retain_extracted(memory: Memory, day: str, bullets: list[str], why: str) -> list[str]:
    """Appends the valid `bullets` (a type prefix, nothing unreadable) to the Retain
    section of the workspace's `memory/<day>.md` and indexes the log; returns the lines
    written (none: those it holds already). Invalid ones are logged and left out; one
    commit when memory is versioned (klaw.memory.versioning), `why` saying from what."""
    from klaw.memory.retain import bullet_text, parse_bullet
    from klaw.memory.versioning import versioner

    source = f"memory/{day}.md"
    valid: list[str] = []
    for raw in bullets[:MAX_RETAIN_BULLETS]:
        body = bullet_text(raw)
        if body is None:
            continue
        fact = parse_bullet(body, source=source, line=0)
        if fact.kind is None or fact.problem:
            log.info("retain bullet left out (%s): %.80s", fact.problem or "no type prefix", body)
            continue
        valid.append(body)
    if len(bullets) > MAX_RETAIN_BULLETS:
        log.info("%d retain bullets: the first %d kept", len(bullets), MAX_RETAIN_BULLETS)
    if not valid:
        log.warning("no usable retain bullets in the answer (%s): nothing retained", why)
        return []
    workspace = memory.paths.workspace
    path = workspace / "memory" / f"{day}.md"
    with versioner(workspace, memory.config).change([path], f"retain: facts for {day}", why):
        written = append_retain(workspace, day, valid)
    if written:
        memory.index_file(path)
    return written

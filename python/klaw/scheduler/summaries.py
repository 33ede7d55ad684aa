"""Background summarization (design §3.4): what a chat said, in a few lines, as files.

Every `summarization.everyMessages` (default 50) conversation messages of a chat's
current segment not yet covered by a summary, and on `summarization.cron` (nightly)
for every chat with some left over, a cheap model (`routing.tasks.summarization`)
writes a summary at subagent priority (interactive replies first). The summary is
a Markdown file, ``summaries/{chat_id}/YYYY-MM-DD_msg_A_B.md`` (the owner's day of
its last message), where A..B number the chat's summarized messages (each file
continues where the previous one stopped); it is recorded in klaw.db's `summaries`
table and indexed into archival memory, and the newest one of the segment is what
context assembly puts before the window. Each summary folds in the previous one of
the segment, so the newest stands for the whole segment so far. The conversation
log is never touched; `klaw reindex` rebuilds the table from the files.

What a summary covers is read back from its file: the second line states the times
of its first and last messages and the id of the last, so nothing but the files is
needed to go on. The newest summary is the one with the highest ordinal; it belongs
to the current segment when its first message does (never judged by file times).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final
from zoneinfo import ZoneInfo

from klaw.fsutil import atomic_write
from klaw.memory.summaries import Covered, last_summary

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.engine.pipeline import Pipeline
    from klaw.memory.api import Memory
    from klaw.memory.rows import StoredMessage
    from klaw.paths import KlawPaths
    from klaw.scheduler.service import Scheduler

__all__ = ["SUMMARY_JOB", "Summarizer", "sync_summary_job"]

log = logging.getLogger("klaw.scheduler")

#: The built-in job that summarizes every chat on `summarization.cron`.
SUMMARY_JOB: Final = "summaries"
#: At most this many messages go into one summary (the newest ones when more wait).
MAX_MESSAGES: Final = 200
#: Each message is cut to this many characters in the transcript the model reads.
MAX_MESSAGE_CHARS: Final = 1500
#: The nightly run leaves chats with fewer new messages than this alone.
NIGHTLY_MINIMUM: Final = 6

SYSTEM: Final = (
    "You write short summaries of a conversation between a user and their assistant, "
    "for the assistant's long-term memory. Keep facts, names, dates, decisions, "
    "preferences and open tasks; drop greetings and small talk. Write in the language "
    "of the conversation, in at most 200 words of plain Markdown (bullet points are "
    "fine), with no preamble."
)


class Summarizer:
    def __init__(
        self, config: EngineConfig, paths: KlawPaths, memory: Memory, pipeline: Pipeline
    ) -> None:
        self.config = config
        self.paths = paths
        self.memory = memory
        self.pipeline = pipeline
        self._running: dict[str, asyncio.Task[Path | None]] = {}
        self._closed = False
        # Turns to let pass before reading a chat's log again: a turn adds at least
        # two messages, so with n uncovered the next (every - n) / 2 - 1 cannot reach
        # `every` (the check reads up to 400 rows: not on every reply on a Pi).
        self._skip: dict[str, int] = {}
        self._again: set[str] = set()  # chats with a turn while their summary ran

    @property
    def every(self) -> int:
        return self.config.summarization.every_messages

    def after_turn(self, chat_id: str) -> None:
        """Called by the pipeline after each reply: summarize once enough is new."""
        if self._closed or chat_id.startswith("scheduler_"):
            return
        if chat_id in self._running:
            # Checked again when the running summary is done (indexing it can take a
            # while): a turn meanwhile must not go uncounted until the chat's next one.
            self._again.add(chat_id)
            return
        if self._skip.get(chat_id, 0) > 0:
            self._skip[chat_id] -= 1
            return
        task = asyncio.get_running_loop().create_task(self._guarded(chat_id, self.every))
        self._running[chat_id] = task
        task.add_done_callback(lambda _t: self._done(chat_id))

    def _done(self, chat_id: str) -> None:
        self._running.pop(chat_id, None)
        if chat_id in self._again:
            self._again.discard(chat_id)
            self.after_turn(chat_id)

    async def run_all(self) -> int:
        """The nightly job: every chat with at least a few new messages; returns how
        many summaries were written."""
        chats = await asyncio.to_thread(self._chats)
        written = 0
        for chat_id in chats:
            if chat_id in self._running:
                continue
            if await self._guarded(chat_id, NIGHTLY_MINIMUM) is not None:
                written += 1
        return written

    async def aclose(self) -> None:
        """Stops taking turns and cancels summaries in progress (a model call is
        abandoned; a file already written stays and is indexed at the next start)."""
        self._closed = True
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _chats(self) -> list[str]:
        try:
            return sorted(
                p.name
                for p in self.paths.conversations.iterdir()
                if p.is_dir() and not p.name.startswith("scheduler_")
            )
        except FileNotFoundError:
            return []

    async def _guarded(self, chat_id: str, minimum: int) -> Path | None:
        from klaw.errors import Cancelled

        try:
            return await self.summarize(chat_id, minimum=minimum)
        except asyncio.CancelledError:
            raise
        except Cancelled:  # the engine is stopping; the file is indexed at the next start
            log.info("summary of %s written, indexing cancelled: the engine is stopping", chat_id)
            return None
        except Exception:  # background work: log it, the next trigger tries again
            log.exception("summarizing %s failed", chat_id)
            return None

    async def summarize(self, chat_id: str, *, minimum: int) -> Path | None:
        """Writes the chat's next summary when at least `minimum` messages of its
        segment are not covered yet; returns the file (None: nothing written)."""
        from klaw.llm.errors import AllProvidersFailed
        from klaw.llm.types import LlmRequest, Message

        prepared = await asyncio.to_thread(self._pending, chat_id, minimum)
        if prepared is None:
            return None
        previous, rows, fold = prepared
        model = self._model()
        request = LlmRequest(
            messages=[
                Message(role="system", content=SYSTEM),
                Message(role="user", content=_transcript(fold, rows)),
            ]
        )
        try:
            response = await self.pipeline.complete_background(request, model)
        except AllProvidersFailed as exc:
            log.warning("no model to summarize %s (%s): trying again later", chat_id, exc)
            return None
        text = (response.content or "").strip()
        if not text:
            log.warning("the model returned an empty summary for %s", chat_id)
            return None
        return await asyncio.to_thread(self._write, chat_id, previous, rows, text)

    def _model(self) -> str:
        return self.pipeline.usable_model(self.config.routing.tasks.summarization)

    def _pending(
        self, chat_id: str, minimum: int
    ) -> tuple[Covered | None, list[StoredMessage], Covered | None] | None:
        """(the newest summary, the messages to summarize, the summary to fold in:
        the newest one when it belongs to the current segment)."""
        session = self.memory.store.get_session(chat_id)
        segment = session.segment_start if session is not None else ""
        previous = last_summary(self.paths.summaries / chat_id)
        since = segment
        if previous is not None and previous.to_ts > since:
            since = previous.to_ts
        rows = self.memory.store.recent_messages(chat_id, since or None, MAX_MESSAGES * 2)
        if previous is not None:
            ids = [r.id for r in rows]
            if previous.to_id in ids:  # what follows it in log order
                rows = rows[ids.index(previous.to_id) + 1 :]
            else:
                rows = [r for r in rows if r.created_at > previous.to_ts]
        talk = [r for r in rows if r.kind is None and r.role in ("user", "assistant")]
        talk = talk[-MAX_MESSAGES:]
        if len(talk) < minimum:
            self._skip[chat_id] = max(0, -(-(minimum - len(talk)) // 2) - 1)
            return None
        self._skip.pop(chat_id, None)
        fold = previous if previous is not None and previous.of_segment(segment) else None
        return previous, talk, fold

    def _write(
        self, chat_id: str, previous: Covered | None, rows: list[StoredMessage], text: str
    ) -> Path:
        first = (previous.to_ordinal if previous else 0) + 1
        last = first + len(rows) - 1
        width = max(3, len(str(last)))
        day = self._day(rows[-1].created_at)
        folder = self.paths.summaries / chat_id
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{day}_msg_{first:0{width}d}_{last:0{width}d}.md"
        body = (
            f"# Summary of {chat_id}, messages {first}-{last}\n"
            f"_{rows[0].created_at} – {rows[-1].created_at}, {len(rows)} messages, "
            f"to {rows[-1].id}._\n\n"
            f"{text}\n"
        )
        atomic_write(path, body)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.memory.store.add_summary(
            chat_id, f"msg_{first:0{width}d}", f"msg_{last:0{width}d}", str(path), now
        )
        self.memory.index_file(path)
        if self.config.compatibility.openclaw.enabled:
            from klaw.openclaw.writeback import WriteBack

            WriteBack(self.paths.workspace, self.config).summary(chat_id, text)
        log.info("summary of %s written: %s (%d messages)", chat_id, path.name, len(rows))
        return path

    def _day(self, ts: str) -> str:
        """The owner's day (`scheduler.timezone`, else the host's zone) of an ISO UTC
        time: the day jobs, caps and daily logs name too."""
        zone = ZoneInfo(self.config.scheduler.timezone) if self.config.scheduler.timezone else None
        try:
            when = datetime.fromisoformat(ts)
        except ValueError:  # not a time: the file still needs a name
            return ts[:10]
        return (
            (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(zone).date().isoformat()
        )


def _transcript(previous: Covered | None, rows: list[StoredMessage]) -> str:
    parts = []
    if previous is not None and previous.text.strip():
        parts.append("The summary so far (fold it into yours):\n" + previous.text.strip())
    lines = []
    for r in rows:
        content = " ".join(r.content.split())
        if len(content) > MAX_MESSAGE_CHARS:
            content = content[:MAX_MESSAGE_CHARS] + " […]"
        lines.append(f"[{r.created_at}] {r.role}: {content}")
    parts.append("The conversation to summarize:\n" + "\n".join(lines))
    return "\n\n".join(parts)


async def sync_summary_job(scheduler: Scheduler, config: EngineConfig, zone: str) -> None:
    """The nightly `summaries` job as engine.yaml says (removed when summaries are off)."""
    from klaw.scheduler.jobs import JobSpec

    current = await scheduler.get(SUMMARY_JOB)
    if not config.summarization.enabled:
        if current is not None:
            await scheduler.remove(SUMMARY_JOB)
        return
    spec = JobSpec(
        name=SUMMARY_JOB,
        cron=config.summarization.cron,
        message="Summarize the chats' messages not covered yet.",
        timezone=zone,
        kind="summaries",
    )
    if current is None or current.to_data() != spec.to_data():
        await scheduler.add(spec, replace=True)

"""Background summarization (design §3.4): when a chat gets summarized, and by whom.

Every `summarization.everyMessages` (default 50) conversation messages of a chat's
current segment not yet covered by a summary, and on `summarization.cron` (nightly)
for every chat with some left over, a cheap model (`routing.tasks.summarization`)
writes a summary at subagent priority (interactive replies first), folding in the
previous one of the segment, so the newest stands for the whole segment so far.
The oldest messages waiting go first, at most `MAX_MESSAGES` to a summary, and the
run goes on until fewer than the trigger's minimum wait: a backlog (summaries were
off, or no model answered for a while) is caught up, never cut.

The files, what they cover and which is the newest are klaw.memory.summaries'.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final
from zoneinfo import ZoneInfo

from klaw.errors import Cancelled, KlawError
from klaw.lanes import SUBAGENT_CHAT_PREFIX
from klaw.memory.summaries import (
    RETAIN_MARK,
    Covered,
    backlog,
    retain_extracted,
    split_answer,
    write_summary,
)
from klaw.scheduler.ports import BackgroundRequest

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.memory.api import Memory
    from klaw.memory.rows import StoredMessage
    from klaw.paths import KlawPaths
    from klaw.scheduler.ports import BackgroundTurns
    from klaw.scheduler.service import Scheduler

__all__ = ["SUMMARY_JOB", "Summarizer", "sync_summary_job"]

log = logging.getLogger("klaw.scheduler")

#: The built-in job that summarizes every chat on `summarization.cron`.
SUMMARY_JOB: Final = "summaries"
#: At most this many messages go into one summary (the oldest first when more wait).
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
    "fine), with no preamble.\n\n"
    f"Then write a line {RETAIN_MARK} and under it 0 to 5 facts worth keeping for "
    "months (none when nothing durable was said), one bullet each, in this form:\n"
    "- W @Anna: Anna lives in Berlin with her two cats.\n"
    "- O(c=0.8) @Owner: Prefers short answers in the morning.\n"
    "W is a fact about the world, B something the user or the assistant did, O an "
    "opinion or preference with c the confidence from 0.0 to 1.0, S an observation. "
    'Mark each person, place or project with @Name (@"Two Words" for a name with '
    "spaces). When a fact states where someone lives, works or another attribute that "
    "can change, add it after the letter: W(a=home), W(a=job). Each bullet must make "
    "sense on its own later, in the language of the conversation."
)


class Summarizer:
    def __init__(
        self, config: EngineConfig, paths: KlawPaths, memory: Memory, turns: BackgroundTurns
    ) -> None:
        self.config = config
        self.paths = paths
        self.memory = memory
        self.turns = turns
        self._running: dict[str, asyncio.Task[int]] = {}
        self._closed = False
        # Turns to let pass before reading a chat's log again (see `summarize`).
        self._skip: dict[str, int] = {}
        zone = config.scheduler.timezone  # the owner's day names the files
        self._zone = ZoneInfo(zone) if zone else None
        self._again: set[str] = set()  # chats with a turn while their summary ran
        #: Told (chat id, text) of each summary written: OpenClaw's write-back subscribes.
        self.on_written: list[Callable[[str, str], None]] = []

    @property
    def every(self) -> int:
        return self.config.summarization.every_messages

    def after_turn(self, chat_id: str) -> None:
        """Called by the pipeline after each reply: summarize once enough is new."""
        if self._closed or chat_id.startswith(SUBAGENT_CHAT_PREFIX):
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
            written += await self._guarded(chat_id, NIGHTLY_MINIMUM)
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
                if p.is_dir() and not p.name.startswith(SUBAGENT_CHAT_PREFIX)
            )
        except FileNotFoundError:
            return []

    async def _guarded(self, chat_id: str, minimum: int) -> int:
        try:
            return await self.summarize(chat_id, minimum=minimum)
        except asyncio.CancelledError:
            raise
        except Cancelled:  # the engine is stopping; the file is indexed at the next start
            log.info("summary of %s written, indexing cancelled: the engine is stopping", chat_id)
            return 0
        except Exception:  # background work: log it, the next trigger tries again
            log.exception("summarizing %s failed", chat_id)
            return 0

    async def summarize(self, chat_id: str, *, minimum: int) -> int:
        """Writes the chat's next summaries, oldest messages first, while at least
        `minimum` messages of its segment are not covered; returns how many."""
        waiting = await asyncio.to_thread(backlog, self.memory, self.paths.summaries, chat_id)
        written = 0
        while True:
            rows = await asyncio.to_thread(waiting.take, MAX_MESSAGES)
            if len(rows) < minimum:
                # A turn adds at least two messages: the next turns that cannot reach
                # `every` need not read the log again (it reads up to 400 rows).
                self._skip[chat_id] = max(0, -(-(minimum - len(rows)) // 2) - 1)
                return written
            self._skip.pop(chat_id, None)
            request = BackgroundRequest(SYSTEM, _transcript(waiting.fold, rows))
            try:
                answer = await self.turns.complete_background(request, self._model())
            except KlawError as exc:  # no model answered
                log.warning("no model to summarize %s (%s): trying again later", chat_id, exc)
                return written
            text, bullets = split_answer(answer)
            if not text:
                log.warning("the model returned an empty summary for %s", chat_id)
                return written
            summary = await asyncio.to_thread(
                write_summary,
                self.memory,
                self.paths.summaries,
                waiting.previous,
                rows,
                text,
                self._zone,
            )
            waiting.covered(summary)
            written += 1
            await asyncio.to_thread(self._retain, chat_id, summary, bullets)
            await asyncio.to_thread(self._written, chat_id, text)
            log.info(
                "summary of %s written: %s (%d messages)", chat_id, summary.path.name, len(rows)
            )

    def _retain(self, chat_id: str, summary: Covered, bullets: list[str] | None) -> None:
        """The facts extracted with the summary, into the log of the summary's day."""
        if bullets is None:
            log.warning("the summary of %s came without its retain part: nothing retained", chat_id)
            return
        why = f"extracted with the summary {summary.path.name} of {chat_id}"
        try:
            retain_extracted(self.memory, summary.path.name[:10], bullets, why)
        except (OSError, KlawError) as exc:  # the summary is written either way
            log.warning("retaining the facts of %s failed: %s", chat_id, exc)

    def _written(self, chat_id: str, text: str) -> None:
        for subscriber in self.on_written:
            try:
                subscriber(chat_id, text)
            except Exception:  # the summary is written and indexed either way
                log.exception("after the summary of %s: %r failed", chat_id, subscriber)

    def _model(self) -> str:
        return self.turns.usable_model(self.config.routing.tasks.summarization)


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

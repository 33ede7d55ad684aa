"""The message pipeline: store → debounce → LLM slot → context → LLM ⇄ tools → reply (§2.4).

`Pipeline` is the engine's `InboundHandler`:

1. Every inbound is stored in klaw.db at once (in a worker thread; a per-chat intake
   lock keeps arrival order), with its own ``ts``. The store is
   idempotent on the message id: a redelivered message (insert count 0) is dropped.
2. Per chat, messages arriving within ``processing.debounceMs`` of each other are
   collected into one batch; the timer restarts with every message. A batch is one
   user turn (consecutive user rows are merged into one message for the model).
   Turns of one chat run one after another, in order; different chats run
   concurrently, up to ``processing.maxConcurrentLlm`` at a time. Slots are handed
   out by priority (`INTERACTIVE` before `SUBAGENT`), then first come first served.
3. One turn: context from the workspace files, core memory and the chat's window
   since the session's segment start (`assemble_context`), then `Router.complete`
   and up to ``processing.maxToolCallRounds`` rounds of tool calls (malformed calls
   and tool failures go back to the model as error results). At the cap, or when a
   loop breaker trips (`klaw.engine.loops`: tokens, time, repeated calls), the user
   gets a plain message saying why. A spent budget (`klaw.spend`) ends the turn with
   its one-line notice. Assistant and tool messages are stored; the reply goes
   out as an `outbound` answering the batch's last message. When every provider
   fails the user gets `AllProvidersFailed.user_message`; the inbound stays stored.

`handle` returns once the turn holding its message is done (so the server's
graceful shutdown waits for it).

Exactly-once across crashes: the gateway re-sends every message it has no answer
for. A message already stored is not stored twice, and then: if its turn is still
running here, nothing more happens; if its chat's answered watermark (files under
`answered/`, see klaw.engine.answered, written with the turn's last row before the
reply goes out, so `klaw reindex` cannot drop them) covers it, the stored
reply is sent again when it answered this message (the gateway drops an outbound id
it already delivered) or a `duplicate` error settles it; otherwise the engine died
during its turn and it is processed now.

Commands (`/new`, `/model`...) run in the chat's order after any batch collected
before them (see `klaw.engine.commands`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any, Final

from klaw.engine.answered import AnsweredMarks
from klaw.engine.context import (
    ContextInput,
    ContextLimits,
    StoredMessage,
    assemble_context,
    message_meta,
    model_limits,
)
from klaw.engine.drafts import DraftSink, DraftStream
from klaw.engine.images import load_images
from klaw.engine.loops import TOOL_LIMIT_MESSAGE, LoopGuard
from klaw.errors import KlawError
from klaw.lanes import INTERACTIVE, SUBAGENT, SUBAGENT_CHAT_PREFIX, PrioritySlots
from klaw.llm.errors import AllProvidersFailed
from klaw.llm.types import LlmRequest, LlmResponse, Message, Usage
from klaw.memory.rows import with_content
from klaw.memory.summaries import segment_summary
from klaw.retry import Backoff
from klaw.spend import BudgetSpent, source_for_chat
from klaw.tools.builtin_groups import eager_problems, fold, pick
from klaw.tools.onboarding import onboarding_pending
from klaw.wire.loglines import command_text, inbound_line, line_row, outbound_line
from klaw.wire.protocol import Command, Error, ErrorCode, Inbound, LogLine, Outbound, new_id
from klaw.wire.record import to_iso

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.engine.commands import Commands
    from klaw.engine.server import Reply
    from klaw.llm.router import Router
    from klaw.memory.api import Memory
    from klaw.memory.core import CoreMemory
    from klaw.memory.recall import Recall, Recalled
    from klaw.paths import KlawPaths
    from klaw.scheduler.ports import BackgroundRequest
    from klaw.tools.base import ToolRegistry
    from klaw.tools.skills import SkillCatalog

__all__ = ["TOOL_LIMIT_MESSAGE", "Pipeline"]

log = logging.getLogger("klaw.engine")

CORE_MEMORY_NOTICE: Final = (
    "⚠️ My core memory file (core_memory.json) is damaged, so I am answering without "
    "it. Nothing was overwritten: run `klaw doctor` on the host to see how to fix it."
)
#: How long after a reply its answered watermark is fsynced (it was renamed into place
#: before the reply went out; see klaw.engine.answered).
MARK_SYNC_DELAY_S: Final = 0.1

RegistryFactory = Callable[[str], "ToolRegistry"]
#: Tools a group chat does not get (the owner's memory and workspace, and running
#: code on the owner's machine: anyone in the group could ask for it).
PRIVATE_TOOLS: Final = frozenset(
    {
        "code_execute",
        "memory_search",
        "memory_save",
        "memory_core_get",
        "memory_core_update",
        "memory_core_delete",
        "file_read",
        "file_write",
        "file_list",
        "send_file",
    }
)


#: Tools a subagent does not get: core memory is read-only for it (design §2.4), and
#: a job that schedules jobs could multiply itself.
SUBAGENT_DENIED_TOOLS: Final = frozenset(
    {
        "memory_core_update",
        "memory_core_delete",
        "schedule_add",
        "schedule_remove",
        "subagent_spawn",
    }
)


#: The heartbeat's tools: what a checklist needs (look things up, read notes, tell
#: someone), not the whole set; every schema is paid on every hourly run.
LEAN_TOOLS: Final = frozenset(
    {"current_time", "memory_search", "file_read", "file_list", "skill_load", "send_message"}
)
#: AGENTS.md guides conversations (and is the largest workspace file: ~2k tokens in
#: OpenClaw's template); a checklist run does without it, and without MEMORY.md (up to
#: memory.prompt.memoryMdTokens), which it reaches through memory_search when needed.
LEAN_SKIPPED_FILES: Final = frozenset({"AGENTS.md", "MEMORY.md"})


@dataclass
class _Batch:
    messages: list[Inbound] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    priority: int = INTERACTIVE
    done: asyncio.Future[None] | None = None
    attempt: int = 0  # turns of these messages that found no model
    model: str | None = None  # a subagent's model (else the chat session's)
    lean: bool = False  # the heartbeat's lean context (see `LEAN_TOOLS`)
    source: str | None = None  # who pays (klaw.spend); None: from the chat id


@dataclass(frozen=True)
class _TurnInputs:
    """What `Pipeline._inputs` read for one turn."""

    model: str
    limits: ContextLimits
    rows: list[StoredMessage]
    core_text: str  # core memory for the prompt; "" when empty or unreadable
    skills: list[tuple[str, str]]  # (name, description) offered to the model
    summary: str | None  # the segment's newest summary
    invoked: tuple[str, str] | None  # (command, skill) the last message calls
    onboarding: bool  # BOOTSTRAP.md and onboarding_done are offered
    recalled: Recalled | None = None  # auto-recall's block (memory/recall.py)


@dataclass
class _Chat:
    order: asyncio.Lock = field(default_factory=asyncio.Lock)  # turns of a chat, in order
    batch: _Batch | None = None  # collecting while its debounce timer runs
    timer: asyncio.Task[None] | None = None


class Pipeline:
    """The engine's message pipeline; see the module docstring."""

    def __init__(
        self,
        config: EngineConfig,
        paths: KlawPaths,
        memory: Memory,
        router: Router,
        *,
        registry_factory: RegistryFactory | None = None,
        now: Callable[[], datetime] | None = None,
        commands: Commands | None = None,
    ) -> None:
        self.config = config
        self.paths = paths
        self.memory = memory
        self.router = router
        self._registry_factory = registry_factory or self._default_registry
        self._now = now or (lambda: datetime.now(UTC))
        # The model is told the time in the owner's zone (scheduler.timezone, else the
        # host's), the one current_time, jobs, daily logs and summaries name days in.
        self._zone: tzinfo | None = config.scheduler.zone()
        self._slots = PrioritySlots(config.processing.max_concurrent_llm)
        self._chats: dict[str, _Chat] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._active: set[str] = set()  # ids of messages queued or in a running turn
        # Ids being stored but not queued yet: already in klaw.db, so a turn running
        # meanwhile must leave them out of its window like queued ones (else it
        # answers them too, ahead of its own messages, and they get a second turn).
        self._arriving: set[str] = set()
        self._registries: dict[str, ToolRegistry] = {}
        self._retrying: set[str] = set()  # unanswered messages waiting for their retry
        self._intake: dict[str, asyncio.Lock] = {}  # per chat: store, then queue, in order
        self.answered = AnsweredMarks(paths.answered, legacy=memory.store.meta_get)
        self._core: CoreMemory | None = None  # core_memory.json, read by `_inputs`
        self._skill_catalog: SkillCatalog | None = None
        self._syncing: asyncio.Task[None] | None = None  # fsyncing answered watermarks
        self._core_problem: str | None = None  # why core_memory.json can't be read
        self._core_warned: dict[str, str] = {}  # chat → the problem it was told about
        self._recall: Recall | None = None  # auto-recall, made at the first turn
        # When no model answers, the batch is tried again after this, doubling.
        self.retry_base_s = 30.0
        self.retry_max_s = 900.0
        for problem in eager_problems(config.tools.eager):
            log.warning("%s", problem)
        if commands is None:
            from klaw.engine.commands import Commands

            commands = Commands(config, paths, memory, now=self._now)
        self.commands = commands
        #: Called with the chat id after each interactive reply (background summaries).
        self.after_turn: Callable[[str], None] | None = None
        #: Called with the chat id after every reply (the conversation index).
        self.on_reply: Callable[[str], None] | None = None
        #: Where streamed drafts go (the engine server); None: no streaming.
        self.drafts: DraftSink | None = None

    def _default_registry(self, chat_id: str) -> ToolRegistry:
        from klaw.tools import builtin_registry

        return builtin_registry(self.paths, self.config, self.memory, chat_id=chat_id)

    def session(self, chat_id: str, first_ts: str) -> tuple[str, str]:
        """(model, segment start) of a chat; the row is created on its first message."""
        store = self.memory.store
        row = store.get_session(chat_id)
        if row is not None:
            return row.model, row.segment_start
        model = self.config.routing.default
        store.upsert_session(chat_id, model, first_ts, to_iso(self._now()) or first_ts)
        return model, first_ts

    # ------------------------------------------------------------------ intake

    async def handle(
        self,
        msg: Inbound | Command,
        reply: Reply,
        *,
        priority: int = INTERACTIVE,
        model: str | None = None,
        lean: bool = False,
        source: str | None = None,
    ) -> None:
        """Store `msg`, queue it for its chat's next turn and wait for that turn.

        A `SUBAGENT` turn (a scheduled job) runs after interactive ones waiting for a
        slot, sees `context.subagentWindow` rows of its own chat, answers with `model`
        (else `routing.tasks.subagent`), and is not retried when no model answers
        (the job's run fails and the scheduler records it). A `lean` turn (the
        heartbeat) gets no AGENTS.md, skills by name only and `LEAN_TOOLS`.
        """
        skill = (
            await asyncio.to_thread(self._skill_for, msg.name) if isinstance(msg, Command) else None
        )
        if isinstance(msg, Command) and skill is not None:
            # A skill's chat command is a request to the model, not an engine command.
            msg = Inbound(
                id=msg.id,
                channel=msg.channel,
                chat_id=msg.chat_id,
                ts=msg.ts,
                content=command_text(msg),
                meta=msg.meta,
            )
        row = line_row(inbound_line(msg), msg.channel, msg.chat_id)
        # Stored in a worker thread (a write may wait behind indexing: never on the
        # loop); the chat's intake lock keeps arrival order from storing to queueing.
        intake = self._intake.setdefault(msg.chat_id, asyncio.Lock())
        async with intake:
            self._arriving.add(msg.id)
            try:
                inserted = await asyncio.to_thread(self.memory.store.insert_messages, [row])
            except BaseException:
                self._arriving.discard(msg.id)
                raise
            if isinstance(msg, Command):
                self._arriving.discard(msg.id)  # typed rows never enter a window
                queued = asyncio.Event()
                command = self._spawn(
                    self._command(msg, reply, duplicate=inserted == 0, queued=queued)
                )
                # Hold intake until the command stands in the chat's order: a message
                # arriving after it must be answered after it.
                waiting = asyncio.ensure_future(queued.wait())
                await asyncio.wait([command, waiting], return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
            else:
                try:
                    if inserted == 0:
                        self._arriving.discard(msg.id)  # `_redelivered` checks `_active`
                        if not await self._redelivered(msg, reply):
                            return
                        log.info(
                            "message %s of %s was stored but never answered: processing it",
                            msg.id,
                            msg.chat_id,
                        )
                    done = self._enqueue(
                        msg, reply, priority, model=model, lean=lean, source=source
                    )
                finally:
                    self._arriving.discard(msg.id)
        if isinstance(msg, Command):
            await command
            return
        await asyncio.shield(done)

    async def _redelivered(self, msg: Inbound, reply: Reply) -> bool:
        """Settles a message stored before; True when it still needs its turn."""
        if msg.id in self._active or msg.id in self._retrying:
            log.info("message %s of %s is already being processed", msg.id, msg.chat_id)
            return False
        marks = self.answered
        stored = await asyncio.to_thread(marks.reply_for, msg.chat_id, msg.id)
        ts = to_iso(msg.ts) or ""
        if stored is None and await asyncio.to_thread(marks.needs_turn, msg.chat_id, msg.id, ts):
            return True
        if stored is not None:
            log.info("message %s of %s was answered: sending that reply again", msg.id, msg.chat_id)
            await _send(reply, stored)
        else:
            await _send(
                reply,
                Error(
                    code=ErrorCode.DUPLICATE,
                    message="this message was already answered",
                    ref=msg.id,
                ),
            )
        return False

    async def _command(
        self, cmd: Command, reply: Reply, *, duplicate: bool, queued: asyncio.Event
    ) -> None:
        """Runs a command in its chat's order, after any batch collected before it;
        `queued` is set once it waits in that order."""
        chat = self._chats.setdefault(cmd.chat_id, _Chat())
        if chat.batch is not None:
            # Close the collecting batch now (nothing later may join it) and let it
            # queue on the chat's order lock before this command does.
            if chat.timer is not None:
                chat.timer.cancel()
            batch, chat.batch, chat.timer = chat.batch, None, None
            self._spawn(self._run(cmd.chat_id, chat, batch))
            await asyncio.sleep(0)
        queued.set()  # no await between this and taking a place on the order lock
        async with chat.order:
            first_ts = to_iso(cmd.ts) or ""
            model, segment = await asyncio.to_thread(self.session, cmd.chat_id, first_ts)
            out = await self.commands.execute(cmd, model, segment, duplicate=duplicate)
        await _send(reply, out)

    def _enqueue(
        self,
        msg: Inbound,
        reply: Reply,
        priority: int,
        *,
        attempt: int = 0,
        model: str | None = None,
        lean: bool = False,
        source: str | None = None,
    ) -> asyncio.Future[None]:
        chat = self._chats.setdefault(msg.chat_id, _Chat())
        if chat.batch is None:
            chat.batch = _Batch(done=asyncio.get_running_loop().create_future(), priority=priority)
        batch = chat.batch
        batch.model = model or batch.model
        batch.lean = batch.lean or lean
        batch.source = source or batch.source
        batch.attempt = max(batch.attempt, attempt)
        self._active.add(msg.id)
        batch.messages.append(msg)
        batch.replies.append(reply)
        batch.priority = min(batch.priority, priority)
        if chat.timer is not None:
            chat.timer.cancel()
        chat.timer = self._spawn(self._debounce(msg.chat_id, chat))
        assert batch.done is not None
        return batch.done

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _debounce(self, chat_id: str, chat: _Chat) -> None:
        await asyncio.sleep(self.config.processing.debounce_ms / 1000)
        # From here on this batch is closed: new messages start the next one.
        batch, chat.batch, chat.timer = chat.batch, None, None
        if batch is not None:
            await self._run(chat_id, chat, batch)

    async def _run(self, chat_id: str, chat: _Chat, batch: _Batch) -> None:
        """One batch's turn, in the chat's order (the lock is the first thing awaited)."""
        assert batch.done is not None
        try:
            async with chat.order:
                if batch.priority >= SUBAGENT:
                    # A subagent takes a slot per model call (see `_complete`): an
                    # interactive reply waits for at most one of its calls, never for
                    # its whole turn of tool rounds.
                    await self._turn(chat_id, batch)
                else:
                    await self._slots.acquire(batch.priority)
                    try:
                        await self._turn(chat_id, batch)
                    finally:
                        self._slots.release()
        except asyncio.CancelledError:
            if not batch.done.done():
                batch.done.cancel()
            raise
        except Exception as exc:
            log.exception("turn of %s failed", chat_id)
            # The exception's text may hold host paths or internals: the chat gets its
            # kind only, the log has the rest.
            for msg, reply in zip(batch.messages, batch.replies, strict=True):
                await _send(
                    reply,
                    Error(
                        code=ErrorCode.INTERNAL,
                        message=f"internal error ({type(exc).__name__}); see the engine log",
                        ref=msg.id,
                    ),
                )
        finally:
            self._active.difference_update(m.id for m in batch.messages)
            if not batch.done.done():
                batch.done.set_result(None)

    async def aclose(self) -> None:
        """Cancel pending debounce timers and running turns (their inbounds stay stored)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._chats.clear()
        await asyncio.to_thread(self.answered.sync)  # watermarks whose fsync was cancelled

    # ------------------------------------------------------------------ one turn

    async def _turn(self, chat_id: str, batch: _Batch) -> None:
        store = self.memory.store
        last = batch.messages[-1]
        reply = batch.replies[-1]
        first_ts = min(to_iso(m.ts) or "" for m in batch.messages)
        latest = max(to_iso(m.ts) or "" for m in batch.messages)
        own = {m.id for m in batch.messages}
        group = any(m.meta.group for m in batch.messages)
        got = await asyncio.to_thread(self._inputs, chat_id, first_ts, latest, own, batch, group)
        model, skills, onboarding = got.model, got.skills, got.onboarding
        if self._core_problem is not None and not group:
            await self._warn_core(batch, latest)
        registry = self._registry(chat_id, group)
        registry.begin_turn()  # tool groups unused for a few turns fold back into one line
        if not onboarding:
            registry = registry.only(n for n in registry.names() if n != "onboarding_done")
        if batch.lean:
            registry = pick(registry, LEAN_TOOLS)  # every schema sent, folded or not
            skills = [(name, "") for name, _ in skills]
        context = assemble_context(
            ContextInput.from_limits(
                got.limits,
                workspace=self.paths.workspace,
                core_memory=got.core_text,
                summary=got.summary,
                recalled=got.recalled.text if got.recalled else "",
                window=got.rows,
                now=self._now().astimezone(self._zone),
                channel=last.channel,
                tools=registry.schemas() if self._tools_for(model) else [],
                skills=skills,
                invoked_skill=got.invoked,
                chat_kind="group" if group else "private",
                skip_files=(LEAN_SKIPPED_FILES if batch.lean else frozenset())
                | (frozenset() if onboarding else frozenset({"BOOTSTRAP.md"})),
            )
        )
        messages = list(context.messages)
        if any(m.images for m in messages):  # photos for a vision model: read off the loop
            messages = await asyncio.to_thread(load_images, messages, self.paths.workspace)
        guard = LoopGuard(self.config.processing)
        usage = Usage()
        records: list[LogLine] = []
        answered_by = model
        meta: dict[str, Any] = {}
        line_type: str | None = None
        stream = self._draft_stream(batch)
        while True:
            if stream is not None:
                await stream.reset()  # a new round: its text replaces the last one's
            try:
                response = await self._complete(
                    LlmRequest(
                        # after a round, the tool groups `tools_load` loaded in it too
                        messages=messages,
                        tools=registry.schemas() if records and context.tools else context.tools,
                        stream=stream is not None,
                    ),
                    model,
                    batch,
                    stream,
                )
            except AllProvidersFailed as exc:
                log.error("no model answered %s: %s", chat_id, exc)
                if stream is not None:
                    stream.close()
                await self._unanswered(batch, exc.user_message, records)
                return
            except BudgetSpent as exc:  # the reply is the notice (a job's run is `capped`)
                text, line_type = exc.notice, "notice"
                meta.update(error="budget_spent", budget=exc.scope, first_notice=exc.first)
                break
            usage.tokens_in += response.usage.tokens_in
            usage.tokens_out += response.usage.tokens_out
            _add_cost(meta, response)
            answered_by = response.model or answered_by
            if not response.tool_calls:
                text = response.content or ""
                if response.budget_note:  # the offline model answered: say why
                    text = f"{response.budget_note}\n\n{text}"
                break
            stop = guard.check(response)
            if stop is not None:
                log.warning("%s: %s: turn ended", chat_id, stop.detail)
                text, meta["error"] = stop.message, stop.error
                break
            assistant = response.to_message()
            new = [self._line(assistant, latest, model=response.model)]
            messages.append(assistant)
            for call in response.tool_calls:
                result = await registry.call(call)
                tool_msg = Message.tool_result(call.id, result.content, is_error=result.is_error)
                messages.append(tool_msg)
                new.append(self._line(tool_msg, latest, tool=call.name))
            records.extend(new)
            await asyncio.to_thread(
                store.insert_messages, [line_row(x, last.channel, chat_id) for x in new]
            )

        if stream is not None:
            stream.close()  # no draft after the reply
        meta.update(
            {"model": answered_by, "tokens_in": usage.tokens_in, "tokens_out": usage.tokens_out}
        )
        if got.recalled is not None and got.recalled.items:  # what auto-recall put in
            meta["recalled"] = list(got.recalled.items)
        if not text.strip():
            log.warning("%s: the model answered with no text", chat_id)
        out = Outbound(
            ts=self._at(latest),
            channel=last.channel,
            chat_id=chat_id,
            content=text,
            reply_to=last.id,
            answers=[m.id for m in batch.messages],
            records=records,
            line_type=line_type,
            meta=meta,
        )
        await asyncio.to_thread(self._finish, out, latest)
        await _send(reply, out)
        # The watermark was written before the reply went out; durable after it.
        if self._syncing is None or self._syncing.done():
            self._syncing = self._spawn(self._sync_marks())
        if self.on_reply is not None:
            self.on_reply(chat_id)
        if self.after_turn is not None and batch.priority < SUBAGENT:
            self.after_turn(chat_id)

    async def _complete(
        self, request: LlmRequest, model: str, batch: _Batch, stream: DraftStream | None = None
    ) -> LlmResponse:
        if batch.priority < SUBAGENT:  # `_run` holds a slot
            return await self.router.complete(
                request,
                model=model,
                on_delta=stream.delta if stream else None,
                on_reset=stream.reset if stream else None,
                source=batch.source or source_for_chat(batch.messages[-1].chat_id),
            )
        source = batch.source or source_for_chat(batch.messages[-1].chat_id)
        return await self._background_call(request, model, source)

    def _draft_stream(self, batch: _Batch) -> DraftStream | None:
        """Drafts for an interactive turn whose channel shows replies while written."""
        last = batch.messages[-1]
        if self.drafts is None or batch.priority >= SUBAGENT or batch.lean:
            return None
        if not self.drafts.streams(last.channel):
            return None
        return DraftStream(
            self.drafts, channel=last.channel, chat_id=last.chat_id, reply_to=last.id
        )

    async def complete_background(self, request: BackgroundRequest, model: str) -> str:
        """A model call without tools at subagent priority (summaries; the scheduler's
        `BackgroundTurns` port): the answer's text. Raises `AllProvidersFailed`."""
        messages = [
            Message(role="system", content=request.instructions),
            Message(role="user", content=request.text),
        ]
        call = await self._background_call(LlmRequest(messages=messages), model, request.source)
        return call.content or ""

    async def _background_call(self, request: LlmRequest, model: str, source: str) -> LlmResponse:
        """One model call at subagent priority, holding a slot for that call only
        (subagent turns, summaries)."""
        await self._slots.acquire(SUBAGENT)
        try:
            return await self.router.complete(request, model=model, source=source)
        finally:
            self._slots.release()

    def load(self) -> dict[str, int]:
        """For `klaw status`: model calls waiting for a slot, turns being worked on."""
        return {"llm_waiting": self._slots.waiting, "messages_active": len(self._active)}

    async def _warn_core(self, batch: _Batch, latest: str) -> None:
        """Tell the owner, once per chat and problem, that core memory is unreadable.

        A `notice` settles nothing and stays out of the model's window; the text names
        the file, never a host path.
        """
        problem = self._core_problem or ""
        last = batch.messages[-1]
        if self._core_warned.get(last.chat_id) == problem:
            return
        self._core_warned[last.chat_id] = problem
        out = Outbound(
            ts=self._at(latest),
            channel=last.channel,
            chat_id=last.chat_id,
            content=CORE_MEMORY_NOTICE,
            reply_to=last.id,
            line_type="notice",
            meta={"error": "core_memory_unreadable"},
        )
        await asyncio.to_thread(
            self.memory.store.insert_messages,
            [line_row(outbound_line(out), out.channel, out.chat_id)],
        )
        await _send(batch.replies[-1], out)

    async def _unanswered(self, batch: _Batch, notice: str, records: list[LogLine]) -> None:
        """Every provider failed: tell the user, keep the batch unanswered, retry later.

        The notice is a typed line (kept out of the model's window) and settles
        nothing, so the gateway re-sends these messages after a restart too. A later
        successful turn of the chat covers them (they are in its window).
        """
        last = batch.messages[-1]
        latest = max(to_iso(m.ts) or "" for m in batch.messages)
        out = Outbound(
            ts=self._at(latest),
            channel=last.channel,
            chat_id=last.chat_id,
            content=notice,
            reply_to=last.id,
            records=records,
            line_type="notice",
            meta={"error": "all_providers_failed"},
        )
        await asyncio.to_thread(
            self.memory.store.insert_messages,
            [line_row(outbound_line(out), out.channel, out.chat_id)],
        )
        await _send(batch.replies[-1], out)
        if batch.priority >= SUBAGENT:
            return  # a scheduled run fails and is recorded; its next due time comes
        delay = Backoff(self.retry_base_s, 2.0, self.retry_max_s).delay(batch.attempt + 1)
        self._retrying.update(m.id for m in batch.messages)
        self._spawn(self._retry(batch, latest, delay))

    async def _retry(self, batch: _Batch, latest: str, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
        finally:
            self._retrying.difference_update(m.id for m in batch.messages)
        if await asyncio.to_thread(self.answered.covers, batch.messages[0].chat_id, latest):
            # A later turn answered the chat with these messages in its window:
            # settle them at the gateway (nothing more will come for them).
            for msg, reply in zip(batch.messages, batch.replies, strict=True):
                await _send(
                    reply,
                    Error(
                        code=ErrorCode.DUPLICATE, message="answered by a later reply", ref=msg.id
                    ),
                )
            return
        log.info(
            "retrying %d unanswered message(s) of %s",
            len(batch.messages),
            batch.messages[0].chat_id,
        )
        for msg, reply in zip(batch.messages, batch.replies, strict=True):
            if msg.id not in self._active:
                self._enqueue(msg, reply, batch.priority, attempt=batch.attempt + 1)

    async def _sync_marks(self) -> None:
        """fsyncs the answered watermarks written since, until none is left: one
        worker at a time, after `MARK_SYNC_DELAY_S`, so replies in quick succession
        share their fsyncs (a worker per reply competed with the next message)."""
        while self.answered.unsynced():
            await asyncio.sleep(MARK_SYNC_DELAY_S)
            await asyncio.to_thread(self.answered.sync)

    def _finish(self, out: Outbound, latest: str) -> None:
        """Stores the reply row and moves the chat's answered watermark (one writer)."""
        self.memory.store.insert_messages([line_row(outbound_line(out), out.channel, out.chat_id)])
        # The last few replies are kept: after a gateway outage every one of them may
        # still be owed (the gateway re-sends what it never saw answered).
        self.answered.record(out, latest)

    def _inputs(
        self, chat_id: str, first_ts: str, latest: str, own: set[str], batch: _Batch, group: bool
    ) -> _TurnInputs:
        """Everything a turn reads from disk, in one worker-thread hop (each hop is a
        thread handoff and a loop wake-up on the reply's path)."""
        from klaw.memory.core import CoreMemory, CoreMemoryError

        if self._core is None:
            # One reader for the engine's life: it keeps the parsed file until the
            # file changes (a new one per turn read and parsed it every turn).
            self._core = CoreMemory(self.paths.core_memory)

        stored, since = self.session(chat_id, first_ts)
        subagent = batch.priority >= SUBAGENT
        if subagent:
            stored = batch.model or self.config.routing.tasks.subagent
        model = self.usable_model(stored)
        limits = model_limits(self.config, model, subagent=subagent)
        cap = limits.window_cap
        # A window of `cap` messages mostly takes `cap` rows: those are read first.
        # Merged user runs, typed rows and tool rounds can take up to twice as many
        # (and ten): read when the first rows do not already decide the window.
        rows, decided = self._window_rows(chat_id, since, latest, own, cap + 10, cap)
        if not decided:
            rows, _ = self._window_rows(chat_id, since, latest, own, cap * 2 + 10, cap)
        try:
            core_text = self._core.to_prompt()
            self._core_problem = None
        except CoreMemoryError as exc:
            # A damaged file must not stop every chat: answer without core memory, keep
            # the file as it is for the owner to fix, and say so (see _turn).
            if self._core_problem != str(exc):
                log.error("answering without core memory: %s (%s)", exc, self.paths.core_memory)
            self._core_problem, core_text = str(exc), ""
        summary = segment_summary(self.paths.summaries, chat_id, since or None)
        # Onboarding is a conversation with the owner: never in groups, jobs or heartbeats.
        background = batch.lean or chat_id.startswith(SUBAGENT_CHAT_PREFIX)
        onboarding = not (group or background) and onboarding_pending(self.paths.workspace)
        return _TurnInputs(
            model=model,
            limits=limits,
            rows=rows,
            core_text=core_text,
            skills=self._skills(),
            summary=summary,
            invoked=self._invoked(batch),
            onboarding=onboarding,
            recalled=self._recalled(batch, group, background),
        )

    def _recalled(self, batch: _Batch, group: bool, background: bool) -> Recalled | None:
        """Auto-recall for the turn's new messages (klaw.memory.recall): like core
        memory, private chats only; never for jobs and heartbeats."""
        if background or (group and not self.config.context.allow_private_memory_in_groups):
            return None
        if self._recall is None:
            from klaw.memory.recall import Recall

            self._recall = Recall(self.paths.workspace, self.config.memory.auto_recall, self.memory)
        return self._recall.for_messages([m.content for m in batch.messages])

    def _window_rows(
        self, chat_id: str, since: str, latest: str, own: set[str], limit: int, cap: int
    ) -> tuple[list[StoredMessage], bool]:
        """The chat's last `limit` rows of the segment as the turn sees them, and
        whether they decide its window of `cap` messages (older rows could not change
        it: the segment has no more, or `_decides_window`)."""
        recent = self.memory.store.recent_messages(chat_id, since or None, limit)
        # Messages of later batches (stored on arrival, waiting their turn) are not
        # part of this turn: they would be answered here and again in their own. Taken
        # after the read: a message is marked arriving before it is stored, so any row
        # read here that is not done yet is marked (one C-level union under the GIL).
        later = (self._active | self._arriving) - own
        window = [r for r in recent if r.created_at <= latest and r.id not in later]
        # The messages this turn answers go last, whatever their timestamps: with 1 s
        # resolution a message sent while the previous turn ran shares its second with
        # that turn's reply, which is stored after it ("user B, assistant A" would make
        # B look answered). Everything else keeps log order.
        mine = [r for r in window if r.id in own]
        rows = _merge_user_runs([r for r in window if r.id not in own] + mine)
        if len(recent) < limit or any(r.kind == "session_break" for r in recent):
            return rows, True  # the whole segment, or all of it after its last break
        return rows, len(mine) == len(own) and _decides_window(rows, cap)

    def usable_model(self, stored: str) -> str:
        """The chat's model, or `routing.default` when it cannot be used.

        A model removed from engine.yaml, or one whose remote provider has no key
        (the chat began on the offline model, or the offline model now stands in for
        keyless providers), falls back to the default.
        """
        if stored not in self.config.models:
            return self.config.routing.default
        provider = self.config.providers.get(stored.partition("/")[0])
        if provider is None or not provider.callable_without_probe:
            return self.config.routing.default
        return stored

    def _tools_for(self, model: str) -> bool:
        spec = self.config.models.get(model)
        return spec is None or spec.tools

    def _registry(self, chat_id: str, group: bool = False) -> ToolRegistry:
        """One tool registry per chat, built on its first turn (tools hold no turn state).

        A group chat gets no tool that reads or writes the owner's memory or workspace
        unless `context.allowPrivateMemoryInGroups` (keeping them out of the prompt
        alone would leave them one tool call away). A subagent's chat (a scheduled
        job) reads core memory but does not change it, and schedules nothing.
        """
        registry = self._registries.get(chat_id)
        if registry is None:
            registry = self._registry_factory(chat_id)
            denied: frozenset[str] = frozenset()
            if group and not self.config.context.allow_private_memory_in_groups:
                denied = PRIVATE_TOOLS
            elif chat_id.startswith(SUBAGENT_CHAT_PREFIX):
                denied = SUBAGENT_DENIED_TOOLS
            if denied & set(registry.names()):
                registry = registry.only(n for n in registry.names() if n not in denied)
            if group:  # private tool groups (MCP servers) never reach a group chat
                registry = registry.without_private_groups()
                if not self.config.context.allow_private_memory_in_groups:
                    from klaw.tools.web import for_groups

                    registry = for_groups(registry)  # web_fetch without web.fetch.allowHosts
            # Last: rarely used built-ins become one line each of tools_load.
            registry = fold(registry, self.config.tools.eager, chat_id)
            self._registries[chat_id] = registry
        return registry

    def skill_commands(self) -> dict[str, str]:
        """Chat command -> skill name, for the owner's user-invocable skills."""
        try:
            builtin = {c.name for c in self.config.commands}
            return {cmd: s.name for cmd, s in self._catalog().commands(builtin).items()}
        except Exception:  # a broken skill folder must not stop the reply
            log.exception("skill commands could not be listed")
            return {}

    def _catalog(self) -> SkillCatalog:
        """The owner's skills: one catalog for the engine's life (it scans the folders
        at each call, and warns once per problem rather than once per turn)."""
        if self._skill_catalog is None:
            from klaw.tools.skills import SkillCatalog

            self._skill_catalog = SkillCatalog.for_paths(self.paths, self.config)
        return self._skill_catalog

    def _skill_for(self, command: str) -> str | None:
        return self.skill_commands().get(command.lower())

    def _invoked(self, batch: _Batch) -> tuple[str, str] | None:
        text = batch.messages[-1].content.lstrip()
        if not text.startswith("/"):
            return None
        words = text[1:].split(maxsplit=1)
        command = words[0].split("@")[0].lower() if words else ""
        skill = self._skill_for(command) if command else None
        return (command, skill) if skill else None

    def _skills(self) -> list[tuple[str, str]]:
        try:
            return [(s.name, s.description) for s in self._catalog().offered().values()]
        except Exception:  # a broken skill folder must not stop the reply
            log.exception("skills could not be listed")
            return []

    def _at(self, latest: str) -> datetime:
        """The logical time of a turn's rows: its latest input's.

        Rows of one time keep their log order, so a reply sits right after what it
        answers and before anything sent later, even when buffered messages and a
        `/new` are processed long after they were sent (then the clock would put the
        reply after the break).
        """
        return datetime.fromisoformat(latest) if latest else self._now()

    def _line(
        self,
        message: Message,
        latest: str,
        *,
        model: str | None = None,
        tool: str | None = None,
    ) -> LogLine:
        meta = message_meta(message)
        if model:
            meta["model"] = model
        if tool:
            meta["tool"] = tool
        return LogLine(
            id=new_id(),
            ts=self._at(latest),
            role=message.role,
            content=message.content or "",
            meta=meta,
        )


def _decides_window(rows: Sequence[StoredMessage], cap: int) -> bool:
    """Whether older rows could not change the window `assemble_context` makes of
    `rows` (oldest first): it keeps at most `cap` messages, newest first, so it never
    reaches past cap + 1 messages that are the same however far back the read went.
    Only the first row (a user run merged with older rows) and tool results right
    after it (their call may be older) could differ; tool results, typed rows and
    replies a tool sent (`from_chat`) are not counted at all."""
    i = 1
    while i < len(rows) and rows[i].role == "tool":
        i += 1
    counted = 0
    for r in rows[i:]:
        if r.kind is None and (
            r.role == "user" or (r.role == "assistant" and '"from_chat"' not in (r.metadata or ""))
        ):
            counted += 1
    return counted > cap


def _add_cost(meta: dict[str, Any], response: LlmResponse) -> None:
    """The turn's cost on its reply (`meta.cost`, per currency; `meta.cost_unknown`:
    calls of unknown price); the spend log has each call (docs/costs.md)."""
    call = response.spent
    if call is None:
        return  # not metered
    if call.cost is None:
        meta["cost_unknown"] = meta.get("cost_unknown", 0) + 1
    elif call.currency is not None:  # else a local model: free
        costs = meta.setdefault("cost", {})
        costs[call.currency] = round(costs.get(call.currency, 0.0) + call.cost, 8)


def _merge_user_runs(rows: Sequence[StoredMessage]) -> list[StoredMessage]:
    """Consecutive user rows (a debounced batch) become one row, texts joined by newlines."""
    out: list[StoredMessage] = []
    for row in rows:
        prev = out[-1] if out else None
        if prev is not None and prev.role == "user" and row.role == "user" and row.kind is None:
            if prev.kind is None:
                merged = "\n".join(t for t in (prev.content, row.content) if t)
                out[-1] = with_content(row, merged)
                continue
        out.append(row)
    return out


async def _send(reply: Reply, msg: Outbound | Error) -> None:
    try:
        await reply(msg)
    except KlawError as exc:
        about = msg.chat_id if isinstance(msg, Outbound) else msg.ref
        log.error("%s for %s not delivered: %s", msg.type, about, exc)

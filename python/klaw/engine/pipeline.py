"""The message pipeline: store → debounce → LLM slot → context → LLM ⇄ tools → reply (§2.4).

`Pipeline` is the engine's `InboundHandler`:

1. Every inbound is stored in klaw.db at once, with its own ``ts``. The store is
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
   and tool failures go back to the model as error results). At the cap the user
   gets `TOOL_LIMIT_MESSAGE`. Assistant and tool messages are stored; the reply goes
   out as an `outbound` answering the batch's last message. When every provider
   fails the user gets `AllProvidersFailed.user_message`; the inbound stays stored.

`handle` returns once the turn holding its message is done (so the server's
graceful shutdown waits for it). Commands are not handled here yet: they get a
`not_implemented` error.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from klaw.engine.context import (
    ContextInput,
    StoredMessage,
    assemble_context,
    message_meta,
    model_limits,
)
from klaw.engine.protocol import Command, Error, ErrorCode, Inbound, Outbound, new_id
from klaw.errors import KlawError
from klaw.llm.errors import AllProvidersFailed
from klaw.llm.types import LlmRequest, Message
from klaw.memory.api import to_iso

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.engine.server import Reply
    from klaw.llm.router import Router
    from klaw.memory.api import Memory
    from klaw.paths import KlawPaths
    from klaw.tools.base import ToolRegistry

__all__ = [
    "INTERACTIVE",
    "SUBAGENT",
    "TOOL_LIMIT_MESSAGE",
    "Pipeline",
    "PrioritySlots",
]

log = logging.getLogger("klaw.engine")

INTERACTIVE: Final = 0
SUBAGENT: Final = 10

TOOL_LIMIT_MESSAGE: Final = (
    "I stopped after {rounds} rounds of tool calls without reaching an answer (the limit "
    "was reached). Please rephrase or narrow the request."
)

RegistryFactory = Callable[[str], "ToolRegistry"]


class PrioritySlots:
    """A semaphore whose waiters are served by (priority, arrival): lower goes first."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"need at least one slot, got {slots}")
        self._free = slots
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    @property
    def free(self) -> int:
        return self._free

    async def acquire(self, priority: int = INTERACTIVE) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._seq), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot was handed over just as we were cancelled
            raise

    def release(self) -> None:
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1


@dataclass
class _Batch:
    messages: list[Inbound] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    priority: int = INTERACTIVE
    done: asyncio.Future[None] | None = None


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
    ) -> None:
        self.config = config
        self.paths = paths
        self.memory = memory
        self.router = router
        self._registry_factory = registry_factory or self._default_registry
        self._now = now or (lambda: datetime.now(UTC))
        self._slots = PrioritySlots(config.processing.max_concurrent_llm)
        self._chats: dict[str, _Chat] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def _default_registry(self, chat_id: str) -> ToolRegistry:
        from klaw.tools import builtin_registry

        return builtin_registry(self.paths, self.config, self.memory, chat_id=chat_id)

    # ------------------------------------------------------------------ intake

    async def handle(
        self, msg: Inbound | Command, reply: Reply, *, priority: int = INTERACTIVE
    ) -> None:
        """Store `msg`, queue it for its chat's next turn and wait for that turn."""
        if isinstance(msg, Command):
            await _send(
                reply,
                Error(
                    code=ErrorCode.NOT_IMPLEMENTED,
                    message=f"command /{msg.name} is not supported yet",
                    ref=msg.id,
                ),
            )
            return
        row: StoredMessage = (
            msg.id,
            msg.channel,
            msg.chat_id,
            "user",
            None,
            msg.content,
            json.dumps(msg.meta.model_dump(mode="json", exclude_defaults=True)),
            to_iso(msg.ts) or "",
        )
        # Synchronous on purpose: no await between arrival and queueing keeps the
        # order of a chat's messages (one small insert).
        inserted = self.memory.store.insert_messages([row])
        if inserted == 0:
            log.info("message %s of %s already stored: not processed again", msg.id, msg.chat_id)
            return
        done = self._enqueue(msg, reply, priority)
        await asyncio.shield(done)

    def _enqueue(self, msg: Inbound, reply: Reply, priority: int) -> asyncio.Future[None]:
        chat = self._chats.setdefault(msg.chat_id, _Chat())
        if chat.batch is None:
            chat.batch = _Batch(done=asyncio.get_running_loop().create_future(), priority=priority)
        batch = chat.batch
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
        if batch is None:
            return
        assert batch.done is not None
        try:
            async with chat.order:
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
            last = batch.messages[-1]
            await _send(
                batch.replies[-1],
                Error(code=ErrorCode.INTERNAL, message=f"processing failed: {exc}", ref=last.id),
            )
        finally:
            if not batch.done.done():
                batch.done.set_result(None)

    async def aclose(self) -> None:
        """Cancel pending debounce timers and running turns (their inbounds stay stored)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._chats.clear()

    # ------------------------------------------------------------------ one turn

    async def _turn(self, chat_id: str, batch: _Batch) -> None:
        store = self.memory.store
        last = batch.messages[-1]
        reply = batch.replies[-1]
        session = await asyncio.to_thread(store.get_session, chat_id)
        model = session[0] if session else self.config.routing.default
        since = session[1] if session and session[1] else None
        limits = model_limits(self.config, model)
        registry = self._registry_factory(chat_id)
        rows = await asyncio.to_thread(
            store.recent_messages, chat_id, since, max(limits.window_cap * 4, 50)
        )
        from klaw.memory.core import CoreMemory

        core_text = CoreMemory(self.paths.core_memory).to_prompt()
        context = assemble_context(
            ContextInput.from_limits(
                limits,
                workspace=self.paths.workspace,
                core_memory=core_text,
                summary=None,
                window=_merge_user_runs(rows),
                now=self._now(),
                channel=last.channel,
                tools=registry.schemas(),
            )
        )
        messages = list(context.messages)
        latest = max(to_iso(m.ts) or "" for m in batch.messages)
        max_rounds = self.config.processing.max_tool_call_rounds
        rounds = 0
        while True:
            try:
                response = await self.router.complete(
                    LlmRequest(messages=messages, tools=context.tools), model=model
                )
            except AllProvidersFailed as exc:
                log.error("no model answered %s: %s", chat_id, exc)
                await _send(
                    reply,
                    Outbound(
                        channel=last.channel,
                        chat_id=chat_id,
                        content=exc.user_message,
                        reply_to=last.id,
                        meta={"error": "all_providers_failed"},
                    ),
                )
                return
            if not response.tool_calls:
                text = response.content or ""
                break
            if rounds >= max_rounds:
                log.warning("%s: tool-call limit of %d rounds reached", chat_id, max_rounds)
                text = TOOL_LIMIT_MESSAGE.format(rounds=max_rounds)
                break
            rounds += 1
            assistant = response.to_message()
            new_rows = [self._row(last, assistant, latest, model=response.model)]
            messages.append(assistant)
            for call in response.tool_calls:
                result = await registry.call(call)
                tool_msg = Message.tool_result(call.id, result.content, is_error=result.is_error)
                messages.append(tool_msg)
                new_rows.append(self._row(last, tool_msg, latest))
            await asyncio.to_thread(store.insert_messages, new_rows)

        final = Message("assistant", text)
        await asyncio.to_thread(
            store.insert_messages, [self._row(last, final, latest, model=response.model)]
        )
        if not text.strip():
            log.warning("%s: the model answered with no text; nothing sent", chat_id)
            return
        await _send(
            reply,
            Outbound(channel=last.channel, chat_id=chat_id, content=text, reply_to=last.id),
        )

    def _row(
        self, last: Inbound, message: Message, latest: str, *, model: str | None = None
    ) -> StoredMessage:
        """A stored row for an engine-made message, never dated before the turn's input."""
        meta = message_meta(message)
        if model:
            meta["model"] = model
        at = max(to_iso(self._now()) or "", latest)
        return (
            new_id(),
            last.channel,
            last.chat_id,
            message.role,
            None,
            message.content or "",
            json.dumps(meta, ensure_ascii=False) if meta else None,
            at,
        )


def _merge_user_runs(rows: Sequence[StoredMessage]) -> list[StoredMessage]:
    """Consecutive user rows (a debounced batch) become one row, texts joined by newlines."""
    out: list[StoredMessage] = []
    for row in rows:
        prev = out[-1] if out else None
        if prev is not None and prev[3] == "user" and row[3] == "user" and row[4] is None:
            if prev[4] is None:
                merged = "\n".join(t for t in (prev[5], row[5]) if t)
                out[-1] = (*row[:5], merged, row[6], row[7])
                continue
        out.append(row)
    return out


async def _send(reply: Reply, msg: Outbound | Error) -> None:
    try:
        await reply(msg)
    except KlawError as exc:
        log.error("reply %s to %s not delivered: %s", msg.type, getattr(msg, "ref", None), exc)

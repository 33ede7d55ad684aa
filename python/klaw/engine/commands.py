"""Slash commands the engine answers without the LLM (design §6.6).

    /new               a new segment: a `session_break` marker; the window starts after it
    /model             the chat's model
    /model p/model-id  switch (validated against engine.yaml `models`)
    /models            the configured models, marking the chat's and which have keys
    /memory            core memory
    /status            engine uptime, the chat's model, segment start, messages in flight,
                       what was spent today and this month
    /help              the commands of engine.yaml `commands`

The engine is not the writer of interactive logs: markers go to the gateway as the
outbound's `records` (it logs them before the reply), and the engine stores the same
rows in klaw.db. A redelivered command (already stored) is answered again without
acting twice. Commands not listed in `commands` get a short "unknown command" reply.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from klaw import __version__
from klaw.wire.loglines import line_row, outbound_line
from klaw.wire.protocol import Command, LogLine, Outbound, new_id
from klaw.wire.record import to_iso

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.memory.api import Memory
    from klaw.paths import KlawPaths

__all__ = ["Commands"]

StatusFn = Callable[[], dict[str, Any]]


class Commands:
    def __init__(
        self,
        config: EngineConfig,
        paths: KlawPaths,
        memory: Memory,
        *,
        now: Callable[[], datetime] | None = None,
        status: StatusFn | None = None,
    ) -> None:
        self.config = config
        self.paths = paths
        self.memory = memory
        self._now = now or (lambda: datetime.now(UTC))
        self._status = status
        self._t0 = time.monotonic()
        #: Commands answered by other parts (`/approve`: klaw.mcp), name -> reply text.
        self.handlers: dict[str, Callable[[Command], Awaitable[str]]] = {}

    def set_status(self, status: StatusFn) -> None:
        self._status = status

    async def execute(self, cmd: Command, model: str, segment: str, *, duplicate: bool) -> Outbound:
        """The reply to `cmd`; the chat's (model, segment start) is given by the caller."""
        name = cmd.name.lower()
        records: list[LogLine] = []
        if name in self.handlers:
            text = await self.handlers[name](cmd)
        elif name not in {c.name for c in self.config.commands}:
            text = f"Unknown command /{cmd.name}. " + self._help()
        elif name == "new":
            text, records = await self._new(cmd, model, duplicate)
        elif name == "model":
            text, records = await self._model(cmd, model, segment, duplicate)
        elif name == "models":
            text = self._models(model)
        elif name == "memory":
            if cmd.meta.group and not self.config.context.allow_private_memory_in_groups:
                text = "Core memory is private: it is not shown in group chats."
            else:
                text = await asyncio.to_thread(self._memory, cmd.chat_id)
        elif name == "status":
            text = await asyncio.to_thread(self._status_text, cmd.chat_id, model, segment)
        else:
            text = self._help()
        out = Outbound(
            ts=cmd.ts,
            channel=cmd.channel,
            chat_id=cmd.chat_id,
            content=text,
            reply_to=cmd.id,
            answers=[cmd.id],
            records=records,
            line_type="command_reply",
            meta={"command": name},
        )
        rows = [line_row(r, cmd.channel, cmd.chat_id) for r in records]
        rows.append(line_row(outbound_line(out), cmd.channel, cmd.chat_id))
        await asyncio.to_thread(self.memory.store.insert_messages, rows)
        return out

    # --- the commands ----------------------------------------------------

    async def _new(self, cmd: Command, model: str, duplicate: bool) -> tuple[str, list[LogLine]]:
        if duplicate:
            return "A new session was already started.", []
        # The break sits at the command's own time: messages sent before it stay
        # behind it, even when a buffered command arrives late.
        mark = LogLine(
            id=new_id(),
            ts=cmd.ts,
            role="system",
            type="session_break",
            meta={"reason": "user_reset", "model": model, "command_id": cmd.id},
        )
        at = to_iso(cmd.ts) or ""
        await asyncio.to_thread(
            self.memory.store.upsert_session, cmd.chat_id, model, at, to_iso(self._now()) or at
        )
        return (
            "New session started. The conversation so far is kept in the log and in "
            f"memory search; the context starts fresh. Model: {model}.",
            [mark],
        )

    async def _model(
        self, cmd: Command, model: str, segment: str, duplicate: bool
    ) -> tuple[str, list[LogLine]]:
        want = cmd.args.strip()
        if not want:
            return f"Model: {model}. Switch with /model provider/model-id (see /models).", []
        if want not in self.config.models:
            return (
                f"Unknown model {want!r}. Configured models: "
                + ", ".join(sorted(self.config.models))
                + ". Add it under `models` in engine.yaml first.",
                [],
            )
        if want == model or duplicate:
            return f"Model: {want}.", []
        mark = LogLine(
            id=new_id(),
            ts=cmd.ts,
            role="system",
            type="model_switch",
            meta={"model": want, "previous": model, "command_id": cmd.id},
        )
        await asyncio.to_thread(
            self.memory.store.upsert_session,
            cmd.chat_id,
            want,
            segment,
            to_iso(self._now()) or segment,
        )
        note = "" if self._has_key(want) else " Note: its provider has no API key configured."
        return f"Model switched from {model} to {want}.{note}", [mark]

    def _has_key(self, ref: str) -> bool:
        provider = self.config.providers.get(ref.partition("/")[0])
        return provider is not None and provider.callable_without_probe

    def _models(self, current: str) -> str:
        lines = ["Models (engine.yaml):"]
        for ref in sorted(self.config.models):
            flags = []
            if ref == current:
                flags.append("this chat")
            if ref == self.config.routing.default:
                flags.append("default")
            if not self._has_key(ref):
                flags.append("no API key")
            lines.append(f"- {ref}" + (f" ({', '.join(flags)})" if flags else ""))
        lines.append("Switch with /model provider/model-id.")
        return "\n".join(lines)

    def _memory(self, chat_id: str) -> str:
        from klaw.memory.core import CoreMemory, CoreMemoryError

        try:
            text = CoreMemory(self.paths.core_memory).to_prompt()
        except CoreMemoryError as exc:
            return f"Core memory cannot be read: {exc}. Run `klaw doctor` on the host."
        core = f"Core memory:\n{text}" if text else "Core memory is empty."
        return core + self._recalled(chat_id)

    def _recalled(self, chat_id: str) -> str:
        """What auto-recall put into the chat's last turn (its reply's `recalled`)."""
        import json

        for row in reversed(self.memory.store.recent_messages(chat_id, None, 20)):
            if row.role != "assistant" or row.kind:
                continue
            try:
                got = json.loads(row.metadata or "{}").get("recalled")
            except (ValueError, AttributeError):
                return ""
            if not isinstance(got, list) or not got:
                return "\nAuto-recall put nothing into the last turn."
            return "\nAuto-recall put into the last turn:\n" + "\n".join(f"- {c}" for c in got)
        return ""

    def _status_text(self, chat_id: str, model: str, segment: str) -> str:
        info = self._status() if self._status else {}
        uptime = int(info.get("uptime_s", time.monotonic() - self._t0))
        h, rem = divmod(uptime, 3600)
        m, sec = divmod(rem, 60)
        stats = dict(self.memory.store.stats())
        lines = [
            f"Klaw {__version__}, up {h}h{m:02d}m{sec:02d}s",
            f"Chat: {chat_id}",
            f"Model: {model}",
            f"Session since: {segment or 'the beginning'}",
            f"Messages in flight: {info.get('in_flight', 0)}",
            f"Stored: {stats.get('messages', 0)} messages, {stats.get('chunks', 0)} memory chunks",
        ]
        if info.get("spend"):  # the spend meter's line (docs/costs.md)
            lines.append(str(info["spend"]))
        return "\n".join(lines)

    def _help(self) -> str:
        return "Commands:\n" + "\n".join(
            f"/{c.name}: {c.description}" for c in self.config.commands
        )

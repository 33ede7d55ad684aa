"""Conversation-log lines shared by the gateway (which writes them) and the engine
(which stores the same rows in klaw.db), so `klaw reindex` rebuilds what was live.

Every line's ``ts`` is `to_iso` (UTC, whole seconds): the store and the files order
by the same string, and rows of one second keep their log order.
"""

from __future__ import annotations

import json
from typing import Any

from klaw._core import Message
from klaw.wire.protocol import Command, Inbound, LogLine, Outbound
from klaw.wire.record import Record, to_iso

__all__ = ["command_text", "inbound_line", "line_row", "outbound_line", "to_record"]

# (id, channel, chat_id, role, type, content, metadata_json, created_at)


def command_text(cmd: Command) -> str:
    return f"/{cmd.name} {cmd.args}".strip()


def inbound_line(msg: Inbound | Command) -> LogLine:
    """The user line for an inbound message or a command, as the gateway logs it."""
    meta: dict[str, Any] = {"channel": msg.channel, "chat_id": msg.chat_id}
    meta.update(msg.meta.model_dump(mode="json", exclude_defaults=True))
    if isinstance(msg, Command):
        return LogLine(
            id=msg.id, ts=msg.ts, role="user", type="command", content=command_text(msg), meta=meta
        )
    return LogLine(id=msg.id, ts=msg.ts, role="user", content=msg.content, meta=meta)


def outbound_line(out: Outbound) -> LogLine:
    """The assistant line for an outbound (its records are logged before it)."""
    meta: dict[str, Any] = {"channel": out.channel, "chat_id": out.chat_id}
    if out.reply_to:
        meta["reply_to"] = out.reply_to
    meta.update(out.meta)
    if out.attachments:
        meta["attachments"] = [
            a.model_dump(mode="json", exclude_none=True) for a in out.attachments
        ]
    return LogLine(
        id=out.id, ts=out.ts, role="assistant", type=out.line_type, content=out.content, meta=meta
    )


def to_record(line: LogLine) -> Record:
    """The JSONL record of a line (`Record` validates role, type and ts)."""
    return Record(
        id=line.id,
        ts=to_iso(line.ts) or "",
        role=line.role,
        content=line.content,
        type=line.type,
        meta=dict(line.meta),
    )


def line_row(line: LogLine, channel: str, chat_id: str) -> Message:
    """The klaw.db row the engine stores for `line` (what reindex makes of the file)."""
    return Message(
        id=line.id,
        channel=channel,
        chat_id=chat_id,
        role=line.role,
        kind=line.type,
        content=line.content,
        # Compact, as in the JSONL line: reindex stores the file's own `meta` text.
        metadata=json.dumps(line.meta, ensure_ascii=False, separators=(",", ":"))
        if line.meta
        else None,
        created_at=to_iso(line.ts) or "",
    )

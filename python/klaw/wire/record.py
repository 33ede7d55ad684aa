"""The conversation-log record (design §5.2): one message a line of JSONL.

Shared by the gateway (the only writer of interactive logs), the engine (which stores
the same rows in klaw.db) and every reader, so it lives in `klaw.wire` beside the
socket protocol and depends on neither side. A line is one JSON object::

    {"id": "msg_001", "ts": "2026-02-24T14:30:00Z", "role": "user", "content": "Hi",
     "type": "session_break", "meta": {"channel": "telegram", "chat_id": "123456"}}

``type`` is omitted for ordinary messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from klaw._core import parse_record_ts
from klaw.errors import InvalidInput

__all__ = [
    "REQUIRED_FIELDS",
    "ROLES",
    "TYPES",
    "Record",
    "encode_record",
    "new_message_id",
    "now_iso",
    "to_iso",
    "validate_chat_id",
]

ROLES = frozenset({"user", "assistant", "system", "tool"})
TYPES = frozenset(
    {
        "session_break",
        "model_switch",
        "command",
        "command_reply",
        "notice",
        "subagent_result",
        "internal",
    }
)
REQUIRED_FIELDS = ("id", "ts", "role", "content")

# Raw in JSON text these are legal, but str.splitlines() and some JS tools break on
# them; inside JSON they can only occur in strings, so escaping them is lossless.
_LINE_SEPARATORS = {"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _parse_ts(ts: str) -> datetime:
    """Parse a record timestamp by the readers' own rule (``klaw_core::record``), so a
    record written here is never skipped when read: ISO 8601 with a time zone."""
    micros = parse_record_ts(ts) if isinstance(ts, str) else None
    if micros is None:
        raise ValueError(f"{ts!r} is not ISO 8601 with a time zone (e.g. ...T14:30:00Z)")
    return _EPOCH + timedelta(microseconds=micros)


def _utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_message_id() -> str:
    """A fresh unique message id (time-ordered prefix, random tail)."""
    import uuid

    return f"msg_{datetime.now(UTC).strftime('%Y%m%d%H%M%S')}_{uuid.uuid4().hex[:12]}"


def validate_chat_id(chat_id: str) -> str:
    """Return ``chat_id`` if it is safe as one directory name, else raise InvalidInput."""
    if not isinstance(chat_id, str) or not chat_id:
        raise InvalidInput("chat_id must be a non-empty string")
    bad = (
        "/" in chat_id
        or "\\" in chat_id
        or ".." in chat_id
        or chat_id.startswith(".")
        or any(ord(c) < 0x20 or c == "\x7f" for c in chat_id)
    )
    if bad:
        raise InvalidInput(
            f"invalid chat_id {chat_id!r}: no path separators, '..', leading '.' or control "
            "characters allowed (use e.g. 'telegram_123456')"
        )
    if len(chat_id.encode("utf-8")) > 200:
        raise InvalidInput("chat_id is longer than 200 bytes")
    return chat_id


@dataclass(frozen=True, slots=True)
class Record:
    """One conversation message, validated on construction."""

    id: str
    ts: str
    role: str
    content: str
    type: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in REQUIRED_FIELDS:
            if not isinstance(getattr(self, name), str):
                raise InvalidInput(f"record field {name!r} must be a string")
        if not self.id:
            raise InvalidInput("record id must not be empty")
        if self.role not in ROLES:
            raise InvalidInput(f"record role {self.role!r} is not one of {sorted(ROLES)}")
        if self.type is not None and self.type not in TYPES:
            raise InvalidInput(f"record type {self.type!r} is not null or one of {sorted(TYPES)}")
        if not isinstance(self.meta, dict):
            raise InvalidInput("record meta must be an object")
        try:
            _parse_ts(self.ts)
        except ValueError as exc:
            raise InvalidInput(f"record ts {self.ts!r} is not ISO 8601 with timezone") from exc

    @classmethod
    def create(
        cls,
        role: str,
        content: str,
        *,
        type: str | None = None,
        meta: Mapping[str, Any] | None = None,
        ts: str | None = None,
        id: str | None = None,
    ) -> Record:
        """A new record with a fresh id and the current UTC time unless given."""
        return cls(
            id=id or new_message_id(),
            ts=ts or _utc_now_iso(),
            role=role,
            content=content,
            type=type,
            meta=dict(meta or {}),
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Record:
        """Validate a mapping as a record; unknown top-level keys are rejected."""
        unknown = set(data) - {"id", "ts", "role", "content", "type", "meta"}
        if unknown:
            raise InvalidInput(f"unknown record fields: {sorted(unknown)}")
        missing = [name for name in REQUIRED_FIELDS if name not in data]
        if missing:
            raise InvalidInput(f"record is missing required fields: {missing}")
        meta = data.get("meta")
        return cls(
            id=data["id"],
            ts=data["ts"],
            role=data["role"],
            content=data["content"],
            type=data.get("type"),
            meta={} if meta is None else meta,
        )

    @property
    def when(self) -> datetime:
        return _parse_ts(self.ts)

    @property
    def day(self) -> str:
        """The UTC day (YYYY-MM-DD) that names this record's file."""
        return self.when.astimezone(UTC).strftime("%Y-%m-%d")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "ts": self.ts,
            "role": self.role,
            "content": self.content,
        }
        if self.type is not None:
            out["type"] = self.type
        out["meta"] = self.meta
        return out


def encode_record(record: Record) -> bytes:
    """One JSON line, UTF-8, ending in exactly one newline.

    ``json.dumps`` escapes control characters, so it never emits a raw newline; the
    check below is a guard against that ever changing, not a normal path.
    """
    try:
        text = json.dumps(
            record.to_dict(), ensure_ascii=False, allow_nan=False, separators=(",", ":")
        )
    except (TypeError, ValueError) as exc:  # non-JSON value in meta, NaN/Infinity
        raise InvalidInput(f"record {record.id!r} is not JSON-serialisable: {exc}") from exc
    for raw, escaped in _LINE_SEPARATORS.items():
        if raw in text:
            text = text.replace(raw, escaped)
    if "\n" in text or "\r" in text:
        raise InvalidInput(f"record {record.id!r} would not fit on one line")
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError as exc:  # lone surrogates in content
        raise InvalidInput(f"record {record.id!r} has text that is not valid Unicode") from exc


def now_iso() -> str:
    """The current UTC time in whole seconds, as every log line and row carries it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_iso(value: datetime | str | None) -> str | None:
    """Accepts a datetime (naive = UTC) or an ISO string; returns ISO UTC."""
    if value is None or isinstance(value, str):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

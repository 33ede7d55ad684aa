"""OpenClaw session transcripts as Klaw conversation-log records.

A transcript (`agents/<id>/sessions/<sessionId>.jsonl`, pi's session format v1-v3) is a
header line and then entries linked by `id`/`parentId` into a tree; the conversation
is the path from the last entry back to the root (branches left by `/tree` are not).
`message` entries become records: the user's text without the channel envelope
OpenClaw prepends (`[Telegram Alice id:123 +5m ...] `, or the "(untrusted metadata)"
JSON blocks of later versions), the assistant's text and tool calls (thinking
dropped), tool results as `tool` rows. Turns OpenClaw makes itself (heartbeat and
boot prompts, cron wake-ups, `/new` greetings) and their silent acknowledgements
(`HEARTBEAT_OK`, `NO_REPLY`) are not conversation and are left out.

Record ids are derived from the session and entry ids, so importing the same
transcript twice writes nothing the second time (the log book skips known ids).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from klaw.errors import InvalidInput
from klaw.openclaw.home import open_regular
from klaw.wire.record import Record, to_iso

__all__ = ["Transcript", "chat_for_key", "chat_of_file", "read_transcript"]

_ENVELOPE = re.compile(
    r"^\[(?:Telegram|WhatsApp|Discord|Signal|Slack|iMessage|WebChat)\b[^\]]*\]\s?"
)
_DATE_PREFIX = re.compile(r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \d{4}-\d{2}-\d{2} [^\]]*\]\s?")
_META_HEADER = re.compile(
    r"^(?:Conversation info|Sender|Thread starter|Replied message|Forwarded message context"
    r"|Chat history since last reply|Untrusted context)\s*\((?:untrusted|metadata)[^)]*\):\s*$"
)
_SYNTHETIC = (
    "Read HEARTBEAT.md if it exists",
    "Follow the heartbeat monitor scratch context",
    "You are running a boot check.",
    "A new session was started via /new or /reset",
    "Pre-compaction memory flush",
)
_CRON_PREFIX = re.compile(r"^\[cron:[^\]]+\]")
_SILENT = frozenset({"HEARTBEAT_OK", "NO_REPLY"})
_REPLY_TAG = re.compile(r"^\s*\[\[\s*reply_to[^\]]*\]\]\s*")
#: Deeper lines are dropped: Klaw's own reader (serde_json, in the reindex) stops at 128
#: levels, and a record puts a few above what it takes from the line.
_MAX_DEPTH = 64
_KEY_CHAT = re.compile(
    r"^agent:[^:]+:(?P<channel>telegram|discord)(?::[^:]+)?:(?P<kind>direct|dm|group|channel)"
    r":(?P<id>-?[0-9A-Za-z_@.]+)"
)


def chat_for_key(key: str, entry: dict[str, Any], owner_chat: str | None) -> str | None:
    """The Klaw chat of an OpenClaw session key; None for what is not one of the
    owner's Klaw chats (cron, hook and subagent runs; other channels' chats)."""
    m = _KEY_CHAT.match(key)
    if m:
        return f"{m.group('channel')}_{m.group('id')}"
    parts = key.split(":")
    main = (len(parts) == 3 and parts[0] == "agent") or key == "global"
    peer = len(parts) == 4 and parts[0] == "agent" and parts[2] in ("direct", "dm")
    if not (main or peer):
        return None  # cron:/hook:/subagent runs, WhatsApp, Slack, group:<id> of old builds
    # The main session (all DMs share it by default) and per-peer DMs: where it last spoke.
    ctx = entry.get("deliveryContext")
    ctx = ctx if isinstance(ctx, dict) else {}
    channel = ctx.get("channel") or entry.get("lastChannel")
    to = ctx.get("to") or entry.get("lastTo")
    if channel in ("telegram", "discord") and isinstance(to, (str, int)) and str(to):
        return f"{channel}_{str(to).removeprefix(f'{channel}:')}"
    if channel and channel not in ("telegram", "discord", "webchat"):
        return None
    return owner_chat


_ENVELOPE_ID = re.compile(r"^\[(?P<channel>\w+)\b[^\]]*?\bid:(?P<id>-?\d+)")


def chat_of_file(path: Path, owner_chat: str | None) -> str | None:
    """The chat of a transcript that sessions.json does not list (an archived
    `.jsonl.reset.*` session): from the Telegram envelope of its first user message,
    else the owner's for an archive; None when it is another channel's or unknown."""
    try:
        with open_regular(path) as f:
            for _, raw in zip(range(200), f, strict=False):
                try:
                    entry = json.loads(raw)
                except (ValueError, RecursionError):
                    continue
                msg = entry.get("message") if isinstance(entry, dict) else None
                if isinstance(msg, dict) and msg.get("role") == "user":
                    text, _ = _text(msg.get("content"))
                    m = _ENVELOPE_ID.match(text.lstrip())
                    if m and m.group("channel").lower() == "telegram":
                        return f"telegram_{m.group('id')}"
                    if m or _ENVELOPE.match(text.lstrip()):
                        return None
                    break
    except (OSError, InvalidInput):
        return None
    return owner_chat if ".jsonl.reset." in path.name else None


@dataclass
class Transcript:
    path: Path
    session_id: str
    records: list[Record] = field(default_factory=list)
    skipped_lines: list[tuple[int, str]] = field(default_factory=list)
    left_out: int = 0  # OpenClaw's own turns (heartbeat, boot, cron wake-ups) and branches


def _text(content: Any) -> tuple[str, int]:
    """Joined text parts and the number of images."""
    if isinstance(content, str):
        return content, 0
    texts: list[str] = []
    images = 0
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "image":
            images += 1
    return "\n".join(texts), images


def user_text(raw: str) -> str:
    """The user's words without the channel envelope OpenClaw adds for the model."""
    text = raw.lstrip()
    text = _ENVELOPE.sub("", text, count=1)
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if _META_HEADER.match(lines[i].strip()):
            i += 1
            if i < len(lines) and lines[i].strip().startswith("```"):
                i += 1
                while i < len(lines) and not lines[i].strip().startswith("```"):
                    i += 1
                i += 1
            continue
        out.append(lines[i])
        i += 1
    text = "\n".join(out).strip()
    return _DATE_PREFIX.sub("", text, count=1).strip()


def _synthetic(text: str) -> bool:
    head = text.lstrip()
    return head.startswith(_SYNTHETIC) or bool(_CRON_PREFIX.match(head))


def _ts(entry: dict[str, Any], message: dict[str, Any]) -> str | None:
    for value in (entry.get("timestamp"), message.get("timestamp")):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return to_iso(datetime.fromtimestamp(value / 1000, UTC))
            except (OverflowError, OSError, ValueError):
                continue
        if isinstance(value, str):
            try:
                when = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            return to_iso(when)
    return None


def _lines(path: Path, skipped: list[tuple[int, str]]) -> Iterator[dict[str, Any]]:
    with open_regular(path) as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                skipped.append((n, "not UTF-8"))
                continue
            except ValueError:
                skipped.append((n, "not JSON (torn or damaged line)"))
                continue
            except RecursionError:  # one line must not cost the whole transcript
                skipped.append((n, "nested too deeply"))
                continue
            if _deeper_than(obj, _MAX_DEPTH):
                skipped.append((n, "nested too deeply"))
                continue
            if isinstance(obj, dict):
                yield obj
            else:
                skipped.append((n, "not a JSON object"))


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests more than `limit` arrays and objects (walked without
    recursion, so a deep value cannot exhaust the stack here either)."""
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def _active_path(entries: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The entries from the root to the last one (v1 files without ids: all of them)."""
    by_id = {e["id"]: e for e in entries if isinstance(e.get("id"), str)}
    if not by_id or not entries or not isinstance(entries[-1].get("id"), str):
        return entries, 0
    path: list[dict[str, Any]] = []
    seen: set[str] = set()
    node: dict[str, Any] | None = entries[-1]
    while node is not None and node["id"] not in seen:
        seen.add(node["id"])
        path.append(node)
        parent = node.get("parentId")
        node = by_id.get(parent) if isinstance(parent, str) else None
    path.reverse()
    return path, len(by_id) - len(path)


def read_transcript(path: Path, chat_id: str, channel: str) -> Transcript:
    """The records of one transcript file for `chat_id` (bad lines skipped and listed)."""
    skipped: list[tuple[int, str]] = []
    raw = list(_lines(path, skipped))
    header = raw[0] if raw and raw[0].get("type") == "session" else {}
    session_id = str(header.get("id") or path.name.split(".jsonl")[0])
    entries = [e for e in raw if e.get("type") != "session"]
    path_entries, branches = _active_path(entries)
    out = Transcript(path, session_id, skipped_lines=skipped, left_out=branches)
    short = re.sub(r"[^0-9A-Za-z]", "", session_id)[:12] or "session"
    base_meta: dict[str, Any] = {"channel": channel, "chat_id": chat_id, "imported": "openclaw"}
    drop_reply = False  # the assistant turn answering a synthetic prompt
    for n, entry in enumerate(path_entries):
        message = entry.get("message")
        if entry.get("type", "message") != "message" or not isinstance(message, dict):
            continue
        role = message.get("role")
        ts = _ts(entry, message)
        if ts is None:
            out.left_out += 1
            continue
        rid = f"oc-{short}-{entry.get('id') or n}"
        if role == "user":
            text, images = _text(message.get("content"))
            if _synthetic(text):
                out.left_out += 1
                drop_reply = True
                continue
            drop_reply = False
            body = user_text(text)
            if images:
                body = (body + "\n" if body else "") + f"[{images} image(s) not imported]"
            if not body:
                out.left_out += 1
                continue
            out.records.append(Record(rid, ts, "user", body, meta=dict(base_meta)))
        elif role == "assistant":
            content = message.get("content")
            text, _ = _text(content)
            text = _REPLY_TAG.sub("", text).strip()
            calls = [
                {"id": p["id"], "name": p["name"], "arguments": p.get("arguments") or {}}
                for p in (content if isinstance(content, list) else [])
                if isinstance(p, dict)
                and p.get("type") == "toolCall"
                and isinstance(p.get("id"), str)
                and isinstance(p.get("name"), str)
            ]
            if drop_reply or (text in _SILENT and not calls):
                out.left_out += 1
                continue
            if not text and not calls:
                continue  # thinking only, or an aborted turn
            meta = dict(base_meta)
            if calls:
                meta["tool_calls"] = calls
            model = message.get("model")
            if isinstance(model, str) and isinstance(message.get("provider"), str):
                meta["openclaw_model"] = f"{message['provider']}/{model}"
            out.records.append(Record(rid, ts, "assistant", text, meta=meta))
        elif role == "toolResult":
            if drop_reply:
                out.left_out += 1
                continue
            text, _ = _text(message.get("content"))
            meta = dict(base_meta)
            meta["tool_call_id"] = str(message.get("toolCallId") or "")
            if message.get("isError") is True:
                meta["is_error"] = True
            out.records.append(Record(rid, ts, "tool", text, meta=meta))
    return out

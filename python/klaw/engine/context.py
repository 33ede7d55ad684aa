"""Assembling the context window for one LLM call (design §3.1–3.3, §4.3, §9.2).

The context is rebuilt from scratch before every call; nothing here mutates the
conversation log. `assemble_context` is pure apart from reading the workspace
persona files, synchronous and fast (one batch token count in the common case); what
does not change between turns (each stored row's message, each tool schema's JSON, the
persona files by their stat) is built once and kept, keyed by what it is built from.

Layout of what it returns::

    system   ## Soul / ## Identity / ## Instructions / ## Environment Notes /
             ## About the User        SOUL, IDENTITY, AGENTS, TOOLS, USER .md, missing skipped
             ## Long-Term Memory (MEMORY.md)   within its share (private chats only)
             ## Current Context       date with weekday, time with timezone, channel
             ## Core Memory           core_memory.json (private chats only, see below)
             ## Earlier in This Conversation   the segment's last summary
             ## Available Skills      name: description (bodies come from `skill_load`)
    ...      the sliding window: newest messages of the current segment that fit
    tools    the tool schemas (counted against the budget as their JSON)

Budget (all in tokens, counted with the Rust counter by default)::

    after_margin = contextBudget - ceil(10% of contextBudget)
    reserve      = max_tokens of the reply (DEFAULT_REPLY_RESERVE when the model sets
                   none), clamped so the input keeps at least MIN_INPUT_SHARE of
                   after_margin (otherwise e.g. maxTokens 16384 with contextBudget
                   16000 would leave a negative budget)
    usable       = after_margin - reserve

The fixed parts (system prompt, tool schemas) are counted first; the window gets
what remains: whole "units" (a plain message, or an assistant message with tool
calls together with its tool results) from the newest back, up to `window_cap`
messages, never crossing a ``session_break`` row. The last unit (the current user
message) is always kept. When the fixed parts plus that last unit do not fit, the
workspace files are cut, largest first down to a common size, each with a visible
"[truncated]" note; if even that is not enough the report says ``over_budget``.

Group chats never get core memory nor USER.md (the same private facts; core memory
is a superset of it) unless `allow_private_memory_in_groups` is set; nor MEMORY.md,
which private chats get after the persona files up to its share
(`memory.prompt.memoryMdTokens`, cut at a line end with a note: klaw.memory.condense);
the rest of archival memory reaches the model through `memory_search`.

Stored tool calls: the `metadata_json` of a stored row carries them as produced by
`message_meta` (assistant: ``{"tool_calls": [{"id", "name", "arguments"}]}``; tool:
``{"tool_call_id": ..., "is_error": bool}``); the OpenAI wire shape
(``{"function": {"name", "arguments": "<json>"}}``) is accepted too. A tool result
whose call is not in the window is dropped, and calls whose results are missing are
removed from their assistant message, so providers never see a broken pair.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from klaw.engine.images import IMAGE_TOKENS, MAX_IMAGES, image_placeholder
from klaw.filekey import FileKey, file_key
from klaw.llm.types import (
    Message,
    Role,
    ToolCall,
    ToolSchema,
    images_for_model,
    not_shown,
    with_notes,
)
from klaw.memory.condense import prompt_cut
from klaw.memory.rows import StoredMessage, count_tokens_batch
from klaw.tools.onboarding import onboarding_pending
from klaw.workspace_text import workspace_text

if TYPE_CHECKING:
    from klaw.config import EngineConfig

__all__ = [
    "DEFAULT_REPLY_RESERVE",
    "MIN_INPUT_SHARE",
    "PER_MESSAGE_OVERHEAD",
    "SAFETY_MARGIN",
    "TRUNCATED_NOTE",
    "WORKSPACE_FILES",
    "AssembledContext",
    "ChatKind",
    "ContextInput",
    "ContextLimits",
    "ContextReport",
    "StoredMessage",
    "TokenCounterFn",
    "assemble_context",
    "budget_split",
    "message_meta",
    "model_limits",
    "row_to_message",
]

log = logging.getLogger("klaw.engine")

ChatKind = Literal["private", "group"]
# Token counts for a batch of texts, e.g. `count_tokens_batch` or
# `TokenCounter(...).count_batch`.
TokenCounterFn: TypeAlias = Callable[[list[str]], list[int]]

# Workspace files of the system prompt, in order, with their headings (design §4.3).
WORKSPACE_FILES: tuple[tuple[str, str], ...] = (
    ("SOUL.md", "Soul"),
    ("IDENTITY.md", "Identity"),
    ("AGENTS.md", "Instructions"),
    ("TOOLS.md", "Environment Notes"),
    ("USER.md", "About the User"),
    ("BOOTSTRAP.md", "First Run"),  # while onboarding is pending (tools/onboarding.py)
)
PRIVATE_FILES = frozenset({"USER.md", "BOOTSTRAP.md"})
BOOTSTRAP_NOTE = (
    "[Klaw: save what you learn about the owner with memory_core_update as well; when "
    "this is done, call onboarding_done instead of deleting the file.]"
)

SAFETY_MARGIN = 0.10  # share of contextBudget kept free for counting error (design §3.3)
DEFAULT_REPLY_RESERVE = 4096  # when the model config sets no maxTokens
MIN_INPUT_SHARE = 0.20  # the reply reserve never leaves the input less than this
PER_MESSAGE_OVERHEAD = 4  # role and framing tokens of one chat message
TRUNCATED_NOTE = "[truncated: {name} was cut to fit the context budget]"
MAX_FILE_BYTES = 1 << 20  # a bigger workspace file could never fit: read only this much

_DEFAULT_COUNTER: TokenCounterFn = count_tokens_batch
_ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class ContextLimits:
    """The numbers from engine.yaml that bound one call's context."""

    context_budget: int
    max_tokens: int | None
    window_cap: int
    allow_private_memory_in_groups: bool = False
    vision: bool = False  # models.<id>.vision: photos go as images
    memory_md_tokens: int = 0  # memory.prompt.memoryMdTokens; 0: MEMORY.md not read
    memory_max_tokens: int = 0  # memory.prompt.maxTokens; 0: no cap


def model_limits(config: EngineConfig, model: str, *, subagent: bool = False) -> ContextLimits:
    """`models[model].contextBudget` (else `context.defaultBudgetTokens`), the model's
    `maxTokens`, `vision`, and `context.slidingWindow` (or `subagentWindow` for
    subagents)."""
    model_cfg = config.models.get(model)
    ctx = config.context
    return ContextLimits(
        context_budget=(model_cfg.context_budget if model_cfg else None)
        or ctx.default_budget_tokens,
        max_tokens=model_cfg.max_tokens if model_cfg else None,
        window_cap=ctx.subagent_window if subagent else ctx.sliding_window,
        allow_private_memory_in_groups=ctx.allow_private_memory_in_groups,
        vision=bool(model_cfg and model_cfg.vision),
        memory_md_tokens=config.memory.prompt.memory_md_tokens,
        memory_max_tokens=config.memory.prompt.max_tokens,
    )


@dataclass(frozen=True)
class ContextInput:
    """Everything one context assembly needs; see the module docstring."""

    workspace: Path
    core_memory: str  # CoreMemory.to_prompt(); "" when empty
    summary: str | None  # the last summary of the current segment
    window: Sequence[StoredMessage]  # oldest first, already cut at the segment start
    now: datetime  # timezone-aware
    channel: str
    context_budget: int
    max_tokens: int | None  # the reply's maxTokens; None: DEFAULT_REPLY_RESERVE
    window_cap: int  # context.slidingWindow or context.subagentWindow
    tools: Sequence[ToolSchema] = ()
    skills: Sequence[tuple[str, str]] = ()  # (name, description)
    # (command, skill): the user called a skill's chat command (`/image_lab ...`)
    invoked_skill: tuple[str, str] | None = None
    chat_kind: ChatKind = "private"
    allow_private_memory_in_groups: bool = False
    count_tokens: TokenCounterFn = _DEFAULT_COUNTER
    # Workspace files left out (the heartbeat's lean context skips AGENTS.md).
    skip_files: frozenset[str] = frozenset()
    # Auto-recall's block (klaw.memory.recall, its own heading): private chats only.
    recalled: str = ""
    # The model takes images: image attachments of the window's user messages become
    # `ImagePart` placeholders (the newest MAX_IMAGES), loaded by `klaw.engine.images`.
    vision: bool = False
    # MEMORY.md's share of the prompt (private chats; 0: not read) and the cap on persona
    # files + core memory + MEMORY.md + auto-recall, which MEMORY.md gives way to.
    memory_md_tokens: int = 0
    memory_max_tokens: int = 0

    @classmethod
    def from_limits(cls, limits: ContextLimits, **kwargs: Any) -> ContextInput:
        """Build an input with the budget, reserve, cap and group policy of `limits`."""
        return cls(
            context_budget=limits.context_budget,
            max_tokens=limits.max_tokens,
            window_cap=limits.window_cap,
            allow_private_memory_in_groups=limits.allow_private_memory_in_groups,
            vision=limits.vision,
            memory_md_tokens=limits.memory_md_tokens,
            memory_max_tokens=limits.memory_max_tokens,
            **kwargs,
        )


# -------------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class ContextReport:
    """What went into the context and why.

    `tokens` has one entry per part present: the workspace file names, "context"
    (date/time/channel), "core_memory", "summary", "skills", "tools", "window".
    """

    context_budget: int
    margin: int
    reserve: int
    usable: int
    tokens: dict[str, int]
    total: int
    window_kept: int  # messages of the segment sent to the model
    window_dropped: int  # messages of the segment left out (budget or cap)
    orphans_dropped: int = 0  # tool results / calls without their other half
    before_break: int = 0  # input rows at or before the last session_break
    truncated: tuple[str, ...] = ()  # workspace files that were cut
    reserve_clamped: bool = False
    over_budget: bool = False  # even after truncation the total exceeds `usable`
    private_memory_included: bool = True

    @property
    def was_truncated(self) -> bool:
        return bool(self.truncated)


@dataclass(frozen=True)
class AssembledContext:
    messages: list[Message]
    tools: list[ToolSchema]
    report: ContextReport


# -------------------------------------------------------------------- budget math


def budget_split(context_budget: int, max_tokens: int | None) -> tuple[int, int, int, bool]:
    """(margin, reserve, usable, reserve_clamped) for a context budget."""
    if context_budget <= 0:
        raise ValueError(f"context budget must be positive, got {context_budget}")
    margin = math.ceil(context_budget * SAFETY_MARGIN)
    after_margin = context_budget - margin
    wanted = DEFAULT_REPLY_RESERVE if max_tokens is None else max(0, max_tokens)
    limit = after_margin - math.ceil(after_margin * MIN_INPUT_SHARE)
    reserve = min(wanted, limit)
    return margin, reserve, after_margin - reserve, reserve < wanted


# ------------------------------------------------------------ stored rows <-> Message


def message_meta(message: Message) -> dict[str, Any]:
    """The metadata to store with `message` so `row_to_message` can rebuild its
    tool-call fields (empty for plain messages)."""
    meta: dict[str, Any] = {}
    if message.tool_calls:
        meta["tool_calls"] = [
            {"id": call.id, "name": call.name, "arguments": call.arguments}
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        meta["tool_call_id"] = message.tool_call_id
    if message.is_error:
        meta["is_error"] = True
    return meta


def _parse_call(raw: Any) -> ToolCall | None:
    if not isinstance(raw, Mapping):
        return None
    fn = raw.get("function")
    source: Mapping[str, Any] = fn if isinstance(fn, Mapping) else raw
    call_id, name = raw.get("id"), source.get("name")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
        return None
    args: Any = source.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return ToolCall(call_id, name, error="arguments are not JSON", raw_arguments=args)
    if not isinstance(args, dict):
        return ToolCall(call_id, name, error="arguments are not an object", raw_arguments=None)
    return ToolCall(call_id, name, arguments=args)


def _load_meta(metadata_json: str | None) -> dict[str, Any]:
    if not metadata_json:
        return {}
    try:
        meta = json.loads(metadata_json)
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}


def row_to_message(row: StoredMessage) -> Message | None:
    """The LLM message for a stored row; None for markers, commands and their replies
    (any row with a `type`) and unknown roles."""
    role, content = row.role, row.content
    if row.kind or role not in _ROLES:
        return None
    meta = _load_meta(row.metadata)
    msg_role: Role = role  # type: ignore[assignment]  # checked against _ROLES above
    if role == "assistant":
        if meta.get("from_chat") == row.chat_id:
            # Sent by a tool of this chat's own turn (`send_file`): the tool call and its
            # result, beside it in the window, already say so; as a message of its own
            # it would put two assistant messages in a row.
            return None
        raw_calls = meta.get("tool_calls")
        calls = [c for c in map(_parse_call, raw_calls or []) if c is not None]
        text = _with_attachments(content, meta, "sent file")
        return Message("assistant", text or None, tool_calls=calls)
    if role == "tool":
        call_id = meta.get("tool_call_id")
        return Message(
            "tool",
            content,
            tool_call_id=call_id if isinstance(call_id, str) and call_id else None,
            is_error=meta.get("is_error") is True,
        )
    if role == "user":
        files = meta.get("attachments")
        images = [
            image
            for f in (files if isinstance(files, list) else [])
            if isinstance(f, Mapping) and (image := image_placeholder(f)) is not None
        ]
        return Message("user", _with_attachments(content, meta), images=images)
    return Message(msg_role, content)


# A chat's window is mostly the same rows turn after turn, and stored rows never change:
# each row's Message is built once (its metadata JSON parsed once). Rows key it by value,
# every field (equal and hashed in Rust: no getter per field); a merged user run keeps
# its last row's id with other text, so it is another key. Messages are never changed in
# place (`dataclasses.replace` makes new ones), so turns can share them. Bounded by
# entries and by the characters held.
_MESSAGES: dict[StoredMessage, Message | None] = {}
_MESSAGES_MAX = 2048
_MESSAGES_MAX_CHARS = 4 << 20
_messages_chars = 0


def _row_message(row: StoredMessage) -> Message | None:
    """`row_to_message(row)`, built once per row content."""
    global _messages_chars
    try:
        return _MESSAGES[row]
    except KeyError:
        pass
    msg = row_to_message(row)
    size = len(row.content) + len(row.metadata or "")
    if len(_MESSAGES) >= _MESSAGES_MAX or _messages_chars + size > _MESSAGES_MAX_CHARS:
        _MESSAGES.clear()
        _messages_chars = 0
    _MESSAGES[row] = msg
    _messages_chars += size
    return msg


def _with_attachments(content: str, meta: Mapping[str, Any], label: str = "attached file") -> str:
    """Files the user sent (or the agent did), as lines the model can act on (file_read
    takes the path)."""
    files = meta.get("attachments")
    if not isinstance(files, list) or not files:
        return content
    lines = []
    for f in files:
        if not isinstance(f, Mapping) or not isinstance(f.get("path"), str):
            continue
        about = ", ".join(str(x) for x in (f.get("mime"), _size(f.get("size"))) if x)
        lines.append(f"[{label}: {f['path']}{f' ({about})' if about else ''}]")
    return "\n".join([content, *lines]) if content else "\n".join(lines)


def _images_within_cap(messages: list[Message], vision: bool) -> list[Message]:
    """Image placeholders kept for the newest MAX_IMAGES images of a vision model; every
    other image becomes a note (`images_for_model` for a model without vision)."""
    if not vision:
        return images_for_model(messages, vision=False)
    kept = 0
    out: list[Message] = []
    for m in reversed(messages):
        if m.images:
            # Within one message the last images are the newest.
            split = max(0, len(m.images) - max(0, MAX_IMAGES - kept))
            older, keep = m.images[:split], m.images[split:]
            kept += len(keep)
            if older:
                reason = f"only the {MAX_IMAGES} newest images are sent"
                m = with_notes(m, keep, [not_shown(i, reason) for i in older])
        out.append(m)
    out.reverse()
    return out


def _size(n: Any) -> str | None:
    if not isinstance(n, int):
        return None
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.0f} KiB"


def _message_text(message: Message) -> str:
    """The text counted for one message: content plus its tool calls as JSON."""
    text = message.content or ""
    if message.tool_calls:
        calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls]
        text += json.dumps(calls, ensure_ascii=False)
    return text


# (name, description, id of the parameters) -> (those parameters, the schema's JSON): a
# tool's parameters are one dict for the engine's life (a class attribute), so each
# schema is encoded once. The dict is held, so its id cannot be reused by another.
_SCHEMA_TEXT: dict[tuple[str, str, int], tuple[dict[str, Any], str]] = {}


def _schema_json(schema: ToolSchema) -> str:
    key = (schema.name, schema.description, id(schema.parameters))
    hit = _SCHEMA_TEXT.get(key)
    if hit is not None and hit[0] is schema.parameters:
        return hit[1]
    text = json.dumps(
        {"name": schema.name, "description": schema.description, "parameters": schema.parameters},
        ensure_ascii=False,
    )
    if len(_SCHEMA_TEXT) > 256:
        _SCHEMA_TEXT.clear()
    _SCHEMA_TEXT[key] = (schema.parameters, text)
    return text


# Text -> tokens by the default counter: the persona files, the tool schemas and most
# of the window are the same texts turn after turn (a cached row's message keeps its
# text object, whose hash Python keeps too). Bounded by entries and characters held.
_COUNTS: dict[str, int] = {}
_COUNTS_MAX = 4096
_COUNTS_MAX_CHARS = 4 << 20
_counts_chars = 0


def _count_all(count: TokenCounterFn, texts: list[str]) -> list[int]:
    """`count(texts)`, counting with the default counter only texts not seen before."""
    global _counts_chars
    if count is not _DEFAULT_COUNTER:
        return count(texts)
    known = _COUNTS
    fresh: dict[str, int] = {}
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    if missing:
        fresh = dict(zip(missing, count(missing), strict=True))
        size = sum(map(len, missing))
        if len(known) + len(missing) > _COUNTS_MAX or _counts_chars + size > _COUNTS_MAX_CHARS:
            known.clear()
            _counts_chars = 0
        known.update(fresh)
        _counts_chars += size
    out: list[int] = []
    for t in texts:
        n = fresh.get(t)
        if n is None:
            n = known.get(t)
        if n is None:  # dropped meanwhile by another thread's clear
            n = count([t])[0]
        out.append(n)
    return out


# --------------------------------------------------------------------- the window


def _segment(rows: Sequence[StoredMessage]) -> tuple[Sequence[StoredMessage], int]:
    """Rows after the last session_break, and how many rows were cut before it."""
    for i in range(len(rows) - 1, -1, -1):
        if rows[i].kind == "session_break":
            return rows[i + 1 :], i + 1
    return rows, 0


def _units(messages: list[Message]) -> tuple[list[list[Message]], int]:
    """Group messages into units that must stay together; drop broken tool pairs.

    A unit is one plain message, or an assistant message with tool calls followed by
    the tool results answering them. Returns (units, messages or calls dropped).
    """
    units: list[list[Message]] = []
    dropped = 0
    i = 0
    while i < len(messages):
        msg = messages[i]
        i += 1
        if msg.role == "tool":  # a result whose call is not right before it
            dropped += 1
            continue
        if msg.role != "assistant" or not msg.tool_calls:
            units.append([msg])
            continue
        wanted = {call.id for call in msg.tool_calls}
        results: list[Message] = []
        while i < len(messages) and messages[i].role == "tool":
            result = messages[i]
            i += 1
            if result.tool_call_id in wanted:
                wanted.discard(result.tool_call_id)
                results.append(result)
            else:
                dropped += 1
        if wanted:  # calls never answered: providers refuse them
            dropped += len(wanted)
            calls = [c for c in msg.tool_calls if c.id not in wanted]
            msg = replace(msg, tool_calls=calls)
            if not calls and not msg.content:
                continue
        units.append([msg, *results])
    return units, dropped


# ------------------------------------------------------------------- system prompt


_FILE_CACHE: dict[str, tuple[FileKey, tuple[str, bool] | None]] = {}


def _read_workspace_file(workspace: Path, name: str) -> tuple[str, bool] | None:
    """(text, cut at MAX_FILE_BYTES) of a workspace file; None if absent or empty.

    Read again only when its stat changed (`klaw.filekey`): every turn asks for the
    same five files, and a stat is much cheaper than a read and a decode.
    """
    where = f"{workspace}/{name}"  # a string: Path objects cost more than the stat
    try:
        st = os.stat(where)
    except FileNotFoundError:
        return None
    except OSError:
        return _read_file_uncached(workspace / name)
    key = file_key(st)
    hit = _FILE_CACHE.get(where)
    if key is not None and hit is not None and hit[0] == key:
        return hit[1]
    result = _read_file_uncached(workspace / name)
    if key is None:  # changed just now: not trusted to stay as read
        _FILE_CACHE.pop(where, None)
        return result
    if len(_FILE_CACHE) > 64:
        _FILE_CACHE.clear()
    _FILE_CACHE[where] = (key, result)
    return result


def _read_file_uncached(path: Path) -> tuple[str, bool] | None:
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read workspace file %s: %s", path.name, exc.strerror)
        return None
    cut = len(raw) > MAX_FILE_BYTES
    # OpenClaw's templates carry frontmatter its runtime strips; Windows edits, CRLF.
    text = workspace_text(raw[:MAX_FILE_BYTES].decode("utf-8", errors="replace"))
    if not text:
        return None
    return text, cut


_MEMORY_MD_WARNED: set[tuple[int, int]] = set()


def _memory_md(
    inp: ContextInput, files: list[tuple[str, str, str]], tail: list[tuple[str, str]]
) -> tuple[str, str, str] | None:
    """MEMORY.md as a workspace file within its share (klaw.memory.condense.prompt_cut):
    the share, or what the persona files, core memory and auto-recall leave of
    `memory_max_tokens` if less."""
    read = _read_workspace_file(inp.workspace, "MEMORY.md")
    if read is None:
        return None
    text, share = read[0], inp.memory_md_tokens
    if inp.memory_max_tokens:
        others = [_section(h, b) for _, h, b in files]
        others += [t for key, t in tail if key in ("core_memory", "recall")]
        used = sum(_count_all(inp.count_tokens, others))
        share = min(share, max(0, inp.memory_max_tokens - used))
    body, _, total = prompt_cut(text, share, inp.count_tokens)
    if body is not text and (total, share) not in _MEMORY_MD_WARNED:
        _MEMORY_MD_WARNED.add((total, share))
        log.warning(
            "MEMORY.md is %d tokens, over its share of the prompt (%d): its first lines go "
            "in; `klaw memory condense` proposes a shorter file",
            total,
            share,
        )
    return "MEMORY.md", "Long-Term Memory (MEMORY.md)", body


# The last (minute, zone, offset) formatted and its text: the clock line changes once a
# minute, and strftime with a zone lookup is most of assembling the tail.
_now_text: tuple[tuple[object, ...], str] | None = None


def _format_now(now: datetime) -> str:
    global _now_text
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("`now` must be timezone-aware (e.g. datetime.now(ZoneInfo(...)))")
    # An aware datetime compares by its instant: the zone and offset are in the key.
    key = (now.replace(second=0, microsecond=0), now.tzinfo, now.utcoffset(), now.tzname())
    last = _now_text
    if last is not None and last[0] == key:
        return last[1]
    text = _now_line(now)
    _now_text = (key, text)
    return text


def _now_line(now: datetime) -> str:
    offset = now.strftime("%z")
    offset = f"UTC{offset[:3]}:{offset[3:5]}" if offset else "UTC"
    zone = getattr(now.tzinfo, "key", None) or now.tzname() or offset
    if zone == offset:
        zone_text = offset
    elif zone in ("UTC", "Etc/UTC", "GMT") and not now.utcoffset():
        zone_text = "UTC"
    else:
        zone_text = f"{zone}, {offset}"
    return f"Date: {now:%Y-%m-%d} ({now:%A})\nTime: {now:%H:%M} ({zone_text})"


def _section(heading: str, body: str) -> str:
    return f"## {heading}\n{body.strip()}\n"


def _fit_text(text: str, max_tokens: int, count: TokenCounterFn) -> str:
    """The longest prefix of `text` within `max_tokens`, cut at a line or word end."""
    if max_tokens <= 0:
        return ""
    lo, hi = 0, len(text)
    # Binary search on the character length; a handful of counts.
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count([text[:mid]])[0] <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    prefix = text[:lo]
    if lo < len(text):
        for sep in ("\n", " "):
            at = prefix.rfind(sep)
            if at >= lo * 0.8:
                return prefix[:at].rstrip()
    return prefix.rstrip()


def _water_level(sizes: list[int], target: int) -> int:
    """The largest cap L with sum(min(s, L)) <= target (largest cut first)."""
    if sum(sizes) <= target:
        return max(sizes, default=0)
    lo, hi = 0, max(sizes)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(s, mid) for s in sizes) <= target:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ------------------------------------------------------------------------ assembly


def assemble_context(inp: ContextInput) -> AssembledContext:
    """Build the messages of one LLM call within the model's budget.

    Raises ValueError for a non-positive budget or a naive `now`.
    """
    count = inp.count_tokens
    margin, reserve, usable, clamped = budget_split(inp.context_budget, inp.max_tokens)
    private_ok = inp.chat_kind == "private" or inp.allow_private_memory_in_groups

    # ---- fixed parts, in prompt order
    files: list[tuple[str, str, str]] = []  # (file name, heading, body)
    cut_on_read: list[str] = []
    for name, heading in WORKSPACE_FILES:
        if (name in PRIVATE_FILES and not private_ok) or name in inp.skip_files:
            continue
        if name == "BOOTSTRAP.md" and not onboarding_pending(inp.workspace):
            continue
        read = _read_workspace_file(inp.workspace, name)
        if read is None:
            continue
        body, cut = read
        if name == "BOOTSTRAP.md":
            body += "\n\n" + BOOTSTRAP_NOTE
        if cut:
            body += "\n" + TRUNCATED_NOTE.format(name=name)
            cut_on_read.append(name)
        files.append((name, heading, body))

    tail: list[tuple[str, str]] = []
    if private_ok and inp.core_memory.strip():
        tail.append(("core_memory", _section("Core Memory", inp.core_memory)))
    if inp.summary and inp.summary.strip():
        tail.append(("summary", _section("Earlier in This Conversation", inp.summary)))
    if inp.skills or inp.invoked_skill:
        lines = [
            f"- {name}: {' '.join(desc.split())}" if desc.strip() else f"- {name}"
            for name, desc in inp.skills
        ]
        lines.append("Load a skill's full instructions with `skill_load` before using it.")
        if inp.invoked_skill:
            command, skill = inp.invoked_skill
            lines.append(
                f"The user's last message calls /{command}: load the skill `{skill}` with "
                "`skill_load` now and follow it for what they wrote after the command."
            )
        tail.append(("skills", _section("Available Skills", "\n".join(lines))))
    if private_ok and inp.recalled.strip():  # changes per turn: after the stable parts
        tail.append(("recall", inp.recalled.strip() + "\n"))
    # The clock goes last: what precedes it stays byte-identical between calls, so
    # llama.cpp and providers' prompt caches reuse the prefix (docs/decisions.md).
    tail.append(
        (
            "context",
            _section(
                "Current Context",
                f"{_format_now(inp.now)}\nChannel: {inp.channel} ({inp.chat_kind} chat)",
            ),
        )
    )

    if private_ok and inp.memory_md_tokens > 0 and "MEMORY.md" not in inp.skip_files:
        memory_md = _memory_md(inp, files, tail)
        if memory_md is not None:
            files.append(memory_md)

    # ---- the window, as units
    segment, before_break = _segment(inp.window)
    converted = _images_within_cap(
        [m for m in map(_row_message, segment) if m is not None], inp.vision
    )
    units, orphans = _units(converted)

    # ---- one batch count for everything
    file_texts = [_section(heading, body) for _, heading, body in files]
    tail_texts = [text for _, text in tail]
    schema_texts = [_schema_json(s) for s in inp.tools]
    flat = [m for unit in units for m in unit]
    counts = _count_all(
        count, [*file_texts, *tail_texts, *schema_texts, *(_message_text(m) for m in flat)]
    )
    pos = 0
    file_tokens = counts[pos : pos + len(file_texts)]
    pos += len(file_texts)
    tail_tokens = counts[pos : pos + len(tail_texts)]
    pos += len(tail_texts)
    tools_tokens = sum(counts[pos : pos + len(schema_texts)])
    pos += len(schema_texts)
    msg_tokens = [
        t + PER_MESSAGE_OVERHEAD + IMAGE_TOKENS * len(m.images)
        for t, m in zip(counts[pos:], flat, strict=True)
    ]
    unit_tokens: list[int] = []
    start = 0
    for unit in units:
        unit_tokens.append(sum(msg_tokens[start : start + len(unit)]))
        start += len(unit)

    fixed = sum(file_tokens) + sum(tail_tokens) + tools_tokens + PER_MESSAGE_OVERHEAD
    last_tokens = unit_tokens[-1] if units else 0

    # ---- truncate the workspace files if even the fixed parts do not fit
    truncated: list[str] = list(cut_on_read)
    excess = fixed + last_tokens - usable
    if excess > 0 and files:
        target = max(0, sum(file_tokens) - excess)
        level = _water_level(file_tokens, target)
        for i, (name, heading, body) in enumerate(files):
            if file_tokens[i] <= level:
                continue
            note = TRUNCATED_NOTE.format(name=name)
            overhead = count([_section(heading, note)])[0] + 1
            kept = _fit_text(body, level - overhead, count)
            new_body = f"{kept}\n{note}" if kept else note
            file_texts[i] = _section(heading, new_body)
            file_tokens[i] = count([file_texts[i]])[0]
            if name not in truncated:
                truncated.append(name)
        fixed = sum(file_tokens) + sum(tail_tokens) + tools_tokens + PER_MESSAGE_OVERHEAD

    # ---- the window gets what remains: newest units first, up to the cap
    remaining = usable - fixed
    chosen: list[list[Message]] = []
    kept_messages = 0
    window_tokens = 0
    for n in range(len(units) - 1, -1, -1):
        unit, cost = units[n], unit_tokens[n]
        is_last = n == len(units) - 1
        if not is_last and (
            kept_messages + len(unit) > inp.window_cap or window_tokens + cost > remaining
        ):
            break
        chosen.append(unit)
        kept_messages += len(unit)
        window_tokens += cost
    # The window opens with the user: Anthropic refuses a first message from the
    # assistant and Gemini a model turn first, so a cut that kept a reply but not the
    # message it answered drops the reply too (never the turn's own last unit).
    first = len(units) - len(chosen)
    while len(chosen) > 1 and chosen[-1][0].role == "assistant":
        chosen.pop()
        window_tokens -= unit_tokens[first]
        first += 1
    chosen.reverse()
    window_msgs = [m for unit in chosen for m in unit]

    # ---- the result
    system_text = "\n".join([*file_texts, *tail_texts]).rstrip() + "\n"
    messages = [Message.system(system_text), *window_msgs]
    tokens: dict[str, int] = {name: t for (name, _, _), t in zip(files, file_tokens, strict=True)}
    tokens.update({key: t for (key, _), t in zip(tail, tail_tokens, strict=True)})
    if inp.tools:
        tokens["tools"] = tools_tokens
    tokens["window"] = window_tokens
    total = fixed + window_tokens
    report = ContextReport(
        context_budget=inp.context_budget,
        margin=margin,
        reserve=reserve,
        usable=usable,
        tokens=tokens,
        total=total,
        window_kept=len(window_msgs),
        window_dropped=len(flat) - len(window_msgs),
        orphans_dropped=orphans,
        before_break=before_break,
        truncated=tuple(truncated),
        reserve_clamped=clamped,
        over_budget=total > usable,
        private_memory_included=private_ok,
    )
    if truncated:
        log.warning("workspace files truncated to fit the context budget: %s", ", ".join(truncated))
    if report.over_budget:
        log.warning("context over budget: %d tokens for %d usable", total, usable)
    return AssembledContext(messages=messages, tools=list(inp.tools), report=report)

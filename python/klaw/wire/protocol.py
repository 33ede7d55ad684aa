"""The engine socket protocol (design §2.3): typed messages, one JSON object a line.

Wire format: UTF-8 JSON objects separated by ``\\n``, discriminated by ``type``, field
names in camelCase as in the design (``chatId``, ``replyTo``); snake_case names are
accepted on input too, and unknown fields are ignored. ``content`` is also accepted
as ``text``. A line may hold at most `MAX_LINE_BYTES` bytes (newline excluded), except
what the engine sends: up to `MAX_ENGINE_LINE_BYTES`, because an outbound carries its
turn's tool rounds for the log (a 900 KB `file_write` escapes to 1.5 MB of JSON). A
reader allocates that much only when such a line comes; the engine's own readers keep
the small limit, so a client cannot make it hold 64 MiB per connection.

Gateway ⇄ engine (the gateway's one persistent connection):

    → register        {"type":"register","client":"gateway","channels":["telegram"]}
    ← registered      the engine accepted the registration (version, pid)
    → inbound         a user message: id, channel, chatId, ts, content, meta
    → command         a slash command: id, channel, chatId, ts, name, args, meta
    ← outbound        a reply or a push: id, ts, channel, chatId, content, replyTo,
                      answers (the inbound ids it settles), records (log lines), meta
    → delivered       the gateway sent outbound `ref` to the user
    ⇄ error           code, message, ref (the id of the message it answers)
    ← shutdown        the engine stops taking messages: buffer until it is back
    → health          the channels' liveness (ok/stale, last success), on each change
                      and after register; `klaw status` shows it

JSONL ownership (design §2.4, docs/decisions.md): the gateway is the only writer of
interactive conversation logs. It writes each inbound and command before forwarding
it, and for each outbound first its `records` (the turn's tool calls and results,
`session_break` and `model_switch` markers), then the reply itself as an assistant
line with the outbound's `id`, `ts`, `lineType` and `meta` — the same ids and
times the engine stored in klaw.db, so `klaw reindex` rebuilds the same rows.

CLI → engine (short connections; the response echoes the request ``id``):

    → status          ← status_result         uptime, pid, version, gateway (and its
                                              channels' health), counts
    → sessions        ← sessions_result       chats and their sessions
    → memory_search   ← memory_search_result  hits: citation, content, score...
    → schedule        ← schedule_result       action list|add|remove|history|run
    → tool_run        ← tool_run_result       one of the tools `klaw mcp serve` offers

`decode` never lets a bad line through: it raises a `ProtocolError` whose `code`
and `ref` the receiver turns into an `error` reply with `error_for`.
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import (
    AliasChoices,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from klaw.errors import KlawError

__all__ = [
    "MAX_ATTACHMENTS",
    "MAX_ENGINE_LINE_BYTES",
    "MAX_LINE_BYTES",
    "MAX_UPLOAD_BYTES",
    "UPLOAD_ATTEMPTS",
    "UPLOAD_BYTES_PER_S",
    "Attachment",
    "ChannelHealth",
    "Command",
    "CommandInfo",
    "Delivered",
    "Draft",
    "Error",
    "ErrorCode",
    "GatewayInfo",
    "Health",
    "Inbound",
    "InboundMeta",
    "InvalidJson",
    "InvalidMessage",
    "JobRun",
    "LineReader",
    "LineTooLong",
    "LogLine",
    "MemorySearch",
    "MemorySearchResult",
    "Message",
    "Outbound",
    "ProtocolError",
    "Quote",
    "Register",
    "Registered",
    "Request",
    "Schedule",
    "ScheduleResult",
    "ScheduledJob",
    "SearchHit",
    "SessionInfo",
    "Sessions",
    "SessionsResult",
    "Shutdown",
    "Status",
    "StatusResult",
    "ToolRun",
    "ToolRunResult",
    "UnknownType",
    "decode",
    "encode",
    "error_for",
    "json_object",
    "mime_of",
    "new_id",
]

#: The longest line the engine accepts (and clients send), newline excluded.
MAX_LINE_BYTES: Final = 1024 * 1024
#: The longest line the engine sends (an outbound with its tool rounds).
MAX_ENGINE_LINE_BYTES: Final = 64 * 1024 * 1024

# Files out (`Outbound.attachments`): what the engine's `send_file` and the channels agree on.
#: Files in one outbound (Discord's limit per message).
MAX_ATTACHMENTS: Final = 10
#: The largest file any channel takes (Telegram's bot upload limit); a channel may take less.
MAX_UPLOAD_BYTES: Final = 50 * 1024 * 1024
#: Tries of one upload: each sends the whole file again, and later replies wait behind it.
UPLOAD_ATTEMPTS: Final = 3
#: A slow home uplink: how long a file's bytes may take, on top of a call's own timeout.
UPLOAD_BYTES_PER_S: Final = 64 * 1024


def new_id() -> str:
    return uuid.uuid4().hex


class ErrorCode:
    """The `code` values of `error` messages."""

    INVALID_JSON: Final = "invalid_json"
    INVALID_MESSAGE: Final = "invalid_message"
    UNKNOWN_TYPE: Final = "unknown_type"
    LINE_TOO_LONG: Final = "line_too_long"
    UNEXPECTED: Final = "unexpected_message"  # a valid type the receiver does not take
    NOT_REGISTERED: Final = "not_registered"  # inbound/command before `register`
    NOT_IMPLEMENTED: Final = "not_implemented"  # no message pipeline yet
    SHUTTING_DOWN: Final = "shutting_down"  # the engine is stopping: buffer and retry
    REPLACED: Final = "replaced"  # another gateway registered; this connection closes
    UNAVAILABLE: Final = "unavailable"  # e.g. the engine runs without memory
    BUSY: Final = "busy"  # too many connections: try again later
    IDLE: Final = "idle"  # a client connection sent nothing for too long
    BAD_REQUEST: Final = "bad_request"  # the request was well-formed but refused
    DUPLICATE: Final = "duplicate"  # already answered: nothing more will come for it
    REFUSED: Final = "refused"  # the gateway would not deliver (allowlist)
    SEND_FAILED: Final = "send_failed"  # the channel could not deliver
    INTERNAL: Final = "internal"


# --- errors ---------------------------------------------------------------


class ProtocolError(KlawError):
    """A line that is not a valid protocol message; `code` names the reason."""

    code: str = ErrorCode.INVALID_MESSAGE

    def __init__(self, message: str, ref: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.ref = ref


class InvalidJson(ProtocolError):
    code = ErrorCode.INVALID_JSON


class UnknownType(ProtocolError):
    code = ErrorCode.UNKNOWN_TYPE


class InvalidMessage(ProtocolError):
    code = ErrorCode.INVALID_MESSAGE


class LineTooLong(ProtocolError):
    code = ErrorCode.LINE_TOO_LONG


# --- models ---------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="ignore",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
    )


class Attachment(_Model):
    """A file the gateway saved locally (photo, document, voice)."""

    path: str
    mime: str | None = None
    name: str | None = None
    size: int | None = Field(default=None, ge=0)
    duration: float | None = Field(default=None, ge=0)  # seconds, of a voice note or audio


def mime_of(name: str) -> str:
    """The type an attachment named `name` has when nobody said (its extension)."""
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


class Quote(_Model):
    """The message a user replied to, as the channel showed it."""

    id: str | None = None
    sender: str | None = None
    content: str = Field(default="", validation_alias=AliasChoices("content", "text"))


class InboundMeta(_Model):
    sender: str | None = None  # the channel's user id
    group: bool = False  # a group chat: the owner's private memory stays out (§4.3)
    sender_name: str | None = None
    reply_to: Quote | None = None
    attachments: list[Attachment] = Field(default_factory=list)


class Register(_Model):
    type: Literal["register"] = "register"
    client: str = "gateway"
    channels: list[str] = Field(default_factory=list)
    # Channels that show a reply while it is being written (`streaming: true`): the
    # engine streams from the model and sends `draft` messages for their chats.
    streaming: list[str] = Field(default_factory=list)


class CommandInfo(_Model):
    name: str
    description: str = ""
    # A skill's command: the gateway sends `/name args` to the engine as a message
    # (the model runs the skill), not as a Command.
    prompt: bool = False


class Registered(_Model):
    """The engine accepted the gateway; `commands` is the menu to register (§6.6)."""

    type: Literal["registered"] = "registered"
    version: str
    pid: int
    commands: list[CommandInfo] = Field(default_factory=list)


class Inbound(_Model):
    type: Literal["inbound"] = "inbound"
    id: str = Field(min_length=1)
    channel: str = Field(min_length=1)
    chat_id: str = Field(min_length=1)
    ts: AwareDatetime
    content: str = Field(default="", validation_alias=AliasChoices("content", "text"))
    meta: InboundMeta = Field(default_factory=InboundMeta)


class Command(_Model):
    """A slash command: `/model glm-5` is name "model", args "glm-5"."""

    type: Literal["command"] = "command"
    id: str = Field(min_length=1)
    channel: str = Field(min_length=1)
    chat_id: str = Field(min_length=1)
    ts: AwareDatetime
    name: str = Field(min_length=1)
    args: str = ""
    meta: InboundMeta = Field(default_factory=InboundMeta)


def _now() -> datetime:
    return datetime.now(UTC)


class LogLine(_Model):
    """One conversation-log line (design §5.2) the engine asks the gateway to append."""

    id: str = Field(min_length=1)
    ts: AwareDatetime
    role: Literal["user", "assistant", "system", "tool"]
    type: str | None = None  # session_break, model_switch, command, command_reply
    content: str = ""
    meta: dict[str, Any] = Field(default_factory=dict)


class Outbound(_Model):
    """A message for the user. `answers` lists the inbound/command ids it settles.

    The gateway logs `records` then the reply (an assistant line of type `line_type`),
    sends `content` unless it is empty, and confirms with `delivered`. `attachments`
    are workspace files (paths relative to it) sent with the text; the gateway opens
    them itself, inside the workspace, and refuses the whole message if one cannot go.
    """

    type: Literal["outbound"] = "outbound"
    id: str = Field(default_factory=new_id)
    ts: AwareDatetime = Field(default_factory=_now)
    channel: str = Field(min_length=1)
    chat_id: str = Field(min_length=1)
    content: str = Field(default="", validation_alias=AliasChoices("content", "text"))
    reply_to: str | None = None
    answers: list[str] = Field(default_factory=list)
    records: list[LogLine] = Field(default_factory=list)
    line_type: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
    attachments: list[Attachment] = Field(default_factory=list, max_length=MAX_ATTACHMENTS)


class Draft(_Model):
    """The reply to inbound `reply_to` as written so far (`content` is the whole text,
    not a delta). Ephemeral: never logged, buffered or confirmed; the `outbound` that
    follows is the reply. A draft whose text shrinks or changes means the model started
    over (a fallback after a failure mid-stream): show it in place of the old one."""

    type: Literal["draft"] = "draft"
    channel: str = Field(min_length=1)
    chat_id: str = Field(min_length=1)
    reply_to: str = Field(min_length=1)
    content: str = ""


class Delivered(_Model):
    """The gateway's confirmation that outbound `ref` reached the user's channel."""

    type: Literal["delivered"] = "delivered"
    ref: str = Field(min_length=1)


class Error(_Model):
    type: Literal["error"] = "error"
    code: str
    message: str
    ref: str | None = None


class Shutdown(_Model):
    type: Literal["shutdown"] = "shutdown"
    reason: str = "the engine is stopping"


class Status(_Model):
    type: Literal["status"] = "status"
    id: str = Field(default_factory=new_id)


class ChannelHealth(_Model):
    """Whether a chat channel still hears its platform (docs/telegram.md, "Liveness")."""

    name: str
    state: Literal["ok", "stale"]
    #: The last successful poll (Telegram) or heartbeat ACK (Discord); None: none yet.
    last_ok: AwareDatetime | None = None
    detail: str = ""  # the last failure, when stale


class Health(_Model):
    """Gateway → engine: its channels' liveness, sent on each change and on register."""

    type: Literal["health"] = "health"
    channels: list[ChannelHealth]


class GatewayInfo(_Model):
    client: str
    channels: list[str]
    connected_at: AwareDatetime
    streaming: list[str] = Field(default_factory=list)
    health: list[ChannelHealth] = Field(default_factory=list)


class StatusResult(_Model):
    type: Literal["status_result"] = "status_result"
    id: str
    pid: int
    version: str
    started_at: AwareDatetime
    uptime_s: float
    gateway: GatewayInfo | None = None
    in_flight: int = 0
    memory: bool = False
    counts: dict[str, int] = Field(default_factory=dict)
    #: `code_execute`'s backend, limits, container age and runs; None: no sandbox.
    sandbox: dict[str, str | int | float | bool | None] | None = None
    #: MCP server -> its state (`ready: 2 tool(s)`, `failed: why`); docs/mcp.md.
    mcp: dict[str, str] = Field(default_factory=dict)


class Sessions(_Model):
    type: Literal["sessions"] = "sessions"
    id: str = Field(default_factory=new_id)


class ToolRun(_Model):
    """`klaw mcp serve`: run one of the engine's tools offered to other agents."""

    type: Literal["tool_run"] = "tool_run"
    id: str = Field(default_factory=new_id)
    name: str = Field(min_length=1, max_length=64)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolRunResult(_Model):
    type: Literal["tool_run_result"] = "tool_run_result"
    id: str
    content: str
    is_error: bool = False


class SessionInfo(_Model):
    chat_id: str
    model: str | None = None
    segment_start: str | None = None
    created_at: str | None = None


class SessionsResult(_Model):
    """`sessions`: chats with a conversation log; session fields when the store has a row.

    `total` is the number of rows in the store's sessions table; `unlisted` is how many
    of them belong to chats that have no conversation directory (the store cannot list
    them by itself yet).
    """

    type: Literal["sessions_result"] = "sessions_result"
    id: str
    sessions: list[SessionInfo] = Field(default_factory=list)
    total: int = 0
    unlisted: int = 0


class MemorySearch(_Model):
    type: Literal["memory_search"] = "memory_search"
    id: str = Field(default_factory=new_id)
    query: str = Field(min_length=1)
    top_k: int | None = Field(default=None, gt=0, le=100)
    kind: str | None = None  # retained facts of this kind only
    entity: str | None = Field(default=None, min_length=1)  # ... about this entity


class SearchHit(_Model):
    citation: str
    content: str
    score: float
    source: str
    created_at: str
    heading: str | None = None


class MemorySearchResult(_Model):
    type: Literal["memory_search_result"] = "memory_search_result"
    id: str
    hits: list[SearchHit] = Field(default_factory=list)


class Schedule(_Model):
    """`klaw schedule ...`: one request per action; fields beyond `name` are `add`'s."""

    type: Literal["schedule"] = "schedule"
    id: str = Field(default_factory=new_id)
    action: Literal["list", "add", "remove", "history", "run", "pause", "resume"]
    name: str | None = None
    cron: str | None = None
    message: str | None = None
    model: str | None = None
    inject_into: str | None = None
    timezone: str | None = None
    precheck: str | None = None
    daily_token_cap: int | None = Field(default=None, gt=0)
    limit: int = Field(default=20, gt=0, le=1000)


class ScheduledJob(_Model):
    name: str
    cron: str
    timezone: str
    message: str
    kind: str = "cron"
    model: str | None = None
    inject_into: str | None = None
    precheck: str | None = None
    daily_token_cap: int | None = None
    next_run: AwareDatetime | None = None
    running: bool = False
    title: str | None = None  # an imported job's original name
    paused: bool = False


class JobRun(_Model):
    """One row of the run ledger (times are ISO 8601, UTC)."""

    job: str
    due: str
    status: str
    started: str | None = None
    ended: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    error: str | None = None


class ScheduleResult(_Model):
    type: Literal["schedule_result"] = "schedule_result"
    id: str
    jobs: list[ScheduledJob] = Field(default_factory=list)  # list; add/remove: the job
    runs: list[JobRun] = Field(default_factory=list)  # history
    next_times: list[AwareDatetime] = Field(default_factory=list)  # add
    due: AwareDatetime | None = None  # run: the due time it was given


Message: TypeAlias = Annotated[
    Register
    | Registered
    | Inbound
    | Command
    | Outbound
    | Draft
    | Delivered
    | Error
    | Shutdown
    | Health
    | Status
    | StatusResult
    | Sessions
    | SessionsResult
    | MemorySearch
    | MemorySearchResult
    | Schedule
    | ScheduleResult
    | ToolRun
    | ToolRunResult,
    Field(discriminator="type"),
]
#: CLI requests: answered on the same connection with the same `id`.
Request: TypeAlias = Status | Sessions | MemorySearch | Schedule | ToolRun

_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
_TYPES: Final = frozenset(
    {
        "register",
        "registered",
        "inbound",
        "command",
        "outbound",
        "draft",
        "delivered",
        "error",
        "shutdown",
        "health",
        "status",
        "status_result",
        "sessions",
        "sessions_result",
        "memory_search",
        "memory_search_result",
        "schedule",
        "schedule_result",
        "tool_run",
        "tool_run_result",
    }
)


def encode(msg: BaseModel, limit: int = MAX_LINE_BYTES) -> bytes:
    """One line of UTF-8 JSON ending in a newline; `LineTooLong` past `limit` bytes."""
    line = msg.model_dump_json(by_alias=True).encode()
    if len(line) > limit:
        raise LineTooLong(
            f"{msg.__class__.__name__} encodes to {len(line)} bytes, "
            f"over the {limit}-byte line limit",
            getattr(msg, "id", None),
        )
    return line + b"\n"


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _is_unicode(obj: Any) -> bool:
    """True when every string in `obj` (keys too) is valid Unicode (no lone surrogate)."""
    stack = [obj]
    while stack:  # iterative: the depth was already bounded by json.loads
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def _ref(obj: dict[str, Any]) -> str | None:
    ref = obj.get("id")
    return ref if isinstance(ref, str) else None


def json_object(line: bytes, limit: int = MAX_LINE_BYTES) -> dict[str, Any]:
    """One line (trailing newline optional) as a JSON object: UTF-8, valid JSON, valid
    Unicode, not nested past the parser's depth. Raises a `ProtocolError` subclass.
    Shared by the engine protocol and the console's (`klaw.wire.console`)."""
    body = line.rstrip(b"\r\n")
    if len(body) > limit:
        raise LineTooLong(f"line of {len(body)} bytes is over the {limit}-byte limit")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidJson(f"line is not valid UTF-8 (byte {exc.start})") from None
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise InvalidJson(f"line is not valid JSON: {exc}") from None
    except RecursionError:  # [[[[…: json.loads recurses per level
        raise InvalidJson("line is not valid JSON: nested too deeply") from None
    if _SURROGATE_ESCAPE.search(text) and not _is_unicode(obj):
        # "\ud800" alone is valid JSON but not Unicode: it could be neither stored nor
        # echoed back (UTF-8 refuses it). Escaped pairs (emoji from ensure_ascii
        # encoders) are fine: json.loads joins them.
        raise InvalidJson("line holds a lone UTF-16 surrogate escape: not valid Unicode")
    if not isinstance(obj, dict):
        raise InvalidMessage(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def decode(line: bytes, limit: int = MAX_LINE_BYTES) -> Message:
    """Parses one line (trailing newline optional); raises a `ProtocolError` subclass."""
    obj = json_object(line, limit)
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise InvalidMessage('message has no "type" field', _ref(obj))
    if kind not in _TYPES:
        raise UnknownType(
            f"unknown message type {kind[:64]!r}; known: {', '.join(sorted(_TYPES))}",
            _ref(obj),
        )
    try:
        return _ADAPTER.validate_python(obj)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'][1:]) or '(message)'}: {err['msg']}"
            for err in exc.errors(include_url=False)
        )
        raise InvalidMessage(f"invalid {kind} message: {problems}", _ref(obj)) from None


def error_for(exc: ProtocolError) -> Error:
    """The `error` reply for a line that failed to decode."""
    return Error(code=exc.code, message=exc.message, ref=exc.ref)


# --- streams --------------------------------------------------------------

_CHUNK = 64 * 1024


class LineReader:
    """Reads protocol lines from a stream, refusing (and skipping) oversized ones.

    `asyncio.StreamReader.readline` leaves the tail of an oversized line in the
    stream, where it would be read as a second, garbage line; this reader drops the
    whole line and raises `LineTooLong` once, then carries on with the next line.
    """

    def __init__(self, reader: asyncio.StreamReader, max_line: int = MAX_LINE_BYTES) -> None:
        self._reader = reader
        self._max = max_line
        self._buf = bytearray()
        self._scanned = 0

    async def message(self) -> Message | None:
        """The next message; None at end of stream. Blank lines are skipped. A line
        that is too long or does not decode raises its `ProtocolError`; the stream
        stays usable, so the caller reports it and reads on. (The one read-and-decode
        loop of the engine server, the gateway's engine link and the CLI client.)"""
        while True:
            line = await self.readline()
            if line is None:
                return None
            if line.strip():
                return decode(line, self._max)

    async def readline(self) -> bytes | None:
        """The next line without its newline; None at end of stream."""
        while True:
            i = self._buf.find(b"\n", self._scanned)
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 1]
                self._scanned = 0
                return self._checked(line)
            self._scanned = len(self._buf)
            if len(self._buf) > self._max:
                size = len(self._buf)
                self._buf.clear()
                self._scanned = 0
                size += await self._skip_rest_of_line()
                raise LineTooLong(
                    f"line of {size} bytes or more is over the {self._max}-byte limit; skipped"
                )
            chunk = await self._reader.read(_CHUNK)
            if not chunk:
                if not self._buf:
                    return None
                line = bytes(self._buf)  # a last line without its newline
                self._buf.clear()
                self._scanned = 0
                return self._checked(line)
            self._buf += chunk

    def _checked(self, line: bytes) -> bytes:
        if len(line) > self._max:
            raise LineTooLong(
                f"line of {len(line)} bytes is over the {self._max}-byte limit; skipped"
            )
        return line

    async def _skip_rest_of_line(self) -> int:
        skipped = 0
        while True:
            chunk = await self._reader.read(_CHUNK)
            if not chunk:
                return skipped
            i = chunk.find(b"\n")
            if i >= 0:
                self._buf += chunk[i + 1 :]
                return skipped + i
            skipped += len(chunk)

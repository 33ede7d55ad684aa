"""The console protocol: `klaw chat` ↔ the gateway's console socket.

UTF-8 JSON objects, one a line, checked by the same `json_object` as the engine
protocol (UTF-8, valid Unicode, depth, size), then typed here. The gateway
(`klaw.gateway.channels.console`) and the client (`klaw.cli.chat_cmds`) both import this
module and neither parses lines by hand.

    client → gateway   Say        {"type":"say","text":"..."}
    gateway → client   Hello      {"type":"hello","commands":[["new","New session"],...]}
                       Reply      {"type":"reply","text":"...","queued":false}
                       Typing     {"type":"typing"}
                       ConsoleError {"type":"error","message":"..."}
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from klaw.wire.protocol import MAX_LINE_BYTES, InvalidMessage, UnknownType, json_object

__all__ = [
    "ConsoleError",
    "ConsoleMessage",
    "Hello",
    "Reply",
    "Say",
    "Typing",
    "decode_console",
    "encode_console",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Say(_Model):
    """A line the user typed (``/name args`` is a command)."""

    type: Literal["say"] = "say"
    text: str


class Hello(_Model):
    """Sent on connect and whenever the command menu changes: (name, description)."""

    type: Literal["hello"] = "hello"
    commands: list[tuple[str, str]] = Field(default_factory=list)


class Reply(_Model):
    """A reply or a push; `queued` marks one kept while no client was connected."""

    type: Literal["reply"] = "reply"
    text: str
    queued: bool = False


class Typing(_Model):
    """The agent is working on an answer."""

    type: Literal["typing"] = "typing"


class ConsoleError(_Model):
    """A line could not be taken; the connection stays open."""

    type: Literal["error"] = "error"
    message: str


ConsoleMessage: TypeAlias = Annotated[
    Say | Hello | Reply | Typing | ConsoleError, Field(discriminator="type")
]
_ADAPTER: TypeAdapter[ConsoleMessage] = TypeAdapter(ConsoleMessage)
_TYPES = frozenset({"say", "hello", "reply", "typing", "error"})


def encode_console(msg: BaseModel) -> bytes:
    """One line of UTF-8 JSON (real UTF-8, not escapes) ending in a newline."""
    return msg.model_dump_json().encode() + b"\n"


def decode_console(line: bytes, limit: int = MAX_LINE_BYTES) -> ConsoleMessage:
    """A console line (trailing newline optional); raises a `ProtocolError` subclass
    whose message says what is wrong in words a user can act on."""
    obj = json_object(line, limit)
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise InvalidMessage('expected a JSON object like {"type":"say","text":"..."}')
    if kind not in _TYPES:
        raise UnknownType(f"unknown message type {kind[:64]!r}")
    try:
        return _ADAPTER.validate_python(obj)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'][1:]) or '(message)'}: {err['msg']}"
            for err in exc.errors(include_url=False)
        )
        raise InvalidMessage(f"invalid {kind} message: {problems}") from None

"""The JSONL protocol: round trips, wire names, and every way a line can be bad."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klaw.errors import KlawError
from klaw.wire.protocol import (
    MAX_LINE_BYTES,
    Attachment,
    Command,
    Error,
    ErrorCode,
    GatewayInfo,
    Inbound,
    InboundMeta,
    InvalidJson,
    InvalidMessage,
    LineReader,
    LineTooLong,
    MemorySearch,
    MemorySearchResult,
    Message,
    Outbound,
    ProtocolError,
    Quote,
    Register,
    Registered,
    SearchHit,
    SessionInfo,
    Sessions,
    SessionsResult,
    Shutdown,
    Status,
    StatusResult,
    UnknownType,
    decode,
    encode,
    error_for,
)

TS = datetime(2026, 2, 24, 14, 30, tzinfo=UTC)

SAMPLES: list[Message] = [
    Register(channels=["telegram", "discord"]),
    Registered(version="0.1.0", pid=42),
    Inbound(
        id="msg_001",
        channel="telegram",
        chat_id="telegram_123456",
        ts=TS,
        content="Привет, 你好 \n second line",
        meta=InboundMeta(
            sender="123456",
            sender_name="Ann",
            reply_to=Quote(id="msg_000", sender="klaw", content="earlier"),
            attachments=[Attachment(path="/tmp/a.jpg", mime="image/jpeg", size=10)],
        ),
    ),
    Command(id="c1", channel="telegram", chat_id="telegram_1", ts=TS, name="model", args="glm-5"),
    Outbound(
        channel="telegram",
        chat_id="telegram_1",
        content="Hi!",
        reply_to="msg_001",
        meta={"source": "heartbeat"},
    ),
    Error(code=ErrorCode.NOT_IMPLEMENTED, message="not yet", ref="msg_001"),
    Shutdown(),
    Status(),
    StatusResult(
        id="s1",
        pid=1,
        version="0.1.0",
        started_at=TS,
        uptime_s=1.5,
        gateway=GatewayInfo(client="gateway", channels=["telegram"], connected_at=TS),
        in_flight=2,
        memory=True,
        counts={"memory_chunks": 3},
    ),
    Sessions(),
    SessionsResult(
        id="s2",
        sessions=[SessionInfo(chat_id="telegram_1", model="glm/glm-5", segment_start=str(TS))],
        total=2,
        unlisted=1,
    ),
    MemorySearch(query="wifi password", top_k=5),
    MemorySearchResult(
        id="m1",
        hits=[
            SearchHit(
                citation="memory/a.md#L1-L3",
                content="wifi",
                score=0.5,
                source="memory/a.md",
                created_at="2026-02-24T00:00:00Z",
            )
        ],
    ),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: m.type)
def test_every_type_round_trips_on_one_line(msg: Message) -> None:
    line = encode(msg)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line) == msg


def test_the_wire_is_camel_case_utf8() -> None:
    line = encode(
        Inbound(id="a", channel="telegram", chat_id="telegram_1", ts=TS, content="Привет")
    )
    obj = json.loads(line)
    assert obj["chatId"] == "telegram_1"
    assert obj["ts"] == "2026-02-24T14:30:00Z"
    assert "Привет".encode() in line  # not \\u-escaped


def test_design_example_decodes_and_unknown_fields_are_ignored() -> None:
    line = (
        b'{"type":"inbound","id":"msg_001","channel":"telegram","chatId":"telegram_123456",'
        b'"content":"Hi","ts":"2026-02-24T14:30:00Z","future":{"x":1}}\n'
    )
    msg = decode(line)
    assert isinstance(msg, Inbound)
    assert (msg.chat_id, msg.content, msg.ts) == ("telegram_123456", "Hi", TS)


def test_snake_case_and_text_alias_are_accepted() -> None:
    msg = decode(
        b'{"type":"inbound","id":"1","channel":"t","chat_id":"t_1","text":"yo",'
        b'"ts":"2026-02-24T14:30:00+03:00","meta":{"reply_to":{"text":"q"}}}'
    )
    assert isinstance(msg, Inbound)
    assert msg.content == "yo" and msg.meta.reply_to is not None
    assert msg.meta.reply_to.content == "q"


@pytest.mark.parametrize(
    ("line", "exc", "code", "ref"),
    [
        (b"{nope", InvalidJson, ErrorCode.INVALID_JSON, None),
        (b"\xff\xfe{}", InvalidJson, ErrorCode.INVALID_JSON, None),
        (b"[1, 2]", InvalidMessage, ErrorCode.INVALID_MESSAGE, None),
        (b'{"id": "x"}', InvalidMessage, ErrorCode.INVALID_MESSAGE, "x"),
        (b'{"type": "bogus", "id": "x"}', UnknownType, ErrorCode.UNKNOWN_TYPE, "x"),
        (b'{"type": "inbound", "id": "x"}', InvalidMessage, ErrorCode.INVALID_MESSAGE, "x"),
        (
            b'{"type":"inbound","id":"x","channel":"t","chatId":"c","ts":"2026-02-24T14:30:00"}',
            InvalidMessage,
            ErrorCode.INVALID_MESSAGE,
            "x",
        ),
        (
            b'{"type": "memory_search", "id": "q", "query": ""}',
            InvalidMessage,
            "invalid_message",
            "q",
        ),
        (b"x" * (MAX_LINE_BYTES + 1), LineTooLong, ErrorCode.LINE_TOO_LONG, None),
    ],
)
def test_bad_lines_raise_protocol_errors(
    line: bytes, exc: type[ProtocolError], code: str, ref: str | None
) -> None:
    with pytest.raises(exc) as info:
        decode(line)
    assert isinstance(info.value, KlawError)
    assert info.value.code == code and info.value.ref == ref
    err = error_for(info.value)
    assert (err.code, err.ref) == (code, ref) and err.message


def test_invalid_field_message_names_the_field() -> None:
    with pytest.raises(InvalidMessage, match="chatId"):
        decode(b'{"type":"inbound","id":"x","channel":"t","ts":"2026-02-24T14:30:00Z"}')


def test_encode_refuses_an_oversized_message() -> None:
    with pytest.raises(LineTooLong):
        encode(Error(code="x", message="a" * MAX_LINE_BYTES))


@settings(deadline=None)  # timing is not the property; a loaded CI box is slow
@given(st.binary(max_size=300))
def test_decode_of_any_bytes_is_a_message_or_a_protocol_error(data: bytes) -> None:
    try:
        decode(data)
    except ProtocolError:
        pass


@settings(deadline=None)
@given(st.text(max_size=200), st.text(min_size=1, max_size=30))
def test_inbound_content_round_trips(content: str, chat: str) -> None:
    msg = Inbound(id="i", channel="telegram", chat_id=chat, ts=TS, content=content)
    assert decode(encode(msg)) == msg


async def test_line_reader_skips_an_oversized_line_whole() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(b"first\n" + b"y" * 300 + b"\nsecond\nlast")
    reader.feed_eof()
    lines = LineReader(reader, max_line=100)
    assert await lines.readline() == b"first"
    with pytest.raises(LineTooLong):
        await lines.readline()
    assert await lines.readline() == b"second"
    assert await lines.readline() == b"last"
    assert await lines.readline() is None

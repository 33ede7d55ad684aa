"""The whole engine over its real socket: a gateway peer, klaw.db, the real embedding
model, a scripted OpenAI-compatible server and the built-in tools."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import Peer, peer, running

from klaw.config import EngineConfig
from klaw.llm.errors import USER_MESSAGE
from klaw.memory import Memory
from klaw.paths import KlawPaths
from klaw.wire.protocol import (
    MAX_LINE_BYTES,
    Command,
    Delivered,
    Error,
    ErrorCode,
    Inbound,
    Message,
    Outbound,
    Register,
    Registered,
)
from scripted_llm import FakeLLM, call, engine_config

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)


def msg(n: int, text: str, chat: str = "telegram_1") -> Inbound:
    return Inbound(
        id=f"tg_{n}", channel="telegram", chat_id=chat, ts=T0 + timedelta(seconds=n), content=text
    )


def cmd(n: int, name: str, args: str = "", chat: str = "telegram_1") -> Command:
    return Command(
        id=f"cmd_{n}",
        channel="telegram",
        chat_id=chat,
        ts=T0 + timedelta(seconds=n),
        name=name,
        args=args,
    )


@pytest.fixture
def config(tmp_path: Path, llm: FakeLLM) -> EngineConfig:
    return engine_config(tmp_path, llm.url, debounceMs=20)


@pytest.fixture
def open_memory(klaw_home: KlawPaths, backend: Any, config: EngineConfig) -> Callable[[], Memory]:
    """A fresh Memory per engine start (the engine closes it when it stops)."""
    return lambda: Memory.open(paths=klaw_home, config=config, backend=backend)


async def gateway(p: Peer) -> Registered:
    await p.send(Register(channels=["telegram"]))
    reply = await p.recv()
    assert isinstance(reply, Registered)
    return reply


async def next_outbound(p: Peer) -> Outbound:
    m: Message = await p.recv()
    assert isinstance(m, Outbound), m
    return m


def window_texts(request: dict[str, Any]) -> list[str]:
    return [m.get("content") or "" for m in request["messages"] if m["role"] != "system"]


async def test_inbound_to_reply_with_a_tool_round(
    klaw_home: KlawPaths, config: EngineConfig, open_memory: Any, llm: FakeLLM
) -> None:
    llm.answer(None, [call("c1", "memory_save", '{"content": "The owner likes green tea."}')])
    llm.answer("Noted: green tea.")
    async with running(klaw_home, memory_factory=open_memory, config=config), peer(klaw_home) as p:
        registered = await gateway(p)
        assert [c.name for c in registered.commands] == [c.name for c in config.commands]
        await p.send(msg(1, "Remember that I like green tea."))
        out = await next_outbound(p)
        assert out.content == "Noted: green tea."
        assert out.reply_to == "tg_1" and out.answers == ["tg_1"]
        assert out.meta["model"] == "fake/m"
        assert (out.meta["tokens_in"], out.meta["tokens_out"]) == (20, 6)  # two calls
        # The tool round travels as records for the gateway to log before the reply.
        roles = [(r.role, r.meta.get("tool")) for r in out.records]
        assert roles == [("assistant", None), ("tool", "memory_save")]
        assert out.records[0].meta["tool_calls"][0]["name"] == "memory_save"
        first, second = llm.requests
        assert any(t["function"]["name"] == "send_message" for t in first["tools"])
        assert window_texts(first)[-1] == "Remember that I like green tea."
        tool_result = second["messages"][-1]
        assert tool_result["role"] == "tool" and tool_result["tool_call_id"] == "c1"
    mem = open_memory()
    try:
        assert "green tea" in mem.search("what tea does the owner like")[0].content
        rows = mem.store.recent_messages("telegram_1", None, 10)
        assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
        assert rows[-1].id == out.id
        assert mem.store.get_session("telegram_1") is not None
    finally:
        mem.close()


async def test_new_starts_a_segment_the_window_never_crosses(
    klaw_home: KlawPaths, config: EngineConfig, open_memory: Any, llm: FakeLLM
) -> None:
    llm.answer("Paris.")
    llm.answer("Hello again.")
    async with running(klaw_home, memory_factory=open_memory, config=config), peer(klaw_home) as p:
        await gateway(p)
        await p.send(msg(1, "The capital of France?"))
        assert (await next_outbound(p)).content == "Paris."
        await p.send(cmd(2, "new"))
        reset = await next_outbound(p)
        assert reset.line_type == "command_reply" and reset.answers == ["cmd_2"]
        assert "New session" in reset.content
        (marker,) = reset.records
        assert (marker.role, marker.type) == ("system", "session_break")
        assert marker.ts == T0 + timedelta(seconds=2)
        await p.send(msg(3, "Hi"))
        assert (await next_outbound(p)).content == "Hello again."
    assert window_texts(llm.requests[-1]) == ["Hi"]


async def test_model_commands(
    klaw_home: KlawPaths, tmp_path: Path, llm: FakeLLM, backend: Any
) -> None:
    config = engine_config(tmp_path, llm.url)
    config.models["fake/big"] = config.models["fake/m"].model_copy()
    mem = lambda: Memory.open(paths=klaw_home, config=config, backend=backend)  # noqa: E731
    llm.answer("From the big one.")
    async with running(klaw_home, memory_factory=mem, config=config), peer(klaw_home) as p:
        await gateway(p)
        await p.send(cmd(1, "model"))
        assert "Model: fake/m" in (await next_outbound(p)).content
        await p.send(cmd(2, "model", "nope/x"))
        refused = await next_outbound(p)
        assert "Unknown model 'nope/x'" in refused.content and not refused.records
        await p.send(cmd(3, "model", "fake/big"))
        switched = await next_outbound(p)
        assert "switched from fake/m to fake/big" in switched.content
        assert [r.type for r in switched.records] == ["model_switch"]
        await p.send(cmd(4, "models"))
        listing = (await next_outbound(p)).content
        assert "- fake/big (this chat)" in listing and "- fake/m (default)" in listing
        await p.send(msg(5, "Who answers?"))
        assert (await next_outbound(p)).meta["model"] == "fake/big"
        await p.send(cmd(6, "help"))
        assert "/new: " in (await next_outbound(p)).content
        await p.send(cmd(7, "status"))
        status = (await next_outbound(p)).content
        assert "Model: fake/big" in status and "Chat: telegram_1" in status
        await p.send(cmd(8, "memory"))
        assert "Core memory" in (await next_outbound(p)).content
        await p.send(cmd(9, "frobnicate"))
        assert "Unknown command /frobnicate" in (await next_outbound(p)).content
    assert llm.requests[-1]["model"] == "big"


async def test_send_message_refused_by_the_gateway_reaches_the_model(
    klaw_home: KlawPaths, config: EngineConfig, open_memory: Any, llm: FakeLLM
) -> None:
    args = json.dumps({"chat_id": "telegram_999", "text": "psst"})
    llm.answer(None, [call("c1", "send_message", args)])
    llm.answer(None, [call("c2", "send_message", args)])
    llm.answer("I could not reach that chat.")
    async with running(klaw_home, memory_factory=open_memory, config=config), peer(klaw_home) as p:
        await gateway(p)
        await p.send(msg(1, "Tell chat 999 a secret."))
        push = await next_outbound(p)
        assert (push.chat_id, push.content, push.reply_to) == ("telegram_999", "psst", None)
        await p.send(
            Error(code=ErrorCode.REFUSED, message="telegram_999 is not allowed", ref=push.id)
        )
        push2 = await next_outbound(p)
        await p.send(Delivered(ref=push2.id))
        final = await next_outbound(p)
        assert final.content == "I could not reach that chat."
    refused = llm.requests[1]["messages"][-1]
    assert refused["role"] == "tool" and "not allowed" in refused["content"]
    delivered = llm.requests[2]["messages"][-1]
    assert delivered["content"] == "Delivered to telegram_999."


async def test_a_message_cut_off_by_a_crash_is_answered_once_after_restart(
    klaw_home: KlawPaths, config: EngineConfig, open_memory: Any, llm: FakeLLM
) -> None:
    # First life: no model answers; the message is stored and stays unanswered.
    llm.replies.append((500, {"error": {"message": "down"}}))
    async with running(klaw_home, memory_factory=open_memory, config=config), peer(klaw_home) as p:
        await gateway(p)
        await p.send(msg(1, "Are you there?"))
        notice = await next_outbound(p)
        assert notice.content == USER_MESSAGE and notice.answers == []
    # Second life: the gateway re-sends what was never answered.
    llm.answer("Yes.")
    async with running(klaw_home, memory_factory=open_memory, config=config), peer(klaw_home) as p:
        await gateway(p)
        await p.send(msg(1, "Are you there?"))
        answer = await next_outbound(p)
        assert answer.content == "Yes." and answer.answers == ["tg_1"]
        # A third delivery (the gateway lost the confirmation) re-sends the same reply.
        await p.send(msg(1, "Are you there?"))
        again = await next_outbound(p)
        assert again.id == answer.id
        # An older message already covered by the watermark is settled as a duplicate.
    assert len(llm.requests) == 2


async def test_bad_input_over_the_socket(
    klaw_home: KlawPaths, config: EngineConfig, open_memory: Any, llm: FakeLLM
) -> None:
    llm.answer(None, [call("c1", "no_such_tool", "{}"), call("c2", "file_read", "{not json")])
    llm.answer(None, [call("c3", "file_read", '{"path": "notes/../../../etc/passwd"}')])
    llm.answer("Done.")
    async with running(klaw_home, memory_factory=open_memory, config=config), peer(klaw_home) as p:
        await gateway(p)
        await p.send(b'{"type":"inbound", "id": "x"\n')
        assert isinstance(await p.recv(), Error)
        await p.send(b'{"type":"teleport","id":"x"}\n')
        err = await p.recv()
        assert isinstance(err, Error) and err.code == ErrorCode.UNKNOWN_TYPE
        huge = msg(1, "x" * (MAX_LINE_BYTES + 10))
        await p.send(huge.model_dump_json(by_alias=True).encode() + b"\n")
        err = await p.recv()
        assert isinstance(err, Error) and err.code == ErrorCode.LINE_TOO_LONG
        await p.send(msg(2, "Read my notes."))
        assert (await next_outbound(p)).content == "Done."
    results = [m for m in llm.requests[1]["messages"] if m["role"] == "tool"]
    assert "Unknown tool 'no_such_tool'" in results[0]["content"]
    assert "not a JSON object" in results[1]["content"]
    escaped = llm.requests[2]["messages"][-1]
    assert escaped["role"] == "tool" and "root:" not in escaped["content"]
    assert "outside" in escaped["content"] or "escape" in escaped["content"]


async def test_a_model_without_tools_gets_no_schemas(
    klaw_home: KlawPaths, config: EngineConfig, open_memory: Any, llm: FakeLLM
) -> None:
    config.models["fake/m"].tools = False  # e.g. the tiny offline model
    llm.answer("Hi.")
    async with running(klaw_home, memory_factory=open_memory, config=config), peer(klaw_home) as p:
        await gateway(p)
        await p.send(msg(1, "Hello"))
        assert (await next_outbound(p)).content == "Hi."
    assert not llm.requests[0].get("tools")


async def test_replies_missed_by_an_absent_gateway_are_all_sent_again(
    klaw_home: KlawPaths, config: EngineConfig, open_memory: Any, llm: FakeLLM
) -> None:
    llm.answer("First answer.")
    llm.answer("Second answer.")
    async with running(klaw_home, memory_factory=open_memory, config=config):
        async with peer(klaw_home) as p:
            await gateway(p)
            await p.send(msg(1, "one"))
            first = await next_outbound(p)
            await p.send(msg(2, "two"))
            second = await next_outbound(p)
        # The gateway never logged them (say it crashed): it re-sends both messages.
        async with peer(klaw_home) as p:
            await gateway(p)
            await p.send(msg(1, "one"))
            await p.send(msg(2, "two"))
            again = [await next_outbound(p), await next_outbound(p)]
    assert [o.id for o in again] == [first.id, second.id]
    assert len(llm.requests) == 2


async def test_the_segments_last_summary_is_in_the_context_and_not_after_new(
    klaw_home: KlawPaths, config: EngineConfig, open_memory: Any, llm: FakeLLM
) -> None:
    folder = klaw_home.summaries / "telegram_1"
    folder.mkdir(parents=True)
    summary = folder / "2026-11-20_msg_001_050.md"
    # It covers the first message of the segment, which the /new below ends.
    first = (T0 + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    summary.write_text(
        f"# Summary of telegram_1, messages 1-50\n_{first} – {first}, 1 message, to tg_1._\n\n"
        "We planned a trip to Brno.\n"
    )
    llm.answer("Sure.")
    llm.answer("Fresh start.")
    async with running(klaw_home, memory_factory=open_memory, config=config), peer(klaw_home) as p:
        await gateway(p)
        await p.send(msg(1, "Where were we?"))
        await next_outbound(p)
        await p.send(cmd(2, "new"))
        await next_outbound(p)
        await p.send(msg(3, "And now?"))
        await next_outbound(p)
    first, second = (r["messages"][0]["content"] for r in llm.requests)
    assert "We planned a trip to Brno." in first
    # The summary was written before /new: it belongs to the old segment.
    assert "Brno" not in second

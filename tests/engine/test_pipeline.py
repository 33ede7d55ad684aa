"""The message pipeline over the real Memory and a scripted local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from klaw.engine.pipeline import Pipeline
from klaw.lanes import INTERACTIVE, SUBAGENT, PrioritySlots
from klaw.llm.errors import USER_MESSAGE
from klaw.llm.router import Router
from klaw.memory import Memory
from klaw.memory.rows import StoredMessage
from klaw.paths import KlawPaths
from klaw.wire.protocol import Command, Error, Inbound, Outbound
from scripted_llm import FakeLLM, call, engine_config

T = 10.0  # upper bound for any single wait


class Outbox:
    def __init__(self) -> None:
        self.sent: list[Outbound | Error] = []
        self._changed = asyncio.Event()

    async def __call__(self, msg: Outbound | Error) -> None:
        self.sent.append(msg)
        self._changed.set()

    async def wait_for(self, count: int) -> list[Outbound | Error]:
        """Waits (bounded by the caller's timeout) until `count` messages were sent."""
        while len(self.sent) < count:
            self._changed.clear()
            await self._changed.wait()
        return self.sent


@pytest.fixture
async def make_pipeline(
    tmp_path: Path, klaw_home: KlawPaths, memory: Memory, llm: FakeLLM
) -> AsyncIterator[Any]:
    made: list[tuple[Pipeline, Router]] = []

    def make(**processing: Any) -> Pipeline:
        config = engine_config(tmp_path, llm.url, **processing)
        router = Router(config)
        pipeline = Pipeline(config, klaw_home, memory, router)
        made.append((pipeline, router))
        return pipeline

    yield make
    for pipeline, router in made:
        await asyncio.wait_for(pipeline.aclose(), T)
        await asyncio.wait_for(router.aclose(), T)


def inbound(
    msg_id: str, content: str, chat: str = "telegram_1", ts: datetime | None = None
) -> Inbound:
    """A message sent now (the engine dates its replies by its own clock)."""
    return Inbound(
        id=msg_id,
        channel="telegram",
        chat_id=chat,
        ts=ts or datetime.now(UTC),
        content=content,
    )


def rows(memory: Memory, chat: str = "telegram_1") -> list[StoredMessage]:
    return list(memory.store.recent_messages(chat, None, 100))  # oldest first


# ---------------------------------------------------------------- tests


async def test_one_inbound_is_stored_sent_to_the_llm_and_answered(
    make_pipeline: Any, memory: Memory, llm: FakeLLM, klaw_home: KlawPaths
) -> None:
    (klaw_home.workspace / "SOUL.md").write_text("You are Klaw, terse and kind.")
    pipeline = make_pipeline()
    llm.answer("Hi there!")
    out = Outbox()
    msg = inbound("msg_001", "Hello bot", ts=datetime.now(UTC) - timedelta(minutes=5))
    await asyncio.wait_for(pipeline.handle(msg, out), T)

    assert len(llm.requests) == 1
    request = llm.requests[0]
    assert request["model"] == "m"
    assert request["messages"][0]["role"] == "system"
    assert "You are Klaw, terse and kind." in request["messages"][0]["content"]
    assert request["messages"][-1] == {"role": "user", "content": "Hello bot"}
    assert "current_time" in {t["function"]["name"] for t in request["tools"]}

    assert len(out.sent) == 1
    reply = out.sent[0]
    assert isinstance(reply, Outbound)
    assert (reply.content, reply.reply_to, reply.chat_id, reply.channel) == (
        "Hi there!",
        "msg_001",
        "telegram_1",
        "telegram",
    )
    stored = rows(memory)
    assert stored[0].id == "msg_001" and (stored[0].role, stored[0].content) == (
        "user",
        "Hello bot",
    )
    assert stored[0].created_at == msg.ts.strftime("%Y-%m-%dT%H:%M:%SZ")  # its own ts
    assert [(r.role, r.content) for r in stored[1:]] == [("assistant", "Hi there!")]


async def test_a_redelivered_message_is_not_processed_twice(
    make_pipeline: Any, memory: Memory, llm: FakeLLM
) -> None:
    pipeline = make_pipeline()
    llm.answer("once")
    out = Outbox()
    await asyncio.wait_for(pipeline.handle(inbound("msg_001", "Hello"), out), T)
    await asyncio.wait_for(pipeline.handle(inbound("msg_001", "Hello"), out), T)
    assert len(llm.requests) == 1
    # The stored reply goes out again with the same id: the gateway drops an outbound
    # it has already delivered, and a reply lost in a crash is not lost for good.
    assert len(out.sent) == 2
    first, again = out.sent
    assert isinstance(first, Outbound) and isinstance(again, Outbound)
    assert again.id == first.id and again.content == "once"
    assert [r.role for r in rows(memory)] == ["user", "assistant"]


async def test_quick_messages_of_one_chat_are_merged_into_one_turn(
    make_pipeline: Any, memory: Memory, llm: FakeLLM
) -> None:
    pipeline = make_pipeline(debounceMs=50)
    llm.answer("I'll look at it.")
    out = Outbox()
    first = asyncio.create_task(pipeline.handle(inbound("m1", "take a look"), out))
    second = asyncio.create_task(pipeline.handle(inbound("m2", "at this file"), out))
    await asyncio.wait_for(asyncio.gather(first, second), T)

    assert len(llm.requests) == 1
    last = llm.requests[0]["messages"][-1]
    assert last == {"role": "user", "content": "take a look\nat this file"}
    assert len(out.sent) == 1
    reply = out.sent[0]
    assert isinstance(reply, Outbound) and reply.reply_to == "m2"
    assert [r.id for r in rows(memory)][:2] == ["m1", "m2"]


async def test_turns_after_the_debounce_window_are_separate_and_ordered(
    make_pipeline: Any, llm: FakeLLM
) -> None:
    pipeline = make_pipeline(debounceMs=10)
    llm.answer("first answer")
    llm.answer("second answer")
    out = Outbox()
    await asyncio.wait_for(pipeline.handle(inbound("m1", "one"), out), T)
    await asyncio.wait_for(pipeline.handle(inbound("m2", "two"), out), T)
    assert [m.content for m in out.sent if isinstance(m, Outbound)] == [
        "first answer",
        "second answer",
    ]
    history = [(m["role"], m.get("content")) for m in llm.requests[1]["messages"][1:]]
    assert history == [("user", "one"), ("assistant", "first answer"), ("user", "two")]


async def test_a_tool_call_round_reaches_the_second_request(
    make_pipeline: Any, memory: Memory, llm: FakeLLM
) -> None:
    pipeline = make_pipeline()
    llm.answer(None, [call("call_1", "current_time", "{}")])
    llm.answer("It is late.")
    out = Outbox()
    await asyncio.wait_for(pipeline.handle(inbound("m1", "what time is it?"), out), T)

    assert len(llm.requests) == 2
    second = llm.requests[1]["messages"]
    assistant, tool = second[-2], second[-1]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"][0]["id"] == "call_1"
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_1"
    # The tool's own clock, in whatever zone it names: compared as instants, not as a
    # year (at 02:00 on New Year's Day at UTC+14 the UTC year is still the old one).
    told = datetime.fromisoformat(tool["content"].rpartition("ISO ")[2].rstrip(")"))
    assert abs(told - datetime.now(UTC)) < timedelta(seconds=T)
    reply = out.sent[-1]
    assert isinstance(reply, Outbound) and reply.content == "It is late."
    assert [r.role for r in rows(memory)] == ["user", "assistant", "tool", "assistant"]


async def test_a_malformed_tool_call_is_answered_as_a_tool_error(
    make_pipeline: Any, memory: Memory, llm: FakeLLM
) -> None:
    pipeline = make_pipeline()
    llm.answer(None, [call("call_1", "current_time", "{not json")])
    llm.answer("Sorry, let me answer without it.")
    out = Outbox()
    await asyncio.wait_for(pipeline.handle(inbound("m1", "time?"), out), T)

    tool = llm.requests[1]["messages"][-1]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_1"
    assert "not a JSON object" in tool["content"]
    stored_tool = next(r for r in rows(memory) if r.role == "tool")
    assert json.loads(stored_tool.metadata or "{}")["is_error"] is True
    reply = out.sent[-1]
    assert isinstance(reply, Outbound)
    assert reply.content == "Sorry, let me answer without it."


async def test_the_tool_round_limit_ends_with_a_user_facing_message(
    make_pipeline: Any, llm: FakeLLM
) -> None:
    pipeline = make_pipeline(maxToolCallRounds=2)
    for i in range(3):
        llm.answer(None, [call(f"call_{i}", "current_time", "{}")])
    out = Outbox()
    await asyncio.wait_for(pipeline.handle(inbound("m1", "loop forever"), out), T)
    assert len(llm.requests) == 3
    reply = out.sent[-1]
    assert isinstance(reply, Outbound) and "limit" in reply.content


async def test_all_providers_failing_tells_the_user_and_keeps_the_inbound(
    make_pipeline: Any, memory: Memory, llm: FakeLLM
) -> None:
    pipeline = make_pipeline()
    llm.replies.append((500, {"error": {"message": "boom"}}))
    out = Outbox()
    await asyncio.wait_for(pipeline.handle(inbound("m1", "are you there?"), out), T)
    assert len(out.sent) == 1
    reply = out.sent[0]
    assert isinstance(reply, Outbound)
    assert reply.content == USER_MESSAGE and reply.reply_to == "m1"
    # The notice settles nothing: the gateway keeps m1 pending, the engine retries it.
    assert reply.answers == [] and reply.line_type == "notice"
    assert [(r.id, r.role, r.kind) for r in rows(memory)] == [
        ("m1", "user", None),
        (reply.id, "assistant", "notice"),
    ]


async def test_unanswered_messages_are_retried_when_a_model_is_back(
    make_pipeline: Any, memory: Memory, llm: FakeLLM
) -> None:
    pipeline = make_pipeline()
    pipeline.retry_base_s = 0.05
    llm.replies.append((500, {"error": {"message": "boom"}}))
    llm.answer("Yes, I am here.")
    out = Outbox()
    await asyncio.wait_for(pipeline.handle(inbound("m1", "are you there?"), out), T)
    notice, answer = await asyncio.wait_for(out.wait_for(2), T)
    assert isinstance(notice, Outbound) and notice.content == USER_MESSAGE
    assert isinstance(answer, Outbound)
    assert answer.content == "Yes, I am here." and answer.answers == ["m1"]
    # The retried request did not see the notice as part of the conversation.
    assert USER_MESSAGE not in json.dumps(llm.requests[-1]["messages"])


async def test_chats_run_concurrently(make_pipeline: Any, llm: FakeLLM) -> None:
    pipeline = make_pipeline(maxConcurrentLlm=2)
    llm.answer("a")
    llm.answer("b")
    out_a, out_b = Outbox(), Outbox()
    await asyncio.wait_for(
        asyncio.gather(
            pipeline.handle(inbound("a1", "hi", chat="telegram_1"), out_a),
            pipeline.handle(inbound("b1", "hi", chat="telegram_2"), out_b),
        ),
        T,
    )
    assert len(llm.requests) == 2
    assert len(out_a.sent) == len(out_b.sent) == 1


async def test_priority_slots_serve_interactive_work_first() -> None:
    slots = PrioritySlots(1)
    await asyncio.wait_for(slots.acquire(), T)
    order: list[str] = []

    async def worker(name: str, priority: int) -> None:
        await slots.acquire(priority)
        order.append(name)
        slots.release()

    sub = asyncio.create_task(worker("subagent", SUBAGENT))
    await asyncio.sleep(0)
    inter = asyncio.create_task(worker("interactive", INTERACTIVE))
    await asyncio.sleep(0)
    slots.release()
    await asyncio.wait_for(asyncio.gather(sub, inter), T)
    assert order == ["interactive", "subagent"]
    assert slots.free == 1


async def test_a_command_during_debounce_runs_after_the_batch_before_it(
    make_pipeline: Any, llm: FakeLLM
) -> None:
    pipeline = make_pipeline(debounceMs=5000)  # the command, not the timer, closes the batch
    llm.answer("answer to hello")
    out = Outbox()
    now = datetime.now(UTC).replace(microsecond=0)
    first = asyncio.create_task(pipeline.handle(inbound("m1", "hello", ts=now), out))
    await asyncio.sleep(0)  # m1 is stored and collecting
    new = Command(
        id="c1", channel="telegram", chat_id="telegram_1", ts=now + timedelta(seconds=1), name="new"
    )
    await asyncio.wait_for(asyncio.gather(first, pipeline.handle(new, out)), T)
    reply, reset = out.sent
    assert isinstance(reply, Outbound) and reply.answers == ["m1"]
    assert isinstance(reset, Outbound) and reset.line_type == "command_reply"
    assert [m["content"] for m in llm.requests[0]["messages"][1:]] == ["hello"]


async def test_a_later_batch_is_not_answered_in_an_earlier_turn(
    make_pipeline: Any, llm: FakeLLM
) -> None:
    pipeline = make_pipeline(debounceMs=0)
    llm.hold = asyncio.Event()
    for text in ("r0", "rA", "rB"):
        llm.answer(text)
    out = Outbox()
    now = datetime.now(UTC).replace(microsecond=0)
    t0 = asyncio.create_task(pipeline.handle(inbound("x", "first", ts=now), out))
    await asyncio.wait_for(llm.arrived.wait(), T)  # turn x is at the model
    ta = asyncio.create_task(
        pipeline.handle(inbound("a", "question A", ts=now + timedelta(seconds=1)), out)
    )
    chat = pipeline._chats["telegram_1"]
    # A's batch closes (debounce 0) and waits for the chat's turn.
    await asyncio.wait_for(_until(lambda: "a" in pipeline._active and chat.batch is None), T)
    tb = asyncio.create_task(
        pipeline.handle(inbound("b", "question B", ts=now + timedelta(seconds=2)), out)
    )
    # B is stored too, in a batch of its own.
    await asyncio.wait_for(_until(lambda: "b" in pipeline._active and chat.batch is None), T)
    llm.hold.set()
    await asyncio.wait_for(asyncio.gather(t0, ta, tb), T)
    a_turn = [m["content"] for m in llm.requests[1]["messages"] if m["role"] == "user"]
    assert a_turn[-1] == "question A" and "question B" not in json.dumps(a_turn)
    assert [o.answers for o in out.sent if isinstance(o, Outbound)] == [["x"], ["a"], ["b"]]


async def test_a_message_of_the_answered_second_is_still_answered_after_a_crash(
    make_pipeline: Any, llm: FakeLLM
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    pipeline = make_pipeline(debounceMs=0)
    llm.answer("rA")
    out = Outbox()
    await asyncio.wait_for(pipeline.handle(inbound("a", "A", ts=now), out), T)
    # B, sent in the same second, is stored; its turn dies with the engine.
    llm.hold = asyncio.Event()
    llm.arrived.clear()
    tb = asyncio.create_task(pipeline.handle(inbound("b", "B", ts=now), out))
    await asyncio.wait_for(llm.arrived.wait(), T)
    await pipeline.aclose()
    tb.cancel()
    llm.replies.clear()
    llm.answer("lost with the dead turn")
    llm.answer("rB")
    llm.hold.set()
    await asyncio.wait_for(_until(lambda: len(llm.replies) == 1), T)
    # The engine restarts; the gateway re-sends B, which no reply answered yet.
    again = make_pipeline(debounceMs=0)
    out2 = Outbox()
    await asyncio.wait_for(again.handle(inbound("b", "B", ts=now), out2), T)
    (reply,) = out2.sent
    assert isinstance(reply, Outbound) and reply.answers == ["b"] and reply.content == "rB"


async def test_a_redelivered_message_waiting_for_its_retry_is_not_run_again(
    make_pipeline: Any, llm: FakeLLM
) -> None:
    pipeline = make_pipeline(debounceMs=0)
    pipeline.retry_base_s = 3600.0  # the retry is far away
    llm.replies.append((500, {"error": {"message": "down"}}))
    out = Outbox()
    msg = inbound("a", "hello")
    await asyncio.wait_for(pipeline.handle(msg, out), T)
    for _ in range(3):  # the gateway reconnects and re-sends it
        await asyncio.wait_for(pipeline.handle(msg, out), T)
    assert len(llm.requests) == 1 and len(out.sent) == 1


async def _until(predicate: Any) -> None:
    while not predicate():
        await asyncio.sleep(0.01)


async def test_a_turn_sees_the_earlier_reply_before_its_own_message(
    make_pipeline: Any, llm: FakeLLM
) -> None:
    """Finding 2: text A, /status, text B within one second (Telegram's resolution).
    B's turn must end with B, after the answer to A, although all share one timestamp."""
    pipeline = make_pipeline(debounceMs=1000)
    llm.hold = asyncio.Event()
    llm.answer("answer to A")
    llm.answer("answer to B")
    out = Outbox()
    now = datetime.now(UTC).replace(microsecond=0)
    ta = asyncio.create_task(pipeline.handle(inbound("a", "text A", ts=now), out))
    await asyncio.sleep(0)  # A is stored and collecting
    status = Command(id="s", channel="telegram", chat_id="telegram_1", ts=now, name="status")
    ts_ = asyncio.create_task(pipeline.handle(status, out))  # closes A's batch
    await asyncio.wait_for(llm.arrived.wait(), T)  # A's turn is at the model
    tb = asyncio.create_task(pipeline.handle(inbound("b", "text B", ts=now), out))
    await asyncio.wait_for(_until(lambda: "b" in pipeline._active), T)
    llm.hold.set()
    await asyncio.wait_for(asyncio.gather(ta, ts_, tb), T)
    second = [(m["role"], m.get("content")) for m in llm.requests[1]["messages"][1:]]
    assert second == [("user", "text A"), ("assistant", "answer to A"), ("user", "text B")]


class _GatedStore:
    """klaw.db with one message's insert held after it is written (instrumentation:
    every call goes to the real store), so a turn can run while that message is stored
    but not yet queued."""

    def __init__(self, store: Any, held_id: str) -> None:
        self._store = store
        self.held_id = held_id
        self.stored = threading.Event()
        self.release = threading.Event()

    def insert_messages(self, rows: list[Any]) -> int:
        n = self._store.insert_messages(rows)
        if any(r.id == self.held_id for r in rows):
            self.stored.set()
            self.release.wait(T)
        return n

    def recent_messages(self, *args: Any) -> Any:
        # A turn reads its window only once the held message is in klaw.db.
        self.stored.wait(T)
        return self._store.recent_messages(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_a_message_stored_but_not_queued_stays_out_of_a_running_turn(
    make_pipeline: Any, memory: Memory, llm: FakeLLM
) -> None:
    """Found by the e2e replay test under load: B was in klaw.db but not yet queued
    when A's turn read its window, so A's turn answered "B, A" (B first: A is its own
    and goes last) and B then got a turn of its own."""
    pipeline = make_pipeline(debounceMs=0)
    gated = _GatedStore(memory.store, "b")
    memory.store = gated  # type: ignore[assignment]
    llm.hold = asyncio.Event()
    llm.answer("reply A")
    llm.answer("reply B")
    out = Outbox()
    now = datetime.now(UTC).replace(microsecond=0)  # the same second for both
    ta = asyncio.create_task(pipeline.handle(inbound("a", "question A", ts=now), out))
    await asyncio.wait_for(_until(lambda: "a" in pipeline._active), T)
    tb = asyncio.create_task(pipeline.handle(inbound("b", "question B", ts=now), out))
    # A's turn reads its window after B is in klaw.db and before B is queued.
    await asyncio.wait_for(llm.arrived.wait(), T)
    gated.release.set()
    llm.hold.set()
    await asyncio.wait_for(asyncio.gather(ta, tb), T)
    memory.store = gated._store
    turns = [[m["content"] for m in r["messages"] if m["role"] == "user"] for r in llm.requests]
    assert turns == [["question A"], ["question A", "question B"]]
    assert [o.answers for o in out.sent if isinstance(o, Outbound)] == [["a"], ["b"]]

"""Loop breakers (klaw.engine.loops) through the real pipeline and router against a
scripted model that would loop forever: the same call again and again, two calls in
turn, new calls every round, many tokens, a long time. No turn makes more model calls
than its cap, the user gets a plain message and the log names the loop; jobs too."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from test_pipeline import Outbox, inbound, make_pipeline

from klaw.config import ProcessingConfig
from klaw.engine import loops
from klaw.engine.loops import LoopGuard
from klaw.lanes import SUBAGENT
from klaw.llm.types import LlmResponse, ToolCall, Usage
from klaw.wire.protocol import Outbound
from scripted_llm import FakeLLM, call

FIXTURES = (make_pipeline,)  # test_pipeline's, which pytest finds here by its name
T = 10.0
FOREVER = 60  # scripted replies: more than any cap here


def forever(llm: FakeLLM, *calls: tuple[str, str]) -> None:
    """The model answers every request with the next of `calls` (cycling): a loop that
    never ends on its own."""
    for i in range(FOREVER):
        name, args = calls[i % len(calls)]
        llm.answer(None, [call(f"c{i}", name, args)])


def new_calls(llm: FakeLLM) -> None:
    """Every round a call never made before (no repetition to detect)."""
    for i in range(FOREVER):
        llm.answer(None, [call(f"c{i}", "file_list", f'{{"path": "dir{i}"}}')])


async def turn(pipeline: Any, chat: str = "telegram_1", **kw: Any) -> Outbound:
    out = Outbox()
    await asyncio.wait_for(pipeline.handle(inbound("m1", "go", chat=chat), out, **kw), T)
    reply = out.sent[-1]
    assert isinstance(reply, Outbound)
    return reply


async def test_the_same_call_three_times_in_a_row_ends_the_turn(
    make_pipeline: Any, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = make_pipeline(maxToolCallRounds=50)
    forever(llm, ("current_time", "{}"))
    with caplog.at_level(logging.WARNING, "klaw.engine"):
        reply = await turn(pipeline)
    assert len(llm.requests) == 3  # the third identical call is not run
    assert reply.meta["error"] == "loop_repeat"
    assert "current_time with the same arguments" in reply.content
    assert "loop: current_time {} called 3 times in a row" in caplog.text


async def test_two_calls_alternating_end_the_turn(
    make_pipeline: Any, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = make_pipeline(maxToolCallRounds=50)
    forever(llm, ("current_time", "{}"), ("file_list", '{"path": "."}'))
    with caplog.at_level(logging.WARNING, "klaw.engine"):
        reply = await turn(pipeline)
    assert len(llm.requests) == 6  # A,B,A,B,A,B
    assert reply.meta["error"] == "loop_alternate"
    assert "back and forth between current_time and file_list" in reply.content
    assert "alternating 3 times" in caplog.text


async def test_new_calls_every_round_stop_at_the_round_cap(
    make_pipeline: Any, llm: FakeLLM
) -> None:
    pipeline = make_pipeline(maxToolCallRounds=4)
    new_calls(llm)
    reply = await turn(pipeline)
    assert len(llm.requests) == 5  # the first call and four rounds
    assert reply.meta["error"] == "tool_call_limit"


async def test_the_token_cap_of_a_turn(make_pipeline: Any, llm: FakeLLM) -> None:
    pipeline = make_pipeline(maxToolCallRounds=50, loops="{maxTokens: 40}")
    new_calls(llm)  # 10 + 3 tokens a call (the fake's usage)
    reply = await turn(pipeline)
    assert len(llm.requests) == 4  # 13, 26, 39, 52 ≥ 40
    assert reply.meta["error"] == "loop_tokens"
    assert "52 tokens" in reply.content


async def test_the_time_cap_of_a_turn(
    make_pipeline: Any, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    ticks = iter(range(0, 100_000, 100))  # every look at the clock: 100 s later
    monkeypatch.setattr(loops, "monotonic", lambda: float(next(ticks)))
    pipeline = make_pipeline(maxToolCallRounds=50, loops="{maxSeconds: 250}")
    new_calls(llm)
    reply = await turn(pipeline)
    assert len(llm.requests) == 3  # checked at 100, 200, 300 s
    assert reply.meta["error"] == "loop_time"


async def test_a_job_turn_gets_the_same_breakers(make_pipeline: Any, llm: FakeLLM) -> None:
    pipeline = make_pipeline(maxToolCallRounds=50)
    forever(llm, ("current_time", "{}"))
    reply = await turn(pipeline, chat="scheduler_looper", priority=SUBAGENT)
    assert len(llm.requests) == 3
    assert reply.meta["error"] == "loop_repeat"


async def test_with_loops_off_only_the_round_cap_holds(make_pipeline: Any, llm: FakeLLM) -> None:
    pipeline = make_pipeline(maxToolCallRounds=5, loops="{enabled: false}")
    forever(llm, ("current_time", "{}"))
    reply = await turn(pipeline)
    assert len(llm.requests) == 6
    assert reply.meta["error"] == "tool_call_limit"


def response(*names: str) -> LlmResponse:
    calls = [ToolCall(id=f"c{i}", name=n, arguments={"x": 1}) for i, n in enumerate(names)]
    return LlmResponse(None, calls, "tool_calls", Usage(1, 1))


@pytest.mark.parametrize(
    ("sequence", "stops_at"),
    [
        ("AAA", 3),
        ("ABABAB", 6),
        ("AABAAB", None),  # not a pair in turn, nor three in a row
        ("AABAABAAB", 9),  # a round of three, three times
        ("ABCABCABC", 9),
        ("ABCABCAB", None),
        ("ABCDABCDABCD", 12),
        ("ABCDEABCDEABCDE", None),  # rounds of five and more: the round cap catches them
        ("ABAB" + "A", None),
    ],
)
def test_repetitions(sequence: str, stops_at: int | None) -> None:
    guard = LoopGuard(ProcessingConfig(max_tool_call_rounds=100))
    stopped = None
    for i, name in enumerate(sequence, 1):
        if guard.check(response(name)) is not None:
            stopped = i
            break
    assert stopped == stops_at


def test_parallel_calls_in_one_response_count_in_order() -> None:
    guard = LoopGuard(ProcessingConfig(max_tool_call_rounds=100))
    stop = guard.check(response("A", "A", "A"))
    assert stop is not None and stop.error == "loop_repeat"


def test_three_calls_in_turn_end_the_turn_with_their_names() -> None:
    guard = LoopGuard(ProcessingConfig(max_tool_call_rounds=100))
    stops = [guard.check(response(name)) for name in "ABCABCABC"]
    stop = stops[-1]
    assert stops[:-1] == [None] * 8 and stop is not None and stop.error == "loop_cycle"
    assert "calling A, B and C in turn" in stop.message
    assert 'A {"x": 1} -> B' in stop.detail


def test_arguments_differing_in_key_order_or_malformed_whitespace_are_the_same_call() -> None:
    guard = LoopGuard(ProcessingConfig(max_tool_call_rounds=100))
    calls = [
        ToolCall(id="a", name="f", arguments={"x": 1, "y": 2}),
        ToolCall(id="b", name="f", arguments={"y": 2, "x": 1}),
    ]
    assert guard.check(LlmResponse(None, calls, "tool_calls", Usage(1, 1))) is None
    bad = [
        ToolCall(id=f"m{i}", name="g", arguments={}, error="not JSON", raw_arguments=raw)
        for i, raw in enumerate(['{"x":', '{"x": ', ' {"x":\n'])
    ]
    stops = [guard.check(LlmResponse(None, [c], "tool_calls", Usage(1, 1))) for c in bad]
    assert stops[-1] is not None and stops[-1].error == "loop_repeat"


def test_usage_below_zero_does_not_undo_the_token_cap() -> None:
    guard = LoopGuard(ProcessingConfig.model_validate({"loops": {"maxTokens": 39}}))
    guard.check(LlmResponse(None, [], "tool_calls", Usage(-(10**9), -5)))
    calls = [ToolCall(id=f"c{i}", name=f"t{i}", arguments={}) for i in range(3)]
    stops = [guard.check(LlmResponse(None, [c], "tool_calls", Usage(10, 3))) for c in calls]
    assert stops[-1] is not None and stops[-1].error == "loop_tokens"

"""What metering costs per model call (issue 27 items 1-3), each beside a baseline in
the same run:

* the router's budget hook for one call of a 50-message, 22-tool request: the check
  and reservation before (`Router._admit`: every cap, the estimate) and the settling
  after (`Spend.settle`: the cost, the in-memory totals and one spend-log line written),
  with daily, monthly and per-source caps set (bar: p50 ≤ 50 µs, asserted: no file is
  read per call); beside encoding the same request's body (`encode_payload`, which
  every call already does, with its per-message cache warm);
* the loop breaker's check after a response with one tool call (`LoopGuard.check`),
  beside `json.dumps` of the call's arguments.
"""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path
from typing import Any

import pytest

from klaw.config import EngineConfig, ProcessingConfig
from klaw.engine.loops import LoopGuard
from klaw.llm.openai_compat import encode_payload
from klaw.llm.router import Router
from klaw.llm.types import LlmRequest, LlmResponse, Message, ToolCall, ToolSchema, Usage
from klaw.spend import Spend
from smoke import SMOKE


def _config() -> EngineConfig:
    return EngineConfig.model_validate(
        {
            "providers": {"glm": {"endpoint": "https://open.bigmodel.cn/api/paas/v4"}},
            "models": {"glm/glm-5": {}},
            "routing": {"default": "glm/glm-5", "fallback": []},
            "budget": {
                "daily": 1e9,
                "monthly": 1e9,
                "currency": "CNY",
                "perSource": {"heartbeat": 1e9, "job:*": 1e9, "chat:*": 1e9},
            },
        }
    )


def _request() -> LlmRequest:
    messages = [Message.system("You are Klaw. " * 400)]
    for i in range(50):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append(Message(role, f"message {i}: " + "some words of a chat " * 8))
    tools = [
        ToolSchema(f"tool_{i}", "does a thing " * 10, {"type": "object", "properties": {}})
        for i in range(22)
    ]
    return LlmRequest(messages=messages, model="glm-5", tools=tools)


def _p50(benchmark: Any) -> float:
    stats = benchmark.stats.stats if benchmark.stats else None
    return float(stats.median) if stats else statistics.median([0.0])


@pytest.mark.benchmark(group="spend-per-call")
def test_router_budget_hook_per_call(benchmark: Any, tmp_path: Path) -> None:
    config = _config()
    spend = Spend(config, tmp_path / "spend")
    router = Router(config, spend=spend)
    request = _request()
    chain = router.chain()
    sources = itertools.cycle(["chat:telegram_1", "heartbeat", "job:news", "summary"])

    def one_call() -> None:
        ticket, _ = router._admit(next(sources), chain, request)
        assert ticket is not None
        spend.settle(ticket, "glm/glm-5", 5200, 180, 4000)

    benchmark(one_call)
    spend.close()
    lines = next((tmp_path / "spend").iterdir()).read_bytes().count(b"\n")
    benchmark.extra_info["spend_log_lines"] = lines
    if not SMOKE:
        assert _p50(benchmark) <= 50e-6


@pytest.mark.benchmark(group="spend-per-call")
def test_baseline_request_body_encoding(benchmark: Any) -> None:
    request = _request()
    encode_payload(request)  # the per-message JSON cache warm, as between turns
    body = benchmark(lambda: encode_payload(request))
    benchmark.extra_info["body_bytes"] = len(body)


def _response() -> LlmResponse:
    call = ToolCall(id="c1", name="file_read", arguments={"path": "notes/todo.md", "lines": 40})
    return LlmResponse(None, [call], "tool_calls", Usage(5200, 40))


@pytest.mark.benchmark(group="loop-guard")
def test_loop_guard_check(benchmark: Any) -> None:
    processing = ProcessingConfig(max_tool_call_rounds=10**9)
    response = _response()

    def check() -> None:
        guard = LoopGuard(processing)  # a fresh turn: the repeat check never trips
        guard.check(response)

    benchmark(check)


@pytest.mark.benchmark(group="loop-guard")
def test_baseline_arguments_json(benchmark: Any) -> None:
    import json

    arguments = _response().tool_calls[0].arguments
    benchmark(lambda: json.dumps(arguments, sort_keys=True, ensure_ascii=False))

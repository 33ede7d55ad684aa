"""AnthropicClient against a small fake of POST /v1/messages."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from fake_llm import FakeLLM, Reply

from klaw.config import EngineConfig
from klaw.llm import (
    AnthropicClient,
    LlmRequest,
    MalformedResponse,
    Message,
    ProviderError,
    Router,
    ToolSchema,
)
from klaw.llm.anthropic import ANTHROPIC_VERSION

KEY = "sk-ant-test-secret"


@pytest.fixture
async def client(server: FakeLLM) -> AsyncIterator[AnthropicClient]:
    c = AnthropicClient("anthropic", server.url + "/v1", KEY, timeout_s=5)
    yield c
    await c.aclose()


TOOL_USE = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-20250514",
    "content": [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Oslo"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 42, "output_tokens": 17},
}


async def test_tool_round_trip(server: FakeLLM, client: AnthropicClient) -> None:
    final = {**TOOL_USE, "content": [{"type": "text", "text": "Sunny."}], "stop_reason": "end_turn"}
    server.queue(Reply(json=TOOL_USE), Reply(json=final))
    tool = ToolSchema("get_weather", "Weather by city", {"type": "object", "properties": {}})
    history = [Message.system("sys A"), Message.system("sys B"), Message.user("weather?")]
    first = await client.complete(LlmRequest(history, model="claude", tools=[tool]))
    assert first.content == "Let me check."
    assert first.finish_reason == "tool_calls"
    assert (first.usage.tokens_in, first.usage.tokens_out) == (42, 17)
    [call] = first.tool_calls
    assert (call.id, call.name, call.arguments) == ("toolu_01A", "get_weather", {"city": "Oslo"})

    req = server.requests[0]
    assert req.path == "/v1/messages"
    assert req.headers["x-api-key"] == KEY
    assert req.headers["anthropic-version"] == ANTHROPIC_VERSION
    assert "Authorization" not in req.headers
    assert req.json["system"] == "sys A\n\nsys B"
    assert req.json["max_tokens"] == 4096
    assert req.json["tools"] == [
        {"name": "get_weather", "description": "Weather by city", "input_schema": tool.parameters}
    ]
    assert req.json["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]}
    ]

    history += [
        first.to_message(),
        Message.tool_result("toolu_01A", "sunny"),
        Message.tool_result("toolu_02B", "boom", is_error=True),
    ]
    second = await client.complete(LlmRequest(history, model="claude", max_tokens=50))
    assert second.content == "Sunny." and second.finish_reason == "stop"
    sent = server.requests[1].json
    assert sent["max_tokens"] == 50
    assert sent["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "sunny"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_02B",
                    "content": "boom",
                    "is_error": True,
                },
            ],
        },
    ]


async def test_errors(server: FakeLLM, client: AnthropicClient) -> None:
    server.queue(
        Reply(
            529,
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            headers={"retry-after": "3"},
        ),
        Reply(json={**TOOL_USE, "stop_reason": "max_tokens", "content": []}),
    )
    with pytest.raises(ProviderError) as info:
        await client.complete(LlmRequest([Message.user("hi")], model="claude"))
    assert (info.value.status, info.value.message, info.value.retry_after) == (
        529,
        "Overloaded",
        3.0,
    )
    assert KEY not in str(info.value)
    cut = await client.complete(LlmRequest([Message.user("hi")], model="claude"))
    assert cut.finish_reason == "length" and cut.content is None


# ---------------------------------------------------------------- streaming


def streamed(*blocks: list[dict[str, Any]], stop: str = "end_turn") -> list[Any]:
    """A Messages stream as the API sends it: `blocks` are each block's events (start,
    deltas, stop), between message_start and message_delta/message_stop."""
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-20250514",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 25, "output_tokens": 1},
        },
    }
    end = [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 15},
        },
        {"type": "message_stop"},
    ]
    return [start, {"type": "ping"}, *(e for b in blocks for e in b), *end]


def text_block(index: int, *parts: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        },
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": p},
            }
            for p in parts
        ),
        {"type": "content_block_stop", "index": index},
    ]


def tool_block(index: int, ident: str, name: str, *json_parts: str) -> list[dict[str, Any]]:
    start = {"type": "tool_use", "id": ident, "name": name, "input": {}}
    return [
        {"type": "content_block_start", "index": index, "content_block": start},
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": p},
            }
            for p in json_parts
        ),
        {"type": "content_block_stop", "index": index},
    ]


def stream_request() -> LlmRequest:
    return LlmRequest([Message.user("weather?")], model="claude", stream=True)


async def test_a_stream_gives_text_deltas_and_assembles_tool_calls(
    server: FakeLLM, client: AnthropicClient
) -> None:
    server.queue(
        Reply(
            sse=streamed(
                text_block(0, "Let me ", "check the ", "погоду."),
                tool_block(1, "toolu_01", "get_weather", "", '{"city": "Os', 'lo", "days": ', "2}"),
                tool_block(2, "toolu_02", "current_time"),  # no input at all: no arguments
                stop="tool_use",
            ),
            named=True,
        )
    )
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    response = await client.complete(stream_request(), on_delta)
    assert deltas == ["Let me ", "check the ", "погоду."]
    assert response.content == "Let me check the погоду."
    first, second = response.tool_calls
    assert (first.id, first.name, first.arguments) == (
        "toolu_01",
        "get_weather",
        {"city": "Oslo", "days": 2},
    )
    assert (second.name, second.arguments, second.error) == ("current_time", {}, None)
    assert response.finish_reason == "tool_calls"
    assert (response.usage.tokens_in, response.usage.tokens_out) == (25, 15)
    assert response.model == "claude-sonnet-4-20250514"
    assert server.requests[0].json["stream"] is True


async def test_streamed_tool_input_that_is_not_an_object_is_the_calls_error(
    server: FakeLLM, client: AnthropicClient
) -> None:
    server.queue(Reply(sse=streamed(tool_block(0, "toolu_1", "f", '{"a": '), stop="tool_use")))
    (call,) = (await client.complete(stream_request())).tool_calls
    assert call.name == "f" and call.error == "tool input is not a JSON object"


async def test_an_error_event_mid_stream_is_a_provider_error_with_its_status(
    server: FakeLLM, client: AnthropicClient
) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    events = streamed(text_block(0, "Half"))
    server.queue(Reply(sse=[*events[:4], overloaded], named=True))
    seen: list[str] = []

    async def on_delta(text: str) -> None:
        seen.append(text)

    with pytest.raises(ProviderError) as info:
        await client.complete(stream_request(), on_delta)
    assert (info.value.status, info.value.message) == (529, "Overloaded (mid-stream)")
    assert seen == ["Half"]


async def test_a_stream_that_stops_before_message_stop_is_not_an_answer(
    server: FakeLLM, client: AnthropicClient
) -> None:
    events = streamed(text_block(0, "Half an answer"))
    server.queue(Reply(sse=events[:-2]), Reply(sse=events[:-2], drop=True))
    with pytest.raises(MalformedResponse, match="before message_stop"):
        await client.complete(stream_request())
    with pytest.raises(ProviderError):  # the connection cut: an error, never half an answer
        await client.complete(stream_request())


async def test_a_stream_refused_before_it_began_is_an_http_error(
    server: FakeLLM, client: AnthropicClient
) -> None:
    server.queue(
        Reply(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
    )
    with pytest.raises(ProviderError) as info:
        await client.complete(stream_request())
    assert (info.value.status, info.value.message) == (429, "slow down")


async def test_the_router_retries_an_overloaded_stream_and_resets_the_half_answer(
    server: FakeLLM,
) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    half = streamed(text_block(0, "Half"))[:4]
    server.queue(
        Reply(sse=[*half, overloaded], named=True),
        Reply(sse=streamed(text_block(0, "The whole ", "answer.")), named=True),
    )
    config = EngineConfig.model_validate(
        {
            "providers": {
                "claude": {"type": "anthropic", "endpoint": server.url + "/v1", "apiKey": KEY}
            },
            "models": {"claude/sonnet": {}},
            "routing": {"default": "claude/sonnet", "fallback": []},
            "llm": {"maxRetries": 1, "initialBackoffMs": 0, "local": {"enabled": False}},
        }
    )
    seen: list[str] = []

    async def on_delta(text: str) -> None:
        seen.append(text)

    async def on_reset() -> None:
        seen.append("<reset>")

    async with Router(config) as router:
        response = await router.complete(
            LlmRequest([Message.user("hi")], stream=True), on_delta=on_delta, on_reset=on_reset
        )
    assert response.content == "The whole answer."
    assert seen == ["Half", "<reset>", "The whole ", "answer."] and len(server.requests) == 2

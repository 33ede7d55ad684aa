"""AnthropicClient against a small fake of POST /v1/messages."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fake_llm import FakeLLM, Reply

from klaw.llm import AnthropicClient, LlmRequest, Message, ProviderError, ToolSchema
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

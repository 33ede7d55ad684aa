"""SSE streaming: text deltas reach the callback; tool-call fragments are assembled."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from fake_llm import FakeLLM, Reply

from klaw.llm import LlmRequest, MalformedResponse, Message, OpenAICompatClient, ProviderError


@pytest.fixture
async def client(server: FakeLLM) -> AsyncIterator[OpenAICompatClient]:
    c = OpenAICompatClient("prov", server.url + "/v1", "key", timeout_s=5)
    yield c
    await c.aclose()


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "deepseek-chat",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def request() -> LlmRequest:
    return LlmRequest([Message.user("hi")], model="deepseek-chat", stream=True)


async def test_text_deltas_and_usage(server: FakeLLM, client: OpenAICompatClient) -> None:
    server.queue(
        Reply(
            sse=[
                chunk({"role": "assistant", "content": ""}),
                ": keep-alive",
                chunk({"reasoning_content": "think "}),
                chunk({"reasoning_content": "more"}),
                chunk({"content": "При"}),
                chunk({"content": "вет"}),
                chunk({}, "stop"),
                {"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
                "[DONE]",
            ]
        )
    )
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    response = await client.complete(request(), on_delta)
    assert deltas == ["При", "вет"]
    assert response.content == "Привет"
    assert response.reasoning_content == "think more"
    assert response.finish_reason == "stop"
    assert (response.usage.tokens_in, response.usage.tokens_out) == (5, 2)
    body = server.requests[0].json
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_tool_call_fragments_assembled(server: FakeLLM, client: OpenAICompatClient) -> None:
    server.queue(
        Reply(
            sse=[
                chunk({"role": "assistant", "content": None}),
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_a",
                                "type": "function",
                                "function": {"name": "memory_save", "arguments": ""},
                            }
                        ]
                    }
                ),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"text": '}}]}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"tea"}'}}]}),
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 1,
                                "id": "call_b",
                                "function": {"name": "current_time", "arguments": "{}"},
                            }
                        ]
                    }
                ),
                chunk({}, "tool_calls"),
                "[DONE]",
            ]
        )
    )
    response = await client.complete(request())
    assert response.content is None
    assert response.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_a", "memory_save", {"text": "tea"}),
        ("call_b", "current_time", {}),
    ]


async def test_fragments_without_index(server: FakeLLM, client: OpenAICompatClient) -> None:
    def call(**kw: Any) -> dict[str, Any]:
        return chunk({"tool_calls": [kw]})

    server.queue(
        Reply(
            sse=[
                call(id="x1", function={"name": "a", "arguments": '{"k"'}),
                call(function={"arguments": ": 1}"}),
                call(id="x2", function={"name": "b", "arguments": {"k": 2}}),
                chunk({}, "tool_calls"),
            ]
        )
    )
    response = await client.complete(request())
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("x1", "a", {"k": 1}),
        ("x2", "b", {"k": 2}),
    ]


async def test_stream_errors(server: FakeLLM, client: OpenAICompatClient) -> None:
    server.queue(
        Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "2"}),
        Reply(sse=[chunk({"content": "a"}), "{not json"]),
    )
    with pytest.raises(ProviderError) as info:
        await client.complete(request())
    assert (info.value.status, info.value.retry_after) == (429, 2.0)
    with pytest.raises(MalformedResponse):
        await client.complete(request())

"""SSE streaming: text deltas reach the callback; tool-call fragments are assembled; a
stream that stalls, never ends, stops short or never breaks its line is an error."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fake_llm import FakeLLM, Reply

from klaw.llm import (
    LlmRequest,
    MalformedResponse,
    Message,
    OpenAICompatClient,
    ProviderError,
    ProviderTimeout,
    TruncatedStream,
)
from klaw.llm._http import MAX_SSE_LINE


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


async def test_a_stream_of_keep_alives_times_out(server: FakeLLM) -> None:
    """Hostile 3: one chunk, then `: keep-alive` comments for ever. The comments do not
    count as a sign of life: the idle timeout ends the attempt."""
    server.queue(Reply(sse=[chunk({"content": "Hal"})], forever=": keep-alive"))
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    async with OpenAICompatClient(
        "prov", server.url + "/v1", "key", timeout_s=30, stream_idle_s=0.3
    ) as client:
        with pytest.raises(ProviderTimeout, match=r"sent nothing for 0\.3 s"):
            await client.complete(request(), on_delta)
    assert deltas == ["Hal"]


async def test_a_stream_that_never_ends_meets_the_request_deadline(server: FakeLLM) -> None:
    """Events that carry nothing, for ever: `requestTimeoutMs` bounds the whole stream."""
    server.queue(Reply(sse=[chunk({"content": "Hal"})], forever=chunk({"content": ""})))
    async with OpenAICompatClient(
        "prov", server.url + "/v1", "key", timeout_s=0.5, stream_idle_s=30
    ) as client:
        with pytest.raises(ProviderTimeout, match=r"no complete answer within 0\.5 s"):
            await client.complete(request())


async def test_a_slow_reader_is_not_a_silent_provider(server: FakeLLM) -> None:
    """The idle time counts the provider's silence, not the time the consumer takes
    with an event (a Telegram preview edit, say)."""
    server.queue(Reply(sse=[chunk({"content": "a"}), chunk({"content": "b"}, "stop"), "[DONE]"]))

    async def slow(text: str) -> None:
        if text == "a":
            await asyncio.sleep(1.0)

    async with OpenAICompatClient(
        "prov", server.url + "/v1", "key", timeout_s=30, stream_idle_s=0.5
    ) as client:
        assert (await client.complete(request(), slow)).content == "ab"


async def test_a_stream_without_its_end_is_not_an_answer(
    server: FakeLLM, client: OpenAICompatClient
) -> None:
    """Hostile 9: a stream that stops with neither `finish_reason` nor `[DONE]` may have
    lost the rest of the answer: an error (retried), never a complete reply. Either end
    marker alone is an end."""
    server.queue(
        Reply(sse=[chunk({"role": "assistant", "content": "Half an"})]),
        Reply(sse=[chunk({"content": "Whole"}), "[DONE]"]),
        Reply(sse=[chunk({"content": "Whole"}, "stop")]),
    )
    with pytest.raises(TruncatedStream, match="before a finish_reason or \\[DONE\\]") as info:
        await client.complete(request())
    assert info.value.transient
    assert (await client.complete(request())).content == "Whole"
    assert (await client.complete(request())).content == "Whole"


async def test_a_line_that_never_ends_is_refused_in_bounded_memory(server: FakeLLM) -> None:
    """Hostile 10: `data: ` and 200 MiB with no line break. The reader stops once it
    holds MAX_SSE_LINE bytes of one line, with a clear error."""
    server.queue(Reply(sse=[chunk({"content": "a"})], flood=200 * 2**20))
    async with OpenAICompatClient("prov", server.url + "/v1", "key", timeout_s=60) as client:
        tracemalloc.start()
        try:
            with pytest.raises(MalformedResponse, match="line over 8 MiB"):
                await client.complete(request())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 4 * MAX_SSE_LINE
    assert server.flooded < 100 * 2**20

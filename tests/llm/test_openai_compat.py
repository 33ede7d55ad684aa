"""OpenAICompatClient against a local server replaying real provider response shapes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fake_llm import FakeLLM, Reply, completion

from klaw.llm import (
    LlmRequest,
    MalformedResponse,
    Message,
    OpenAICompatClient,
    ProviderConnectionError,
    ProviderError,
    ToolCall,
    ToolSchema,
)

FIXTURES = Path(__file__).parent / "fixtures"
SECRET = "sk-test-0123456789abcdef"


@pytest.fixture
async def client(server: FakeLLM) -> AsyncIterator[OpenAICompatClient]:
    c = OpenAICompatClient("prov", server.url + "/v1", SECRET, timeout_s=5)
    yield c
    await c.aclose()


def ask(text: str = "hi", **kw: Any) -> LlmRequest:
    return LlmRequest([Message.system("be brief"), Message.user(text)], model="m", **kw)


@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("*.json")))
async def test_provider_shapes(name: str, server: FakeLLM, client: OpenAICompatClient) -> None:
    fixture = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    server.queue(Reply(json=fixture["response"]))
    response = await client.complete(ask())
    expect = fixture["expect"]
    assert response.content == expect["content"]
    assert response.reasoning_content == expect["reasoning_content"]
    assert response.finish_reason == expect["finish_reason"]
    assert [response.usage.tokens_in, response.usage.tokens_out] == expect["usage"]
    assert response.model == expect["model"]
    assert len(response.tool_calls) == len(expect["tool_calls"])
    for got, want in zip(response.tool_calls, expect["tool_calls"], strict=True):
        assert got.name == want["name"]
        assert got.arguments == want["arguments"]
        assert got.malformed is want["malformed"]
        if "id" in want:
            assert got.id == want["id"]
    ids = [c.id for c in response.tool_calls]
    assert all(ids) and len(set(ids)) == len(ids)


async def test_missing_ids_are_stable(server: FakeLLM, client: OpenAICompatClient) -> None:
    fixture = json.loads((FIXTURES / "missing_ids.json").read_text(encoding="utf-8"))
    server.queue(Reply(json=fixture["response"]), Reply(json=fixture["response"]))
    first, second = await client.complete(ask()), await client.complete(ask())
    assert [c.id for c in first.tool_calls] == [c.id for c in second.tool_calls]


async def test_malformed_arguments_are_reported_not_raised(
    server: FakeLLM, client: OpenAICompatClient
) -> None:
    fixture = json.loads((FIXTURES / "malformed_arguments.json").read_text(encoding="utf-8"))
    server.queue(Reply(json=fixture["response"]))
    bad, arr, good = (await client.complete(ask())).tool_calls
    assert bad.error is not None and "not valid JSON" in bad.error
    assert bad.raw_arguments is not None and "unterminated" in bad.raw_arguments
    assert arr.error is not None and "list" in arr.error
    assert good.error is None


async def test_request_shape_and_bearer(server: FakeLLM, client: OpenAICompatClient) -> None:
    server.ok()
    tool = ToolSchema("current_time", "Current time", {"type": "object", "properties": {}})
    await client.complete(ask(tools=[tool], max_tokens=100, temperature=0.2))
    req = server.requests[0]
    assert req.path == "/v1/chat/completions"
    assert req.headers["Authorization"] == f"Bearer {SECRET}"
    assert req.json["model"] == "m"
    assert req.json["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert req.json["tools"][0]["function"]["name"] == "current_time"
    assert req.json["max_tokens"] == 100 and req.json["temperature"] == 0.2
    assert "stream" not in req.json


async def test_no_auth_header_without_key(server: FakeLLM) -> None:
    server.ok()
    ollama = OpenAICompatClient("ollama", server.url + "/v1")
    try:
        await ollama.complete(ask())
    finally:
        await ollama.aclose()
    assert "Authorization" not in server.requests[0].headers


async def test_reasoning_content_sent_back_across_tool_rounds(
    server: FakeLLM, client: OpenAICompatClient
) -> None:
    fixture = json.loads((FIXTURES / "deepseek_reasoner_tool_call.json").read_text("utf-8"))
    server.queue(Reply(json=fixture["response"])).ok("It is sunny.")
    first = await client.complete(ask("weather in Moscow?"))
    call = first.tool_calls[0]
    history = [
        *ask("weather in Moscow?").messages,
        first.to_message(),
        Message.tool_result(call.id, '{"sky": "sunny"}'),
    ]
    second = await client.complete(LlmRequest(history, model="deepseek-reasoner"))
    assert second.content == "It is sunny."
    sent = server.requests[1].json["messages"]
    assert sent[2] == {
        "role": "assistant",
        "content": "",
        "reasoning_content": first.reasoning_content,
        "tool_calls": [
            {
                "id": "call_00_Wx9kLm2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Москва"}'},
            }
        ],
    }
    assert sent[3] == {
        "role": "tool",
        "tool_call_id": "call_00_Wx9kLm2",
        "content": '{"sky": "sunny"}',
    }


async def test_malformed_call_resent_with_valid_arguments(
    server: FakeLLM, client: OpenAICompatClient
) -> None:
    server.ok()
    bad = ToolCall("x", "file_write", error="arguments are not valid JSON", raw_arguments="{")
    history = [Message.user("hi"), Message("assistant", None, tool_calls=[bad])]
    await client.complete(LlmRequest(history, model="m"))
    assert server.requests[0].json["messages"][1]["tool_calls"][0]["function"]["arguments"] == "{}"


@pytest.mark.parametrize(
    ("reply", "status", "message", "retry_after"),
    [
        (
            Reply(429, {"error": {"message": "Rate limit reached"}}, headers={"Retry-After": "7"}),
            429,
            "Rate limit reached",
            7.0,
        ),
        (
            Reply(404, {"error": "model 'qwen3:8b' not found"}),
            404,
            "model 'qwen3:8b' not found",
            None,
        ),
        (Reply(400, {"code": "1214", "msg": "messages 参数非法"}), 400, "messages 参数非法", None),
        (
            Reply(503, body="<html>Service Unavailable</html>"),
            503,
            "<html>Service Unavailable</html>",
            None,
        ),
        (
            Reply(401, {"error": {"message": f"Incorrect API key provided: {SECRET}"}}),
            401,
            "Incorrect API key provided: ***",
            None,
        ),
    ],
)
async def test_http_errors_become_provider_errors(
    reply: Reply,
    status: int,
    message: str,
    retry_after: float | None,
    server: FakeLLM,
    client: OpenAICompatClient,
) -> None:
    server.queue(reply)
    with pytest.raises(ProviderError) as info:
        await client.complete(ask())
    err = info.value
    assert (err.status, err.message, err.retry_after) == (status, message, retry_after)
    assert err.provider == "prov" and err.model == "m"
    assert SECRET not in str(err)


async def test_malformed_body(server: FakeLLM, client: OpenAICompatClient) -> None:
    server.queue(Reply(body='{"choices": [', status=200), Reply(json={"object": "x"}))
    with pytest.raises(MalformedResponse):
        await client.complete(ask())
    with pytest.raises(MalformedResponse, match="no choices"):
        await client.complete(ask())


async def test_error_inside_a_200(server: FakeLLM, client: OpenAICompatClient) -> None:
    server.queue(Reply(json={"error": {"message": "quota exceeded", "code": "1113"}}))
    with pytest.raises(ProviderError, match="quota exceeded"):
        await client.complete(ask())


async def test_unreachable_endpoint() -> None:
    c = OpenAICompatClient("down", "http://127.0.0.1:9/v1", SECRET, timeout_s=2)
    try:
        with pytest.raises(ProviderConnectionError) as info:
            await c.complete(ask())
        assert info.value.transient and SECRET not in str(info.value)
    finally:
        await c.aclose()


async def test_content_as_parts(server: FakeLLM, client: OpenAICompatClient) -> None:
    body = completion(None)
    body["choices"][0]["message"]["content"] = [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
    ]
    server.queue(Reply(json=body))
    assert (await client.complete(ask())).content == "ab"

"""The request body an OpenAI-compatible provider gets: encoded with each message and
tool schema's JSON kept, it is still exactly `build_payload`'s, turn after turn."""

from __future__ import annotations

import json
from typing import Any

from klaw.llm import LlmRequest, Message, ToolCall, ToolSchema
from klaw.llm.openai_compat import build_payload, encode_payload
from klaw.llm.types import ImagePart


def _httpx_json(body: dict[str, Any]) -> bytes:
    """What httpx sends for `json=body` (httpx._content.encode_json)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _request(**kw: Any) -> LlmRequest:
    messages = [
        Message.system("Soul: calm. Время: 12:00, 会议"),
        Message.user("what's the weather?"),
        Message(
            "assistant",
            None,
            tool_calls=[ToolCall("c1", "weather", {"city": "Praha", "days": 2})],
            reasoning_content="look it up",
        ),
        Message.tool_result("c1", '{"t": 3.5}'),
        Message.tool_result("c2", "boom", is_error=True),
        Message("user", "and this?", images=[ImagePart("inbox/a.png", "image/png", b"\x89PNG")]),
    ]
    tools = [ToolSchema("weather", "The weather.", {"type": "object", "properties": {}})]
    return LlmRequest(messages, model="glm-5", tools=tools, **kw)


def test_the_encoded_body_is_build_payloads_byte_for_byte() -> None:
    for kw in ({}, {"max_tokens": 512, "temperature": 0.2}, {"stream": True}):
        request = _request(**kw)
        assert encode_payload(request) == _httpx_json(build_payload(request))
        assert encode_payload(request) == _httpx_json(build_payload(request))  # kept parts
    bare = LlmRequest([Message.user("hi")], model="m")
    assert encode_payload(bare) == _httpx_json(build_payload(bare))


def test_a_new_message_or_new_tool_parameters_are_encoded_anew() -> None:
    request = _request()
    encode_payload(request)
    # Another message object with other text, and a tool whose schema dict is new.
    request.messages[1] = Message.user("what's the time?")
    request.tools[0] = ToolSchema(
        "weather", "The weather.", {"type": "object", "properties": {"city": {"type": "string"}}}
    )
    body = json.loads(encode_payload(request))
    assert body["messages"][1]["content"] == "what's the time?"
    assert body["tools"][0]["function"]["parameters"]["properties"] == {"city": {"type": "string"}}
    assert encode_payload(request) == _httpx_json(build_payload(request))

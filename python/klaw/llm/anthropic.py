"""Anthropic Messages API (POST {endpoint}/messages), non-streaming.

Differences from the OpenAI shape handled here: the system prompt is a separate field,
tool calls and results are content blocks (`tool_use`, `tool_result`), tool results travel
in a user message, consecutive messages of one role are merged (the API wants them to
alternate), and `max_tokens` is required.
"""

from __future__ import annotations

from typing import Any

import httpx

from klaw.llm._http import HttpClient, parse_json
from klaw.llm.errors import MalformedResponse
from klaw.llm.types import (
    DeltaCallback,
    FinishReason,
    LlmRequest,
    LlmResponse,
    Message,
    ToolCall,
    Usage,
)

__all__ = ["ANTHROPIC_VERSION", "AnthropicClient"]

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096  # the API has no default; used when the model config sets none

_STOP: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


class AnthropicClient(HttpClient):
    def __init__(
        self,
        provider: str,
        endpoint: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        super().__init__(provider, endpoint, headers, api_key, timeout_s, transport)

    async def complete(
        self, request: LlmRequest, on_delta: DeltaCallback | None = None
    ) -> LlmResponse:
        async with self._guard(request.model):
            response, raw = await self._post("messages", build_payload(request))
        if response.status_code >= 400:
            raise self._error(response, raw, request.model)
        data = parse_json(raw, provider=self.provider, model=request.model)
        result = self._parse(data, request.model)
        if request.stream and on_delta is not None and result.content:
            await on_delta(result.content)  # no SSE here: the whole answer is one delta
        return result

    def _parse(self, data: dict[str, Any], model: str) -> LlmResponse:
        blocks = data.get("content")
        if not isinstance(blocks, list):
            raise MalformedResponse(
                "answer has no content blocks", provider=self.provider, model=model
            )
        text: list[str] = []
        thinking: list[str] = []
        calls: list[ToolCall] = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                text.append(str(block.get("text", "")))
            elif kind == "thinking":
                thinking.append(str(block.get("thinking", "")))
            elif kind == "tool_use":
                args = block.get("input")
                error = None if isinstance(args, dict) else "tool input is not a JSON object"
                calls.append(
                    ToolCall(
                        id=str(block.get("id") or f"toolu_{len(calls)}"),
                        name=str(block.get("name") or ""),
                        arguments=args if isinstance(args, dict) else {},
                        error=error,
                    )
                )
        usage: dict[str, Any] = data["usage"] if isinstance(data.get("usage"), dict) else {}
        stop = data.get("stop_reason")
        return LlmResponse(
            content="".join(text) or None,
            tool_calls=calls,
            finish_reason=_STOP.get(str(stop), "other") if stop else "stop",
            usage=Usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)),
            model=str(data.get("model") or model),
            reasoning_content="".join(thinking) or None,
        )


def build_payload(request: LlmRequest) -> dict[str, Any]:
    system = "\n\n".join(m.content or "" for m in request.messages if m.role == "system")
    turns: list[dict[str, Any]] = []
    for m in request.messages:
        if m.role == "system":
            continue
        role = "assistant" if m.role == "assistant" else "user"
        blocks = _blocks(m)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
        "messages": turns,
    }
    if system:
        body["system"] = system
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
    return body


def _blocks(m: Message) -> list[dict[str, Any]]:
    if m.role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": m.tool_call_id or "",
            "content": m.content or "",
        }
        if m.is_error:
            block["is_error"] = True
        return [block]
    # Images before the text, as Anthropic advises.
    out: list[dict[str, Any]] = [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": i.mime, "data": i.base64()},
        }
        for i in m.images
    ]
    if m.content:
        out.append({"type": "text", "text": m.content})
    for c in m.tool_calls:
        out.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})
    return out

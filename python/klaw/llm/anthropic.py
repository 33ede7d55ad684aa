"""Anthropic Messages API (POST {endpoint}/messages), with SSE streaming when
`request.stream` is set.

Differences from the OpenAI shape handled here: the system prompt is a separate field,
tool calls and results are content blocks (`tool_use`, `tool_result`), tool results travel
in a user message, consecutive messages of one role are merged (the API wants them to
alternate), and `max_tokens` is required.

A stream (`message_start`, `content_block_start/delta/stop`, `message_delta`,
`message_stop`) is folded back into the message a non-streamed call returns, then read
by the same parser. Text deltas go to `on_delta` as they come. An `error` event (the API
sends one mid-stream when it is overloaded) becomes a `ProviderError` with the status
the same error would have had before the stream began, so the router retries or falls
back as usual; a stream that ends before `message_stop` is an error too, never a
shorter answer.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any

from klaw.llm._http import HttpClient, parse_json
from klaw.llm.errors import MalformedResponse, ProviderError
from klaw.llm.types import (
    DeltaCallback,
    FinishReason,
    LlmRequest,
    LlmResponse,
    Message,
    ToolCall,
    Usage,
)
from klaw.redaction import redact

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
#: The HTTP status of each error type (docs.anthropic.com, "Errors"): an `error` event
#: mid-stream is retried like the same error answered before the stream.
_ERROR_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


class AnthropicClient(HttpClient):
    @staticmethod
    def _headers(api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    async def complete(
        self, request: LlmRequest, on_delta: DeltaCallback | None = None
    ) -> LlmResponse:
        body = build_payload(request)
        async with self._guard(request.model):
            if request.stream:
                return await self._stream(request, {**body, "stream": True}, on_delta)
            response, raw = await self._post("messages", body)
        if response.status_code >= 400:
            raise self._error(response, raw, request.model)
        data = parse_json(raw, provider=self.provider, model=request.model)
        return self._parse(data, request.model)

    async def _stream(
        self, request: LlmRequest, body: dict[str, Any], on_delta: DeltaCallback | None
    ) -> LlmResponse:
        model = request.model
        acc = _StreamedMessage()
        stream = self._events(
            "messages", body, model, finished=lambda: acc.stopped, end="message_stop"
        )
        async with aclosing(stream) as events:
            async for event in events:
                if event.get("type") == "error":
                    raise self._stream_error(event, model)
                text = acc.add(event)
                if text and on_delta is not None:
                    await on_delta(text)
                if acc.stopped:
                    break
        return self._parse(acc.message, model)

    def _stream_error(self, event: dict[str, Any], model: str) -> ProviderError:
        err = event.get("error")
        if not isinstance(err, dict):
            err = {}
        kind = str(err.get("type") or "error")
        message = " ".join(str(err.get("message") or kind).split())[:300]
        return ProviderError(
            redact(f"{message} (mid-stream)", self._api_key),
            provider=self.provider,
            model=model,
            status=_ERROR_STATUS.get(kind, 500),
        )

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
            usage=_usage(usage),
            model=str(data.get("model") or model),
            reasoning_content="".join(thinking) or None,
        )


class _StreamedMessage:
    """The message a stream describes, built up event by event in the shape of a
    non-streamed answer (`content` blocks, `stop_reason`, `usage`)."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {"content": [], "usage": {}}
        self.stopped = False
        self._blocks: dict[int, dict[str, Any]] = {}
        # A block's streamed fields in pieces, joined when it closes (adding each delta
        # to a string would copy the whole answer so far at every delta): "text",
        # "thinking", and "input" (a tool_use block's input as JSON text).
        self._parts: dict[int, dict[str, list[str]]] = {}

    def add(self, event: dict[str, Any]) -> str:
        """Fold one event in; returns its text delta ('' for any other event)."""
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            start = event["message"]
            self.message["model"] = start.get("model")
            self._usage(start.get("usage"))
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            block = dict(event["content_block"])
            index = _index(event, len(self._blocks))
            self._parts[index] = {"input": []} if block.get("type") == "tool_use" else {}
            self._blocks[index] = block
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            return self._delta(_index(event, len(self._blocks) - 1), event["delta"])
        elif kind == "content_block_stop":
            self._close(_index(event, len(self._blocks) - 1))
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
                self.message["stop_reason"] = delta["stop_reason"]
            self._usage(event.get("usage"))
        elif kind == "message_stop":
            for index in list(self._parts):
                self._close(index)
            self.message["content"] = [b for _, b in sorted(self._blocks.items())]
            self.stopped = True
        return ""  # ping and event types added later carry nothing we need

    def _delta(self, index: int, delta: dict[str, Any]) -> str:
        block, parts = self._blocks.get(index), self._parts.get(index)
        if block is None or parts is None:
            return ""
        kind = delta.get("type")
        if kind == "text_delta":
            text = str(delta.get("text") or "")
            parts.setdefault("text", [str(block.get("text") or "")]).append(text)
            return text
        if kind == "input_json_delta" and "input" in parts:
            parts["input"].append(str(delta.get("partial_json") or ""))
        elif kind == "thinking_delta":
            thinking = str(delta.get("thinking") or "")
            parts.setdefault("thinking", [str(block.get("thinking") or "")]).append(thinking)
        return ""

    def _close(self, index: int) -> None:
        parts = self._parts.pop(index, None)
        block = self._blocks.get(index)
        if parts is None or block is None:
            return
        for name in ("text", "thinking"):
            if name in parts:
                block[name] = "".join(parts[name])
        if "input" not in parts:
            return
        raw = "".join(parts["input"])
        try:
            # An empty input streams no JSON at all: the call takes no arguments.
            block["input"] = json.loads(raw) if raw.strip() else {}
        except ValueError:
            block["input"] = raw  # not an object: the parser reports it as the call's error

    def _usage(self, raw: Any) -> None:
        if isinstance(raw, dict):
            for key in ("input_tokens", "output_tokens", *_CACHE_KEYS):
                if isinstance(raw.get(key), int):
                    self.message["usage"][key] = raw[key]


#: Input tokens Anthropic counts apart from `input_tokens`: read from the cache, and
#: written to it (billed above the input price; counted as input here).
_CACHE_KEYS = ("cache_read_input_tokens", "cache_creation_input_tokens")


def _usage(usage: dict[str, Any]) -> Usage:
    def num(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and value > 0 else 0

    read, written = (num(k) for k in _CACHE_KEYS)
    return Usage(num("input_tokens") + read + written, num("output_tokens"), read)


def _index(event: dict[str, Any], default: int) -> int:
    index = event.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else default


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
            "source": {"type": "base64", "media_type": i.mime, "data": i.base64},
        }
        for i in m.images
    ]
    if m.content:
        out.append({"type": "text", "text": m.content})
    for c in m.tool_calls:
        out.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})
    return out

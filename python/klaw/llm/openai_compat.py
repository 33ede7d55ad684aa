"""OpenAI-compatible chat completions: GLM, DeepSeek, Qwen (DashScope), Ollama, OpenRouter.

Providers differ in small ways this client absorbs: tool-call `arguments` as a JSON string
or as an object, missing or repeated tool-call ids, `reasoning_content` (DeepSeek) or
`reasoning` (Ollama) next to the content, `finish_reason` "stop" although tools were
called, GLM's "sensitive" finish reason, content given as a list of parts.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from klaw.llm._http import (
    HttpClient,
    parse_json,
)
from klaw.llm.errors import MalformedResponse, ProviderError
from klaw.llm.types import (
    DeltaCallback,
    FinishReason,
    LlmRequest,
    LlmResponse,
    Message,
    ToolCall,
    ToolSchema,
    Usage,
)
from klaw.redaction import redact

__all__ = ["OpenAICompatClient", "build_payload", "encode_payload", "parse_tool_calls"]

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "eos": "stop",
    "length": "length",
    "max_tokens": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
    "sensitive": "content_filter",  # GLM
    "network_error": "error",  # GLM
}


class OpenAICompatClient(HttpClient):
    """POST {endpoint}/chat/completions, with SSE streaming when `request.stream` is set."""

    async def complete(
        self, request: LlmRequest, on_delta: DeltaCallback | None = None
    ) -> LlmResponse:
        body = encode_payload(request)
        async with self._guard(request.model):
            if request.stream:
                return await self._stream(request, body, on_delta)
            response, raw = await self._post("chat/completions", body)
        if response.status_code >= 400:
            raise self._error(response, raw, request.model)
        data = parse_json(raw, provider=self.provider, model=request.model)
        return self._parse(data, request.model)

    def _parse(self, data: dict[str, Any], model: str) -> LlmResponse:
        if "error" in data and not data.get("choices"):  # some providers answer errors with 200
            raise ProviderError(
                redact(str(data["error"])[:300], self._api_key),
                provider=self.provider,
                model=model,
            )
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise MalformedResponse("answer has no choices", provider=self.provider, model=model)
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            raise MalformedResponse("answer has no message", provider=self.provider, model=model)
        calls = parse_tool_calls(message.get("tool_calls"))
        return LlmResponse(
            content=_text(message.get("content")),
            tool_calls=calls,
            finish_reason=_finish(choice.get("finish_reason"), bool(calls)),
            usage=_usage(data.get("usage")),
            model=str(data.get("model") or model),
            reasoning_content=_text(message.get("reasoning_content") or message.get("reasoning")),
        )

    async def _stream(
        self, request: LlmRequest, body: bytes, on_delta: DeltaCallback | None
    ) -> LlmResponse:
        acc = _StreamAccumulator()
        stream = self._events(
            "chat/completions",
            body,
            request.model,
            finished=lambda: acc.finish_reason is not None,
            end="a finish_reason or [DONE]",
        )
        async with aclosing(stream) as events:
            async for chunk in events:
                text = acc.add(chunk)
                if text and on_delta is not None:
                    await on_delta(text)
        return acc.response(request.model)


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: str = ""
    object_arguments: dict[str, Any] | None = None


@dataclass
class _StreamAccumulator:
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str = ""

    def add(self, chunk: dict[str, Any]) -> str:
        """Fold one chunk in; return its text delta."""
        self.model = str(chunk.get("model") or self.model)
        if isinstance(chunk.get("usage"), dict):
            self.usage = _usage(chunk["usage"])
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return ""  # the usage-only last chunk of stream_options.include_usage
        choice = choices[0]
        self.finish_reason = choice.get("finish_reason") or self.finish_reason
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            return ""
        reasoning = _text(delta.get("reasoning_content") or delta.get("reasoning"))
        if reasoning:
            self.reasoning.append(reasoning)
        for raw in delta.get("tool_calls") or []:
            if isinstance(raw, dict):
                self._add_call(raw)
        text = _text(delta.get("content")) or ""
        if text:
            self.content.append(text)
        return text

    def _add_call(self, raw: dict[str, Any]) -> None:
        index = raw.get("index")
        if not isinstance(index, int):
            # No index (some compatible servers): a new id starts a new call, else the
            # fragment continues the last one.
            last = max(self.calls, default=-1)
            new_id = raw.get("id")
            starts = last < 0 or (new_id and self.calls[last].id not in ("", new_id))
            index = last + 1 if starts else last
        part = self.calls.setdefault(index, _PartialCall())
        if raw.get("id") and not part.id:
            part.id = str(raw["id"])
        function = raw.get("function") or {}
        if isinstance(function, dict):
            if function.get("name") and not part.name:
                part.name = str(function["name"])
            args = function.get("arguments")
            if isinstance(args, dict):
                part.object_arguments = args
            elif isinstance(args, str):
                part.arguments += args

    def response(self, model: str) -> LlmResponse:
        raw_calls = [
            {
                "id": c.id or None,
                "function": {
                    "name": c.name,
                    "arguments": c.object_arguments
                    if c.object_arguments is not None
                    else c.arguments,
                },
            }
            for _, c in sorted(self.calls.items())
        ]
        calls = parse_tool_calls(raw_calls)
        return LlmResponse(
            content="".join(self.content) or None,
            tool_calls=calls,
            finish_reason=_finish(self.finish_reason, bool(calls)),
            usage=self.usage,
            model=self.model or model,
            reasoning_content="".join(self.reasoning) or None,
        )


# --------------------------------------------------------------------------- payload


def build_payload(request: LlmRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [_wire_message(m) for m in request.messages],
    }
    if request.tools:
        body["tools"] = [_wire_tool(t) for t in request.tools]
    body.update(_options(request))
    return body


def encode_payload(request: LlmRequest) -> bytes:
    """`build_payload(request)` as JSON (compact, UTF-8, as httpx encodes it), each
    message and tool schema encoded once: a chat's window holds the same message
    objects turn after turn (`klaw.engine.context` keeps them), the tools the same
    schemas, and encoding them all was the biggest part of a request's own CPU."""
    parts = ['{"model":', _dumps(request.model), ',"messages":[']
    parts.append(",".join(_message_json(m) for m in request.messages))
    parts.append("]")
    if request.tools:
        parts.append(',"tools":[')
        parts.append(",".join(_tool_json(t) for t in request.tools))
        parts.append("]")
    for key, value in _options(request).items():
        parts += [",", _dumps(key), ":", _dumps(value)]
    parts.append("}")
    return "".join(parts).encode("utf-8")


def _options(request: LlmRequest) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if request.max_tokens is not None:
        out["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        out["temperature"] = request.temperature
    if request.stream:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


# Encoded JSON by the object it was encoded from (held, so its id is not reused):
# messages by identity (they are never changed, only replaced), tool schemas by their
# name, description and parameters dict (one dict per tool for the engine's life).
_MESSAGE_JSON: dict[int, tuple[Message, str]] = {}
_TOOL_JSON: dict[tuple[str, str, int], tuple[dict[str, Any], str]] = {}
_MAX_KEPT = 1024
_MAX_KEPT_CHARS = 4 << 20
_kept_chars = 0


def _keep(size: int) -> None:
    """Room for `size` more characters of kept JSON (all dropped when full)."""
    global _kept_chars
    if len(_MESSAGE_JSON) >= _MAX_KEPT or _kept_chars + size > _MAX_KEPT_CHARS:
        _MESSAGE_JSON.clear()
        _kept_chars = 0
    _kept_chars += size


def _message_json(m: Message) -> str:
    hit = _MESSAGE_JSON.get(id(m))
    if hit is not None and hit[0] is m:
        return hit[1]
    text = _dumps(_wire_message(m))
    if not m.images:  # images are big and seldom the same object twice
        _keep(len(text))
        _MESSAGE_JSON[id(m)] = (m, text)
    return text


def _tool_json(t: ToolSchema) -> str:
    key = (t.name, t.description, id(t.parameters))
    hit = _TOOL_JSON.get(key)
    if hit is not None and hit[0] is t.parameters:
        return hit[1]
    text = _dumps(_wire_tool(t))
    if len(_TOOL_JSON) >= 256:
        _TOOL_JSON.clear()
    _TOOL_JSON[key] = (t.parameters, text)
    return text


def _wire_tool(t: ToolSchema) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
    }


def _wire_message(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content or ""}
    out: dict[str, Any] = {"role": m.role, "content": m.content or ""}
    if m.images:
        # Content parts only when there is an image: some compatible servers take
        # nothing but a string.
        parts: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": f"data:{i.mime};base64,{i.base64}"}}
            for i in m.images
        ]
        if m.content:
            parts.append({"type": "text", "text": m.content})
        out["content"] = parts
    if m.role == "assistant":
        if m.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.name,
                        # A malformed call is answered by a tool error; resend a valid
                        # object so strict providers accept the history.
                        "arguments": json.dumps(c.arguments, ensure_ascii=False),
                    },
                }
                for c in m.tool_calls
            ]
        if m.reasoning_content:
            out["reasoning_content"] = m.reasoning_content
    return out


# --------------------------------------------------------------------------- response


def parse_tool_calls(raw: Any) -> list[ToolCall]:
    """Normalise provider tool calls: ids made present and unique, arguments a dict.

    A missing id is derived from the call's position, name and arguments so that the same
    answer parsed twice gets the same ids; a repeated id gets a `-2`, `-3`... suffix.
    """
    if not isinstance(raw, list):
        return []
    calls: list[ToolCall] = []
    seen: set[str] = set()
    for position, item in enumerate(raw):
        if not isinstance(item, dict):
            continue
        function = item.get("function")
        function = function if isinstance(function, dict) else {}
        name = str(function.get("name") or "")
        arguments, error, raw_text = _arguments(function.get("arguments"))
        if not name:
            error = error or "the tool call has no function name"
        unique = unique_call_id(item.get("id"), position, name, raw_text, seen)
        calls.append(ToolCall(unique, name, arguments, error, raw_text))
    return calls


def unique_call_id(
    given: object, position: int, name: str, raw_text: str | None, seen: set[str]
) -> str:
    """`given`, or an id derived from the call's position, name and arguments when there
    is none (the same answer parsed twice gets the same ids), with a `-2`, `-3`... suffix
    when it was `seen` already; added to `seen`."""
    if isinstance(given, str) and given:
        call_id = given
    else:
        digest = hashlib.sha1(
            f"{position}\0{name}\0{raw_text}".encode(), usedforsecurity=False
        ).hexdigest()
        call_id = f"call_{position}_{digest[:12]}"
    unique, n = call_id, 1
    while unique in seen:
        n += 1
        unique = f"{call_id}-{n}"
    seen.add(unique)
    return unique


def _arguments(raw: Any) -> tuple[dict[str, Any], str | None, str | None]:
    """(arguments, error, raw text) from a JSON string, an object or nothing."""
    if raw is None:
        return {}, None, None
    if isinstance(raw, dict):
        return raw, None, json.dumps(raw, ensure_ascii=False)
    if not isinstance(raw, str):
        return {}, f"arguments must be a JSON object, got {type(raw).__name__}", str(raw)
    if not raw.strip():
        return {}, None, raw
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"arguments are not valid JSON ({exc.msg} at char {exc.pos})", raw
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}", raw
    return value, None, raw


def _text(value: Any) -> str | None:
    """Message content as text: a string, or a list of parts of which the text ones count."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, list):
        parts = [p.get("text", "") if isinstance(p, dict) else p for p in value if p is not None]
        return "".join(str(p) for p in parts) or None
    return None


def _finish(raw: Any, has_calls: bool) -> FinishReason:
    if has_calls and raw in (None, "stop", "eos"):
        return "tool_calls"  # Ollama and some Qwen versions say "stop" after tool calls
    if raw is None:
        return "stop"
    return _FINISH.get(str(raw), "other")


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()

    def num(*keys: str) -> int:
        for key in keys:
            value = raw.get(key)
            if isinstance(value, int) and value >= 0:  # below zero: not a count (no credit)
                return value
        return 0

    # Cache hits: OpenAI, Qwen and Kimi in prompt_tokens_details, DeepSeek beside them.
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if not isinstance(cached, int):
        cached = num("prompt_cache_hit_tokens", "cached_tokens")
    return Usage(
        num("prompt_tokens", "input_tokens"),
        num("completion_tokens", "output_tokens"),
        max(cached, 0),
    )

"""Gemini's native API: POST {endpoint}/models/{model}:generateContent, and
`:streamGenerateContent?alt=sse` when `request.stream` is set.

Why the native API and not Google's OpenAI-compatible endpoint: docs/decisions.md
("Gemini over its native API"). What differs from the OpenAI shape, handled here:

- the system prompt is `systemInstruction`; roles are `user` and `model`; tool calls
  and results are `functionCall` / `functionResponse` parts, every result of one step in
  one `user` content (the API counts them against the calls);
- tools are `functionDeclarations` whose `parameters` take an OpenAPI subset of JSON
  Schema: keywords outside it (`additionalProperties`, `$schema`, `const`...) are
  dropped, `"type": [..., "null"]` becomes `nullable`, an object without properties
  sends no `parameters` at all (the API refuses an empty one);
- `thoughtSignature`: Gemini 3 answers 400 unless the first `functionCall` of every step
  of the current turn comes back with the signature it was sent with. Signatures ride
  on `ToolCall.signature` through the turn's tool rounds; calls that have none (history
  read back from klaw.db, calls made by another model before a fallback) get Google's
  documented placeholder `skip_thought_signature_validator`;
- usage is `usageMetadata` (thinking tokens count as output); the finish reason
  MAX_TOKENS is "length"; SAFETY, RECITATION, PROHIBITED_CONTENT... with nothing
  produced, and `promptFeedback.blockReason`, raise `ContentBlocked`;
- a 429 carries its wait as `google.rpc.RetryInfo.retryDelay` ("43s") in the error's
  details, not as a Retry-After header: it becomes `ProviderError.retry_after`.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any
from urllib.parse import quote

import httpx

from klaw.llm._http import (
    HttpClient,
    http_error,
    parse_json,
)
from klaw.llm.errors import ContentBlocked, MalformedResponse, ProviderError
from klaw.llm.openai_compat import unique_call_id
from klaw.llm.transport import Answer
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

__all__ = ["API_KEY_HEADER", "SKIP_SIGNATURE", "GeminiClient", "build_payload", "retry_delay"]

API_KEY_HEADER = "x-goog-api-key"
# Google's placeholder for function calls the model did not make itself in this
# conversation (ai.google.dev/gemini-api/docs/thought-signatures, FAQ).
SKIP_SIGNATURE = "skip_thought_signature_validator"

_FINISH: dict[str, FinishReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "FINISH_REASON_UNSPECIFIED": "other",
    "OTHER": "other",
}
# The answer was withheld by a filter.
_BLOCKED = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "LANGUAGE",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)
# The model's own output could not be used (a call it could not write, a call to a tool
# it was not given...): an error, never an empty success.
_BROKEN = frozenset(
    {
        "MALFORMED_FUNCTION_CALL",
        "UNEXPECTED_TOOL_CALL",
        "TOO_MANY_TOOL_CALLS",
        "MALFORMED_RESPONSE",
        "MISSING_THOUGHT_SIGNATURE",
    }
)
# The OpenAPI subset `FunctionDeclaration.parameters` accepts (Schema in the API reference).
_SCHEMA_KEYS = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "maxItems",
        "minItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "anyOf",
        "propertyOrdering",
        "default",
        "items",
        "minimum",
        "maximum",
    }
)


class GeminiClient(HttpClient):
    """One Gemini endpoint (`https://generativelanguage.googleapis.com/v1beta`)."""

    @staticmethod
    def _headers(api_key: str | None) -> dict[str, str]:
        return {API_KEY_HEADER: api_key} if api_key else {}

    async def complete(
        self, request: LlmRequest, on_delta: DeltaCallback | None = None
    ) -> LlmResponse:
        body = build_payload(request)
        async with self._guard(request.model):
            if request.stream:
                return await self._stream(request, body, on_delta)
            response, raw = await self._post(_path(request.model, "generateContent"), body)
        if response.status_code >= 400:
            raise self._error(response, raw, request.model)
        data = parse_json(raw, provider=self.provider, model=request.model)
        acc = _Accumulator(self.provider, request.model, self._api_key)
        acc.add(data)
        return acc.response()

    async def _stream(
        self, request: LlmRequest, body: dict[str, Any], on_delta: DeltaCallback | None
    ) -> LlmResponse:
        acc = _Accumulator(self.provider, request.model, self._api_key)
        path = _path(request.model, "streamGenerateContent")
        stream = self._events(
            path,
            body,
            request.model,
            finished=lambda: acc.finish is not None,
            end="a finishReason",
            params={"alt": "sse"},
        )
        async with aclosing(stream) as events:
            async for chunk in events:
                text = acc.add(chunk)
                if text and on_delta is not None:
                    await on_delta(text)
        return acc.response()

    def _error(self, response: httpx.Response | Answer, raw: bytes, model: str) -> ProviderError:
        exc = http_error(response, raw, provider=self.provider, model=model, secret=self._api_key)
        if exc.retry_after is None:
            exc.retry_after = retry_delay(raw)
        return exc


def _path(model: str, method: str) -> str:
    """`models/{model}:{method}`; a full resource name (`tunedModels/x`) is kept as it is."""
    name = model if model.startswith(("models/", "tunedModels/")) else f"models/{model}"
    return f"{quote(name, safe='/-._~')}:{method}"


def retry_delay(body: bytes | dict[str, Any]) -> float | None:
    """Seconds from the `google.rpc.RetryInfo` detail of an error body, if any."""
    data: Any = body
    if isinstance(body, bytes):
        try:
            data = json.loads(body)
        except ValueError:
            return None
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    error = data.get("error") if isinstance(data, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else []:
        if not isinstance(detail, dict) or not str(detail.get("@type", "")).endswith(
            "google.rpc.RetryInfo"
        ):
            continue
        delay = detail.get("retryDelay")
        if isinstance(delay, str) and delay.strip().endswith("s"):  # "43s", "0.5s"
            try:
                return max(0.0, float(delay.strip()[:-1]))
            except ValueError:
                return None
        if isinstance(delay, dict):  # the proto form {"seconds": ..., "nanos": ...}
            try:
                return float(delay.get("seconds") or 0) + float(delay.get("nanos") or 0) / 1e9
            except (TypeError, ValueError):
                return None
    return None


# --------------------------------------------------------------------------- response


class _Accumulator:
    """Folds GenerateContentResponse objects (one, or every chunk of a stream) into an
    LlmResponse. In a stream each chunk carries new text and whole function calls; usage
    and the finish reason come with the last chunks."""

    def __init__(self, provider: str, model: str, secret: str | None) -> None:
        self.provider = provider
        self.model = model
        self.secret = secret
        self.text: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[ToolCall] = []
        self._ids: set[str] = set()  # the calls' ids, each once
        self.finish: str | None = None
        self.finish_message = ""
        self.blocked_category = ""
        self.usage = Usage()
        self.model_version = ""

    def add(self, data: dict[str, Any]) -> str:
        """Fold one response in; return its new answer text."""
        if isinstance(data.get("error"), dict):  # an error inside a 200 stream
            error = data["error"]
            code = error.get("code")
            raise ProviderError(
                redact(" ".join(str(error.get("message") or error).split())[:300], self.secret),
                provider=self.provider,
                model=self.model,
                status=code if isinstance(code, int) else None,
                retry_after=retry_delay(data),
            )
        self.model_version = str(data.get("modelVersion") or self.model_version)
        if isinstance(data.get("usageMetadata"), dict):
            self.usage = _usage(data["usageMetadata"])
        feedback = data.get("promptFeedback")
        if isinstance(feedback, dict) and feedback.get("blockReason"):
            reason = str(feedback["blockReason"])
            category = _blocked_category(feedback.get("safetyRatings"))
            raise ContentBlocked(
                f"Gemini refused the prompt (blockReason {reason}{category}); nothing was "
                "answered. Rephrase the message, or let another model answer it",
                provider=self.provider,
                model=self.model,
                reason=reason,
            )
        candidates = data.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            return ""
        candidate = candidates[0] if isinstance(candidates[0], dict) else {}
        if candidate.get("finishReason"):
            self.finish = str(candidate["finishReason"])
            self.finish_message = str(candidate.get("finishMessage") or "")
            self.blocked_category = _blocked_category(candidate.get("safetyRatings"))
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        new: list[str] = []
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict):
                new.append(self._part(part))
        return "".join(new)

    def _part(self, part: dict[str, Any]) -> str:
        signature = part.get("thoughtSignature")
        signature = signature if isinstance(signature, str) and signature else None
        call = part.get("functionCall")
        if isinstance(call, dict):
            self._call(call, signature)
            return ""
        text = part.get("text")
        if not isinstance(text, str) or not text:
            return ""  # an empty text part that only carries a signature
        if part.get("thought") is True:
            self.thoughts.append(text)
            return ""
        self.text.append(text)
        return text

    def _call(self, raw: dict[str, Any], signature: str | None) -> None:
        name = raw.get("name")
        args = raw.get("args", {})
        if not name and self.calls:
            # A streamed call whose arguments came apart from its name: they belong to the
            # call before (seen from Gemini's stream by other clients).
            last = self.calls[-1]
            if isinstance(args, dict):
                last.arguments = {**last.arguments, **args}
            last.signature = last.signature or signature
            return
        position = len(self.calls)
        error = None
        if not isinstance(args, dict):
            error = f"arguments must be a JSON object, got {type(args).__name__}"
        if not name:
            error = error or "the tool call has no function name"
        raw_text = json.dumps(args, ensure_ascii=False)
        # Gemini 2.x sends no ids: derived as the OpenAI-compatible client does.
        unique = unique_call_id(raw.get("id"), position, str(name), raw_text, self._ids)
        self.calls.append(
            ToolCall(
                unique,
                str(name or ""),
                args if isinstance(args, dict) else {},
                error,
                raw_text,
                signature=signature,
            )
        )

    def response(self) -> LlmResponse:
        content = "".join(self.text) or None
        produced = bool(content or self.calls)
        finish = self.finish or "STOP"
        if finish in _BLOCKED:
            if not produced:
                raise ContentBlocked(
                    f"Gemini withheld the answer (finishReason {finish}"
                    f"{self.blocked_category}); nothing was returned. Rephrase the "
                    "message, or let another model answer it",
                    provider=self.provider,
                    model=self.model,
                    reason=finish,
                )
            reason: FinishReason = "content_filter"
        elif finish in _BROKEN:
            if not produced:
                detail = f": {self.finish_message[:200]}" if self.finish_message else ""
                raise MalformedResponse(
                    f"Gemini could not finish the answer (finishReason {finish}){detail}",
                    provider=self.provider,
                    model=self.model,
                )
            reason = "error"
        elif self.calls and finish == "STOP":
            reason = "tool_calls"  # Gemini says STOP after function calls
        else:
            reason = _FINISH.get(finish, "other")
        return LlmResponse(
            content=content,
            tool_calls=list(self.calls),
            finish_reason=reason,
            usage=self.usage,
            model=self.model_version or self.model,
            reasoning_content="".join(self.thoughts) or None,
        )


def _blocked_category(ratings: Any) -> str:
    """`, HARM_CATEGORY_X` for the rating that blocked, or ""."""
    for rating in ratings if isinstance(ratings, list) else []:
        if isinstance(rating, dict) and rating.get("blocked") is True:
            return f", {rating.get('category', 'unknown category')}"
    return ""


def _usage(raw: dict[str, Any]) -> Usage:
    def num(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) else 0

    return Usage(
        num("promptTokenCount") + num("toolUsePromptTokenCount"),
        num("candidatesTokenCount") + num("thoughtsTokenCount"),
        num("cachedContentTokenCount"),  # part of promptTokenCount
    )


# --------------------------------------------------------------------------- payload


def build_payload(request: LlmRequest) -> dict[str, Any]:
    system = "\n\n".join(m.content for m in request.messages if m.role == "system" and m.content)
    names = {c.id: c.name for m in request.messages for c in m.tool_calls}
    contents: list[dict[str, Any]] = []
    for m in request.messages:
        if m.role == "system":
            continue
        role = "model" if m.role == "assistant" else "user"
        parts = _parts(m, names)
        if not parts:
            continue
        last = contents[-1] if contents else None
        # Consecutive messages of one role share a content, except that function
        # responses never share one with anything else.
        if (
            last is not None
            and last["role"] == role
            and _is_responses(last["parts"]) == (m.role == "tool")
        ):
            last["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if request.tools:
        body["tools"] = [{"functionDeclarations": [_declaration(t) for t in request.tools]}]
    config: dict[str, Any] = {}
    if request.max_tokens is not None:
        config["maxOutputTokens"] = request.max_tokens
    if request.temperature is not None:
        config["temperature"] = request.temperature
    if config:
        body["generationConfig"] = config
    return body


def _is_responses(parts: list[dict[str, Any]]) -> bool:
    return bool(parts) and all("functionResponse" in p for p in parts)


def _parts(m: Message, names: dict[str, str]) -> list[dict[str, Any]]:
    if m.role == "tool":
        call_id = m.tool_call_id or ""
        key = "error" if m.is_error else "result"
        response: dict[str, Any] = {
            "name": names.get(call_id) or "tool",
            "response": {key: m.content or ""},
        }
        if call_id:
            response["id"] = call_id
        return [{"functionResponse": response}]
    parts: list[dict[str, Any]] = [
        # Images before the text, as Google advises for image prompts.
        {"inlineData": {"mimeType": image.mime, "data": image.base64}}
        for image in m.images
    ]
    if m.content:
        parts.append({"text": m.content})
    for index, call in enumerate(m.tool_calls):
        function: dict[str, Any] = {"id": call.id, "name": call.name, "args": call.arguments}
        part: dict[str, Any] = {"functionCall": function}
        signature = call.signature
        if index == 0 and signature is None:
            signature = SKIP_SIGNATURE
        if signature is not None:
            part["thoughtSignature"] = signature
        parts.append(part)
    return parts


def _declaration(tool: ToolSchema) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name, "description": tool.description}
    params = _schema(tool.parameters)
    if params.get("type") != "object" or params.get("properties"):
        out["parameters"] = params
    return out


def _schema(schema: Any) -> dict[str, Any]:
    """A JSON Schema narrowed to what Gemini's `Schema` accepts (see the module docstring)."""
    if not isinstance(schema, dict):
        return {}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key not in _SCHEMA_KEYS:
            if key == "const":
                out["enum"] = [value]
            continue
        if key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            out["type"] = types[0] if types else "string"
            if "null" in value:
                out["nullable"] = True
        elif key == "properties" and isinstance(value, dict):
            props = {name: _schema(sub) for name, sub in value.items()}
            if props:
                out["properties"] = props
        elif key == "items":
            out["items"] = _schema(value)
        elif key == "anyOf" and isinstance(value, list):
            out["anyOf"] = [_schema(v) for v in value]
        else:
            out[key] = value
    if "required" in out and "properties" in out:
        out["required"] = [r for r in out["required"] if r in out["properties"]]
    elif "required" in out:
        del out["required"]
    return out

"""Helpers shared by the HTTP clients: error mapping, Retry-After, secret redaction, SSE."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx

from klaw.llm.errors import (
    MalformedResponse,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
)

MAX_MESSAGE = 300  # provider explanations are shown in logs and to the owner: keep them short


def make_client(
    endpoint: str,
    headers: dict[str, str],
    timeout_s: float,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """One HTTP client per provider: base URL with a trailing slash so relative
    paths (`chat/completions`, `messages`) append to the endpoint's path."""
    return httpx.AsyncClient(
        base_url=endpoint.rstrip("/") + "/",
        headers=headers,
        timeout=httpx.Timeout(timeout_s),
        transport=transport,
    )


class HttpClient:
    """What every provider client shares: one httpx client for its endpoint, the key
    kept out of errors, transport failures as ProviderErrors, and a timeout on the
    whole request (httpx times each read, not the whole)."""

    def __init__(
        self,
        provider: str,
        endpoint: str,
        headers: dict[str, str],
        api_key: str | None,
        timeout_s: float,
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        self.provider = provider
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._http = make_client(endpoint, headers, timeout_s, transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    def _guard(self, model: str) -> AbstractAsyncContextManager[None]:
        return translate_transport(
            provider=self.provider, model=model, timeout_s=self._timeout_s, secret=self._api_key
        )

    async def _post(self, path: str, body: dict[str, Any]) -> tuple[httpx.Response, bytes]:
        """POST `body` as JSON; the response and its whole body (call inside `_guard`)."""
        async with asyncio.timeout(self._timeout_s):
            response = await self._http.post(path, json=body)
            return response, await response.aread()

    def _error(self, response: httpx.Response, raw: bytes, model: str) -> ProviderError:
        return http_error(response, raw, provider=self.provider, model=model, secret=self._api_key)

    async def _events(
        self, path: str, body: dict[str, Any], model: str, params: dict[str, str] | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """POST `body` and yield the JSON objects of the SSE answer (call inside
        `_guard`, and close the iterator: `contextlib.aclosing`). An HTTP error status is
        the usual `ProviderError`; an event that is not JSON is a `MalformedResponse`;
        OpenAI's `[DONE]` ends the stream; JSON that is not an object is skipped."""
        async with self._http.stream("POST", path, params=params, json=body) as response:
            if response.status_code >= 400:
                raise self._error(response, await response.aread(), model)
            async for data in sse_events(response):
                if data == "[DONE]":
                    return
                try:
                    event = json.loads(data)
                except ValueError as exc:
                    raise MalformedResponse(
                        f"stream event is not JSON: {data[:80]!r}",
                        provider=self.provider,
                        model=model,
                    ) from exc
                if isinstance(event, dict):
                    yield event


def redact(text: str, secret: str | None) -> str:
    """`text` with `secret` blanked out (providers sometimes echo the key they rejected)."""
    if secret:
        text = text.replace(secret, "***")
    return text


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def provider_message(body: bytes, fallback: str) -> str:
    """The human explanation inside an error body, whatever shape the provider uses.

    OpenAI/DeepSeek/DashScope: {"error": {"message": ...}}; Ollama: {"error": "..."};
    GLM and DashScope native: {"code": ..., "message"/"msg": ...}; Anthropic:
    {"type": "error", "error": {"type": ..., "message": ...}}; Google (Gemini, also its
    OpenAI-compatible endpoint) sometimes wraps the error object in a one-element list.
    """
    text = body.decode("utf-8", "replace").strip()
    try:
        data: Any = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    message: Any = None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            message = err.get("message") or err.get("msg") or err.get("type")
        elif isinstance(err, str):
            message = err
        message = message or data.get("message") or data.get("msg")
    if not isinstance(message, str) or not message.strip():
        message = text or fallback
    out = " ".join(str(message).split())
    return out[:MAX_MESSAGE] + ("…" if len(out) > MAX_MESSAGE else "")


def http_error(
    response: httpx.Response, body: bytes, *, provider: str, model: str, secret: str | None
) -> ProviderError:
    status = response.status_code
    message = redact(provider_message(body, response.reason_phrase or "error"), secret)
    return ProviderError(
        message,
        provider=provider,
        model=model,
        status=status,
        retry_after=parse_retry_after(response.headers.get("retry-after")),
    )


@asynccontextmanager
async def translate_transport(
    *, provider: str, model: str, timeout_s: float, secret: str | None
) -> AsyncIterator[None]:
    """Turn httpx/asyncio transport failures into ProviderError subclasses."""
    try:
        yield
    except (httpx.TimeoutException, TimeoutError) as exc:
        raise ProviderTimeout(
            f"no answer within {timeout_s:g} s", provider=provider, model=model
        ) from exc
    except httpx.TransportError as exc:
        # str(exc) names the host, never headers: still redact in case a proxy echoes one.
        raise ProviderConnectionError(
            redact(f"cannot reach the endpoint: {exc or type(exc).__name__}", secret),
            provider=provider,
            model=model,
        ) from exc


def parse_json(body: bytes, *, provider: str, model: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise MalformedResponse(
            f"answer is not JSON: {body[:80]!r}", provider=provider, model=model
        ) from exc
    if not isinstance(data, dict):
        raise MalformedResponse("answer is not a JSON object", provider=provider, model=model)
    return data


async def sse_events(response: httpx.Response) -> AsyncIterator[str]:
    """The `data:` payloads of a server-sent event stream (multi-line data joined)."""
    lines: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if lines:
                yield "\n".join(lines)
                lines = []
        elif line.startswith("data:"):
            lines.append(line[5:].removeprefix(" "))
        # comments (":keep-alive"), event:, id:, retry: carry nothing we need
    if lines:
        yield "\n".join(lines)

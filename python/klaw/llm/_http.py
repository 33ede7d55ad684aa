"""Helpers shared by the HTTP clients: error mapping, Retry-After, secret redaction, SSE."""

from __future__ import annotations

import asyncio
import email.utils
import json
import re
import time
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, aclosing, asynccontextmanager
from typing import Any, Self

import httpx

from klaw.llm.errors import (
    MalformedResponse,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    TruncatedStream,
)
from klaw.llm.transport import Answer, Http11Transport, request_head
from klaw.redaction import redact

MAX_MESSAGE = 300  # provider explanations are shown in logs and to the owner: keep them short
#: The longest SSE line (and event) read: a chunk of an answer is a few KiB, a whole
#: Gemini function call at most a few hundred; a longer line is refused, not held.
MAX_SSE_LINE = 8 * 2**20
_EOL = re.compile(rb"\r\n|\r|\n")


def make_client(
    endpoint: str,
    headers: dict[str, str],
    timeout_s: float,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """One HTTP client per provider: base URL with a trailing slash so relative
    paths (`chat/completions`, `messages`) append to the endpoint's path. Requests go
    through `Http11Transport` (a tenth of httpx's own transport's CPU) unless the
    environment names a proxy, which httpx's transport speaks to."""
    return httpx.AsyncClient(
        base_url=endpoint.rstrip("/") + "/",
        headers=headers,
        timeout=httpx.Timeout(timeout_s),
        transport=transport or fast_transport(),
    )


def fast_transport() -> Http11Transport | None:
    """`Http11Transport`, unless the environment names a proxy: httpx's own transport
    (None) speaks to proxies."""
    return None if urllib.request.getproxies() else Http11Transport()


def _json_request(body: dict[str, Any] | bytes) -> dict[str, Any]:
    """httpx arguments sending `body` as JSON: a dict encoded by httpx, bytes as they are."""
    if isinstance(body, bytes):
        return {"content": body, "headers": {"Content-Type": "application/json"}}
    return {"json": body}


class HttpClient:
    """What every provider client shares: one httpx client for its endpoint, the key
    kept out of errors, transport failures as ProviderErrors, and a timeout on the
    whole request (httpx times each read, not the whole), streamed or not.

    A subclass gives its authentication headers (`_headers`) and speaks its protocol."""

    def __init__(
        self,
        provider: str,
        endpoint: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 60.0,
        stream_idle_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.provider = provider
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._idle_s = timeout_s if stream_idle_s is None else min(stream_idle_s, timeout_s)
        self._fast = fast_transport() if transport is None else None
        self._http = make_client(
            endpoint, self._headers(api_key), timeout_s, transport or self._fast
        )
        # path -> (URL, request head without Content-Length) of its POST
        self._posts: dict[str, tuple[httpx.URL, bytes]] = {}

    @staticmethod
    def _headers(api_key: str | None) -> dict[str, str]:
        """The headers every request carries (the key, in the provider's way)."""
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _guard(self, model: str) -> AbstractAsyncContextManager[None]:
        return translate_transport(
            provider=self.provider, model=model, timeout_s=self._timeout_s, secret=self._api_key
        )

    async def _post(
        self, path: str, body: dict[str, Any] | bytes
    ) -> tuple[httpx.Response | Answer, bytes]:
        """POST `body` as JSON (bytes: already encoded); the response and its whole body
        (call inside `_guard`)."""
        async with asyncio.timeout(self._timeout_s):
            if self._fast is None or not isinstance(body, bytes):
                response = await self._http.post(path, **_json_request(body))
                return response, await response.aread()
            # Straight to the transport: the request the client would build (its head
            # made once per path), without httpx's request and response objects, URL
            # parsing, cookie jar and hooks: most of a call's CPU once the transport was
            # cheap. The client follows no redirects and providers set no cookies.
            url, head = self._head(path)
            answer = await self._fast.post(url, head, body)
            return answer, answer.body

    def _head(self, path: str) -> tuple[httpx.URL, bytes]:
        made = self._posts.get(path)
        if made is None:
            proto = self._http.build_request("POST", path, **_json_request(b""))
            # identity: the whole answer is read as it comes (`Http11Transport.post`
            # still undoes gzip or deflate if a server applies one anyway).
            head = request_head(proto, skip=frozenset({b"content-length", b"accept-encoding"}))
            made = proto.url, head + b"Accept-Encoding: identity\r\n"
            self._posts[path] = made
        return made

    def _error(self, response: httpx.Response | Answer, raw: bytes, model: str) -> ProviderError:
        return http_error(response, raw, provider=self.provider, model=model, secret=self._api_key)

    async def _events(
        self,
        path: str,
        body: dict[str, Any] | bytes,
        model: str,
        *,
        finished: Callable[[], bool],
        end: str,
        params: dict[str, str] | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """POST `body` and yield the JSON objects of the SSE answer (call inside
        `_guard`, and close the iterator: `contextlib.aclosing`).

        An HTTP error status is the usual `ProviderError`; an event that is not JSON, or
        a line over `MAX_SSE_LINE`, a `MalformedResponse`; JSON that is not an object is
        skipped. OpenAI's `[DONE]` ends the stream; a stream that ends otherwise while
        `finished()` is false (the consumer has not seen `end`, the protocol's end
        marker) is a `TruncatedStream`, never a shorter answer. The whole stream must
        end within `requestTimeoutMs`, and each event come within `streamIdleTimeoutMs`
        of the one before (`: keep-alive` comments do not count): else `ProviderTimeout`.
        Time the consumer spends between events is not the provider's silence."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        async with AsyncExitStack() as stack:
            async with self._deadline(deadline, deadline, model):
                response = await stack.enter_async_context(
                    self._http.stream("POST", path, params=params, **_json_request(body))
                )
                if response.status_code >= 400:
                    raise self._error(response, await response.aread(), model)
            events = await stack.enter_async_context(aclosing(sse_events(response.aiter_bytes())))
            while True:
                try:
                    async with self._deadline(deadline, loop.time() + self._idle_s, model):
                        data = await anext(events, None)
                except LineTooLong as exc:
                    what = f"a stream line over {MAX_SSE_LINE // 2**20} MiB; not read further"
                    raise MalformedResponse(what, provider=self.provider, model=model) from exc
                if data is None or data == "[DONE]":
                    break
                try:
                    event = json.loads(data)
                except ValueError as exc:
                    what = f"stream event is not JSON: {data[:80]!r}"
                    raise MalformedResponse(what, provider=self.provider, model=model) from exc
                if isinstance(event, dict):
                    yield event
            if data is None and not finished():
                raise TruncatedStream(
                    f"the stream ended before {end}", provider=self.provider, model=model
                )

    @asynccontextmanager
    async def _deadline(self, whole: float, idle: float, model: str) -> AsyncIterator[None]:
        """Wait until the earlier of two loop times; past it, the `ProviderTimeout` that
        names which one ran out."""
        try:
            async with asyncio.timeout_at(min(whole, idle)):
                yield
        except TimeoutError as exc:
            what = (
                f"the stream sent nothing for {self._idle_s:g} s (keep-alives do not count)"
                if idle < whole
                else f"no complete answer within {self._timeout_s:g} s"
            )
            raise ProviderTimeout(what, provider=self.provider, model=model) from exc


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
    response: httpx.Response | Answer, body: bytes, *, provider: str, model: str, secret: str | None
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


class LineTooLong(Exception):
    """An SSE line longer than `MAX_SSE_LINE`: the reader stops instead of holding it."""


async def sse_lines(
    chunks: AsyncIterator[bytes], max_line: int = MAX_SSE_LINE
) -> AsyncGenerator[str, None]:
    """The lines of a byte stream (ended by CRLF, LF or CR, as SSE says), each at most
    `max_line` bytes: a longer one raises `LineTooLong` once that much is held, so a
    stream without line breaks costs `max_line` of memory, not its length."""
    buf = bytearray()
    async for chunk in chunks:
        scan = max(0, len(buf) - 1)  # a CR left at the end may pair with this chunk's LF
        buf += chunk
        start = 0
        while (match := _EOL.search(buf, max(scan, start))) is not None:
            if match.end() == len(buf) and buf.endswith(b"\r"):
                break  # may be the first half of a CRLF: wait for the next chunk
            yield buf[start : match.start()].decode("utf-8", "replace")
            start = match.end()
        del buf[:start]
        if len(buf) > max_line:
            raise LineTooLong
    if buf:
        yield bytes(buf).removesuffix(b"\r").decode("utf-8", "replace")


async def sse_events(
    chunks: AsyncIterator[bytes], max_line: int = MAX_SSE_LINE
) -> AsyncGenerator[str, None]:
    """The `data:` payloads of a server-sent event stream (multi-line data joined; the
    payload of one event is capped like a line)."""
    lines: list[str] = []
    size = 0
    async with aclosing(sse_lines(chunks, max_line)) as reader:
        async for line in reader:
            if not line:
                if lines:
                    yield "\n".join(lines)
                    lines, size = [], 0
            elif line.startswith("data:"):
                size += len(line)
                if size > max_line:
                    raise LineTooLong
                lines.append(line[5:].removeprefix(" "))
            # comments (":keep-alive"), event:, id:, retry: carry nothing we need
    if lines:
        yield "\n".join(lines)

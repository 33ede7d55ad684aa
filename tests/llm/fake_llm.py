"""A scripted local HTTP server speaking enough of the OpenAI / Anthropic / Gemini APIs
for tests.

Each test queues replies (JSON, status codes, headers, delays, raw bodies, SSE streams);
every request received is recorded. Runs on 127.0.0.1 on a random port. `rules` are
checks a real API makes before answering (fake_rules.py: Gemini's request rules, image
parts of each format): a request one of them rejects gets that API's error instead of
the next scripted reply.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Reply:
    status: int = 200
    json: Any = None
    body: str | None = None  # raw body (malformed JSON, HTML error pages...)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering (cut short when the server closes)
    sse: list[Any] | None = None  # dicts JSON-encoded, strings as is, ':...' as comments
    drop: bool = False  # after the SSE events, cut the connection (no end of stream)
    named: bool = False  # each dict event gets `event: <its "type">` first (Anthropic)
    # After the SSE events, `forever` (an event as in `sse`) again every `every` seconds
    # until the client hangs up: a stream that never ends.
    forever: Any = None
    every: float = 0.02
    flood: int = 0  # after the SSE events, `data: ` and this many bytes with no line break


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    json: Any
    query: dict[str, str] = field(default_factory=dict)


# A check of a request as the real API makes it: None to accept, else the rejection.
Rule = Callable[[Recorded], Reply | None]


class FakeLLM:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.rules: list[Rule] = []
        self.rejected: list[Reply] = []  # what the rules answered, in order
        self.flooded = 0  # bytes of `Reply.flood` written before the client hung up

    def queue(self, *replies: Reply) -> FakeLLM:
        self.replies.extend(replies)
        return self

    def ok(self, content: str = "hello", model: str = "m") -> FakeLLM:
        """Queue a plain successful chat completion."""
        return self.queue(Reply(json=completion(content, model)))

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)  # requests with images
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def close(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        text = await request.text()
        try:
            payload = json.loads(text) if text else None
        except ValueError:
            payload = text
        recorded = Recorded(
            request.method, request.path, dict(request.headers), payload, dict(request.query)
        )
        self.requests.append(recorded)
        for rule in self.rules:
            rejection = rule(recorded)
            if rejection is not None:
                self.rejected.append(rejection)
                return web.json_response(rejection.json, status=rejection.status)
        if not self.replies:
            return web.json_response({"error": {"message": "no scripted reply"}}, status=599)
        reply = self.replies.popleft()
        if reply.delay:
            try:
                await asyncio.wait_for(self._closing.wait(), reply.delay)
            except TimeoutError:
                pass
        if reply.sse is not None:
            return await self._sse(request, reply)
        if reply.body is not None:
            return web.Response(
                status=reply.status,
                text=reply.body,
                headers=reply.headers,
                content_type="application/json",
            )
        return web.json_response(reply.json, status=reply.status, headers=reply.headers)

    async def _sse(self, request: web.Request, reply: Reply) -> web.StreamResponse:
        response = web.StreamResponse(
            status=reply.status, headers={"Content-Type": "text/event-stream", **reply.headers}
        )
        await response.prepare(request)
        for event in reply.sse or []:
            await response.write(_sse_event(event, reply.named))
        try:
            while reply.forever is not None and not self._closing.is_set():
                await response.write(_sse_event(reply.forever, reply.named))
                await asyncio.sleep(reply.every)
            if reply.flood:
                await response.write(b"data: ")
                piece = b"x" * 65536
                for _ in range(reply.flood // len(piece)):
                    await response.write(piece)
                    self.flooded += len(piece)
        except ConnectionError:  # the client hung up, as it should
            return response
        if reply.drop and request.transport is not None:
            request.transport.close()  # mid-response: the client sees a broken stream
            return response
        await response.write_eof()
        return response


def _sse_event(event: Any, named: bool) -> bytes:
    """One SSE event: a dict JSON-encoded, a string as is, ':...' as a comment line."""
    if isinstance(event, str) and event.startswith(":"):
        return f"{event}\n\n".encode()
    data = event if isinstance(event, str) else json.dumps(event, ensure_ascii=False)
    name = f"event: {event['type']}\n" if named and isinstance(event, dict) else ""
    return f"{name}data: {data}\n\n".encode()


def completion(
    content: str | None = "hello",
    model: str = "m",
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str = "stop",
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
    }

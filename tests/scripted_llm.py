"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, and an
engine.yaml pointing at it: for engine and gateway tests that need a model."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from pathlib import Path
from typing import Any

from aiohttp import web

from klaw.config import EngineConfig, load_engine_config


class FakeLLM:
    """Answers POST …/chat/completions with queued (status, json) pairs; records requests."""

    def __init__(self) -> None:
        self.replies: deque[tuple[int, Any]] = deque()
        self.requests: list[Any] = []
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.arrived = asyncio.Event()  # set on every request (tests clear it)
        self.hold: asyncio.Event | None = None  # while set to an unset Event, requests wait
        self.last_chunk_at = 0.0  # monotonic time the last streamed reply was written

    def answer(self, content: str | None, tool_calls: list[dict[str, Any]] | None = None) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls is not None:
            message["tool_calls"] = tool_calls
        finish = "tool_calls" if tool_calls else "stop"
        body = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
        }
        self.replies.append((200, body))

    def answer_stream(
        self,
        chunks: list[str],
        *,
        gate: asyncio.Event | None = None,
        gate_after: int = 1,
        pause_s: float = 0.0,
    ) -> None:
        """A reply streamed as SSE when the request asks for a stream (else whole, after
        the same time): after `gate_after` chunks it waits for `gate`, so a test acts
        while the reply is half written; `pause_s` between chunks is the model's pace
        (benchmarks)."""
        spec = {"chunks": chunks, "gate": gate, "gate_after": gate_after, "pause_s": pause_s}
        self.replies.append((0, spec))

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)  # real APIs take big requests
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests.append(json.loads(await request.text()))
        self.arrived.set()
        if self.hold is not None:
            await self.hold.wait()
        if not self.replies:
            return web.json_response({"error": {"message": "no scripted reply"}}, status=500)
        status, body = self.replies.popleft()
        if status == 0:
            return await self._stream(request, body)
        return web.json_response(body, status=status)

    async def _stream(self, request: web.Request, spec: dict[str, Any]) -> web.StreamResponse:
        chunks: list[str] = spec["chunks"]
        if not self.requests[-1].get("stream"):
            await asyncio.sleep(spec["pause_s"] * len(chunks))  # the same writing time
            self.last_chunk_at = time.monotonic()
            self.answer("".join(chunks))
            status, body = self.replies.pop()
            return web.json_response(body, status=status)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i, text in enumerate(chunks):
            if i == spec["gate_after"] and spec["gate"] is not None:
                await spec["gate"].wait()
            if spec["pause_s"]:
                await asyncio.sleep(spec["pause_s"])
            delta = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
            await response.write(f"data: {json.dumps(delta, ensure_ascii=False)}\n\n".encode())
        self.last_chunk_at = time.monotonic()
        done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        usage = {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 3}}
        for event in (done, usage):
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def offered(request: dict[str, Any]) -> set[str]:
    """The tools a request offers: those whose schema it sends, and those named in a
    group's line of `tools_load` (rarely used built-ins, klaw.tools.builtin_groups)."""
    names: set[str] = set()
    for tool in request.get("tools") or []:
        fn = tool["function"]
        names.add(fn["name"])
        if fn["name"] == "tools_load":
            for line in fn["description"].split("\nGroups:\n", 1)[-1].splitlines():
                if not line.startswith("- mcp__"):  # a server's line names short names
                    names.update(line.rpartition(": ")[2].split(", "))
    return names


# ---------------------------------------------------------------- fixtures


def engine_config(tmp_path: Path, url: str, **processing: Any) -> EngineConfig:
    path = write_engine_yaml(tmp_path / "engine-test.yaml", url, **processing)
    return load_engine_config(path)


def write_engine_yaml(path: Path, url: str, **processing: Any) -> Path:
    """An engine.yaml whose only model is `fake/m` at `url` (no offline model)."""
    proc = {"debounceMs": 50, "maxConcurrentLlm": 2, "maxToolCallRounds": 3, **processing}
    lines = [
        "providers:",
        "  fake:",
        "    type: openai-compatible",
        f"    endpoint: {url}/v1",
        "models:",
        "  fake/m:",
        "    contextBudget: 16000",
        "    maxTokens: 512",
        "routing:",
        "  default: fake/m",
        "  fallback: []",
        "llm:",
        "  local:",
        "    enabled: false",
        "  maxRetries: 0",
        "  initialBackoffMs: 0",
        "  requestTimeoutMs: 5000",
        "processing:",
        *(f"  {k}: {v}" for k, v in proc.items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path

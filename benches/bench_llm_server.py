"""An OpenAI-compatible chat-completions server that times itself, in a process of
its own (as a real model server would be). Usage: python bench_llm_server.py INSIDE_FILE

Prints "port N" once listening on 127.0.0.1. For every POST …/chat/completions it
answers `REPLY` and records perf_counter (CLOCK_MONOTONIC, comparable across
processes) once the request body is read ("arrived") and just before the answer
is written ("written"). The running sum of (written - arrived) is kept as one
native double at offset 0 of INSIDE_FILE, so the benchmark's clock can subtract
the LLM's own time while it runs. GET /timings returns both lists as JSON.
"""

from __future__ import annotations

import asyncio
import json
import mmap
import struct
import sys
import time

from aiohttp import web

REPLY = "Sure: the plumber comes on Tuesday at nine, and I put it in your calendar."


async def main(inside_file: str) -> None:
    arrived: list[float] = []
    written: list[float] = []
    with open(inside_file, "r+b") as fh:
        inside = mmap.mmap(fh.fileno(), 8)
    total = 0.0

    async def complete(request: web.Request) -> web.Response:
        nonlocal total
        raw = await request.read()
        t0 = time.perf_counter()
        body = json.loads(raw)
        reply = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": str(body.get("model", "m")),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": REPLY},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
        }
        response = web.json_response(reply)
        t1 = time.perf_counter()
        arrived.append(t0)
        written.append(t1)
        total += t1 - t0
        struct.pack_into("d", inside, 0, total)
        return response

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def timings(_: web.Request) -> web.Response:
        return web.json_response({"arrived": arrived, "written": written})

    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", complete)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/timings", timings)
    runner = web.AppRunner(app, handle_signals=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"port {runner.addresses[0][1]}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1]))
    except KeyboardInterrupt:
        pass

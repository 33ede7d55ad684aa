"""Klaw as installed from a wheel, used the way a new user would: `klaw init`, `klaw doctor`,
notes indexed and found by hybrid search in Russian and Chinese, one message answered by
the engine daemon through a local OpenAI-compatible server (what Ollama would be).

Run with the Python of the venv the wheel went into (`make test-install` on x86_64,
`make test-aarch64` under qemu); it imports nothing from the source tree. Exits 1 naming
the step that failed, with that step's output.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from klaw.paths import KlawPaths
from klaw.wire.protocol import Inbound, LineReader, Outbound, Register, Registered, decode, encode

BIN = Path(sys.executable).parent
REPLY = "Smoke reply from the local model."
NOTES = {
    "garden.md": "# Дача\n\nПомидоры на даче поливать каждый вечер, огурцы — через день.\n",
    "tea.md": "# 茶\n\n我最喜欢的茶是西湖龙井，每天早上喝一杯。\n",
    "bike.md": "# Bike\n\nThe bike lock code is 4711; the spare key is in the blue drawer.\n",
}
SEARCHES = {"поливать помидоры на даче": "garden.md", "我喜欢喝什么茶": "tea.md"}
# Under emulation every step is ~10x slower than on the machine it was made for.
TIMEOUT = float(os.environ.get("KLAW_SMOKE_TIMEOUT", "600"))


class Failed(Exception):
    pass


def step(name: str) -> None:
    print(f"--- {name} ({time.strftime('%H:%M:%S')})", flush=True)


async def klaw(*args: str, env: dict[str, str]) -> str:
    """Run the CLI while this loop serves the model (doctor and the engine ask it)."""
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "klaw"),
        *args,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    raw, _ = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    out = raw.decode("utf-8", "replace")
    print(out, end="", flush=True)
    if proc.returncode != 0:
        raise Failed(f"`klaw {' '.join(args)}` exited {proc.returncode}")
    return out


def user_env(home: Path) -> dict[str, str]:
    """A clean user's environment: only HOME decides where Klaw keeps things."""
    drop = ("KLAW_", "XDG_", "ORT_", "GLM_", "DEEPSEEK_", "ANTHROPIC_", "TELEGRAM_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["HOME"] = str(home)
    return env


def use_local_server(paths: KlawPaths, url: str) -> None:
    """Point engine.yaml at `url` as its Ollama, the only model, as a user would edit it."""
    from ruamel.yaml import YAML

    yaml = YAML()
    cfg: Any = yaml.load(paths.engine_config.read_text(encoding="utf-8"))
    cfg["providers"]["ollama"]["endpoint"] = f"{url}/v1"
    cfg["routing"]["default"] = "ollama/qwen3:8b"
    cfg["routing"]["fallback"] = []
    cfg["routing"]["tasks"] = {}
    with paths.engine_config.open("w", encoding="utf-8") as out:
        yaml.dump(cfg, out)


async def fake_llm(requests: list[dict[str, Any]]) -> tuple[web.AppRunner, str]:
    async def chat(request: web.Request) -> web.Response:
        requests.append(await request.json())
        return web.json_response(
            {
                "id": "chatcmpl-smoke",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": "qwen3:8b",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": REPLY},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107},
            }
        )

    async def models(request: web.Request) -> web.Response:
        # What Ollama answers; the engine asks it to tell a running server from none.
        return web.json_response({"object": "list", "data": [{"id": "qwen3:8b"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def one_message(
    paths: KlawPaths, env: dict[str, str], requests: list[dict[str, Any]]
) -> None:
    engine = await asyncio.create_subprocess_exec(
        str(BIN / "klaw"), "engine", env=env, stdin=subprocess.DEVNULL
    )
    try:
        reader, writer = await connect(paths.socket, engine)
        lines = LineReader(reader)
        writer.write(encode(Register(channels=["telegram"])))
        first = await asyncio.wait_for(lines.readline(), TIMEOUT)
        reg = decode(first) if first is not None else None
        if not isinstance(reg, Registered):
            raise Failed(f"engine answered register with {reg!r}")
        msg = Inbound(
            id="smoke_1",
            channel="telegram",
            chat_id="telegram_1",
            ts=datetime.now(UTC),
            content="Hello, are you there?",
        )
        writer.write(encode(msg))
        await writer.drain()
        while True:
            line = await asyncio.wait_for(lines.readline(), TIMEOUT)
            if line is None:
                raise Failed("the engine closed the connection before answering")
            out = decode(line)
            if isinstance(out, Outbound) and "smoke_1" in out.answers:
                break
        if out.content != REPLY:
            raise Failed(f"the engine sent {out.content!r}, not the model's reply")
        if not any("Hello, are you there?" in json.dumps(r, ensure_ascii=False) for r in requests):
            raise Failed("the model never saw the message")
        print(f"engine answered: {out.content!r} ({len(requests)} model request(s))")
        writer.close()
    finally:
        engine.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(engine.wait(), TIMEOUT)
    if code != 0:
        raise Failed(f"the engine exited {code} on SIGTERM")


async def connect(
    socket: Path, engine: asyncio.subprocess.Process
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The engine's socket once it listens (it loads the model first)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if engine.returncode is not None:
            raise Failed(f"the engine exited {engine.returncode} before it listened")
        try:
            return await asyncio.open_unix_connection(str(socket))
        except OSError:
            await asyncio.sleep(0.2)  # polling a process start, not a race in Klaw
    raise Failed(f"the engine did not listen on {socket} within {TIMEOUT:.0f} s")


async def smoke(paths: KlawPaths, env: dict[str, str]) -> None:
    requests: list[dict[str, Any]] = []
    runner, url = await fake_llm(requests)
    try:
        step("klaw init")
        await klaw("init", env=env)
        if not (paths.models / "use-multilingual-v3" / "model.onnx").is_file():
            raise Failed("init did not install the embedding model")
        step("klaw doctor, with a local model server configured")
        use_local_server(paths, url)
        out = await klaw("doctor", env=env)
        if "Healthy" not in out:
            raise Failed("doctor did not report a healthy installation")
        step("notes indexed")
        for name, text in NOTES.items():
            (paths.workspace / "memory" / name).write_text(text, encoding="utf-8")
        await klaw("memory", "index", env=env)
        for query, expected in SEARCHES.items():
            step(f"search: {query}")
            out = await klaw("memory", "search", "--json", query, env=env)
            hits = json.loads(out[out.index("[") :])
            if not hits or expected not in json.dumps(hits[0], ensure_ascii=False):
                raise Failed(f"{query!r}: the first hit is not {expected}")
        step("one message through the engine")
        await one_message(paths, env, requests)
    finally:
        await runner.cleanup()


def main() -> int:
    home = Path(tempfile.mkdtemp(prefix="klaw-smoke-"))
    env = user_env(home)
    os.environ.clear()
    os.environ.update(env)
    paths = KlawPaths.from_env()
    started = time.monotonic()
    try:
        asyncio.run(smoke(paths, env))
    except (Failed, TimeoutError) as exc:
        print(f"SMOKE FAILED: {exc or type(exc).__name__}", flush=True)
        return 1
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(f"SMOKE OK in {time.monotonic() - started:.0f} s ({sys.platform}, {os.uname().machine})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

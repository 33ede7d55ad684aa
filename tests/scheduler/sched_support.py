"""Shared pieces of the scheduler tests: engine and gateway runners, the CLI as a
real process, and waiting on conditions (never on the clock)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gateway"))
from fake_telegram import TOKEN, FakeTelegram

from klaw.config import GatewayConfig
from klaw.engine.daemon import run as run_engine
from klaw.gateway.channels.telegram.channel import TelegramChannel
from klaw.gateway.core import Gateway, GatewayTimings
from klaw.gateway.daemon import run as run_gateway
from klaw.paths import KlawPaths
from klaw.wire.logfile import chat_files, read_jsonl


@pytest.fixture(name="telegram")
async def telegram_fixture() -> AsyncIterator[FakeTelegram]:
    """The fake Telegram Bot API of the gateway tests, on 127.0.0.1."""
    server = FakeTelegram()
    await server.start()
    yield server
    await server.close()


T = 30.0
OWNER = 100
CHAT = f"telegram_{OWNER}"
FAST = GatewayTimings(reconnect_initial_s=0.02, reconnect_max_s=0.2, typing_every_s=0.2)


def engine_yaml(
    path: Path,
    url: str,
    *,
    heartbeat: dict[str, str] | None = None,
    summarization: dict[str, Any] | None = None,
    **processing: Any,
) -> Path:
    """engine.yaml with one fake model (`fake/m` at `url`), used for subagents too;
    `heartbeat` sets keys of `scheduler.heartbeat`."""
    proc = {"debounceMs": 0, "maxConcurrentLlm": 2, "maxToolCallRounds": 3, **processing}
    lines = [
        "providers:",
        "  fake:",
        "    type: openai-compatible",
        f"    endpoint: {url}/v1",
        "models:",
        "  fake/m:",
        "    contextBudget: 16000",
        "    maxTokens: 512",
        "  fake/other:",
        "    contextBudget: 16000",
        "routing:",
        "  default: fake/m",
        "  fallback: []",
        "  tasks:",
        "    subagent: fake/m",
        "llm:",
        "  local:",
        "    enabled: false",
        "  maxRetries: 0",
        "  initialBackoffMs: 0",
        "  requestTimeoutMs: 5000",
        "processing:",
        *(f"  {k}: {v}" for k, v in proc.items()),
        "scheduler:",
        "  timezone: Europe/Berlin",
    ]
    if heartbeat:
        lines += ["  heartbeat:", *(f"    {k}: {json.dumps(v)}" for k, v in heartbeat.items())]
    if summarization:
        lines += ["summarization:", *(f"  {k}: {json.dumps(v)}" for k, v in summarization.items())]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def gateway_config(fake: FakeTelegram) -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "channels": {
                "telegram": {
                    "token": TOKEN,
                    "apiServer": fake.url,
                    "allowedChatIds": [str(OWNER)],
                },
                "console": {"enabled": False},
            }
        }
    )


@contextlib.asynccontextmanager
async def engine_running(paths: KlawPaths, backend: Any) -> AsyncIterator[Any]:
    """The real engine in this loop, with the config in `paths.engine_config`;
    yields its server (`.handler` is the pipeline, `.scheduler` the controls)."""
    from klaw.config import load_engine_config
    from klaw.memory import Memory

    config = load_engine_config(paths.engine_config)
    stop, ready = asyncio.Event(), asyncio.Event()
    got: list[Any] = []
    task = asyncio.create_task(
        run_engine(
            paths,
            lambda: Memory.open(paths=paths, config=config, backend=backend),
            stop=stop,
            ready=ready,
            config=config,
            started=got.append,
        )
    )
    waiter = asyncio.create_task(ready.wait())
    await asyncio.wait({task, waiter}, timeout=T, return_when=asyncio.FIRST_COMPLETED)
    assert ready.is_set(), f"engine did not start: {task.result() if task.done() else '?'}"
    try:
        yield got[0]
    finally:
        stop.set()
        assert await asyncio.wait_for(task, T) == 0


@contextlib.asynccontextmanager
async def gateway_running(paths: KlawPaths, fake: FakeTelegram) -> AsyncIterator[Gateway]:
    cfg = gateway_config(fake)
    channel = TelegramChannel(
        cfg.channels.telegram, paths.inbox, backoff=0.01, max_backoff=0.05, poll_timeout=5
    )
    stop = asyncio.Event()
    got: list[Gateway] = []
    task = asyncio.create_task(
        run_gateway(paths, cfg, channels=[channel], stop=stop, timings=FAST, started=got.append)
    )
    await asyncio.wait_for(until(lambda: bool(got) or task.done()), T)
    assert got, f"gateway did not start: {task.result()}"
    try:
        yield got[0]
    finally:
        stop.set()
        assert await asyncio.wait_for(task, T) == 0


async def until(predicate: Callable[[], bool], timeout: float = T) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def klaw(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    """The `klaw` CLI as its own process, with the test's KLAW_* environment."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "klaw.cli.app",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ),
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def history(name: str | None = None) -> list[dict[str, Any]]:
    rc, out, err = await klaw("schedule", "history", *([name] if name else []), "--json")
    assert rc == 0, err
    runs: list[dict[str, Any]] = json.loads(out)["runs"]
    return runs


def log_lines(paths: KlawPaths, chat: str) -> list[dict[str, Any]]:
    return [r for f in chat_files(paths.conversations, chat) for r in read_jsonl(f).records]


def quartz_at(*moments: datetime) -> str:
    """A Quartz expression firing exactly at `moments` (UTC; same minute, hour, day,
    month and year): used to make due times that are known in advance."""
    first = moments[0]
    assert all(m.replace(second=0) == first.replace(second=0) for m in moments)
    secs = ",".join(str(m.second) for m in moments)
    return f"{secs} {first.minute} {first.hour} {first.day} {first.month} ? {first.year}"


def seconds_ahead(start: int, count: int) -> list[datetime]:
    """`count` consecutive whole seconds from `start` s ahead, within one minute."""
    now = datetime.now(UTC).replace(microsecond=0)
    first = now + timedelta(seconds=start)
    if first.second + count > 59:  # keep them in one minute
        first = (first + timedelta(minutes=1)).replace(second=0)
    return [first + timedelta(seconds=i) for i in range(count)]

"""Shared pieces of the scheduler tests: engine.yaml for the scripted model, the
engine and gateway runners of tests/engine_harness.py, the CLI as a real process, and
waiting on conditions (never on the clock)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gateway"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fake_telegram import FakeTelegram

import engine_harness as harness
from engine_harness import CHAT, OWNER, T, gateway_config, gateway_running, log_lines, until
from klaw.paths import KlawPaths

__all__ = [
    "CHAT",
    "OWNER",
    "T",
    "engine_running",
    "engine_yaml",
    "gateway_config",
    "gateway_running",
    "history",
    "klaw",
    "log_lines",
    "quartz_at",
    "seconds_ahead",
    "telegram_fixture",
    "until",
]


@pytest.fixture(name="telegram")
async def telegram_fixture() -> AsyncIterator[FakeTelegram]:
    """The fake Telegram Bot API of the gateway tests, on 127.0.0.1."""
    server = FakeTelegram()
    await server.start()
    yield server
    await server.close()


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


@contextlib.asynccontextmanager
async def engine_running(paths: KlawPaths, backend: Any) -> AsyncIterator[Any]:
    """The real engine in this loop, with the config in `paths.engine_config`;
    yields its server (`.handler` is the pipeline, `.scheduler` the controls)."""
    from klaw.config import load_engine_config
    from klaw.memory import Memory

    config = load_engine_config(paths.engine_config)

    def opener() -> Memory:
        return Memory.open(paths=paths, config=config, backend=backend)

    async with harness.engine_running(paths, memory_factory=opener, config=config) as server:
        yield server


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

"""The engine and gateway as the end-to-end tests run them, in one place: the real engine
in the test's loop or as a `klaw engine` process, the real gateway on the fake Telegram
Bot API, and waiting on conditions (never on the clock). Used by tests/gateway and, through
tests/scheduler/sched_support.py, by the scheduler, OpenClaw, sandbox and CLI suites."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "gateway"))
from fake_telegram import TOKEN, FakeTelegram

from klaw.config import GatewayConfig
from klaw.engine.daemon import run as run_engine
from klaw.gateway.channels.telegram.channel import TelegramChannel
from klaw.gateway.core import Gateway, GatewayTimings
from klaw.gateway.daemon import run as run_gateway
from klaw.paths import KlawPaths
from klaw.wire.logfile import chat_files, read_jsonl

__all__ = [
    "CHAT",
    "FAST",
    "OWNER",
    "T",
    "engine_running",
    "gateway_config",
    "gateway_running",
    "gateway_with",
    "log_lines",
    "spawn_engine",
    "until",
    "wait_socket",
]

T = 30.0  # upper bound of any single wait
OWNER = 100  # the one chat in allowedChatIds
CHAT = f"telegram_{OWNER}"
FAST = GatewayTimings(reconnect_initial_s=0.02, reconnect_max_s=0.2, typing_every_s=0.2)


async def until(predicate: Callable[[], bool], timeout: float = T) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


def gateway_config(fake: FakeTelegram, **telegram: Any) -> GatewayConfig:
    """gateway.yaml's model: Telegram on `fake` for OWNER (`telegram` overrides keys)."""
    return GatewayConfig.model_validate(
        {
            "channels": {
                "telegram": {
                    "token": TOKEN,
                    "apiServer": fake.url,
                    "allowedChatIds": [str(OWNER)],
                    **telegram,
                },
                "console": {"enabled": False},
            }
        }
    )


@contextlib.asynccontextmanager
async def _daemon(
    name: str, run: Callable[..., Awaitable[int]], ready: Callable[[], bool], **kwargs: Any
) -> AsyncIterator[Any]:
    """`run(stop=…, started=…, **kwargs)` as a task of this loop; yields what it passed
    to `started` once `ready()`, and stops it, expecting exit code 0, on the way out."""
    stop = asyncio.Event()
    got: list[Any] = []
    task = asyncio.create_task(run(stop=stop, started=got.append, **kwargs))
    with contextlib.suppress(TimeoutError):
        await until(lambda: (bool(got) and ready()) or task.done())
    assert got, f"{name} did not start: {task.result() if task.done() else '?'}"
    try:
        yield got[0]
    finally:
        stop.set()
        assert await asyncio.wait_for(task, T) == 0


@contextlib.asynccontextmanager
async def engine_running(paths: KlawPaths, **kwargs: Any) -> AsyncIterator[Any]:
    """The real engine (`klaw.engine.daemon.run(paths, **kwargs)`) in this loop, once
    its socket accepts; yields its server (`.handler` is the pipeline, `.scheduler`
    the controls)."""
    async with _daemon("engine", partial(run_engine, paths), lambda: True, **kwargs) as server:
        yield server


@contextlib.asynccontextmanager
async def gateway_with(
    paths: KlawPaths,
    cfg: GatewayConfig,
    channels: list[Any],
    ready: Callable[[], bool] = lambda: True,
) -> AsyncIterator[Gateway]:
    """The real gateway in this loop with `channels`, once it started and `ready()`."""
    run = partial(run_gateway, paths, cfg, channels=channels, timings=FAST)
    async with _daemon("gateway", run, ready) as gateway:
        yield gateway


@contextlib.asynccontextmanager
async def gateway_running(
    paths: KlawPaths,
    fake: FakeTelegram,
    cfg: GatewayConfig | None = None,
    *,
    streams_file: Path | None = None,
) -> AsyncIterator[Gateway]:
    """The real gateway in this loop with one Telegram channel on `fake`."""
    cfg = cfg or gateway_config(fake)
    channel = TelegramChannel(
        cfg.channels.telegram,
        paths.inbox,
        backoff=0.01,
        max_backoff=0.05,
        poll_timeout=5,
        streams_file=streams_file,
    )
    async with gateway_with(paths, cfg, [channel]) as gateway:
        yield gateway


def log_lines(paths: KlawPaths, chat: str = CHAT) -> list[dict[str, Any]]:
    """The records of a chat's conversation log, oldest first."""
    return [r for f in chat_files(paths.conversations, chat) for r in read_jsonl(f).records]


async def spawn_engine() -> asyncio.subprocess.Process:
    """`klaw engine` as its own process, with the test's KLAW_* environment."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "klaw.cli.app",
        "engine",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ),
    )


async def wait_socket(paths: KlawPaths, proc: asyncio.subprocess.Process) -> None:
    """Until the engine process listens on its socket; its stderr if it exits first."""

    async def ready() -> None:
        while True:
            if proc.returncode is not None:
                err = await proc.stderr.read() if proc.stderr else b""
                raise AssertionError(f"engine exited {proc.returncode}: {err.decode()[-2000:]}")
            with contextlib.suppress(OSError):
                _, w = await asyncio.open_unix_connection(str(paths.socket))
                w.close()
                return
            await asyncio.sleep(0.05)

    await asyncio.wait_for(ready(), 60)

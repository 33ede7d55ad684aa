"""Streamed replies (issue 14): how soon the user sees text, with `streaming: true`
beside the same turn without it (the baseline, in the same process and run).

One turn: a Telegram update is queued on the fake Bot API ("push"); the real gateway
and engine (in this process, real klaw.db and embedding model) ask the scripted
OpenAI-compatible model, which writes TOKENS chunks TOKEN_MS apart (whole, after the
same time, when no stream is asked for). Measured on the fake Bot API's clock:

* first_visible_ms: push → the first text in the chat (a draft with streaming, the
  reply itself without);
* done_ms: push → the finished reply in the chat;
* tail_ms: the model's last chunk → the finished reply in the chat: what streaming
  costs at the end of a turn (engine + gateway overhead per streamed reply).

Reported in extra_info, not asserted: wall time on a shared machine moves with its load.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gateway"))
from fake_telegram import TOKEN, FakeTelegram

from klaw.config import GatewayConfig, load_engine_config
from klaw.engine.daemon import run as run_engine
from klaw.gateway.channels.telegram.channel import TelegramChannel
from klaw.gateway.core import Gateway, GatewayTimings
from klaw.gateway.daemon import run as run_gateway
from klaw.memory import Memory
from klaw.paths import KlawPaths
from scripted_llm import FakeLLM, write_engine_yaml
from smoke import scaled

OWNER = 100
TOKENS = 40
TOKEN_MS = 25  # 40 chunks over 1 s: a short answer from a fast cloud model
ROUNDS = scaled(8, 1)
T = 60.0


class _Rig:
    """Engine + gateway + fakes in one loop, kept up across the rounds of one bench."""

    def __init__(self, loop: asyncio.AbstractEventLoop, root: Path, streaming: bool) -> None:
        self.loop = loop
        self.root = root
        self.streaming = streaming
        self.fake = FakeTelegram()
        self.llm = FakeLLM()
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[int]] = []
        self.gateway: Gateway | None = None
        self.samples: dict[str, list[float]] = {"first": [], "done": [], "tail": []}

    async def start(self) -> None:
        for name in ("config", "data", "state", "cache", "workspace"):
            os.environ[f"KLAW_{name.upper()}_DIR" if name != "workspace" else "KLAW_WORKSPACE"] = (
                str(self.root / name)
            )
        paths = KlawPaths.from_env()
        paths.workspace.mkdir(parents=True, exist_ok=True)
        models = Path(os.environ.get("KLAW_TEST_CACHE_DIR") or Path.home() / ".cache/klaw")
        paths.models.parent.mkdir(parents=True, exist_ok=True)
        paths.models.symlink_to(models / "models")
        await self.fake.start()
        await self.llm.start()
        yaml = write_engine_yaml(self.root / "engine.yaml", self.llm.url, debounceMs=0)
        config = load_engine_config(yaml)
        ready = asyncio.Event()
        self.tasks.append(
            asyncio.create_task(
                run_engine(
                    paths,
                    memory_factory=lambda: Memory.open(paths=paths, config=config),
                    stop=self.stop,
                    ready=ready,
                    config=config,
                )
            )
        )
        await asyncio.wait_for(ready.wait(), T)
        cfg = GatewayConfig.model_validate(
            {
                "channels": {
                    "telegram": {
                        "token": TOKEN,
                        "apiServer": self.fake.url,
                        "allowedChatIds": [str(OWNER)],
                        "streaming": self.streaming,
                    },
                    "console": {"enabled": False},
                }
            }
        )
        channel = TelegramChannel(cfg.channels.telegram, paths.inbox, poll_timeout=5)
        got: list[Gateway] = []
        self.tasks.append(
            asyncio.create_task(
                run_gateway(
                    paths,
                    cfg,
                    channels=[channel],
                    stop=self.stop,
                    timings=GatewayTimings(reconnect_initial_s=0.02),
                    started=got.append,
                )
            )
        )
        while not got:
            await asyncio.sleep(0.01)
        self.gateway = got[0]
        await asyncio.wait_for(self.gateway.connected.wait(), T)

    async def turn(self, n: int) -> None:
        chunks = [f"word{i} " for i in range(TOKENS)]
        whole = "".join(chunks).strip()
        self.llm.answer_stream(chunks, pause_s=TOKEN_MS / 1000)
        sent_before = len(self.fake.sent_to(OWNER))
        drafts_before = len(self.fake.drafts)
        pushed = time.monotonic()
        self.fake.text(OWNER, f"question {n}")
        while len(self.fake.sent_to(OWNER)) == sent_before:
            await asyncio.sleep(0.002)  # polling the fake's record, not a race
        reply = self.fake.sent_to(OWNER)[-1]
        assert reply.visible == whole
        drafts = self.fake.drafts[drafts_before:]
        first = drafts[0].at if drafts else reply.at
        if self.streaming:
            assert drafts, "streaming on, but no draft was shown"
        self.samples["first"].append((first - pushed) * 1000)
        self.samples["done"].append((reply.at - pushed) * 1000)
        self.samples["tail"].append((reply.at - self.llm.last_chunk_at) * 1000)
        assert self.gateway is not None
        while len(self.gateway.buffer):
            await asyncio.sleep(0.002)

    async def close(self) -> None:
        self.stop.set()
        for task in self.tasks:
            await asyncio.wait_for(task, T)
        await self.fake.close()
        await self.llm.close()


@pytest.fixture
def env_restored() -> Iterator[None]:
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _bench(
    benchmark: Any, loop: asyncio.AbstractEventLoop, tmp_path: Path, streaming: bool
) -> None:
    rig = _Rig(loop, tmp_path, streaming)
    loop.run_until_complete(rig.start())
    counter = iter(range(10**6))
    try:
        benchmark.pedantic(
            lambda: loop.run_until_complete(rig.turn(next(counter))),
            rounds=ROUNDS,
            iterations=1,
            warmup_rounds=1,
        )
    finally:
        loop.run_until_complete(rig.close())
    for key, values in rig.samples.items():
        values = values[1:] or values  # the warm-up round loads the model's caches
        benchmark.extra_info[f"{key}_ms_p50"] = round(statistics.median(values), 1)
    benchmark.extra_info["tokens"] = TOKENS
    benchmark.extra_info["token_ms"] = TOKEN_MS


@pytest.mark.benchmark(group="streaming")
def test_stream_klaw_on(
    benchmark: Any, loop: asyncio.AbstractEventLoop, tmp_path: Path, env_restored: None
) -> None:
    _bench(benchmark, loop, tmp_path, streaming=True)


@pytest.mark.benchmark(group="streaming")
def test_stream_baseline_off(
    benchmark: Any, loop: asyncio.AbstractEventLoop, tmp_path: Path, env_restored: None
) -> None:
    _bench(benchmark, loop, tmp_path, streaming=False)

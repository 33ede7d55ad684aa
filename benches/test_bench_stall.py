"""The event loop while 5 MB of Markdown is indexed (issue 8, item 6).

A watcher indexes a big memory file in a worker thread; meanwhile messages arrive and
each reply does its disk work (store the inbound, read the chat's window). Measured,
in one process on the same store: the loop's worst lag (a 5 ms ticker's overshoot)
and the worst time a reply's disk work took, for

* `klaw`: the pipeline's way, every store call in a worker thread (`asyncio.to_thread`);
* `on_loop`: the way `Pipeline.handle` stored the inbound before, on the event loop.

The store's lock split (writes no longer exclude searches) helps both; what the loop
can still wait for in `on_loop` is the writer connection, held by the indexing
transaction. Figures are reported in `extra_info` (worst_lag_ms, worst_reply_ms);
no bar: it depends on the machine.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from klaw.config import load_engine_config
from klaw.memory import Memory
from klaw.paths import KlawPaths
from klaw.wire.loglines import inbound_line, line_row
from klaw.wire.protocol import Inbound
from smoke import scaled

GROUP = "loop-stall"
SIZE = scaled(5 * 1024 * 1024, 128 * 1024)
CHAT = "telegram_1"


def markdown(size: int, tag: str) -> str:
    parts: list[str] = []
    total, i = 0, 0
    while total < size:
        p = (
            f"## Day {i} ({tag})\n\nMeter {i * 37 % 9973} kWh, boiler note {i * 7919 % 104729}, "
            f"room {i % 17}, remark {tag}-{i}. " * 4 + "\n\n"
        )
        parts.append(p)
        total += len(p)
        i += 1
    return "".join(parts)


@pytest.fixture
def memory(tmp_path: Path, backend: Any) -> Any:
    paths = KlawPaths(
        config_dir=tmp_path / "config",
        data_dir=tmp_path / "data",
        state_dir=tmp_path / "state",
        cache_dir=tmp_path / "cache",
        workspace=tmp_path / "workspace",
    )
    (paths.workspace / "memory").mkdir(parents=True)
    mem = Memory.open(paths=paths, config=load_engine_config(Path("/nonexistent")), backend=backend)
    yield mem
    mem.close()


async def _scenario(memory: Any, path: Path, on_loop: bool) -> dict[str, float]:
    store = memory.store
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    lags: list[float] = []
    waits: list[float] = []

    async def ticker() -> None:
        while not stop.is_set():
            t = loop.time()
            await asyncio.sleep(0.005)
            lags.append(loop.time() - t - 0.005)

    async def replies() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            msg = Inbound(
                id=f"{path.stem}-{n}",
                channel="telegram",
                chat_id=CHAT,
                ts=datetime.now(UTC),
                content=f"message {n}",
            )
            row = line_row(inbound_line(msg), "telegram", CHAT)
            t = time.perf_counter()
            if on_loop:
                store.insert_messages([row])
                store.recent_messages(CHAT, None, 50)
            else:
                await asyncio.to_thread(store.insert_messages, [row])
                await asyncio.to_thread(store.recent_messages, CHAT, None, 50)
            waits.append(time.perf_counter() - t)
            await asyncio.sleep(0.02)

    tasks = [asyncio.create_task(ticker()), asyncio.create_task(replies())]
    await asyncio.sleep(0.05)  # both running before indexing starts
    chunks = await asyncio.to_thread(memory.index_file, path)
    stop.set()
    await asyncio.gather(*tasks)
    assert chunks > 0 and waits and lags
    return {
        "worst_lag_ms": max(lags) * 1000,
        "worst_reply_ms": max(waits) * 1000,
        "median_reply_ms": statistics.median(waits) * 1000,
        "replies": float(len(waits)),
    }


def _bench(benchmark: Any, memory: Any, on_loop: bool) -> None:
    benchmark.group = GROUP
    rounds = iter(range(1_000))
    figures: list[dict[str, float]] = []

    def run() -> None:
        path = memory.paths.workspace / "memory" / f"big-{next(rounds)}.md"
        path.write_text(markdown(SIZE, path.stem))
        figures.append(asyncio.run(_scenario(memory, path, on_loop)))

    benchmark.pedantic(run, rounds=1, iterations=1)
    worst = figures[-1]
    benchmark.extra_info.update({k: round(v, 1) for k, v in worst.items()})
    benchmark.extra_info["mb_indexed"] = round(SIZE / 2**20, 2)


def test_stall_klaw_off_loop(benchmark: Any, memory: Any) -> None:
    _bench(benchmark, memory, on_loop=False)


def test_stall_on_loop_baseline(benchmark: Any, memory: Any) -> None:
    _bench(benchmark, memory, on_loop=True)

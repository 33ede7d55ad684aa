"""The gateway with Discord on, against its bar, beside the same gateway without it:

* idle RSS of `klaw gateway` with the Telegram, Discord and console channels (bar:
  ≤ 75 MB, asserted), beside `klaw gateway` with Telegram and the console only,
  measured the same way in the same run: the difference is what Discord costs
  (discord.py, its client state, the websocket and its heartbeat thread).

Telegram, Discord and the engine are `gateway_fakes.py`, one process of their own (the
fakes of the tests: Bot API, Discord REST + gateway websocket, and a fake engine). The
timed figure is the start-up: spawn → polling Telegram (and, with Discord, identified
on the Discord websocket). One message then goes through each channel both ways, and
RSS is read once it stops moving.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import engine_support as es
import gateway_support as gs
import proc_status as ps
from smoke import SMOKE

THINK_MS = 20
RSS_BAR_MB = 75.0


def _spawn_and_measure(
    benchmark: Any, loop: Any, tmp_path: Path, *, discord: bool
) -> dict[str, Any]:
    from klaw.paths import KlawPaths

    env = {**os.environ, **es.klaw_env(tmp_path / "home")}
    env.pop("TELEGRAM_BOT_TOKEN", None)
    env.pop("DISCORD_BOT_TOKEN", None)
    paths = KlawPaths.from_env(env)
    fakes = gs.FakesProcess(tmp_path, paths.socket)
    dc = (fakes.discord_url, fakes.discord_dm) if discord else None
    gs.write_gateway_yaml(paths.config_dir, fakes.url, console=True, discord=dc)
    argv = [sys.executable, "-m", "klaw.cli.app", "gateway"]
    log = (tmp_path / "gateway.log").open("wb")
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log)
        procs.append(proc)
        end = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"the gateway exited with {proc.returncode}"
            assert time.monotonic() < end, "the gateway did not connect in 120 s"
            with contextlib.suppress(AssertionError):
                loop.run_until_complete(fakes.call("polling", timeout=0.5))
                if discord:
                    loop.run_until_complete(fakes.call("discord_connected", timeout=0.5))
                return proc

    try:
        proc = benchmark.pedantic(start, rounds=1)
        started = ps.status(proc.pid)["VmRSS"] / 1024
        tg = loop.run_until_complete(fakes.call("turn", n=1, think_ms=THINK_MS, delivered=True))
        dturn = (
            loop.run_until_complete(fakes.call("discord_turn", n=2, think_ms=THINK_MS))
            if discord
            else None
        )
        info = ps.settle(proc)
        summary = loop.run_until_complete(fakes.call("summary"))
    finally:
        for p in procs:
            ps.stop(p)
        log.close()
        loop.run_until_complete(fakes.aclose())
        fakes.close()
    assert len(summary["sent"]) == 1 and summary["failed"] == []
    assert len(summary["discord_sent"]) == (1 if discord else 0)
    assert summary["discord_failed"] == []
    out: dict[str, Any] = {
        **info,
        "rss_started_mb": started,
        "telegram_turn_in_ms": (tg["inbound"] - tg["push"]) * 1000,
        "telegram_turn_out_ms": (tg["sent"] - tg["outbound"]) * 1000,
    }
    if dturn is not None:
        out["discord_turn_in_ms"] = (dturn["inbound"] - dturn["push"]) * 1000
        out["discord_turn_out_ms"] = (dturn["sent"] - dturn["outbound"]) * 1000
    return out


@pytest.mark.benchmark(group="gateway-idle-discord")
def test_idle_klaw_gateway_telegram_discord(benchmark: Any, loop: Any, tmp_path: Path) -> None:
    """Idle RSS (bar: ≤ 75 MB) of `python -m klaw.cli.app gateway` with Telegram (the
    fake Bot API), Discord (the fake Discord) and the console, connected to the fake
    engine. rss_mb (VmRSS) and hwm_mb (VmHWM, the peak) are read once RSS stops moving
    after one message each way on each channel."""
    info = _spawn_and_measure(benchmark, loop, tmp_path, discord=True)
    benchmark.extra_info.update(info)
    if not SMOKE:
        assert info["rss_mb"] <= RSS_BAR_MB


@pytest.mark.benchmark(group="gateway-idle-discord")
def test_idle_gateway_telegram_only(benchmark: Any, loop: Any, tmp_path: Path) -> None:
    """The baseline: the same gateway and fakes, Discord off (Telegram and console)."""
    info = _spawn_and_measure(benchmark, loop, tmp_path, discord=False)
    benchmark.extra_info.update(info)

"""`klaw service`: the systemd units pass `systemd-analyze verify` (Debian's systemd),
say what the issue asks (notify, watchdog, restart, ordering, hardening with Klaw's
own directories writable), `--dry-run` prints them, and the daemons speak sd_notify to
a real datagram socket."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from sched_support import engine_running, engine_yaml, klaw

from klaw.paths import KlawPaths
from klaw.service import render_units, systemd_running
from scripted_llm import FakeLLM


@pytest.mark.parametrize("user", [True, False])
def test_the_units_pass_systemd_analyze_verify(
    klaw_home: KlawPaths, tmp_path: Path, user: bool
) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing (Debian: apt install systemd)"
    units = render_units(klaw_home, klaw_home.workspace, user=user)
    for u in units:
        (tmp_path / u.name).write_text(u.text)
    out = subprocess.run(
        [analyze, "verify", *(str(tmp_path / u.name) for u in units)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0 and out.stderr == "", out.stderr
    engine, gateway = (u.text for u in units)
    for text in (engine, gateway):
        for line in ("Type=notify", "WatchdogSec=60", "Restart=on-failure", "KillMode=mixed",
                     "NoNewPrivileges=yes", "PrivateTmp=yes", "ProtectSystem=strict",
                     "ProtectHome=read-only", "ReadWritePaths=-/run/docker.sock"):  # fmt: skip
            assert f"\n{line}\n" in text
        assert f"-{klaw_home.data_dir} " in text and f"-{klaw_home.workspace}\n" in text
    assert "TimeoutStopSec=90" in engine and "MemoryMax=700M" in engine
    assert "\nAfter=klaw-engine.service\n" in gateway and "\nWants=klaw-engine.service\n" in gateway
    assert ("WantedBy=default.target" in engine) is user


async def test_dry_run_prints_the_units_and_install_needs_systemd(klaw_home: KlawPaths) -> None:
    rc, out, err = await klaw("service", "install", "--dry-run", "--system")
    assert rc == 0, err
    assert "# /etc/systemd/system/klaw-engine.service" in out and "Type=notify" in out
    if systemd_running():
        return  # a real systemd would get the units installed: not in a test
    rc, out, err = await klaw("service", "install")
    assert rc == 1 and "systemd is not running as PID 1" in err and "--dry-run" in err


async def test_memory_limits_come_from_the_config(klaw_home: KlawPaths) -> None:
    klaw_home.config_dir.mkdir(parents=True, exist_ok=True)
    klaw_home.engine_config.write_text('service:\n  memoryMax: "1G"\n')
    klaw_home.gateway_config.write_text("service:\n  memoryMax: 30%\n")
    rc, out, err = await klaw("service", "install", "--dry-run")
    assert rc == 0, err
    engine, gateway = out.split("# ")[1:]
    assert "klaw-engine.service" in engine and "\nMemoryMax=1G\n" in engine
    assert "klaw-gateway.service" in gateway and "\nMemoryMax=30%\n" in gateway
    # A value systemd would reject at boot is refused now, naming the key.
    klaw_home.engine_config.write_text('service:\n  memoryMax: "700 MB"\n')
    rc, out, err = await klaw("service", "install", "--dry-run")
    assert rc == 1 and "service.memoryMax" in err and "700 MB" in err


async def test_the_engine_tells_systemd_it_is_ready_pings_the_watchdog_and_stops(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    engine_yaml(klaw_home.engine_config, llm.url)
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.setblocking(False)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setenv("WATCHDOG_USEC", "200000")  # a ping every 0.1 s
    loop = asyncio.get_running_loop()
    got: list[str] = []

    async def until_seen(state: str) -> None:
        while state not in got:
            got.append((await loop.sock_recv(sock, 256)).decode())

    try:
        async with engine_running(klaw_home, backend):
            await asyncio.wait_for(until_seen("READY=1"), 30)
            await asyncio.wait_for(until_seen("WATCHDOG=1"), 30)
        await asyncio.wait_for(until_seen("STOPPING=1"), 30)
    finally:
        sock.close()
    assert got.index("READY=1") < got.index("WATCHDOG=1") < got.index("STOPPING=1")

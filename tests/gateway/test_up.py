"""`klaw up` (what `make run` starts) in a pseudo-terminal: it starts the engine and
the gateway, chats through the console channel, and Ctrl-C stops everything."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator

import pytest
from test_console import Terminal

from klaw.paths import KlawPaths
from scripted_llm import FakeLLM, write_engine_yaml


@pytest.fixture
def home(klaw_home: KlawPaths, monkeypatch: pytest.MonkeyPatch) -> Iterator[KlawPaths]:
    state = tempfile.mkdtemp(prefix="klaw-")  # socket paths must stay short
    monkeypatch.setenv("KLAW_STATE_DIR", state)
    yield KlawPaths.from_env()
    shutil.rmtree(state, ignore_errors=True)


class UpTerminal(Terminal):
    subcommand = "up"


def klaw_processes(home: KlawPaths) -> set[int]:
    """This test's engine and gateway: klaw daemons whose KLAW_STATE_DIR is the test's own
    temp dir. Other klaw processes on the machine (other test runs) never match."""
    mark = f"KLAW_STATE_DIR={home.state_dir}".encode()
    found = set()
    for proc in os.listdir("/proc"):
        if not proc.isdigit():
            continue
        try:
            with open(f"/proc/{proc}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{proc}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        daemon = b"klaw.cli.app" in cmd and (b"engine" in cmd or b"gateway" in cmd)
        if daemon and mark in env:
            found.add(int(proc))
    return found


async def test_up_chats_and_ctrl_c_stops_everything(home: KlawPaths, llm: FakeLLM) -> None:
    home.config_dir.mkdir(parents=True, exist_ok=True)
    write_engine_yaml(home.engine_config, llm.url, debounceMs=0)
    llm.answer("Hello from the engine.")
    term = UpTerminal()
    try:
        await term.start()
        await term.expect("starting the engine")
        await term.expect("starting the gateway")
        await term.expect("/quit", timeout=120)  # the chat's hint: everything is up
        started = klaw_processes(home)
        assert len(started) == 2
        term.type("hi there\r")
        await term.expect("Hello from the engine.", timeout=60)
        # Ctrl-C (sent as the signal: the pty is not this session's controlling tty).
        # Readline may miss one that lands mid-redraw; a user presses again, as here.
        assert term.proc is not None
        deadline = time.monotonic() + 30
        while term.proc.returncode is None and time.monotonic() < deadline:
            term.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(term.proc.wait(), 0.5)
        assert await term.exit_code() == 0
        await term.expect("stopped")
    finally:
        await term.close()
    assert not (klaw_processes(home) & started)
    assert not home.socket.exists() and not home.console_socket.exists()
    assert [m["content"] for m in llm.requests[0]["messages"][1:]] == ["hi there"]


async def test_closing_the_terminal_stops_the_daemons(home: KlawPaths, llm: FakeLLM) -> None:
    home.config_dir.mkdir(parents=True, exist_ok=True)
    write_engine_yaml(home.engine_config, llm.url, debounceMs=0)
    term = UpTerminal()
    started: set[int] = set()
    try:
        await term.start()
        await term.expect("/quit", timeout=120)
        started = klaw_processes(home)
        assert len(started) == 2 and term.proc is not None
        term.proc.send_signal(signal.SIGHUP)  # the terminal window was closed
        await asyncio.wait_for(term.proc.wait(), 30)
        deadline = time.monotonic() + 30
        while klaw_processes(home) & started and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not klaw_processes(home) & started
    finally:
        for pid in klaw_processes(home) & started:
            os.kill(pid, signal.SIGKILL)
        await term.close()

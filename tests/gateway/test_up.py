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
from collections.abc import AsyncIterator, Iterator

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
        # Ctrl-C, sent as the signal (the pty is not this session's controlling tty).
        # readline drops one that lands while it draws the prompt, and a user presses
        # again; a second press is sent only once the first has clearly been lost (a
        # taken one shows "stopping" at once), so it never lands in the stop (that one
        # would make the exit code 130, the next test).
        assert term.proc is not None
        for _ in range(5):
            term.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(AssertionError):
                await term.expect("stopping the gateway", timeout=20)
                break
        else:
            raise AssertionError(f"Ctrl-C did not stop klaw up:\n{term.text}")
        await term.expect("stopping the engine")
        await term.expect("stopped")
        assert await term.exit_code() == 0
    finally:
        await term.close()
    assert not (klaw_processes(home) & started)
    assert not home.socket.exists() and not home.console_socket.exists()
    assert [m["content"] for m in llm.requests[0]["messages"][1:]] == ["hi there"]


@contextlib.asynccontextmanager
async def up_running(home: KlawPaths, llm: FakeLLM) -> AsyncIterator[tuple[UpTerminal, set[int]]]:
    """`klaw up` on the scripted model, once its chat is up, and the daemons it started;
    whatever is left of them is killed at the end."""
    home.config_dir.mkdir(parents=True, exist_ok=True)
    write_engine_yaml(home.engine_config, llm.url, debounceMs=0)
    term = UpTerminal()
    started: set[int] = set()
    try:
        await term.start()
        await term.expect("/quit", timeout=120)
        started = klaw_processes(home)
        assert len(started) == 2 and term.proc is not None
        yield term, started
    finally:
        for pid in klaw_processes(home) & started:
            os.kill(pid, signal.SIGKILL)
        await term.close()


async def test_a_second_ctrl_c_while_stopping_finishes_the_stop_then_exits_130(
    home: KlawPaths, llm: FakeLLM
) -> None:
    """What users do when stopping takes a while. The engine is in the middle of a reply
    (the model holds it), so its stop waits; a second Ctrl-C then is noted, not obeyed
    half-way: both daemons are stopped, and only then does `klaw up` exit, with 130."""
    llm.answer("Finished after all.")
    llm.hold = asyncio.Event()
    try:
        async with up_running(home, llm) as (term, started):
            assert term.proc is not None
            term.type("hi there\r")
            await asyncio.wait_for(llm.arrived.wait(), 60)  # the engine waits for the model
            term.proc.send_signal(signal.SIGINT)
            await term.expect("stopping the engine")  # the gateway has stopped
            term.proc.send_signal(signal.SIGINT)  # the second Ctrl-C, while the engine stops
            await term.expect("still stopping: klaw up exits once both daemons have stopped")
            assert klaw_processes(home) & started  # not abandoned: the engine is finishing
            llm.hold.set()
            await term.expect("stopped")
            assert await term.exit_code() == 130
            assert not klaw_processes(home) & started
    finally:
        llm.hold.set()


async def test_closing_the_terminal_stops_the_daemons(home: KlawPaths, llm: FakeLLM) -> None:
    async with up_running(home, llm) as (term, started):
        assert term.proc is not None
        term.proc.send_signal(signal.SIGHUP)  # the terminal window was closed
        await asyncio.wait_for(term.proc.wait(), 30)
        deadline = time.monotonic() + 30
        while klaw_processes(home) & started and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not klaw_processes(home) & started

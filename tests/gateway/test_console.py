"""The console channel over its real Unix socket, and `klaw chat` in a real pseudo-terminal."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import stat
import struct
import sys
import tempfile
import termios
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from klaw.gateway.channels.base import ChannelSendError, Incoming
from klaw.gateway.channels.console import BACKLOG, ConsoleChannel, ConsoleSocketError, console_user
from klaw.paths import KlawPaths
from klaw.wire.protocol import MAX_LINE_BYTES

DEADLINE = 10.0
USER = "tester"
CHAT = f"console_{USER}"


# --- fixtures and helpers ----------------------------------------------------


@pytest.fixture
def paths(klaw_home: KlawPaths, monkeypatch: pytest.MonkeyPatch) -> Iterator[KlawPaths]:
    """`klaw_home` with the state dir in a short path: a socket path has ~100 bytes."""
    state = tempfile.mkdtemp(prefix="klaw-")
    monkeypatch.setenv("KLAW_STATE_DIR", state)
    yield KlawPaths.from_env()
    shutil.rmtree(state, ignore_errors=True)


class Served:
    """A ConsoleChannel listening in a task; what it received lands in `received`."""

    def __init__(self, channel: ConsoleChannel) -> None:
        self.channel = channel
        self.received: asyncio.Queue[Incoming] = asyncio.Queue()
        self.echo = False
        self.fail = False
        self.task: asyncio.Task[None] | None = None

    async def on_message(self, msg: Incoming) -> None:
        if self.fail:
            raise RuntimeError("boom")
        await self.received.put(msg)
        if self.echo:
            await self.channel.typing(msg.chat_id)
            await self.channel.send(msg.chat_id, f"echo: {msg.content}")

    async def start(self) -> None:
        self.task = asyncio.create_task(self.channel.listen(self.on_message))
        await _until(lambda: self.channel.serving or self.task is None or self.task.done())
        if self.task is not None and self.task.done():
            self.task.result()  # listen failed: raise its error

    async def next(self) -> Incoming:
        return await asyncio.wait_for(self.received.get(), DEADLINE)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.channel.close()


async def _until(cond: Any, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.01)


@pytest.fixture
async def served(paths: KlawPaths) -> AsyncIterator[Served]:
    s = Served(ConsoleChannel(paths.console_socket, user=USER))
    await s.start()
    yield s
    await s.stop()


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, path: Path) -> Client:
        reader, writer = await asyncio.open_unix_connection(str(path), limit=4 * MAX_LINE_BYTES)
        return cls(reader, writer)

    async def say(self, text: Any) -> None:
        await self.raw(json.dumps({"type": "say", "text": text}).encode() + b"\n")

    async def raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def recv(self) -> dict[str, Any]:
        line = await asyncio.wait_for(self.reader.readline(), DEADLINE)
        assert line, "the gateway closed the connection"
        msg: dict[str, Any] = json.loads(line)
        return msg

    async def hello(self) -> dict[str, Any]:
        msg = await self.recv()
        assert msg["type"] == "hello"
        return msg

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


# --- the channel ---------------------------------------------------------------


def test_console_user_is_sanitized() -> None:
    assert console_user("J.Doe-Smith") == "j_doe_smith"
    assert console_user("Анна") == "user"
    assert console_user("__x__") == "x"
    assert console_user("a" * 100) == "a" * 64
    default = console_user()
    assert default and set(default) <= set("abcdefghijklmnopqrstuvwxyz0123456789_")
    assert ConsoleChannel(Path("/nonexistent"), user="Bob").chat_id == "console_bob"


async def test_lines_become_incoming_messages(served: Served) -> None:
    c = await Client.connect(served.channel.socket_path)
    await c.hello()
    before = datetime.now(UTC)
    await c.say("hello there")
    await c.say("  /model glm/glm-5  ")
    await c.say("   ")
    await c.say("")
    await c.raw(b"\n   \n")
    await c.say("/New")
    await c.say("/home/user/notes.md is where it is")
    await c.say("line one\nline two")

    first = await served.next()
    assert first.kind == "inbound" and first.content == "hello there"
    assert first.channel == "console" and first.chat_id == CHAT
    assert first.id.startswith(f"{CHAT}_") and len(first.id) > len(CHAT) + 16
    assert first.ts.tzinfo is not None
    assert before - timedelta(seconds=1) <= first.ts <= datetime.now(UTC)
    cmd = await served.next()
    assert (cmd.kind, cmd.command, cmd.args) == ("command", "model", "glm/glm-5")
    assert cmd.content == "/model glm/glm-5"
    new = await served.next()  # blank lines were skipped
    assert (new.kind, new.command, new.args) == ("command", "new", "")
    path = await served.next()
    assert path.kind == "inbound" and path.content.startswith("/home/user")
    multi = await served.next()
    assert multi.content == "line one\nline two"
    assert served.received.empty()
    assert len({first.id, cmd.id, new.id, path.id, multi.id}) == 5
    await c.close()


async def test_hello_carries_the_latest_commands(served: Served) -> None:
    await served.channel.set_commands([("new", "New session"), ("model", "Show the model")])
    c = await Client.connect(served.channel.socket_path)
    assert (await c.hello())["commands"] == [["new", "New session"], ["model", "Show the model"]]
    await served.channel.set_commands([("help", "List commands")])
    assert (await c.hello())["commands"] == [["help", "List commands"]]
    await c.close()


async def test_two_clients_both_receive(served: Served) -> None:
    a = await Client.connect(served.channel.socket_path)
    b = await Client.connect(served.channel.socket_path)
    await a.hello()
    await b.hello()
    await _until(lambda: served.channel.connected == 2)
    await served.channel.typing(CHAT)
    await served.channel.send(CHAT, "to both")
    for c in (a, b):
        assert await c.recv() == {"type": "typing"}
        assert await c.recv() == {"type": "reply", "text": "to both", "queued": False}
    await b.say("from b")
    await a.say("from a")
    got = {(await served.next()).content, (await served.next()).content}
    assert got == {"from a", "from b"}
    await a.close()
    await _until(lambda: served.channel.connected == 1)
    await served.channel.send(CHAT, "only b")
    assert (await b.recv())["text"] == "only b"
    assert served.channel.pending == 0
    await b.close()


async def test_replies_wait_for_a_client(served: Served) -> None:
    for i in range(BACKLOG + 5):
        await served.channel.send(CHAT, f"reply {i}")
    assert served.channel.pending == BACKLOG
    a = await Client.connect(served.channel.socket_path)
    await a.hello()
    queued = [await a.recv() for _ in range(BACKLOG)]
    assert queued[0] == {"type": "reply", "text": "reply 5", "queued": True}
    assert [q["text"] for q in queued] == [f"reply {i}" for i in range(5, BACKLOG + 5)]
    assert served.channel.pending == 0
    # A second client does not get them again; new replies go to both.
    b = await Client.connect(served.channel.socket_path)
    await b.hello()
    await served.channel.send(CHAT, "new")
    assert await a.recv() == {"type": "reply", "text": "new", "queued": False}
    assert await b.recv() == {"type": "reply", "text": "new", "queued": False}
    await a.close()
    await b.close()


async def test_typing_without_a_client_is_dropped(served: Served) -> None:
    await served.channel.typing(CHAT)
    assert served.channel.pending == 0
    c = await Client.connect(served.channel.socket_path)
    await c.hello()
    await served.channel.send(CHAT, "x")
    assert await c.recv() == {"type": "reply", "text": "x", "queued": False}
    await c.close()


async def test_bad_lines_get_an_error_and_the_connection_lives(served: Served) -> None:
    c = await Client.connect(served.channel.socket_path)
    await c.hello()
    for bad, expect in [
        (b"not json\n", "not valid JSON"),
        (b"[1, 2]\n", "JSON object"),
        (b'{"type":"shout","text":"x"}\n', "unknown message type"),
        (b'{"type":"say","text":5}\n', "invalid say message: text"),
        (b'{"type":"say"}\n', "invalid say message: text: Field required"),
        (b'{"type":"reply","text":"x"}\n', "comes from the gateway"),
        (b"\xff\xfe\n", "not valid UTF-8"),
        (b'{"type":"say","text":"\\ud800"}\n', "surrogate"),
        (b"[" * 100_000 + b"\n", "nested too deeply"),
    ]:
        await c.raw(bad)
        msg = await c.recv()
        assert msg["type"] == "error" and expect in msg["message"], (bad, msg)
    await c.say("still here")
    assert (await served.next()).content == "still here"
    await c.close()


async def test_oversized_line_is_refused_and_skipped(served: Served) -> None:
    c = await Client.connect(served.channel.socket_path)
    await c.hello()
    await c.raw(b'{"type":"say","text":"' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n')
    msg = await c.recv()
    assert msg["type"] == "error" and "limit" in msg["message"]
    await c.say("after")
    assert (await served.next()).content == "after"
    assert served.received.empty()
    await c.close()


async def test_a_failing_handler_is_reported_to_the_client(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    c = await Client.connect(served.channel.socket_path)
    await c.hello()
    served.fail = True
    with caplog.at_level(logging.ERROR, "klaw.gateway.console"):
        await c.say("doomed")
        msg = await c.recv()
    assert msg["type"] == "error" and "could not take" in msg["message"]
    served.fail = False
    await c.say("fine")
    assert (await served.next()).content == "fine"
    await c.close()


async def test_message_text_is_not_logged_at_info(
    paths: KlawPaths, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "klaw.gateway.console"):
        s = Served(ConsoleChannel(paths.console_socket, user=USER))
        await s.start()
        await s.channel.send(CHAT, "secret reply while away")
        c = await Client.connect(s.channel.socket_path)
        await c.hello()
        await c.recv()
        await c.say("secret question")
        await s.next()
        await c.close()
        await s.stop()
    assert "console client connected" in caplog.text
    assert "secret" not in caplog.text


async def test_send_to_a_foreign_chat_fails_permanently(served: Served) -> None:
    for chat in ("telegram_1", "console_someone", "console_"):
        with pytest.raises(ChannelSendError) as info:
            await served.channel.send(chat, "x")
        assert info.value.permanent
    with pytest.raises(ChannelSendError):
        await served.channel.typing("telegram_1")
    assert served.channel.pending == 0


async def test_socket_is_private_and_replaces_a_stale_one(paths: KlawPaths) -> None:
    path = paths.console_socket
    path.parent.mkdir(parents=True, exist_ok=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens: what a crash leaves
    os.chmod(path, 0o666)  # a fresh socket is 600, so the mode shows it was replaced
    s = Served(ConsoleChannel(path, user=USER))
    await s.start()
    st = path.lstat()
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    c = await Client.connect(path)
    await c.hello()
    await c.close()
    # A second channel on the same path refuses to steal a live socket.
    with pytest.raises(ConsoleSocketError, match="another process"):
        await ConsoleChannel(path, user=USER).listen(s.on_message)
    assert path.lstat().st_ino == st.st_ino
    await s.stop()


async def _ignore(msg: Incoming) -> None:
    return None


async def test_a_non_socket_at_the_path_is_an_error(paths: KlawPaths) -> None:
    path = paths.console_socket
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("not a socket")
    with pytest.raises(ConsoleSocketError, match="not a socket"):
        await ConsoleChannel(path, user=USER).listen(_ignore)
    assert path.read_text() == "not a socket"


async def test_close_removes_the_socket_and_disconnects(served: Served) -> None:
    c = await Client.connect(served.channel.socket_path)
    await c.hello()
    await _until(lambda: served.channel.connected == 1)
    await served.stop()
    assert not served.channel.socket_path.exists()
    assert await asyncio.wait_for(c.reader.read(), DEADLINE) == b""
    await served.channel.close()  # twice is fine
    await c.close()


async def test_lines_after_listen_stopped_are_refused(served: Served) -> None:
    c = await Client.connect(served.channel.socket_path)
    await c.hello()
    assert served.task is not None
    served.task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await served.task
    served.task = None
    await c.say("too late")
    msg = await c.recv()
    assert msg["type"] == "error" and "not taking messages" in msg["message"]
    assert served.received.empty()
    await c.close()


# --- klaw chat in a pseudo-terminal -------------------------------------------------


class Terminal:
    """`klaw chat` running on a pty; output is read as it comes, with deadlines."""

    subcommand = "chat"

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        self.out = bytearray()
        self.seen = 0  # `expect` searches from here
        self.eof = False
        self.changed = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, *args: str) -> None:
        env = dict(os.environ, TERM="xterm", INPUTRC="/dev/null", COLUMNS="100")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "klaw.cli.app",
            self.subcommand,
            *args,
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            env=env,
            start_new_session=True,
        )
        os.close(self.slave)
        asyncio.get_running_loop().add_reader(self.master, self._on_readable)

    def _on_readable(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the child closed its side
            data = b""
        if not data:
            self.eof = True
            asyncio.get_running_loop().remove_reader(self.master)
        self.out += data
        self.changed.set()

    @property
    def text(self) -> str:
        return self.out.decode(errors="replace")

    async def expect(self, needle: str, timeout: float = DEADLINE) -> None:
        """Waits until `needle` appears after what earlier `expect`s matched."""
        deadline = time.monotonic() + timeout
        data = needle.encode()
        while True:
            i = self.out.find(data, self.seen)
            if i >= 0:
                self.seen = i + len(data)
                return
            left = deadline - time.monotonic()
            if left <= 0 or self.eof:
                raise AssertionError(f"{needle!r} not in the terminal output:\n{self.text}")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    async def exit_code(self) -> int:
        assert self.proc is not None
        try:
            return await asyncio.wait_for(self.proc.wait(), DEADLINE)
        except TimeoutError:
            raise AssertionError(f"klaw chat did not exit; it printed:\n{self.text}") from None

    async def close(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if not self.eof:
            asyncio.get_running_loop().remove_reader(self.master)
        os.close(self.master)


@pytest.fixture
async def term() -> AsyncIterator[Terminal]:
    t = Terminal()
    yield t
    await t.close()


@pytest.fixture
async def echo(served: Served) -> Served:
    served.echo = True
    await served.channel.set_commands([("new", "New session"), ("model", "Show the model")])
    return served


async def test_chat_sends_recalls_history_and_exits_on_ctrl_d(
    echo: Served, term: Terminal, paths: KlawPaths
) -> None:
    await term.start()
    await term.expect("commands: /new /model · /quit or Ctrl-D to leave")
    await term.expect("> ")
    term.type("hello klaw\r")
    await term.expect("echo: hello klaw")
    assert (await echo.next()).content == "hello klaw"
    await term.expect("> ")
    term.type("\x1b[A\r")  # up arrow recalls the line, Enter sends it again
    await term.expect("echo: hello klaw")
    assert (await echo.next()).content == "hello klaw"
    await term.expect("> ")
    term.type("\x04")  # Ctrl-D on an empty line
    assert await term.exit_code() == 0
    history = paths.state_dir / "chat_history"
    assert "hello klaw" in history.read_text().splitlines()
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert echo.received.empty()


async def test_history_is_loaded_at_start(echo: Served, term: Terminal, paths: KlawPaths) -> None:
    history = paths.state_dir / "chat_history"
    history.write_text("from last time\n")
    await term.start()
    await term.expect("> ")
    term.type("\x1b[A\r")
    await term.expect("echo: from last time")
    term.type("/quit\r")
    assert await term.exit_code() == 0
    assert history.read_text().splitlines() == ["from last time", "/quit"]


async def test_a_reply_while_typing_keeps_the_unfinished_line(echo: Served, term: Terminal) -> None:
    await term.start()
    await term.expect("> ")
    term.type("half a thou")
    await term.expect("half a thou")
    await echo.channel.send(CHAT, "pushed meanwhile")
    await term.expect("pushed meanwhile")
    await term.expect("> half a thou")  # the prompt is redrawn with the unfinished line
    term.type("ght\r")
    await term.expect("echo: half a thought")
    assert (await echo.next()).content == "half a thought"
    await term.expect("> ")  # keys typed before readline is back go to the cooked tty
    term.type("\x04")
    assert await term.exit_code() == 0


async def test_typing_hint_and_replies_kept_while_away(echo: Served, term: Terminal) -> None:
    await echo.channel.send(CHAT, "sent while nobody listened")
    await term.start()
    await term.expect("(while you were away)")
    await term.expect("sent while nobody listened")
    await term.expect("> ")
    await echo.channel.typing(CHAT)
    await term.expect("…")
    await echo.channel.send(CHAT, "answer")
    await term.expect("answer")
    await term.expect("> ")
    term.type("\x04")
    assert await term.exit_code() == 0


async def test_quit_is_local_and_ctrl_c_exits_cleanly(echo: Served, term: Terminal) -> None:
    await term.start()
    await term.expect("> ")
    term.type("/exit\r")
    assert await term.exit_code() == 0
    assert echo.received.empty()

    again = Terminal()
    try:
        await again.start()
        await again.expect("> ")
        again.type("unfinished")
        await again.expect("unfinished")
        assert again.proc is not None
        # SIGINT is what Ctrl-C sends. CPython's readline notices a signal only when it
        # interrupts select(): one that lands while a key is being processed waits for
        # the next signal. A user then presses Ctrl-C again; so does this test.
        deadline = time.monotonic() + DEADLINE
        while again.proc.returncode is None and time.monotonic() < deadline:
            again.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(again.proc.wait(), 0.5)
        assert await again.exit_code() == 0
        assert "Traceback" not in again.text
    finally:
        await again.close()


async def test_chat_reports_a_gateway_that_goes_away(echo: Served, term: Terminal) -> None:
    await term.start()
    await term.expect("> ")
    await echo.stop()
    await term.expect("the gateway closed the connection")
    assert await term.exit_code() == 1


async def test_chat_without_a_gateway(paths: KlawPaths) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "klaw.cli.app",
        "chat",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), DEADLINE)
    assert proc.returncode == 1
    assert "the gateway is not running: start it with `klaw gateway`" in err.decode()
    assert out == b""


async def test_chat_from_a_pipe(echo: Served) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "klaw.cli.app",
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(b"hi from a script\n"), DEADLINE)
    assert proc.returncode == 0, err
    assert out.decode().splitlines() == ["echo: hi from a script"]

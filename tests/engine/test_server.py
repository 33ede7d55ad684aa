"""The engine daemon over its real Unix socket: lifecycle, gateway, CLI requests."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import stat
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from engine_helpers import T, peer, running

from klaw.engine import client
from klaw.engine.daemon import run
from klaw.engine.server import Reply
from klaw.lock import EngineLock
from klaw.paths import KlawPaths
from klaw.wire.protocol import (
    MAX_LINE_BYTES,
    Command,
    Error,
    ErrorCode,
    Inbound,
    MemorySearchResult,
    Outbound,
    Register,
    Registered,
    Shutdown,
    Status,
    StatusResult,
)

TS = datetime(2026, 2, 24, 14, 30, tzinfo=UTC)


def inbound(n: int = 1, text: str = "hello") -> Inbound:
    return Inbound(id=f"msg_{n}", channel="telegram", chat_id="telegram_1", ts=TS, content=text)


class Echo:
    """Answers every message with an outbound echo and records what it saw."""

    def __init__(self) -> None:
        self.seen: list[Inbound | Command] = []

    async def handle(self, msg: Inbound | Command, reply: Reply) -> None:
        self.seen.append(msg)
        text = msg.content if isinstance(msg, Inbound) else f"/{msg.name} {msg.args}"
        await reply(
            Outbound(channel=msg.channel, chat_id=msg.chat_id, content=text, reply_to=msg.id)
        )


class Gate:
    """A handler that signals when it starts and finishes only when released."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False

    async def handle(self, msg: Inbound | Command, reply: Reply) -> None:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        await reply(Outbound(channel=msg.channel, chat_id=msg.chat_id, content="done"))


def lock_is_free(paths: KlawPaths) -> bool:
    lock = EngineLock(paths.engine_lock)
    try:
        lock.acquire()
    except Exception:
        return False
    lock.release()
    return True


async def register(p: Any, *channels: str) -> None:
    await p.send(Register(channels=list(channels)))
    assert isinstance(await p.recv(), Registered)


# --- lifecycle ---------------------------------------------------------------


async def test_socket_is_private_and_status_answers(klaw_home: KlawPaths) -> None:
    async with running(klaw_home):
        assert stat.S_IMODE(klaw_home.socket.stat().st_mode) == 0o600
        assert stat.S_ISSOCK(klaw_home.socket.stat().st_mode)
        result = await client.status(klaw_home, timeout=T)
        assert result.pid == os.getpid() and result.version
        assert result.gateway is None and result.memory is False
        assert result.uptime_s >= 0
    assert not klaw_home.socket.exists()
    assert lock_is_free(klaw_home)


async def test_a_second_engine_is_refused(
    klaw_home: KlawPaths, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(klaw_home):
        with caplog.at_level(logging.ERROR, logger="klaw.engine"):
            assert await asyncio.wait_for(run(klaw_home, stop=asyncio.Event()), T) == 1
        assert "another engine is already running" in caplog.text
        assert f"pid {os.getpid()}" in caplog.text
        # the first engine is untouched
        assert (await client.status(klaw_home, timeout=T)).pid == os.getpid()


async def test_a_stale_socket_file_is_replaced(klaw_home: KlawPaths) -> None:
    klaw_home.state_dir.mkdir(parents=True)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(klaw_home.socket))
    s.close()  # the file stays behind, nobody listens: a crashed engine's socket
    with pytest.raises(client.EngineNotRunning, match="klaw engine"):
        await client.status(klaw_home, timeout=T)
    async with running(klaw_home):
        assert (await client.status(klaw_home, timeout=T)).pid == os.getpid()


async def test_a_non_socket_at_the_socket_path_is_left_alone(
    klaw_home: KlawPaths, caplog: pytest.LogCaptureFixture
) -> None:
    klaw_home.state_dir.mkdir(parents=True)
    klaw_home.socket.write_text("mine")
    with caplog.at_level(logging.ERROR, logger="klaw.engine"):
        assert await asyncio.wait_for(run(klaw_home, stop=asyncio.Event()), T) == 1
    assert "not a socket" in caplog.text
    assert klaw_home.socket.read_text() == "mine"
    assert lock_is_free(klaw_home)


async def _spawn_engine() -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from klaw.engine.daemon import main; raise SystemExit(main(with_memory=False))",
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    while True:
        line = await asyncio.wait_for(proc.stderr.readline(), T)
        assert line, "engine subprocess exited before it was ready"
        if b"engine started" in line:
            return proc


async def test_an_engine_killed_by_sigkill_leaves_a_socket_the_next_one_cleans(
    klaw_home: KlawPaths,
) -> None:
    proc = await _spawn_engine()
    assert proc.pid != os.getpid()
    assert (await client.status(klaw_home, timeout=T)).pid == proc.pid
    proc.kill()
    await asyncio.wait_for(proc.communicate(), T)  # drains stderr, reaps the process
    assert proc.returncode == -signal.SIGKILL
    assert klaw_home.socket.exists()
    with pytest.raises(client.EngineNotRunning):
        await client.status(klaw_home, timeout=T)
    async with running(klaw_home):
        assert (await client.status(klaw_home, timeout=T)).pid == os.getpid()


async def test_sigterm_stops_the_engine_cleanly(klaw_home: KlawPaths) -> None:
    proc = await _spawn_engine()
    async with peer(klaw_home) as gw:
        await register(gw, "telegram")
        proc.send_signal(signal.SIGTERM)
        assert isinstance(await gw.recv(), Shutdown)
        assert await gw.at_eof()
    _, stderr = await asyncio.wait_for(proc.communicate(), T)
    assert proc.returncode == 0, stderr.decode()
    assert b"engine stopped" in stderr
    assert not klaw_home.socket.exists()
    assert lock_is_free(klaw_home)


async def test_the_client_says_how_to_start_the_engine(klaw_home: KlawPaths) -> None:
    with pytest.raises(client.EngineNotRunning, match="start it with `klaw engine`"):
        await client.status(klaw_home, timeout=T)
    with pytest.raises(client.EngineNotRunning, match="klaw engine"):
        await asyncio.to_thread(client.call, klaw_home, Status(), T)


# --- bad input ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "code", "ref"),
    [
        (b"{not json\n", ErrorCode.INVALID_JSON, None),
        (b"[1]\n", ErrorCode.INVALID_MESSAGE, None),
        (b'{"type":"teleport","id":"t1"}\n', ErrorCode.UNKNOWN_TYPE, "t1"),
        (b'{"type":"inbound","id":"i1"}\n', ErrorCode.INVALID_MESSAGE, "i1"),
        (b"\xff\xff\n", ErrorCode.INVALID_JSON, None),
        (b'{"type":"x","pad":"' + b"a" * MAX_LINE_BYTES + b'"}\n', ErrorCode.LINE_TOO_LONG, None),
        (b'{"type":"shutdown"}\n', ErrorCode.UNEXPECTED, None),
        (b'{"type":"status","id":"\\ud800"}\n', ErrorCode.INVALID_JSON, None),
        (
            b'{"type":"status","id":"x","a":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
            ErrorCode.INVALID_JSON,
            None,
        ),
    ],
    ids=[
        "json",
        "array",
        "unknown",
        "fields",
        "utf8",
        "oversized",
        "unexpected",
        "lone-surrogate",
        "deep-nesting",
    ],
)
async def test_bad_lines_get_an_error_and_the_connection_lives_on(
    klaw_home: KlawPaths, line: bytes, code: str, ref: str | None
) -> None:
    async with running(klaw_home), peer(klaw_home) as p:
        await p.send(line)
        err = await p.recv()
        assert isinstance(err, Error) and (err.code, err.ref) == (code, ref), err
        await p.send(Status(id="after"))
        ok = await p.recv()
        assert isinstance(ok, StatusResult) and ok.id == "after"


async def test_an_escaped_surrogate_pair_is_fine(klaw_home: KlawPaths) -> None:
    async with running(klaw_home), peer(klaw_home) as p:
        await p.send(b'{"type":"status","id":"\\ud83d\\ude00"}\n')  # ensure_ascii emoji
        ok = await p.recv()
        assert isinstance(ok, StatusResult) and ok.id == "\U0001f600"


async def test_clients_past_the_cap_are_refused_busy(klaw_home: KlawPaths) -> None:
    """Finding 9: no client can hold all of the engine's fds."""

    def tune(server: Any) -> None:
        server.max_clients = 3

    async with running(klaw_home, started=tune), peer(klaw_home) as a:
        async with peer(klaw_home) as b, peer(klaw_home) as c:
            for p in (b, c):  # all three are being served
                await p.send(Status(id="s"))
                assert isinstance(await p.recv(), StatusResult)
            async with peer(klaw_home) as d:
                busy = await d.recv()
                assert isinstance(busy, Error) and busy.code == ErrorCode.BUSY
        # b and c left: there is room again.
        async with peer(klaw_home) as e:
            await e.send(Status(id="e"))
            assert isinstance(await e.recv(), StatusResult)
        await a.send(Status(id="a"))
        assert isinstance(await a.recv(), StatusResult)


async def test_a_silent_client_is_closed_but_the_gateway_never(klaw_home: KlawPaths) -> None:
    """Finding 9: an idle client is closed with `idle`; the registered gateway, which
    is silent for hours between messages, is not."""

    servers: list[Any] = []
    async with running(klaw_home, started=servers.append), peer(klaw_home) as gateway:
        await register(gateway, "telegram")
        servers[0].idle_timeout_s = 0.05  # from now on: the gateway is registered already
        async with peer(klaw_home) as quiet:
            idle = await quiet.recv()
            assert isinstance(idle, Error) and idle.code == ErrorCode.IDLE
        async with peer(klaw_home) as late:
            assert isinstance(await late.recv(), Error)  # it, too, said nothing
        await gateway.send(Status(id="g"))  # silent all along, still served
        assert isinstance(await gateway.recv(), StatusResult)


async def test_inbound_before_register_is_refused(klaw_home: KlawPaths) -> None:
    handler = Echo()
    async with running(klaw_home, handler=handler), peer(klaw_home) as p:
        await p.send(inbound(7))
        err = await p.recv()
        assert isinstance(err, Error) and err.code == ErrorCode.NOT_REGISTERED
        assert err.ref == "msg_7"
    assert handler.seen == []


# --- the gateway -------------------------------------------------------------


async def test_gateway_messages_reach_the_handler_and_replies_come_back(
    klaw_home: KlawPaths,
) -> None:
    handler = Echo()
    async with running(klaw_home, handler=handler), peer(klaw_home) as gw:
        await register(gw, "telegram")
        await gw.send(inbound(1, "Привет"))
        out = await gw.recv()
        assert isinstance(out, Outbound)
        assert (out.chat_id, out.content, out.reply_to) == ("telegram_1", "Привет", "msg_1")
        await gw.send(
            Command(
                id="c1", channel="telegram", chat_id="telegram_1", ts=TS, name="model", args="glm"
            )
        )
        out = await gw.recv()
        assert isinstance(out, Outbound) and out.content == "/model glm"
        status = await client.status(klaw_home, timeout=T)
        assert status.gateway is not None and status.gateway.channels == ["telegram"]
    assert [m.id for m in handler.seen] == ["msg_1", "c1"]


async def test_the_default_handler_says_not_implemented(klaw_home: KlawPaths) -> None:
    async with running(klaw_home), peer(klaw_home) as gw:
        await register(gw)
        await gw.send(inbound(3))
        err = await gw.recv()
        assert isinstance(err, Error)
        assert (err.code, err.ref) == (ErrorCode.NOT_IMPLEMENTED, "msg_3")


async def test_a_failing_handler_reports_internal_and_the_engine_survives(
    klaw_home: KlawPaths,
) -> None:
    class Boom:
        async def handle(self, msg: Inbound | Command, reply: Reply) -> None:
            raise RuntimeError("kaput")

    async with running(klaw_home, handler=Boom()), peer(klaw_home) as gw:
        await register(gw)
        await gw.send(inbound(4))
        err = await gw.recv()
        assert isinstance(err, Error) and (err.code, err.ref) == (ErrorCode.INTERNAL, "msg_4")
        await gw.send(Status(id="s"))
        assert isinstance(await gw.recv(), StatusResult)


async def test_a_second_register_replaces_the_first(klaw_home: KlawPaths) -> None:
    handler = Echo()
    async with running(klaw_home, handler=handler):
        async with peer(klaw_home) as old, peer(klaw_home) as new:
            await register(old, "telegram")
            await register(new, "telegram", "discord")
            err = await old.recv()
            assert isinstance(err, Error) and err.code == ErrorCode.REPLACED
            assert await old.at_eof()
            await new.send(inbound(5))
            out = await new.recv()
            assert isinstance(out, Outbound) and out.reply_to == "msg_5"
            status = await client.status(klaw_home, timeout=T)
            assert status.gateway is not None
            assert status.gateway.channels == ["telegram", "discord"]


# --- graceful shutdown -------------------------------------------------------


async def test_shutdown_tells_the_gateway_and_awaits_in_flight_work(
    klaw_home: KlawPaths,
) -> None:
    gate = Gate()
    stop = asyncio.Event()
    ready = asyncio.Event()
    task = asyncio.create_task(run(klaw_home, handler=gate, stop=stop, ready=ready))
    await asyncio.wait_for(ready.wait(), T)
    async with peer(klaw_home) as gw:
        await register(gw, "telegram")
        await gw.send(inbound(1))
        await asyncio.wait_for(gate.started.wait(), T)
        stop.set()
        assert isinstance(await gw.recv(), Shutdown)
        # new messages are refused while the engine drains
        await gw.send(inbound(2))
        err = await gw.recv()
        assert isinstance(err, Error) and (err.code, err.ref) == (ErrorCode.SHUTTING_DOWN, "msg_2")
        assert not task.done() and klaw_home.socket.exists()
        gate.release.set()
        out = await gw.recv()
        assert isinstance(out, Outbound) and out.content == "done"
        assert await gw.at_eof()
    assert await asyncio.wait_for(task, T) == 0
    assert not gate.cancelled
    assert not klaw_home.socket.exists()
    assert lock_is_free(klaw_home)
    with pytest.raises(client.EngineNotRunning):
        await client.status(klaw_home, timeout=T)


async def test_work_past_the_shutdown_timeout_is_cancelled(
    klaw_home: KlawPaths, caplog: pytest.LogCaptureFixture
) -> None:
    gate = Gate()  # never released
    with caplog.at_level(logging.WARNING, logger="klaw.engine"):
        async with running(klaw_home, handler=gate, shutdown_timeout=0.05) as engine:
            async with peer(klaw_home) as gw:
                await register(gw)
                await gw.send(inbound(9))
                await asyncio.wait_for(gate.started.wait(), T)
                engine.stop.set()
                assert isinstance(await gw.recv(), Shutdown)
                assert await gw.at_eof()
    assert gate.cancelled
    assert "cancelling inbound msg_9" in caplog.text
    assert lock_is_free(klaw_home)


# --- memory ------------------------------------------------------------------


async def test_memory_search_status_and_sessions_with_the_real_memory(
    klaw_home: KlawPaths, memory: Any
) -> None:
    memory.save("The home wifi network is called Lighthouse; the password is on the fridge.")
    memory.save("Dentist appointment with Dr. Novak on March 14.")
    memory.store.upsert_session(
        "telegram_1", "glm/glm-5", "2026-02-24T00:00:00Z", "2026-02-24T00:00:00Z"
    )
    memory.store.upsert_session(
        "telegram_2", "qwen", "2026-02-25T00:00:00Z", "2026-02-25T00:00:00Z"
    )
    (klaw_home.conversations / "telegram_1").mkdir(parents=True)
    (klaw_home.conversations / "telegram_3").mkdir(parents=True)

    async with running(klaw_home, memory_factory=lambda: memory):
        result = await client.memory_search(klaw_home, "wifi password", top_k=2, timeout=T)
        assert isinstance(result, MemorySearchResult)
        assert 1 <= len(result.hits) <= 2
        assert "Lighthouse" in result.hits[0].content
        assert result.hits[0].citation == result.hits[0].source == "manual"

        status = await client.status(klaw_home, timeout=T)
        assert status.memory and status.counts["memory_chunks"] == 2

        listed = await client.sessions(klaw_home, timeout=T)
        by_chat = {s.chat_id: s for s in listed.sessions}
        assert set(by_chat) == {"telegram_1", "telegram_3"}
        assert by_chat["telegram_1"].model == "glm/glm-5"
        assert by_chat["telegram_3"].model is None
        assert (listed.total, listed.unlisted) == (2, 1)
    assert memory.store.closed  # the engine closed the store on its way out


async def test_memory_search_without_memory_is_a_clear_error(klaw_home: KlawPaths) -> None:
    async with running(klaw_home):
        with pytest.raises(client.EngineRequestError, match="without memory") as info:
            await client.memory_search(klaw_home, "anything", timeout=T)
        assert info.value.code == ErrorCode.UNAVAILABLE

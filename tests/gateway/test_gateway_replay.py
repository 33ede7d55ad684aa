"""The reconnect replay and new messages: each reaches the engine once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from klaw.config import GatewayConfig
from klaw.gateway.buffer import Buffer
from klaw.gateway.channels.base import Incoming, OutFile
from klaw.gateway.core import Gateway, GatewayTimings
from klaw.paths import KlawPaths
from klaw.wire.logfile import chat_files, read_jsonl
from klaw.wire.protocol import (
    Command,
    CommandInfo,
    Inbound,
    LineReader,
    Message,
    Registered,
    decode,
    encode,
)

T = 10.0


class QuietChannel:
    """A console-named transport that never receives anything by itself."""

    name = "console"
    admit = None
    max_upload_bytes = 1024

    async def listen(self, on_message: Callable[[Incoming], Awaitable[None]]) -> None:
        await asyncio.Event().wait()

    async def send(
        self,
        chat_id: str,
        text: str,
        *,
        reply_to: str | None = None,
        files: Sequence[OutFile] = (),
    ) -> None:
        pass

    async def typing(self, chat_id: str) -> None:
        pass

    async def set_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        pass

    async def close(self) -> None:
        pass


class RecordingEngine:
    """Answers `register` and records every message a gateway sends."""

    def __init__(self, path: Path, commands: Sequence[CommandInfo] = ()) -> None:
        self.path = path
        self.commands = list(commands)
        self.got: list[Message] = []
        self.changed = asyncio.Event()
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self.server = await asyncio.start_unix_server(self._conn, str(self.path))

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lines = LineReader(reader)
        await lines.readline()
        writer.write(encode(Registered(version="test", pid=1, commands=self.commands)))
        await writer.drain()
        self.writers.append(writer)
        while True:
            line = await lines.readline()
            if line is None:
                break
            self.got.append(decode(line))
            self.changed.set()

    async def wait_for(self, msg_id: str) -> None:
        while not any(getattr(m, "id", None) == msg_id for m in self.got):
            self.changed.clear()
            await self.changed.wait()

    async def close(self) -> None:
        self.server.close()
        for w in self.writers:
            w.close()
        await self.server.wait_closed()


async def test_a_command_typed_during_the_replay_reaches_the_engine_once(
    klaw_home: KlawPaths,
) -> None:
    klaw_home.state_dir.mkdir(parents=True, exist_ok=True)
    Buffer(klaw_home.gateway_buffer).add(
        Inbound(
            id="old", channel="console", chat_id="console_me", ts=datetime.now(UTC), content="hi"
        )
    )
    engine = RecordingEngine(klaw_home.socket)
    await engine.start()
    cfg = GatewayConfig.model_validate({"channels": {"console": {"enabled": True}}})
    gw = Gateway(klaw_home, cfg, [QuietChannel()], timings=GatewayTimings(reconnect_initial_s=0.01))
    replaying = asyncio.Event()
    go_on = asyncio.Event()
    send = gw._send_engine_locked

    async def held(msg: Message) -> None:  # the replay stalls on a busy socket
        await send(msg)
        if getattr(msg, "id", None) == "old":
            replaying.set()
            await go_on.wait()

    gw._send_engine_locked = held  # type: ignore[method-assign]
    stop = asyncio.Event()
    run = asyncio.create_task(gw.run(stop))
    await asyncio.wait_for(replaying.wait(), T)
    typed = asyncio.create_task(
        gw.on_message(
            Incoming(
                id="cmd1",
                channel="console",
                chat_id="console_me",
                ts=datetime.now(UTC),
                content="/new",
                kind="command",
                command="new",
            )
        )
    )
    await asyncio.wait_for(_until(lambda: "cmd1" in gw.buffer), T)  # kept, waiting for the lock
    go_on.set()
    await asyncio.wait_for(typed, T)
    await asyncio.wait_for(engine.wait_for("cmd1"), T)
    stop.set()
    await asyncio.wait_for(run, T)
    await engine.close()
    assert [getattr(m, "id", None) for m in engine.got] == ["old", "cmd1"]


async def _until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await asyncio.sleep(0.01)


async def test_a_skills_command_goes_to_the_engine_as_the_message_the_owner_wrote(
    klaw_home: KlawPaths,
) -> None:
    engine = RecordingEngine(
        klaw_home.socket,
        [CommandInfo(name="new"), CommandInfo(name="image_lab", description="x", prompt=True)],
    )
    klaw_home.state_dir.mkdir(parents=True, exist_ok=True)
    await engine.start()
    cfg = GatewayConfig.model_validate({"channels": {"console": {"enabled": True}}})
    gw = Gateway(klaw_home, cfg, [QuietChannel()], timings=GatewayTimings(reconnect_initial_s=0.01))
    stop = asyncio.Event()
    run = asyncio.create_task(gw.run(stop))
    await asyncio.wait_for(gw.connected.wait(), T)
    for ident, name, text in (("s1", "image_lab", "/image_lab a cat"), ("c1", "new", "/new")):
        await gw.on_message(
            Incoming(
                id=ident, channel="console", chat_id="console_me", ts=datetime.now(UTC),
                content=text, kind="command", command=name, args=text.partition(" ")[2],
            )
        )  # fmt: skip
        await asyncio.wait_for(engine.wait_for(ident), T)
    stop.set()
    await asyncio.wait_for(run, T)
    await engine.close()
    skill, new = engine.got
    assert isinstance(skill, Inbound) and skill.content == "/image_lab a cat"
    assert isinstance(new, Command) and new.name == "new"
    logged = [
        r for f in chat_files(klaw_home.conversations, "console_me") for r in read_jsonl(f).records
    ]
    assert [(r["content"], r.get("type")) for r in logged] == [
        ("/image_lab a cat", None),
        ("/new", "command"),
    ]

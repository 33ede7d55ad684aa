"""The far side of the gateway benchmarks, in a process of its own (as Telegram and
the engine are): the fake Bot API of the tests (`tests/gateway/fake_telegram.py`),
the fake Discord (`tests/gateway/fake_discord.py`, REST and gateway websocket) and a
fake engine on the engine socket, driven over a control socket.

Usage: python gateway_fakes.py ENGINE_SOCKET CONTROL_SOCKET
Prints "url http://127.0.0.1:N discord http://127.0.0.1:M dm ID" once everything
listens (ID: the owner's DM channel on the fake Discord); stops on SIGTERM.

The fake engine answers `register` with `registered` (no commands), stamps every
`inbound` line when it has been read, and stamps `delivered`. Every stamp is
`time.monotonic()` (CLOCK_MONOTONIC, as `Call.at` of the fake Bot API, which is
taken once a request's body has been read and parsed), so all four stamps of a
turn come from one clock in one process.

Control: one JSON object a line, answered with one JSON object a line.

    {"op": "turn", "n": 7, "think_ms": 20, "delivered": true}
        queues a text update (the held getUpdates returns it): "push"; waits for
        its inbound line: "inbound"; waits `think_ms` (the model's time, so the
        gateway's typing call is done); writes an outbound answering it:
        "outbound"; waits for the sendMessage request: "sent"; with "delivered",
        waits for the gateway's `delivered` too: "delivered".
    {"op": "polling", "count": 1, "timeout": 30}
        returns once `count` getUpdates have arrived (an error after `timeout` s)
    {"op": "discord_turn", "n": 7, "think_ms": 20}
        the same as "turn" through the owner's Discord DM (always waits for `delivered`)
    {"op": "discord_connected", "timeout": 30}
        returns once a Discord client has identified on the fake gateway websocket
    {"op": "summary"}                 what was sent, call counts, failed calls
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gateway"))
from fake_discord import FakeDiscord
from fake_telegram import FakeTelegram

from klaw.wire.protocol import Outbound, Registered, encode

OWNER = 100  # the one chat, in allowedChatIds
T = 30.0
TEXT = "Message {n}: when does the plumber come, and what about the invoice?"
# A typical short reply with some Markdown (Klaw sends it as Telegram HTML).
REPLY = (
    "Sure: the plumber comes on **Tuesday at nine**, and I put it in your calendar. "
    "The invoice (`INV-2041`, 180 EUR) is due on the 30th; I can remind you the day "
    "before if you like."
)


class TimedTelegram(FakeTelegram):
    """The fake Bot API, handing each accepted sendMessage's arrival to a queue."""

    def __init__(self) -> None:
        super().__init__()
        self.sends: asyncio.Queue[float] = asyncio.Queue()

    async def _m_sendmessage(self, params: dict[str, Any]) -> dict[str, Any]:
        # `_api` appended this request's Call just before (no await in between).
        at = self.calls[-1].at
        result = await super()._m_sendmessage(params)
        self.sends.put_nowait(at)
        return result


class Fakes:
    def __init__(self) -> None:
        self.tg = TimedTelegram()
        self.dc = FakeDiscord()
        self.dm = 0  # the owner's DM channel on the fake Discord, once started
        self.inbound: asyncio.Queue[tuple[str, float]] = asyncio.Queue()
        self.delivered: dict[str, asyncio.Future[float]] = {}
        self.writer: asyncio.StreamWriter | None = None

    async def engine(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        try:
            while line := await reader.readline():
                at = time.monotonic()
                msg = json.loads(line)
                kind = msg.get("type")
                if kind == "register":
                    writer.write(encode(Registered(version="bench", pid=os.getpid())))
                elif kind == "inbound":
                    self.inbound.put_nowait((msg["id"], at))
                elif kind == "delivered":
                    fut = self.delivered.pop(msg["ref"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(at)
        except ConnectionError:
            pass
        finally:
            if self.writer is writer:
                self.writer = None
            writer.close()

    async def turn(self, n: int, think_ms: float, delivered: bool) -> dict[str, Any]:
        if not self.inbound.empty():
            raise RuntimeError(f"turn {n}: an inbound line arrived unasked")
        t_push = time.monotonic()
        self.tg.text(OWNER, TEXT.format(n=n))
        ident, t_in = await asyncio.wait_for(self.inbound.get(), T)
        await asyncio.sleep(think_ms / 1000)
        out = Outbound(
            channel="telegram",
            chat_id=f"telegram_{OWNER}",
            content=REPLY,
            answers=[ident],
            reply_to=ident,
        )
        line = encode(out)
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        if delivered:
            self.delivered[out.id] = fut
        writer = self.writer
        if writer is None:
            raise RuntimeError(f"turn {n}: nobody is connected to the engine socket")
        t_out = time.monotonic()
        writer.write(line)
        t_sent = await asyncio.wait_for(self.tg.sends.get(), T)
        t_done = await asyncio.wait_for(fut, T) if delivered else None
        return {
            "id": ident,
            "push": t_push,
            "inbound": t_in,
            "outbound": t_out,
            "sent": t_sent,
            "delivered": t_done,
        }

    async def discord_turn(self, n: int, think_ms: float) -> dict[str, Any]:
        """A turn through the fake Discord: the DM → inbound → outbound → the sent
        message → `delivered`."""
        if not self.inbound.empty():
            raise RuntimeError(f"turn {n}: an inbound line arrived unasked")
        t_push = time.monotonic()
        self.dc.message(self.dm, TEXT.format(n=n))
        ident, t_in = await asyncio.wait_for(self.inbound.get(), T)
        await asyncio.sleep(think_ms / 1000)
        out = Outbound(
            channel="discord",
            chat_id=f"discord_{self.dm}",
            content=REPLY,
            answers=[ident],
            reply_to=ident,
        )
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.delivered[out.id] = fut
        writer = self.writer
        if writer is None:
            raise RuntimeError(f"turn {n}: nobody is connected to the engine socket")
        before = len(self.dc.sent)
        t_out = time.monotonic()
        writer.write(encode(out))
        await self.dc.wait_for(lambda: len(self.dc.sent) > before, T)
        t_done = await asyncio.wait_for(fut, T)
        return {
            "id": ident,
            "push": t_push,
            "inbound": t_in,
            "outbound": t_out,
            "sent": self.dc.sent[before].at,
            "delivered": t_done,
        }

    async def control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            req = json.loads(line)
            op = req.pop("op")
            try:
                if op == "turn":
                    res = await self.turn(**req)
                elif op == "polling":
                    count, timeout = req.get("count", 1), req.get("timeout", T)
                    await self.tg.wait_calls("getUpdates", count, timeout=timeout)
                    res = {}
                elif op == "discord_turn":
                    res = await self.discord_turn(**req)
                elif op == "discord_connected":
                    await self.dc.wait_for(lambda: self.dc.connected, req.get("timeout", T))
                    res = {}
                elif op == "summary":
                    res = self.summary()
                else:
                    res = {"error": f"unknown op {op!r}"}
            except Exception as exc:
                res = {"error": f"{type(exc).__name__}: {exc}"}
            writer.write(json.dumps(res).encode() + b"\n")
            await writer.drain()
        writer.close()

    def summary(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for c in self.tg.calls:
            counts[c.method] = counts.get(c.method, 0) + 1
        return {
            "sent": [s.visible for s in self.tg.sent],
            "parse_mode": sorted({str(s.parse_mode) for s in self.tg.sent}),
            "calls": counts,
            "failed": [f"{c.method} {c.status}" for c in self.tg.calls if c.status != 200],
            "discord_sent": [s.content for s in self.dc.sent],
            "discord_failed": [
                f"{c.route} {c.status}" for c in self.dc.calls if c.status not in (200, 204)
            ],
        }


async def main(engine_socket: str, control_socket: str) -> None:
    fakes = Fakes()
    url = await fakes.tg.start()
    discord_url = await fakes.dc.start()
    fakes.dm = fakes.dc.dm()
    Path(engine_socket).parent.mkdir(parents=True, exist_ok=True)
    engine = await asyncio.start_unix_server(fakes.engine, path=engine_socket)
    control = await asyncio.start_unix_server(fakes.control, path=control_socket)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"url {url} discord {discord_url} dm {fakes.dm}", flush=True)
    await stop.wait()
    for server in (engine, control):
        server.close()
    await fakes.tg.close()
    await fakes.dc.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))

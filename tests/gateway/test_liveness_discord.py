"""Discord liveness (issue 27, item 4): the real gateway with the real Discord channel
(discord.py) on the fake Discord, whose websocket stops acknowledging heartbeats, goes
silent, sends garbage or is cut every second time. The session is resumed (or identified
anew), nothing is lost, the owner is told once on Telegram (the fake Bot API), and
`klaw status` shows the channel stale, then ok. Heartbeat intervals and timeouts are made
small through the fake and the channel's parameters; every wait is for an event."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import discord.gateway
import pytest
from fake_discord import FakeDiscord
from fake_telegram import FakeTelegram
from liveness_support import discord_channel, gateway, gateway_yaml, status, telegram_channel

from engine_harness import OWNER, T, engine_running, log_lines, until
from klaw.config import EngineConfig
from klaw.paths import KlawPaths
from scripted_llm import FakeLLM


def logged(paths: KlawPaths, dm: int) -> list[str]:
    return [r["content"] for r in log_lines(paths, f"discord_{dm}") if r["role"] == "user"]


def test_the_keep_alive_attributes_read_are_discord_pys() -> None:
    """`heartbeat.watch_heartbeats` reads these of discord.py's keep-alive thread."""
    import inspect

    source = inspect.getsource(discord.gateway.KeepAliveHandler)
    assert "self._last_ack" in source and "self.interval" in source
    assert "self.latency" in source


async def test_unacknowledged_heartbeats_resume_and_the_owner_is_told_once(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_discord: FakeDiscord,
    fake_telegram: FakeTelegram,
    caplog: pytest.LogCaptureFixture,
) -> None:
    dc, tg = fake_discord, fake_telegram
    dc.heartbeat_ms = 200
    tg.add_chat(OWNER)  # the owner once wrote to the bot: Telegram lets it answer
    dm = dc.dm()
    cfg = gateway_yaml(tg, dc, dm=dm, discord_stale=3)
    tele = telegram_channel(klaw_home, cfg)
    llm.answer("Here.")
    caplog.set_level(logging.INFO, "klaw")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config) as eng,
        gateway(klaw_home, cfg, [discord_channel(klaw_home, cfg), tele], dc) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        await until(lambda: gw.channels["discord"].liveness.last_ok_at is not None)  # type: ignore[attr-defined]
        dc.acks = False  # frames may still come; ACKs do not: a zombie connection
        await dc.wait_for(lambda: dc.resumes >= 1, T)  # closed and resumed
        (notice,) = await tg.wait_sent(OWNER, 1, T)
        assert notice.text.startswith("⚠️ Discord has not answered me")
        await until(lambda: "stale" in {h.state for h in eng.gateway.health})
        assert "channel discord stale: no contact since" in await status()
        dc.message(dm, "still there?")
        dc.acks = True
        (reply,) = await dc.wait_sent(dm, 1, T)
        assert reply.content == "Here."
        await tg.wait_sent(OWNER, 2, T)
        await until(lambda: {h.state for h in eng.gateway.health} == {"ok"})
        assert "channel discord ok" in (await status()).splitlines()
    told = [s.text for s in tg.sent_to(OWNER)]
    assert len(told) == 2, told
    assert told[1].startswith("✅ Discord works again")
    assert logged(klaw_home, dm) == ["still there?"]
    assert any("the connection is a zombie; resuming" in r.getMessage() for r in caplog.records)


async def test_a_silent_gateway_is_resumed_and_nothing_is_lost(
    klaw_home: KlawPaths, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    dm = dc.dm()
    cfg = gateway_yaml(None, dc, dm=dm)
    async with gateway(klaw_home, cfg, [discord_channel(klaw_home, cfg, 1.0)], dc):
        dc.silent = True  # the socket stays open, nothing comes: not even ACKs
        dc.message(dm, "during the silence")
        await dc.wait_for(lambda: not dc.connected, T)  # discord.py gave the socket up
        dc.silent = False
        await dc.wait_for(lambda: dc.resumes >= 1 and dc.connected, T)
        await until(lambda: logged(klaw_home, dm) == ["during the silence"])
    assert dc.identifies == 1  # the session was resumed, not started anew


@pytest.mark.parametrize("kind", ["text", "binary"])
async def test_garbage_on_the_gateway_reconnects_and_nothing_is_lost(
    klaw_home: KlawPaths, fake_discord: FakeDiscord, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    dc = fake_discord
    dm = dc.dm()
    cfg = gateway_yaml(None, dc, dm=dm)
    caplog.set_level(logging.INFO, "klaw")
    async with gateway(klaw_home, cfg, [discord_channel(klaw_home, cfg)], dc):
        dc.message(dm, "before")
        await until(lambda: logged(klaw_home, dm) == ["before"])
        await dc.garbage(kind)
        dc.message(dm, "after")
        await until(lambda: logged(klaw_home, dm) == ["before", "after"])
        await dc.wait_for(lambda: dc.connected, T)
    assert dc.identifies + dc.resumes >= 2  # a new connection was made
    messages = [r.getMessage() for r in caplog.records]
    assert any("the gateway sent what discord.py cannot read" in m for m in messages)
    assert not any("channel discord stopped" in m for m in messages)


async def test_every_second_connection_cut_still_resumes(
    klaw_home: KlawPaths, fake_discord: FakeDiscord
) -> None:
    dc = fake_discord
    dm = dc.dm()
    cfg = gateway_yaml(None, dc, dm=dm)
    async with gateway(klaw_home, cfg, [discord_channel(klaw_home, cfg)], dc):
        dc.cut_every = 2
        for n in range(1, 4):
            dc.drop()
            dc.message(dm, f"message {n}")
            await until(lambda n=n: len(logged(klaw_home, dm)) == n)  # type: ignore[misc]
    assert logged(klaw_home, dm) == [f"message {n}" for n in range(1, 4)]
    assert dc.connections >= 4

"""Telegram liveness (issue 27, item 4): the real gateway with the real Telegram channel on
the fake Bot API, made to hang, drop or answer garbage. A hung long poll is abandoned and
reopened, the failures back off, the channel goes stale after `staleAfter` and the owner
is told once on Discord (the fake Discord), `klaw status` shows it stale, then ok; no
message is lost. Small timeouts come from config and constructor parameters; every wait
is for an event, with a generous timeout."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from fake_discord import FakeDiscord
from fake_telegram import FakeTelegram
from liveness_support import (
    POLL_BACKOFF,
    discord_channel,
    gateway,
    gateway_yaml,
    states,
    status,
    telegram_channel,
)

from engine_harness import CHAT, OWNER, T, engine_running, log_lines, until
from klaw.config import EngineConfig
from klaw.paths import KlawPaths
from scripted_llm import FakeLLM


def poll_waits(caplog: pytest.LogCaptureFixture) -> list[float]:
    """The waits the channel logged after failed polls, in order."""
    return [
        float(r.args[3])  # type: ignore[index]
        for r in caplog.records
        if r.name == "klaw.gateway.telegram" and r.getMessage().startswith("telegram: getUpdates")
    ]


async def test_a_hung_poll_is_reopened_and_the_owner_is_told_on_discord_once(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
    fake_discord: FakeDiscord,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tg, dc = fake_telegram, fake_discord
    dm = dc.dm()
    cfg = gateway_yaml(tg, dc, dm=dm, telegram_stale=3)
    channels = [telegram_channel(klaw_home, cfg), discord_channel(klaw_home, cfg)]
    llm.answer("Still here.")
    caplog.set_level(logging.INFO, "klaw")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config) as eng,
        gateway(klaw_home, cfg, channels, dc) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        await tg.wait_calls("getUpdates", 1, T)
        tg.fault("getUpdates", "hang")
        # Abandoned and reopened: a second poll comes while the first is still unanswered.
        await tg.wait_for(lambda: tg.hanging >= 2, T)
        tg.text(OWNER, "are you there?")  # kept by Telegram meanwhile
        (notice,) = await dc.wait_sent(dm, 1, T)
        assert notice.content.startswith("⚠️ Telegram has not answered me")
        await until(lambda: "stale" in {h.state for h in eng.gateway.health})
        shown = json.loads(await status("--json"))["gateway"]["health"]
        (stale,) = [h for h in shown if h["name"] == "telegram"]
        assert stale["name"] == "telegram"
        assert stale["state"] == "stale"
        assert stale["last_ok"] is not None
        assert "timed out" in stale["detail"]
        assert "channel telegram stale: no contact since" in await status()

        tg.heal()
        (reply,) = await tg.wait_sent(OWNER, 1, T)
        assert reply.text == "Still here."
        await dc.wait_sent(dm, 2, T)
        await until(lambda: {h.state for h in eng.gateway.health} == {"ok"})
        assert "channel telegram ok" in (await status()).splitlines()
        assert states(gw) == {"telegram": "ok", "discord": "ok"}
    sent = [s.content for s in dc.sent_to(dm)]
    assert len(sent) == 2, sent  # told once that it stopped, once that it works again
    assert sent[1].startswith("✅ Telegram works again")
    assert [r["content"] for r in log_lines(klaw_home) if r["role"] == "user"] == ["are you there?"]
    # Repeated stalls back off: each wait is the next step of the backoff.
    waits = poll_waits(caplog)
    assert len(waits) >= 2
    assert waits == [POLL_BACKOFF.delay(n) for n in range(1, len(waits) + 1)]
    assert any("channel telegram is stale" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("kind", ["html", "invalid_json", "truncated", "drop"])
async def test_garbage_makes_the_channel_stale_and_nothing_is_lost(
    klaw_home: KlawPaths,
    fake_telegram: FakeTelegram,
    caplog: pytest.LogCaptureFixture,
    kind: str,
) -> None:
    tg = fake_telegram
    cfg = gateway_yaml(tg, None, telegram_stale=3)  # 1 s polls: 2 s to spare
    caplog.set_level(logging.INFO, "klaw")
    async with gateway(klaw_home, cfg, [telegram_channel(klaw_home, cfg)]) as gw:
        await tg.wait_calls("getUpdates", 1, T)
        tg.fault("getUpdates", kind)
        tg.text(OWNER, "first")
        await until(lambda: states(gw) == {"telegram": "stale"})
        tg.text(OWNER, "second")
        tg.heal()
        await until(lambda: len(log_lines(klaw_home, CHAT)) == 2)
        await until(lambda: states(gw) == {"telegram": "ok"})
    assert [r["content"] for r in log_lines(klaw_home, CHAT)] == ["first", "second"]
    messages = [r.getMessage() for r in caplog.records]
    assert any("no other channel to tell the owner about telegram" in m for m in messages)
    assert sum("channel telegram is stale" in m for m in messages) == 1
    assert sum("channel telegram works again" in m for m in messages) == 1


async def test_every_second_poll_dropped_loses_nothing(
    klaw_home: KlawPaths, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    tg = fake_telegram
    cfg = gateway_yaml(tg, None, telegram_stale=120)
    async with gateway(klaw_home, cfg, [telegram_channel(klaw_home, cfg)]) as gw:
        await tg.wait_calls("getUpdates", 1, T)
        tg.fault("getUpdates", "drop", every=2)
        for n in range(1, 6):
            tg.text(OWNER, f"message {n}")
            await until(lambda n=n: len(log_lines(klaw_home, CHAT)) == n)  # type: ignore[misc]
        assert states(gw) == {"telegram": "ok"}
    assert [r["content"] for r in log_lines(klaw_home, CHAT)] == [
        f"message {n}" for n in range(1, 6)
    ]
    dropped = [c for c in tg.calls_of("getUpdates") if c.status == 0]
    assert dropped  # some polls were really dropped
    assert not any("is stale" in r.getMessage() for r in caplog.records)


async def test_a_channel_that_stopped_is_reported_with_its_reason(
    klaw_home: KlawPaths, fake_telegram: FakeTelegram, fake_discord: FakeDiscord
) -> None:
    tg, dc = fake_telegram, fake_discord
    tg.token = "999:not-this-bot"  # Telegram refuses the configured token: the channel stops
    dm = dc.dm()
    # Long enough that only the stop, never the time, can make it stale here.
    cfg = gateway_yaml(tg, dc, dm=dm, telegram_stale=3600)
    channels = [telegram_channel(klaw_home, cfg), discord_channel(klaw_home, cfg)]
    async with gateway(klaw_home, cfg, channels, dc):
        (notice,) = await dc.wait_sent(dm, 1, T)
    assert "it stopped: Telegram refused the bot token" in notice.content

"""What the liveness tests share: gateway.yaml for the fake Telegram and/or the fake
Discord, their channels with small timeouts, the real gateway run in the test's loop
with a fast liveness check, and `klaw status` run as the CLI runs it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from fake_discord import TOKEN as DISCORD_TOKEN
from fake_discord import FakeDiscord
from fake_telegram import TOKEN as TELEGRAM_TOKEN
from fake_telegram import FakeTelegram

from engine_harness import OWNER, _daemon, until
from klaw.cli.app import app
from klaw.cli.testing import CliRunner
from klaw.config import GatewayConfig
from klaw.gateway.channels.discord.channel import DiscordChannel
from klaw.gateway.channels.telegram.channel import TelegramChannel
from klaw.gateway.core import Gateway, GatewayTimings
from klaw.gateway.daemon import DISCORD_CURSOR
from klaw.gateway.daemon import run as run_gateway
from klaw.paths import KlawPaths
from klaw.retry import Backoff

TIMINGS = GatewayTimings(
    reconnect_initial_s=0.02, reconnect_max_s=0.2, typing_every_s=0.2, liveness_every_s=0.05
)
#: The Telegram channel's waits between failed polls.
POLL_BACKOFF = Backoff(0.05, 2.0, 0.4)


def gateway_yaml(
    tg: FakeTelegram | None,
    dc: FakeDiscord | None,
    *,
    dm: int = 0,
    telegram_stale: int = 300,
    discord_stale: int = 300,
) -> GatewayConfig:
    """Telegram on `tg` for OWNER and Discord on `dc` for the DM `dm` (None: off)."""
    telegram: dict[str, Any] = {"enabled": False}
    if tg is not None:
        telegram = {
            "token": TELEGRAM_TOKEN,
            "apiServer": tg.url,
            "allowedChatIds": [str(OWNER)],
            "staleAfter": telegram_stale,
        }
    discord: dict[str, Any] = {"enabled": False}
    if dc is not None:
        discord = {
            "enabled": True,
            "token": DISCORD_TOKEN,
            "apiServer": dc.url,
            "allowedChatIds": [str(dm)],
            "staleAfter": discord_stale,
        }
    channels = {"telegram": telegram, "discord": discord, "console": {"enabled": False}}
    return GatewayConfig.model_validate({"channels": channels})


def telegram_channel(paths: KlawPaths, cfg: GatewayConfig) -> TelegramChannel:
    """1 s long polls, abandoned 0.5 s later."""
    return TelegramChannel(
        cfg.channels.telegram,
        paths.inbox,
        backoff=POLL_BACKOFF.first,
        max_backoff=POLL_BACKOFF.cap,
        poll_timeout=1,
        poll_margin=0.5,
    )


def discord_channel(
    paths: KlawPaths, cfg: GatewayConfig, heartbeat_timeout: float = 60.0
) -> DiscordChannel:
    return DiscordChannel(
        cfg.channels.discord,
        paths.inbox,
        paths.state_dir / DISCORD_CURSOR,
        backoff=0.01,
        max_backoff=0.05,
        save_every=0.01,
        heartbeat_timeout=heartbeat_timeout,
        watch_every=0.05,
    )


@asynccontextmanager
async def gateway(
    paths: KlawPaths, cfg: GatewayConfig, channels: list[Any], dc: FakeDiscord | None = None
) -> AsyncIterator[Gateway]:
    """The real gateway with `channels`, once started and, with `dc`, once discord.py has
    READY (the fake's side being ready is not enough: a test that cuts the connection
    before READY arrived would see a new session instead of a resumed one)."""
    run = partial(run_gateway, paths, cfg, channels=channels, timings=TIMINGS)
    async with _daemon("gateway", run, lambda: dc is None or dc.connected) as gw:
        for ch in channels:
            if isinstance(ch, DiscordChannel):
                await until(ch._client.is_ready)
        yield gw


def states(gw: Gateway) -> dict[str, str]:
    """The channels' states as the gateway last checked (and told) them."""
    names = [h.name for h in gw.liveness.health().channels]
    return {n: "stale" if n in gw.liveness.stale else "ok" for n in names}


async def status(*args: str) -> str:
    """`klaw status ARGS`'s output (in a thread: the CLI runs its own event loop)."""
    result = await asyncio.to_thread(CliRunner().invoke, app, ["status", *args])
    assert result.exit_code == 0, result.stderr
    return str(result.stdout)

"""`klaw gateway`: the gateway daemon's life cycle (design §2.4, conventions "Daemons").

    lock → config → channels → run until SIGTERM/SIGINT → close channels → release

One gateway at a time (a `flock` on `gateway.lock`): two would both poll Telegram
and both write the logs. The engine may be up or down; the gateway buffers.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence

from klaw.config import GatewayConfig, load_gateway_config
from klaw.daemon import run_daemon, start_failed
from klaw.errors import ConfigError, KlawError
from klaw.gateway.channels.base import Channel
from klaw.gateway.core import Gateway, GatewayTimings
from klaw.lock import ProcessLock
from klaw.paths import KlawPaths

__all__ = ["build_channels", "main", "run"]

log = logging.getLogger("klaw.gateway")

#: The Discord channel's last handled message per chat, in the state dir (a hint for the
#: catch-up after a restart: losing it costs nothing but that catch-up).
DISCORD_CURSOR = "discord-cursor.json"


class GatewayLocked(KlawError):
    """Another gateway is running."""


class GatewayLock(ProcessLock):
    def busy(self, holder: str, what: str) -> KlawError:
        return GatewayLocked(
            f"another gateway is already running ({holder}, lock {self.path}); stop it "
            "first (`systemctl --user stop klaw-gateway`)"
        )


def build_channels(paths: KlawPaths, config: GatewayConfig) -> list[Channel]:
    """The channels gateway.yaml enables (Telegram and Discord only with a token)."""
    channels: list[Channel] = []
    tg = config.channels.telegram
    if tg.active:
        from klaw.gateway.channels.telegram.channel import TelegramChannel, TelegramError

        try:
            channels.append(
                TelegramChannel(
                    tg, paths.inbox, streams_file=paths.state_dir / "telegram-previews.json"
                )
            )
        except TelegramError as exc:
            # A bad token must not take the console down with it.
            log.error("Telegram is off: %s", exc)
    elif tg.enabled:
        log.info("Telegram is off: no bot token (set TELEGRAM_BOT_TOKEN)")
    dc = config.channels.discord
    if dc.active:
        from klaw.gateway.channels.discord.channel import DiscordChannel, DiscordError

        try:
            channels.append(
                DiscordChannel(
                    dc,
                    paths.inbox,
                    paths.state_dir / DISCORD_CURSOR,
                    previews_file=paths.state_dir / "discord-previews.json",
                )
            )
        except DiscordError as exc:
            log.error("Discord is off: %s", exc)
    elif dc.enabled:
        log.warning("Discord is off: no bot token (set DISCORD_BOT_TOKEN)")
    if config.channels.console.enabled:
        from klaw.gateway.channels.console import ConsoleChannel

        channels.append(ConsoleChannel(paths.console_socket))
    return channels


async def run(
    paths: KlawPaths,
    config: GatewayConfig,
    *,
    channels: Sequence[Channel] | None = None,
    stop: asyncio.Event | None = None,
    timings: GatewayTimings | None = None,
    started: Callable[[Gateway], None] | None = None,
) -> int:
    """Runs the gateway until `stop` (or a signal); returns the exit code."""
    lock = GatewayLock(paths.gateway_lock)
    try:
        lock.acquire("a second gateway")
    except GatewayLocked as exc:
        log.error("%s", exc)
        return 1
    except KlawError as exc:  # a read-only or foreign state dir
        return start_failed(log, "gateway", exc)
    try:
        chans = list(channels) if channels is not None else build_channels(paths, config)
        if not chans:
            log.error(
                "no channel is enabled: set TELEGRAM_BOT_TOKEN (or enable Discord and set "
                "DISCORD_BOT_TOKEN), or enable the console channel in gateway.yaml"
            )
            return 1
        gateway = Gateway(paths, config, chans, timings=timings)
        log.info(
            "gateway started (pid %d; channels: %s)", os.getpid(), ", ".join(c.name for c in chans)
        )
        if started is not None:
            started(gateway)
        ok = await run_daemon(gateway.run, stop)
        log.info("gateway stopped")
        return 0 if ok else 1
    except (KlawError, OSError) as exc:
        return start_failed(log, "gateway", exc)
    finally:
        lock.release()


def _with_workspace(paths: KlawPaths) -> KlawPaths:
    """The workspace the engine uses (engine.yaml `workspace`), for the inbox."""
    import dataclasses

    from klaw.config import load_engine_config, resolve_workspace

    try:
        return dataclasses.replace(
            paths, workspace=resolve_workspace(load_engine_config(paths.engine_config))
        )
    except ConfigError as exc:
        log.warning("engine.yaml unreadable (%s); inbox under %s", exc, paths.workspace)
        return paths


def main(paths: KlawPaths | None = None) -> int:
    """Blocking entry point for `klaw gateway`: logs to stderr, returns the exit code."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    paths = paths or KlawPaths.from_env()
    try:
        config = load_gateway_config(paths.gateway_config)
    except ConfigError as exc:
        log.error("%s", exc)
        return 1
    paths = _with_workspace(paths)
    return asyncio.run(run(paths, config))

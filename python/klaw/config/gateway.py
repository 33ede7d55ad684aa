"""gateway.yaml: the channels, voice transcription and the gateway's service unit."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, Field

from klaw.config.base import ChatIds, MemoryMax, PositiveInt, Section, empty_to_none
from klaw.config.loader import Loc, is_secret_key, template, validate
from klaw.paths import KlawPaths

__all__ = [
    "ChannelsConfig",
    "ConsoleConfig",
    "DiscordConfig",
    "GatewayConfig",
    "GatewayServiceConfig",
    "TelegramConfig",
    "TranscriptionConfig",
    "default_gateway_yaml",
    "load_gateway_config",
]


class _ChatChannelConfig(Section):
    """What Telegram and Discord share: a token, the two-way whitelist, live replies."""

    @property
    def active(self) -> bool:
        """Enabled and given a token: the gateway connects to the service."""
        return self.enabled and bool(self.token)

    enabled: bool
    token: str = ""
    api_server: str
    # Telegram chats, Discord DMs and guild channels. Inbound: empty = accept from everyone
    # allowed by pairing; outbound: empty = reject all except replies to the current
    # inbound chat (design §9.2).
    allowed_chat_ids: ChatIds = Field(default_factory=list)
    allow_all: bool = False
    # Show replies while they are written (Telegram: drafts in private chats, else edits;
    # Discord: one message, edited as the reply grows).
    streaming: bool = False
    # Seconds without a successful poll (Telegram) or heartbeat ACK (Discord) before the
    # channel counts as stale: the owner is told on another channel, `klaw status` shows it.
    stale_after: PositiveInt = 300


class TelegramConfig(_ChatChannelConfig):
    enabled: bool = True
    api_server: str = "https://api.telegram.org"


class DiscordConfig(_ChatChannelConfig):
    enabled: bool = False
    # The REST base (…/api/v10 is added) and, through its GET /gateway/bot, the websocket.
    api_server: str = "https://discord.com"


class ConsoleConfig(Section):
    enabled: bool = True


class ChannelsConfig(Section):
    telegram: TelegramConfig = Field(default_factory=TelegramConfig)
    discord: DiscordConfig = Field(default_factory=DiscordConfig)
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)


class GatewayServiceConfig(Section):
    """The systemd unit `klaw service install` writes for the gateway."""

    memory_max: MemoryMax = "200M"


class TranscriptionConfig(Section):
    """Voice notes to text through an OpenAI-compatible `/audio/transcriptions` (the
    gateway transcribes as it takes a message in, like it downloads a photo)."""

    @property
    def active(self) -> bool:
        return bool(self.endpoint)

    endpoint: str = ""  # e.g. https://api.openai.com/v1; empty: voice notes stay files
    api_key: Annotated[str | None, BeforeValidator(empty_to_none)] = None
    model: str = "whisper-1"
    language: str | None = None  # ISO-639-1 hint ("ru"); None: detected
    max_seconds: PositiveInt = 600
    max_mb: PositiveInt = 25  # OpenAI's limit for one file
    timeout_s: PositiveInt = 120


class GatewayConfig(Section):
    channels: ChannelsConfig = Field(default_factory=ChannelsConfig)
    transcription: TranscriptionConfig = Field(default_factory=TranscriptionConfig)
    service: GatewayServiceConfig = Field(default_factory=GatewayServiceConfig)


def default_gateway_yaml() -> str:
    """The commented gateway.yaml that `klaw init` writes."""
    return template("gateway.yaml")


def _gateway_optional(cfg: GatewayConfig, loc: Loc) -> bool:
    return is_secret_key("gateway.yaml", loc)


def load_gateway_config(
    path: Path | None = None, env: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Load and validate gateway.yaml (default: the XDG config path); raise ConfigError."""
    env = os.environ if env is None else env
    path = KlawPaths.from_env(env).gateway_config if path is None else path
    return validate(GatewayConfig, path, env, default_gateway_yaml, _gateway_optional)

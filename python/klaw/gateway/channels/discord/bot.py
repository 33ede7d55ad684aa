"""What the Discord channel's three sides (`inbound`, `commands`, `outbound`) share: the
state `DiscordChannel.__init__` sets up, the records they pass each other, and the
helpers each of them uses (login state, notices, error text without the token)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import aiohttp
import discord

from klaw.errors import KlawError
from klaw.gateway.channels.base import (
    ChannelSendError,
    Incoming,
    OnMessage,
    Redelivery,
    StorageOutage,
    display_name,
    platform_id,
    storable,
)
from klaw.gateway.liveness import Liveness
from klaw.redaction import redact
from klaw.retry import Backoff

log = logging.getLogger("klaw.gateway.discord")

T = TypeVar("T")

MESSAGE_LIMIT: Final = 2000  # characters of `content` (counted in UTF-16 units: never fewer)
#: A bot's upload limit per file where the server has no boost (Discord's default).
UPLOAD_LIMIT: Final = 10 * 1024 * 1024
NOT_SERVED_DM: Final = "This assistant is private: ask its owner for access."
NOT_SERVED_GUILD: Final = "I don't answer in this channel."
_TOKEN = re.compile(r"[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+")
_NO_MENTIONS: Final = discord.AllowedMentions.none()


class DiscordError(KlawError):
    """Discord cannot be used as configured, or an operation other than a send failed.

    The message says what to fix (usually ``channels.discord`` in gateway.yaml or the
    bot's settings in the Discord Developer Portal).
    """


def looks_like_token(token: str) -> bool:
    """A bot token is three base64url parts joined by dots."""
    return _TOKEN.fullmatch(token.strip()) is not None


@dataclass
class _Item:
    """One event of a chat's queue, ordered by its snowflake."""

    key: int
    message: discord.Message | None = None
    command: Incoming | None = None  # a slash command, already normalised


@dataclass
class _Interaction:
    """A slash command waiting for its answer: the reply edits its "thinking…"."""

    interaction: discord.Interaction[discord.Client]
    acked: asyncio.Task[bool]
    expires: float  # loop time after which its token is no longer usable


class Bot:
    """The channel's state, declared for the three sides (`DiscordChannel.__init__`
    assigns it; what one side alone uses is declared there), and the helpers they share."""

    name = "discord"
    admit: Callable[[str], bool] | None
    streaming: bool
    _token: str
    _api: str
    _inbox: Path
    _max_file_size: int
    _backoff: Backoff
    _redelivery: Redelivery
    _catch_up: int
    _save_every: float
    _client: discord.Client
    _on_message: OnMessage | None
    _queues: dict[int, deque[_Item]]
    _workers: dict[int, asyncio.Task[None]]
    _caught_up: asyncio.Event
    _catching: asyncio.Task[None] | None
    _interactions: dict[str, _Interaction]
    _seen: deque[int]  # recent interaction ids
    _command_names: frozenset[str]
    _tasks: set[asyncio.Task[Any]]
    _logged_in: asyncio.Event
    _fatal: str | None
    _files: aiohttp.ClientSession | None
    _saving: asyncio.Future[None] | None  # the cursor write under way
    _outage: StorageOutage
    _closed: bool
    liveness: Liveness  # heartbeat ACKs (`heartbeat`)
    _watch_every: float

    def _refused(self) -> str:
        return (
            "Discord refused the bot token: check channels.discord.token in gateway.yaml "
            "(Developer Portal → your application → Bot → Reset Token)"
        )

    def _fail(self, message: str) -> DiscordError:
        self._fatal = message
        self._logged_in.set()  # wakes sends waiting for the login: they fail now
        return DiscordError(message)

    def _spawn(self, coro: Awaitable[T], name: str) -> asyncio.Task[T]:
        task: asyncio.Task[T] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _notice(self, channel: int, text: str) -> None:
        try:
            await self._client.get_partial_messageable(channel).send(
                content=text, allowed_mentions=_NO_MENTIONS
            )
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            log.warning("discord: notice to %d failed: %s", channel, self._describe(exc))

    def _served(self, chat_id: str) -> bool:
        return self.admit is None or self.admit(chat_id)

    async def _wait_login(self) -> None:
        await self._logged_in.wait()
        if self._fatal is not None:
            raise ChannelSendError(f"Discord is off: {self._fatal}")

    def _send_error(self, exc: Exception, what: str) -> ChannelSendError:
        permanent = not _transient(exc)
        if isinstance(exc, discord.Forbidden):
            advice = "the bot may not write there (blocked, or missing permissions)"
        elif isinstance(exc, discord.NotFound):
            advice = "Discord does not know this channel"
        elif permanent:
            advice = "Discord refused the message"
        else:
            advice = "Discord could not be reached; try again later"
        return ChannelSendError(
            f"{what} failed: {advice}: {self._describe(exc)}", permanent=permanent
        )

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, discord.HTTPException):
            text = f"HTTP {exc.status} (code {exc.code}): {exc.text}"
        else:
            text = str(exc)
        return f"{type(exc).__name__}: {redact(text, self._token, '<token>')}"

    def _platform_chat(self, chat_id: str) -> int:
        try:
            value = platform_id(self.name, chat_id)
            if not value.isdigit():
                raise ValueError(value)
            return int(value)
        except ValueError:
            raise ChannelSendError(
                f"{chat_id!r} is not a Discord chat id (discord_<channel id>)", permanent=True
            ) from None


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, discord.HTTPException):
        return exc.status == 429 or exc.status >= 500
    return isinstance(exc, aiohttp.ClientError | OSError | TimeoutError)


def _name(text: str) -> str | None:
    return display_name(storable(text))

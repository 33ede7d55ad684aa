"""The Discord channel: the gateway websocket in, Markdown replies out (design §2.1, §6.6).

Built on discord.py: its gateway client (heartbeats, RESUME after a dropped connection,
a fresh IDENTIFY when Discord refuses the resume), its REST client with Discord's
per-route rate-limit buckets, and its interactions. What Klaw adds:

* **Order and exactly-once per chat.** discord.py hands each event to a task of its
  own; this channel takes them synchronously in `dispatch` instead, into one queue per
  Discord channel, drained by one worker, so a chat's messages reach the gateway core
  in the order Discord sent them. A message counts as handled, and the chat's cursor
  (`discord-cursor.json`: the last message id per chat) moves past it, only once
  `on_message` returned. A replayed event at or below the cursor is skipped.
* **Nothing lost across a restart.** Discord replays what a resumed session missed, but
  not what happened while no session existed (the gateway was stopped, or Discord
  refused the resume). So on every new session (READY), the chats Klaw serves are read
  back from their history after their cursor, merged into their queues in id order,
  before any of them goes on. A cursor written late only means a message fetched twice:
  the gateway core spots the copy by its id.
* **Who is addressed.** A DM is a private chat. A server ("guild") channel is a group
  (the engine keeps private memory and tools out) and a message there is passed on
  only when it @mentions the bot or replies to one of its messages. Pairing and the
  allowlist are the gateway core's, the same as Telegram's.
* **Slash commands** from engine.yaml `commands` are registered globally (only when the
  list changed); an invocation is acknowledged at once ("thinking…", or a private
  refusal for a chat that is not served) and the engine's answer replaces it.

Replies are Discord Markdown as the model wrote it, cut into 2,000-character parts that
keep code blocks whole (`telegram.format.split_message`), sent with every mention disabled so a
reply can never ping @everyone. Sending retries rate limits (discord.py waits out each
429 and the buckets' own limits), 5xx and network errors until the reply is taken;
403/404/400 are final. Logs go to ``klaw.gateway.discord``, never with message text at
INFO, never with the token.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import discord

from klaw.config import DiscordConfig
from klaw.gateway.channels.base import Redelivery, StorageOutage
from klaw.gateway.channels.discord.bot import (
    MESSAGE_LIMIT,
    NOT_SERVED_DM,
    NOT_SERVED_GUILD,
    UPLOAD_LIMIT,
    DiscordError,
    _Item,
    log,
    looks_like_token,
)
from klaw.gateway.channels.discord.commands import Commands
from klaw.gateway.channels.discord.inbound import Inbound, _Cursors
from klaw.gateway.channels.discord.outbound import Outbound, _DiscordPreviews
from klaw.gateway.channels.previews import PreviewStreams
from klaw.gateway.liveness import Liveness
from klaw.retry import Backoff

__all__ = [
    "MESSAGE_LIMIT",
    "NOT_SERVED_DM",
    "NOT_SERVED_GUILD",
    "UPLOAD_LIMIT",
    "DiscordChannel",
    "DiscordError",
    "looks_like_token",
]


class _Client(discord.Client):
    """discord.py's client, with every event also handed to the channel synchronously
    (discord.py would run each handler as a task of its own: no order between them)."""

    def __init__(self, owner: DiscordChannel, **options: Any) -> None:
        super().__init__(**options)
        self._owner = owner

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        super().dispatch(event, *args, **kwargs)
        try:
            self._owner._event(event, args)
        except Exception:  # raised inside discord.py's parser: it would drop the connection
            log.exception("discord: handling the %s event failed", event)


class DiscordChannel(Inbound, Commands, Outbound):
    """`Channel` over a Discord bot (gateway websocket + REST).

    `inbox` is where attachments are saved (a folder inside the workspace); `cursor_path`
    keeps the last handled message per chat for the catch-up after a restart. Attachments
    over `max_file_size` arrive as ``unsupported=FILE_TOO_LARGE``. A message whose
    `on_message` raised is tried again after `backoff`..`max_backoff`, at most
    `max_deliveries` times (storage errors: until the disk is back; an error of the
    message itself: not again, `Redelivery`), its chat told when it is given up; `catch_up` bounds
    the messages read back per chat on a new session. A gateway that sends nothing for
    `heartbeat_timeout` seconds, or acknowledges no heartbeat for two intervals, is
    closed and the session resumed (`heartbeat`).
    """

    max_upload_bytes = UPLOAD_LIMIT

    def __init__(
        self,
        config: DiscordConfig,
        inbox: Path,
        cursor_path: Path,
        *,
        max_file_size: int = 20 * 1024 * 1024,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        max_deliveries: int = 5,
        catch_up: int = 200,
        save_every: float = 1.0,
        admit: Callable[[str], bool] | None = None,
        previews_file: Path | None = None,
        heartbeat_timeout: float = 60.0,
        watch_every: float = 5.0,
    ) -> None:
        token = config.token.strip()
        if not token:
            raise DiscordError("no Discord bot token: set channels.discord.token in gateway.yaml")
        if not looks_like_token(token):
            raise DiscordError(
                "channels.discord.token in gateway.yaml is not a bot token (expected the "
                "three-part string from the Developer Portal's Bot page)"
            )
        self._token = token
        self._api = config.api_server.rstrip("/")
        self._inbox = inbox
        self._max_file_size = max_file_size
        self._backoff = Backoff(backoff, 2.0, max_backoff)
        self._redelivery = Redelivery(log, "discord", max_deliveries, self._backoff)
        self._catch_up = max(0, catch_up)
        self._save_every = save_every
        self.admit = admit
        self._cursors = _Cursors(cursor_path)
        self._cursors.load()
        #: Show replies while they are written (edits of one message; gateway.yaml).
        self.streaming = config.streaming
        self._preview_api = _DiscordPreviews(self)
        self._previews = PreviewStreams(self._preview_api, previews_file)
        # Voice is not used: don't let discord.py warn about its missing voice libraries.
        discord.VoiceClient.warn_nacl = False
        if hasattr(discord.VoiceClient, "warn_dave"):
            discord.VoiceClient.warn_dave = False
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = True
        intents.message_content = True  # privileged: enabled on the Developer Portal
        self._client = _Client(
            self,
            intents=intents,
            max_messages=None,  # no message cache: replies carry what they quote
            chunk_guilds_at_startup=False,
            member_cache_flags=discord.MemberCacheFlags.none(),
            # A gateway silent this long is closed and resumed by discord.py (`heartbeat`).
            heartbeat_timeout=heartbeat_timeout,
        )
        self._on_message = None
        self._queues = {}
        self._workers = {}
        self._caught_up = asyncio.Event()
        self._caught_up.set()
        self._catching = None
        self._interactions = {}
        self._seen = deque(maxlen=256)  # recent interaction ids
        self._command_names = frozenset()
        self._tasks = set()
        self._logged_in = asyncio.Event()
        self._fatal = None
        self._files = None
        self._saving = None  # the cursor write under way
        self._outage = StorageOutage(log, "discord", self._backoff)
        self._closed = False
        #: Heartbeat ACKs, read every `watch_every` seconds (`heartbeat`); the core watches it.
        self.liveness = Liveness(config.stale_after)
        self._watch_every = watch_every

    def _event(self, event: str, args: tuple[Any, ...]) -> None:
        """Every discord.py event, synchronously, in the order Discord sent them."""
        if self._closed:
            return
        if event == "message" and args and isinstance(args[0], discord.Message):
            message = args[0]
            self._enqueue(message.channel.id, _Item(message.id, message=message))
        elif event == "interaction" and args and isinstance(args[0], discord.Interaction):
            command = self._interaction(args[0])
            if command is not None:
                self._enqueue(*command)
        elif event == "connect":
            # A new session (not a resume): Discord replays nothing from before it.
            self._caught_up.clear()
            if self._catching is not None:
                self._catching.cancel()
            self._catching = self._spawn(self._catch_up_all(), "klaw-discord-catch-up")
        elif event == "resumed":
            log.info("discord: session resumed")
        elif event == "disconnect":
            log.info("discord: disconnected; reconnecting")

    async def close(self) -> None:
        """Stops the workers, saves the cursors and closes the connections; safe twice."""
        if self._closed:
            return
        self._closed = True
        await self._previews.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._client.close()
        if self._files is not None:
            await self._files.close()
        if self._saving is not None:
            await asyncio.gather(self._saving, return_exceptions=True)
        if self._cursors.dirty.is_set():
            await self._save_cursors()

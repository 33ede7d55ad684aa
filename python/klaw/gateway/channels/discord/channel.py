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
import functools
import json
import logging
import re
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import aiohttp
import discord
import discord.gateway
import discord.http
import yarl

from klaw.config import DiscordConfig
from klaw.errors import KlawError
from klaw.fsutil import atomic_write, replace_durably
from klaw.gateway.channels.base import (
    FILE_TOO_LARGE,
    STORAGE_NOTICE,
    ChannelSendError,
    Incoming,
    OnMessage,
    OutFile,
    Redelivery,
    StorageOutage,
    display_name,
    message_in,
    platform_id,
    rejected_notice,
    safe_filename,
    storable,
)
from klaw.gateway.channels.previews import DraftsRefused, PreviewStreams
from klaw.gateway.channels.telegram.format import split_message
from klaw.retry import Backoff, retry
from klaw.wire.protocol import UPLOAD_ATTEMPTS, Attachment, Quote

__all__ = ["MESSAGE_LIMIT", "DiscordChannel", "DiscordError", "looks_like_token"]

log = logging.getLogger("klaw.gateway.discord")

T = TypeVar("T")

MESSAGE_LIMIT: Final = 2000  # characters of `content` (counted in UTF-16 units: never fewer)
#: A bot's upload limit per file where the server has no boost (Discord's default).
UPLOAD_LIMIT: Final = 10 * 1024 * 1024
MAX_COMMANDS: Final = 100  # global slash commands an application may have
NOT_SERVED_DM: Final = "This assistant is private: ask its owner for access."
NOT_SERVED_GUILD: Final = "I don't answer in this channel."
_TOKEN = re.compile(r"[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+")
_COMMAND = re.compile(r"/([A-Za-z0-9_]{1,32})(?:\s+(.*))?", re.DOTALL)
_USER_MENTION = re.compile(r"<@!?([0-9]+)>")
_ROLE_MENTION = re.compile(r"<@&([0-9]+)>")
_CHANNEL_MENTION = re.compile(r"<#([0-9]+)>")
_USER_TYPES: Final = frozenset({discord.MessageType.default, discord.MessageType.reply})
_INTERACTION_TTL_S: Final = 14 * 60.0  # Discord keeps an interaction's token for 15 min
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


@dataclass
class _Cursors:
    """The last handled message id per served chat, saved to `path` lazily."""

    path: Path
    last: dict[int, int] = field(default_factory=dict)
    dm: dict[int, bool] = field(default_factory=dict)
    dirty: asyncio.Event = field(default_factory=asyncio.Event)

    def load(self) -> None:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning(
                "discord: ignoring %s (%s): no catch-up for earlier messages", self.path, exc
            )
            return
        chats = raw.get("chats") if isinstance(raw, dict) else None
        for key, entry in (chats or {}).items():
            try:
                channel, last = int(key), int(entry["last"])
            except (KeyError, TypeError, ValueError):
                continue
            self.last[channel] = last
            self.dm[channel] = bool(entry.get("dm", False))

    def advance(self, channel: int, message: int, dm: bool) -> None:
        if message > self.last.get(channel, 0):
            self.last[channel] = message
            self.dm[channel] = dm
            self.dirty.set()

    def snapshot(self) -> str:
        """The file's content now (taken on the loop: `advance` changes the dicts)."""
        self.dirty.clear()
        chats = {
            str(c): {"last": str(m), "dm": self.dm.get(c, False)} for c, m in self.last.items()
        }
        return json.dumps({"chats": chats}, indent=1)


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


class _DiscordPreviews:
    """Discord's side of streamed replies: no drafts, one message edited (discord.py
    waits out the 429s it is given; Discord allows 5 edits per 5 s in a channel)."""

    name = "discord"
    limit = MESSAGE_LIMIT
    interval_s = 1.0

    def __init__(self, channel: DiscordChannel) -> None:
        self._channel = channel

    def drafts(self, chat: int) -> bool:
        return False

    def interval(self, chat: int, edits: bool) -> float:
        return self.interval_s

    async def draft(self, chat: int, key: str, text: str) -> None:
        raise DraftsRefused("Discord has no drafts")

    async def post(self, chat: int, key: str, text: str) -> int:
        target = self._channel._client.get_partial_messageable(chat)
        options = {"content": text, **_quoting(chat, message_in(f"discord_{chat}", key))}
        sent = await target.send(allowed_mentions=_NO_MENTIONS, **options)
        return int(sent.id)

    async def edit(self, chat: int, message_id: int, text: str) -> None:
        message = self._channel._client.get_partial_messageable(chat).get_partial_message(
            message_id
        )
        await message.edit(content=text, allowed_mentions=_NO_MENTIONS)


class DiscordChannel:
    """`Channel` over a Discord bot (gateway websocket + REST).

    `inbox` is where attachments are saved (a folder inside the workspace); `cursor_path`
    keeps the last handled message per chat for the catch-up after a restart. Attachments
    over `max_file_size` arrive as ``unsupported=FILE_TOO_LARGE``. A message whose
    `on_message` raised is tried again after `backoff`..`max_backoff`, at most
    `max_deliveries` times (storage errors: until the disk is back; an error of the
    message itself: not again, `Redelivery`), its chat told when it is given up; `catch_up` bounds
    the messages read back per chat on a new session.
    """

    name = "discord"
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
        )
        self._on_message: OnMessage | None = None
        self._queues: dict[int, deque[_Item]] = {}
        self._workers: dict[int, asyncio.Task[None]] = {}
        self._caught_up = asyncio.Event()
        self._caught_up.set()
        self._catching: asyncio.Task[None] | None = None
        self._interactions: dict[str, _Interaction] = {}
        self._seen: deque[int] = deque(maxlen=256)  # recent interaction ids
        self._command_names: frozenset[str] = frozenset()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._logged_in = asyncio.Event()
        self._fatal: str | None = None
        self._files: aiohttp.ClientSession | None = None
        self._saving: asyncio.Future[None] | None = None  # the cursor write under way
        self._outage = StorageOutage(log, "discord", self._backoff)
        self._closed = False

    # ------------------------------------------------------------------ running

    async def listen(self, on_message: OnMessage) -> None:
        """Connects and handles events until cancelled; raises `DiscordError` when Discord
        refuses the token or the intents (nothing a retry can fix)."""
        self._on_message = on_message
        saver = self._spawn(self._save_loop(), "klaw-discord-cursor")
        try:
            try:
                await self._login()
                await self._client.connect(reconnect=True)
            except discord.PrivilegedIntentsRequired:
                raise self._fail(
                    "Discord refused the Message Content intent: enable it on the Developer "
                    "Portal (your application → Bot → Privileged Gateway Intents)"
                ) from None
            except discord.ConnectionClosed as exc:
                if exc.code == 4004:
                    raise self._fail(self._refused()) from None
                raise self._fail(
                    f"the Discord gateway closed the connection (code {exc.code}): {exc.reason}"
                ) from None
        finally:
            saver.cancel()

    async def _login(self) -> None:
        """Logs in (GET /users/@me, the application) and finds the websocket URL."""
        failures = 0
        base = f"{self._api}/api/v{discord.http.INTERNAL_API_VERSION}"
        while True:
            # discord.py reads both from class attributes: one bot per process.
            discord.http.Route.BASE = base
            try:
                await self._client.login(self._token)
                _, url, _ = await self._client.http.get_bot_gateway()
            except discord.LoginFailure:
                raise self._fail(self._refused()) from None
            except (
                discord.HTTPException,
                discord.GatewayNotFound,
                aiohttp.ClientError,
                OSError,
                TimeoutError,
            ) as exc:
                failures += 1
                wait = self._backoff.delay(failures)
                log.warning(
                    "discord: logging in failed: %s; retrying in %.1fs", self._describe(exc), wait
                )
                await self._client.http.close()  # login opens a new session each time
                await asyncio.sleep(wait)
                continue
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
            user = self._client.user
            log.info("discord: logged in as %s (%s)", user, user.id if user else "?")
            self._logged_in.set()
            return

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

    # ------------------------------------------------------------------ events

    def _event(self, event: str, args: tuple[Any, ...]) -> None:
        """Every discord.py event, synchronously, in the order Discord sent them."""
        if self._closed:
            return
        if event == "message" and args and isinstance(args[0], discord.Message):
            message = args[0]
            self._enqueue(message.channel.id, _Item(message.id, message=message))
        elif event == "interaction" and args and isinstance(args[0], discord.Interaction):
            self._interaction(args[0])
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

    def _enqueue(self, channel: int, item: _Item) -> None:
        self._queues.setdefault(channel, deque()).append(item)
        self._wake(channel)

    def _wake(self, channel: int) -> None:
        if channel not in self._workers and self._queues.get(channel):
            self._workers[channel] = self._spawn(self._drain(channel), f"klaw-discord-{channel}")

    async def _drain(self, channel: int) -> None:
        """The chat's worker: its events one at a time, in order; ends when none is left."""
        try:
            while True:
                await self._caught_up.wait()
                queue = self._queues.get(channel)
                if not queue:
                    self._queues.pop(channel, None)
                    return
                await self._handle(channel, queue.popleft())
        finally:
            self._workers.pop(channel, None)

    async def _handle(self, channel: int, item: _Item) -> None:
        failures = 0
        while True:
            message = item.message
            if message is not None and message.id <= self._cursors.last.get(channel, 0):
                log.debug("discord: message %s was handled before", message.id)
                return
            try:
                incoming = item.command or await self._normalise(message)
                if incoming is not None and self._on_message is not None:
                    await self._on_message(incoming)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if StorageOutage.caused(exc):
                    # Nothing can be stored: the message stays first in its chat until the
                    # disk is back (the cursor does not move, so a restart fetches it too).
                    await self._storage_outage(channel, item, exc)
                    continue
                failures += 1
                wait = self._redelivery.retry_in(f"event {item.key}", failures, exc)
                if wait is None:
                    self._spawn(self._notice(channel, rejected_notice(exc)), "klaw-discord-notice")
                    break
                await asyncio.sleep(wait)
                continue
            self._outage.stored()
            break
        if message is not None and self._served(f"discord_{channel}"):
            self._cursors.advance(channel, message.id, _is_dm(message.channel))

    async def _storage_outage(self, channel: int, item: _Item, exc: Exception) -> None:
        def tell() -> None:  # sent aside: the chat's queue waits for the disk
            self._spawn(self._notice(channel, STORAGE_NOTICE), "klaw-discord-notice")

        await asyncio.sleep(self._outage.failed(channel, f"event {item.key}", exc, tell))

    async def _notice(self, channel: int, text: str) -> None:
        try:
            await self._client.get_partial_messageable(channel).send(
                content=text, allowed_mentions=_NO_MENTIONS
            )
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            log.warning("discord: notice to %d failed: %s", channel, self._describe(exc))

    def _served(self, chat_id: str) -> bool:
        return self.admit is None or self.admit(chat_id)

    # ------------------------------------------------------------------ catch-up

    async def _catch_up_all(self) -> None:
        """Reads back what the served chats said while no session was open."""
        try:
            for channel in list(self._cursors.last):
                if not self._served(f"discord_{channel}"):
                    continue
                missed = await self._missed(channel)
                if missed:
                    log.info("discord: %d message(s) of discord_%d caught up", len(missed), channel)
                    queued = self._queues.setdefault(channel, deque())
                    items = {i.key: i for i in queued}
                    for m in missed:
                        items.setdefault(m.id, _Item(m.id, message=m))
                    queued.clear()
                    queued.extend(sorted(items.values(), key=lambda i: i.key))
        finally:
            self._caught_up.set()
            for channel in list(self._queues):
                self._wake(channel)

    async def _missed(self, channel: int) -> list[discord.Message]:
        """Messages after the chat's cursor, oldest first (at most `catch_up`, the newest)."""
        cursor = self._cursors.last[channel]
        dm = self._cursors.dm.get(channel, False)
        target = self._client.get_partial_messageable(
            channel, type=discord.ChannelType.private if dm else discord.ChannelType.text
        )
        found: list[discord.Message] = []
        try:
            async for m in target.history(limit=self._catch_up):  # newest first
                if m.id <= cursor:
                    break
                found.append(m)
            else:
                if len(found) >= self._catch_up > 0:
                    log.warning(
                        "discord: more than %d messages of discord_%d were missed; older "
                        "ones are skipped",
                        self._catch_up,
                        channel,
                    )
        except (discord.Forbidden, discord.NotFound) as exc:
            log.warning(
                "discord: cannot read discord_%d back (%s); forgetting it", channel, exc.text
            )
            self._cursors.last.pop(channel, None)
            self._cursors.dirty.set()
            return []
        except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("discord: reading discord_%d back failed: %s", channel, self._describe(exc))
        found.reverse()
        return found

    async def _save_loop(self) -> None:
        """Writes the cursors at most every `save_every` seconds (a cursor is a hint:
        a late one costs a fetched copy, which the gateway recognises)."""
        while True:
            await self._cursors.dirty.wait()
            await self._save_cursors()
            await asyncio.sleep(self._save_every)

    async def _save_cursors(self) -> None:
        """One write at a time, in a thread; cancelling the caller does not cancel a
        write under way (`close` waits for it, then writes what came after)."""
        if self._saving is None or self._saving.done():
            data = self._cursors.snapshot()
            self._saving = asyncio.ensure_future(
                asyncio.to_thread(atomic_write, self._cursors.path, data, mkdir=True)
            )
        try:
            await asyncio.shield(self._saving)
        except OSError as exc:
            log.warning("discord: cannot write %s: %s", self._cursors.path, exc)

    # ------------------------------------------------------------------ normalising

    async def _normalise(self, message: discord.Message | None) -> Incoming | None:
        me = self._client.user
        if message is None or me is None:
            return None
        author = message.author
        if author.id == me.id or author.bot or message.webhook_id is not None:
            return None  # our own messages, other bots, webhooks: never answered
        channel = message.channel
        chat_id = f"discord_{channel.id}"
        ident = f"{chat_id}_{message.id}"
        if message.type not in _USER_TYPES:
            log.debug("discord: skipping service message %s", ident)
            return None
        dm = _is_dm(channel)
        if not dm and not _addressed(message, me.id):
            log.debug("discord: %s is not addressed to the bot", ident)
            return None
        text = storable(_text(message, me.id))
        unsupported: str | None = None
        attachments: list[Attachment] = []
        if message.poll is not None:
            unsupported = "poll"
        elif message.attachments:
            if any(a.size > self._max_file_size for a in message.attachments):
                unsupported = FILE_TOO_LARGE
            elif self._served(chat_id):  # a stranger's files are not downloaded
                for n, att in enumerate(message.attachments):
                    name = ident if len(message.attachments) == 1 else f"{ident}_{n + 1}"
                    attachments.append(await self._save(att, name))
        elif message.stickers and not text.strip():
            unsupported = "sticker"
        elif message.message_snapshots and not text.strip():
            unsupported = "forwarded"
        elif not text.strip():
            log.debug("discord: skipping %s: nothing to pass on", ident)
            return None
        command = self._command(text)
        reply = _quote(message)
        log.debug("discord: message %s (%s)", ident, "dm" if dm else "guild")
        return Incoming(
            id=ident,
            channel=self.name,
            chat_id=chat_id,
            ts=message.created_at,
            content=text,
            kind="command" if command else "inbound",
            command=command[0] if command else "",
            args=command[1] if command else "",
            sender=str(author.id),
            sender_name=_name(author.display_name),
            is_group=not dm,
            reply_to=reply,
            attachments=tuple(attachments),
            unsupported=unsupported,
        )

    def _command(self, text: str) -> tuple[str, str] | None:
        """``/name args`` typed as text, for a registered command name."""
        m = _COMMAND.fullmatch(text.strip())
        if m is None or m[1].lower() not in self._command_names:
            return None
        return m[1].lower(), (m[2] or "").strip()

    async def _save(self, att: discord.Attachment, ident: str) -> Attachment:
        """Streams the attachment into the inbox (durably, before the message is stored)."""
        if self._files is None:
            self._files = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=60)
            )
        self._inbox.mkdir(parents=True, exist_ok=True)
        target = self._inbox / f"{ident}_{safe_filename(att.filename)}"
        partial = target.with_name(target.name + ".part")
        size = 0
        try:
            async with self._files.get(att.url) as resp:
                if resp.status != 200:
                    raise DiscordError(f"downloading {ident} failed: HTTP {resp.status}")
                with partial.open("wb") as fh:
                    async for chunk in resp.content.iter_chunked(64 * 1024):
                        size += len(chunk)
                        if size > self._max_file_size:
                            raise DiscordError(f"{ident} is larger than its declared size")
                        fh.write(chunk)
        except (aiohttp.ClientError, TimeoutError) as exc:
            partial.unlink(missing_ok=True)
            raise DiscordError(f"downloading {ident} failed: {exc}") from exc
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        await asyncio.to_thread(replace_durably, partial, target)
        log.debug("discord: saved %d bytes for %s", size, ident)
        duration = getattr(att, "duration", None)  # a voice message's length (seconds)
        return Attachment(
            path=str(target),
            mime=att.content_type,
            name=_name(att.filename),
            size=size,
            duration=float(duration) if isinstance(duration, int | float) else None,
        )

    # ------------------------------------------------------------------ slash commands

    def _interaction(self, interaction: discord.Interaction[discord.Client]) -> None:
        if interaction.type is not discord.InteractionType.application_command:
            return
        channel = interaction.channel_id
        data: dict[str, Any] = dict(interaction.data or {})
        name = str(data.get("name", "")).lower()
        if channel is None or not name or interaction.id in self._seen:
            return  # a RESUME may replay one: it was acknowledged and queued already
        self._seen.append(interaction.id)
        args = " ".join(
            str(o.get("value", ""))
            for o in data.get("options", []) or []
            if isinstance(o, dict) and o.get("value") is not None
        ).strip()
        chat_id = f"discord_{channel}"
        dm = interaction.guild_id is None
        ident = f"{chat_id}_{interaction.id}"
        user = interaction.user
        incoming = Incoming(
            id=ident,
            channel=self.name,
            chat_id=chat_id,
            ts=interaction.created_at,
            content=f"/{name} {args}".strip(),
            kind="command",
            command=name,
            args=args,
            sender=str(user.id),
            sender_name=_name(user.display_name),
            is_group=not dm,
        )
        served = self._served(chat_id)
        acked = self._spawn(self._acknowledge(interaction, served, dm), "klaw-discord-ack")
        if served:
            loop = asyncio.get_running_loop()
            for key in [k for k, p in self._interactions.items() if p.expires < loop.time()]:
                del self._interactions[key]
            self._interactions[ident] = _Interaction(
                interaction, acked, loop.time() + _INTERACTION_TTL_S
            )
        self._enqueue(channel, _Item(interaction.id, command=incoming))

    async def _acknowledge(
        self, interaction: discord.Interaction[discord.Client], served: bool, dm: bool
    ) -> bool:
        """Answers within Discord's 3 s: "thinking…" (the reply replaces it) or, for a
        chat that is not served, a refusal only its sender sees."""
        try:
            if served:
                await interaction.response.defer(thinking=True)
            else:
                text = NOT_SERVED_DM if dm else NOT_SERVED_GUILD
                await interaction.response.send_message(text, ephemeral=True)
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            log.warning("discord: acknowledging interaction %d failed: %s", interaction.id, exc)
            return False
        return served

    async def set_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        """Registers engine.yaml `commands` as global slash commands (each with one
        optional text option, `args`), unless Discord already has exactly these."""
        self._command_names = frozenset(name for name, _ in commands)
        if len(commands) > MAX_COMMANDS:
            log.warning("discord: only the first %d commands are registered", MAX_COMMANDS)
        wanted = [_command_payload(name, text) for name, text in commands[:MAX_COMMANDS]]
        await self._wait_login()
        app = self._client.application_id
        if app is None:
            raise DiscordError("registering slash commands failed: no application id")
        http = self._client.http
        try:
            current = await http.get_global_commands(app)
            if _command_keys(current) == _command_keys(wanted):
                log.debug("discord: slash commands are up to date")
                return
            await http.bulk_upsert_global_commands(app, wanted)
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            raise DiscordError(f"registering slash commands failed: {self._describe(exc)}") from exc
        log.info("discord: registered %d slash command(s)", len(wanted))

    # ------------------------------------------------------------------ sending

    async def send(
        self,
        chat_id: str,
        text: str,
        *,
        reply_to: str | None = None,
        files: Sequence[OutFile] = (),
    ) -> None:
        """Sends `text` in parts of at most 2,000 characters (code blocks kept whole);
        `files` (at most 10, Discord's limit per message) go with the last part. A reply
        to a slash command replaces its "thinking…"; other replies quote the message
        they answer."""
        channel = self._platform_chat(chat_id)
        parts = split_message(text, MESSAGE_LIMIT) if text.strip() else []
        if not parts and not files:
            log.debug("discord: nothing to send to %s (empty text)", chat_id)
            return
        await self._wait_login()
        key = reply_to
        preview = await self._previews.finish(key)
        if preview is not None and parts and await self._edit_preview(channel, preview, parts[0]):
            parts = parts[1:]
            reply_to = None  # the preview quotes the message already
            if not parts and not files:
                await self._previews.done(key)
                return
        pending = self._interactions.pop(reply_to, None) if reply_to else None
        deferred = pending is not None and await pending.acked
        quoting = _quoting(channel, message_in(chat_id, reply_to) if pending is None else None)
        target = self._client.get_partial_messageable(channel)

        async def post(part: str, first: bool, last: bool) -> None:
            options: dict[str, Any] = {"allowed_mentions": _NO_MENTIONS}
            if part:
                options["content"] = part
            if first:
                options.update(quoting)
            readers = [f.reader() for f in files] if last else []  # fresh for each try
            if readers:
                options["files"] = [
                    discord.File(r, filename=f.name) for r, f in zip(readers, files, strict=True)
                ]
            try:
                await target.send(**options)
            finally:
                for r in readers:
                    r.close()

        count = max(len(parts), 1)
        for index in range(count):
            part = parts[index] if parts else ""
            first, last = index == 0, index == count - 1
            try:
                if first and deferred and pending is not None and not (last and files):
                    loop = asyncio.get_running_loop()
                    if loop.time() < pending.expires and await self._edit(pending, part):
                        continue
                await self._until_sent(
                    f"sending to {chat_id}",
                    functools.partial(post, part, first, last),
                    attempts=UPLOAD_ATTEMPTS if last and files else None,
                )
            except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
                done = f" ({index} of {count} parts delivered)" if index else ""
                raise self._send_error(exc, f"sending to {chat_id}{done}") from exc
        await self._previews.done(key)
        log.debug("discord: sent %d part(s) to %s", count, chat_id)

    async def draft(self, chat_id: str, reply_to: str, text: str) -> None:
        """Shows the reply to `reply_to` as written so far (`klaw.gateway.channels.previews`); not
        for slash commands, whose "thinking…" is their preview."""
        if reply_to in self._interactions or not self._logged_in.is_set():
            return
        self._previews.update(self._platform_chat(chat_id), reply_to, text)

    async def _edit_preview(self, channel: int, message_id: int, part: str) -> bool:
        """The reply's first part into its preview message; False: send it instead."""
        try:
            await self._until_sent(
                "finishing a preview", lambda: self._preview_api.edit(channel, message_id, part)
            )
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            log.warning("discord: could not edit the preview (%s); sending", self._describe(exc))
            return False
        return True

    async def _edit(self, pending: _Interaction, part: str) -> bool:
        """Replaces a slash command's "thinking…" with the first part; False if Discord
        no longer knows the interaction (the part then goes as a message)."""
        try:
            await self._until_sent(
                "answering a slash command",
                lambda: pending.interaction.edit_original_response(
                    content=part, allowed_mentions=_NO_MENTIONS
                ),
            )
        except (discord.NotFound, discord.Forbidden, discord.HTTPException) as exc:
            log.warning(
                "discord: answering a slash command failed (%s); sending it as a message",
                self._describe(exc),
            )
            return False
        return True

    async def _until_sent(
        self, what: str, make: Callable[[], Awaitable[T]], *, attempts: int | None = None
    ) -> T:
        """A reply is not dropped for a temporary failure: rate limits (discord.py has
        waited out each 429 it was given), 5xx and network errors are retried with
        backoff until Discord takes it; 4xx errors are final. A message with files gets
        `attempts` tries (each sends the files again; later replies wait behind it)."""
        return await retry(
            make,
            attempts=attempts,
            backoff=self._backoff,
            retryable=_transient,
            log=log,
            what=f"discord: {what}",
        )

    async def typing(self, chat_id: str) -> None:
        """One "typing…" indicator (Discord shows it for 10 s), not retried."""
        channel = self._platform_chat(chat_id)
        await self._wait_login()
        try:
            await self._client.http.send_typing(channel)
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            raise self._send_error(exc, f"typing in {chat_id}") from exc

    async def _wait_login(self) -> None:
        await self._logged_in.wait()
        if self._fatal is not None:
            raise ChannelSendError(f"Discord is off: {self._fatal}")

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

    # ------------------------------------------------------------------ helpers

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
        return f"{type(exc).__name__}: {text.replace(self._token, '<token>')}"

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


# ---------------------------------------------------------------------- module helpers


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, discord.HTTPException):
        return exc.status == 429 or exc.status >= 500
    return isinstance(exc, aiohttp.ClientError | OSError | TimeoutError)


def _quoting(channel: int, message_id: int | None) -> dict[str, Any]:
    """The options of a message that quotes `message_id` (none for None), still sent if
    that message is gone, without pinging its author."""
    if message_id is None:
        return {}
    reference = discord.MessageReference(
        message_id=message_id, channel_id=channel, fail_if_not_exists=False
    )
    return {"reference": reference, "mention_author": False}


def _is_dm(channel: object) -> bool:
    """A DM; anything else (server channels, threads, unknown kinds) counts as a group,
    so the owner's private memory stays out when in doubt."""
    if isinstance(channel, discord.DMChannel):
        return True
    return (
        isinstance(channel, discord.PartialMessageable)
        and channel.type is discord.ChannelType.private
    )


def _addressed(message: discord.Message, me: int) -> bool:
    """In a server: the bot is @mentioned, or the message replies to one of its own."""
    if any(u.id == me for u in message.mentions):
        return True
    ref = message.reference
    resolved = ref.resolved if ref is not None else None
    return isinstance(resolved, discord.Message) and resolved.author.id == me


def _text(message: discord.Message, me: int) -> str:
    """The content with the leading @bot removed and other mentions as readable names."""
    text = re.sub(rf"^\s*(?:<@!?{me}>\s*)+", "", message.content)
    names = {u.id: u.display_name for u in message.mentions}
    roles = {r.id: r.name for r in message.role_mentions}
    channels = {c.id: getattr(c, "name", None) for c in message.channel_mentions}

    def user(m: re.Match[str]) -> str:
        name = names.get(int(m[1]))
        return f"@{name}" if name else m[0]

    def role(m: re.Match[str]) -> str:
        name = roles.get(int(m[1]))
        return f"@{name}" if name else m[0]

    def chan(m: re.Match[str]) -> str:
        name = channels.get(int(m[1]))
        return f"#{name}" if name else m[0]

    text = _USER_MENTION.sub(user, text)
    text = _ROLE_MENTION.sub(role, text)
    return _CHANNEL_MENTION.sub(chan, text)


def _quote(message: discord.Message) -> Quote | None:
    ref = message.reference
    if ref is None or ref.message_id is None:
        return None
    resolved = ref.resolved
    channel = ref.channel_id or message.channel.id
    if isinstance(resolved, discord.Message):
        return Quote(
            id=f"discord_{channel}_{resolved.id}",
            sender=str(resolved.author.id),
            content=storable(resolved.content),
        )
    return Quote(id=f"discord_{channel}_{ref.message_id}")


def _name(text: str) -> str | None:
    return display_name(storable(text))


def _command_payload(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": 1,  # CHAT_INPUT: a slash command
        "description": (description.strip() or name)[:100],
        "options": [{"type": 3, "name": "args", "description": "arguments", "required": False}],
        "contexts": [0, 1],  # in servers and in DMs with the bot
        "integration_types": [0],  # installed to a server
    }


def _command_keys(commands: Sequence[Any]) -> set[tuple[Any, ...]]:
    """What Klaw sets of each command, to compare with what Discord holds."""
    out: set[tuple[Any, ...]] = set()
    for c in commands:
        if not isinstance(c, dict):
            continue
        options = tuple(
            (o.get("type"), o.get("name"), o.get("description"), bool(o.get("required")))
            for o in c.get("options") or []
            if isinstance(o, dict)
        )
        out.add((c.get("name"), c.get("description"), options))
    return out

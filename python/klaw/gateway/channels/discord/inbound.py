"""Discord messages in: logging in, the events of each chat taken one at a time in
order (`_Item` queues), redelivery, the catch-up after a new session (`_Cursors`) and
normalising a message into an `Incoming` (attachments saved to the inbox)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import aiohttp
import discord
import discord.gateway
import discord.http
import yarl

from klaw.fsutil import atomic_write, replace_durably
from klaw.gateway.channels.base import (
    FILE_TOO_LARGE,
    STORAGE_NOTICE,
    Incoming,
    OnMessage,
    StorageOutage,
    rejected_notice,
    safe_filename,
    storable,
)
from klaw.gateway.channels.discord.bot import Bot, DiscordError, _Item, _name, log
from klaw.gateway.channels.discord.heartbeat import watch_heartbeats
from klaw.retry import Backoff
from klaw.wire.protocol import Attachment, Quote

_COMMAND = re.compile(r"/([A-Za-z0-9_]{1,32})(?:\s+(.*))?", re.DOTALL)
_USER_MENTION = re.compile(r"<@!?([0-9]+)>")
_ROLE_MENTION = re.compile(r"<@&([0-9]+)>")
_CHANNEL_MENTION = re.compile(r"<#([0-9]+)>")
_USER_TYPES: Final = frozenset({discord.MessageType.default, discord.MessageType.reply})


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


class Inbound(Bot):
    """Messages in, per chat in order, exactly once (see the `channel` module)."""

    _cursors: _Cursors

    async def listen(self, on_message: OnMessage) -> None:
        """Connects and handles events until cancelled; raises `DiscordError` when Discord
        refuses the token or the intents (nothing a retry can fix)."""
        self._on_message = on_message
        saver = self._spawn(self._save_loop(), "klaw-discord-cursor")
        watch = self._spawn(
            watch_heartbeats(self._client, self.liveness, self._watch_every), "klaw-discord-acks"
        )
        try:
            try:
                await self._login()
                await self._connect()
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
            watch.cancel()

    async def _connect(self) -> None:
        """discord.py's connection loop (it reconnects and resumes by itself), begun
        again with a fresh IDENTIFY when a frame it cannot read (not JSON, a broken
        zlib stream) escapes it: such a frame would otherwise end the channel."""
        # Each new session costs one of Discord's 1,000 IDENTIFYs a day: the waits grow
        # to 5 minutes, and start small again after 10 quiet minutes.
        backoff = Backoff(self._backoff.first, 2.0, max(self._backoff.cap, 300.0))
        failures = 0
        last = 0.0
        while not self._client.is_closed():
            try:
                await self._client.connect(reconnect=True)
                return
            except (discord.PrivilegedIntentsRequired, discord.ConnectionClosed):
                raise
            except (ValueError, zlib.error, AttributeError, KeyError, TypeError) as exc:
                now = time.monotonic()
                failures = 1 if now - last > 600 else failures + 1
                last = now
                wait = backoff.delay(failures)
                why = f"the gateway sent what discord.py cannot read ({self._describe(exc)})"
                log.warning("discord: %s; connecting again in %.1fs", why, wait)
                self.liveness.failed(why)
                ws = self._client.ws
                if ws is not None:
                    with contextlib.suppress(Exception):
                        await ws.close(4000)
                await asyncio.sleep(wait)

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

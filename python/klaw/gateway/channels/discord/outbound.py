"""Discord replies out: 2,000-character parts sent until Discord takes them, a slash
command's "thinking…" replaced, previews of a reply being written (`_DiscordPreviews`),
typing."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
import discord

from klaw.gateway.channels.base import OutFile, message_in
from klaw.gateway.channels.discord.bot import (
    _NO_MENTIONS,
    MESSAGE_LIMIT,
    Bot,
    T,
    _Interaction,
    _transient,
    log,
)
from klaw.gateway.channels.previews import DraftsRefused, PreviewStreams
from klaw.gateway.channels.telegram.format import split_message
from klaw.retry import retry
from klaw.wire.protocol import UPLOAD_ATTEMPTS


class _DiscordPreviews:
    """Discord's side of streamed replies: no drafts, one message edited (discord.py
    waits out the 429s it is given; Discord allows 5 edits per 5 s in a channel)."""

    name = "discord"
    limit = MESSAGE_LIMIT
    interval_s = 1.0

    def __init__(self, channel: Bot) -> None:
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


class Outbound(Bot):
    """Replies, previews and typing."""

    _preview_api: _DiscordPreviews
    _previews: PreviewStreams

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


def _quoting(channel: int, message_id: int | None) -> dict[str, Any]:
    """The options of a message that quotes `message_id` (none for None), still sent if
    that message is gone, without pinging its author."""
    if message_id is None:
        return {}
    reference = discord.MessageReference(
        message_id=message_id, channel_id=channel, fail_if_not_exists=False
    )
    return {"reference": reference, "mention_author": False}

"""The Telegram channel: long polling in, formatted replies out (design §2.4, §6.6).

It speaks the Bot API through `botapi` (aiohttp, plain JSON) rather than a
framework: aiogram's models of the whole API alone cost ~150 MB of RSS, over the
gateway's whole budget (docs/decisions.md). Updates and messages stay dicts, read with
the small typed helpers at the end of this module.

Polling is our own `getUpdates` loop so that an update is acknowledged (the offset moves
past it) only after `on_message` returned: a crash in between means Telegram delivers it
again, and the gateway dedupes by message id.

Bot API errors are translated here: sending raises `ChannelSendError` (``permanent``
when retrying cannot help), a channel that cannot run at all raises `TelegramError`.
Rate limits (429) and network failures are retried a bounded number of times.
Logs go to ``klaw.gateway.telegram`` and never contain message text at INFO or the token.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeAlias, TypeVar

from klaw.config import TelegramConfig
from klaw.errors import KlawError
from klaw.fsutil import replace_durably
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
from klaw.gateway.channels.telegram.botapi import (
    BotApi,
    BotApiBadRequest,
    BotApiConflict,
    BotApiError,
    BotApiException,
    BotApiForbidden,
    BotApiNetworkError,
    BotApiRetryAfter,
    BotApiServerError,
    BotApiTooLarge,
    BotApiUnauthorized,
    InvalidToken,
)
from klaw.gateway.channels.telegram.format import split_message, to_html, utf16_len, visible_text
from klaw.gateway.channels.telegram.stream import telegram_previews
from klaw.gateway.liveness import Liveness
from klaw.redaction import redact
from klaw.retry import Backoff, retry
from klaw.wire.protocol import (
    MAX_UPLOAD_BYTES,
    UPLOAD_ATTEMPTS,
    UPLOAD_BYTES_PER_S,
    Attachment,
    Quote,
)

__all__ = [
    "FILE_TOO_LARGE",
    "TelegramChannel",
    "TelegramError",
    "safe_filename",
]

log = logging.getLogger("klaw.gateway.telegram")

T = TypeVar("T")
Json: TypeAlias = dict[str, Any]  # a Telegram object (Update, Message, User...) as sent

#: Bot API limits: 10 MB for a photo (50 MB for anything else: MAX_UPLOAD_BYTES), 1,024 for
#: a caption.
PHOTO_UPLOAD_LIMIT: Final = 10 * 1024 * 1024
CAPTION_LIMIT: Final = 1024
# What a message carries: the first of these fields it has (in the order aiogram's
# `Message.content_type` checks them: an animation also has a document, a venue a
# location). Text, photo and document are passed on; the rest is content a user sent that
# we cannot pass on, answered politely by the gateway. A message with none of them is a
# service message (joins, pins, topic changes...) and is skipped without an answer.
_CONTENT: Final = (
    "text",
    "audio",
    "animation",
    "document",
    "game",
    "live_photo",
    "photo",
    "sticker",
    "video",
    "video_note",
    "voice",
    "checklist",
    "contact",
    "venue",
    "location",
    "invoice",
    "paid_media",
    "poll",
    "dice",
    "story",
)
_FILES: Final = frozenset({"photo", "document", "voice", "audio"})
# Of the sizes Telegram offers for a photo (90, 320, 800, 1280, 2560 px), the largest
# whose longest side a vision model takes whole (klaw.engine.images.MAX_IMAGE_SIDE): a
# bigger copy would be downloaded only to be shrunk again.
PHOTO_MAX_SIDE: Final = 1568
_GROUP_TYPES: Final = frozenset({"group", "supergroup"})


class _Outcome(enum.Enum):
    DONE = "done"  # handled, or rejected for good
    RETRY = "retry"  # failed; tried again after its backoff
    STALLED = "stalled"  # storage outage: nothing can be stored, fetch again


class TelegramError(KlawError):
    """Telegram cannot be used as configured, or an operation other than a send failed.

    The message says what to fix (usually ``channels.telegram`` in gateway.yaml).
    """


class TelegramChannel:
    """`Channel` over the Telegram Bot API (long polling).

    `inbox` is where photos and documents are saved (a folder inside the workspace).
    `max_file_size` caps downloads (the Bot API itself serves at most 20 MB); bigger files
    arrive as ``unsupported=FILE_TOO_LARGE``. `attempts` bounds the tries of one API call
    (429 and network errors); `backoff`..`max_backoff` are the waits between network
    retries, also while polling, which never gives up; a 429 longer than `max_retry_after`
    fails the send at once instead of blocking it. An update whose `on_message` raised is
    delivered again, at most `max_deliveries` times, then dropped with an error logged and
    its chat told; at once if the message itself is at fault (`Redelivery`). A long poll
    (Telegram holds it `poll_timeout` seconds) without an answer `poll_margin` seconds
    later is abandoned and another opened after the backoff (`liveness`).
    """

    name = "telegram"
    max_upload_bytes = MAX_UPLOAD_BYTES

    def __init__(
        self,
        config: TelegramConfig,
        inbox: Path,
        *,
        max_file_size: int = 20 * 1024 * 1024,
        poll_timeout: int = 30,
        poll_margin: float = 15.0,
        attempts: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        max_retry_after: float = 60.0,
        max_deliveries: int = 5,
        admit: Callable[[str], bool] | None = None,
        streams_file: Path | None = None,
    ) -> None:
        if not config.token:
            raise TelegramError(
                "no Telegram bot token: set channels.telegram.token in gateway.yaml"
            )
        self._token = config.token
        try:
            self._api = BotApi(config.token, config.api_server)
        except InvalidToken:
            raise TelegramError(
                "channels.telegram.token in gateway.yaml is not a bot token "
                "(expected the 123456:ABC... string from @BotFather)"
            ) from None
        self._inbox = inbox
        #: Show replies while they are written (drafts, else edits; gateway.yaml `streaming`).
        self.streaming = config.streaming
        self._streams = telegram_previews(self._api.call, streams_file)
        self._max_file_size = max_file_size
        self._poll_timeout = poll_timeout
        self._poll_margin = poll_margin
        #: The last answered poll; the gateway core watches it (`klaw.gateway.liveness`).
        self.liveness = Liveness(config.stale_after)
        self._attempts = max(1, attempts)
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._retry_backoff = Backoff(backoff, 2.0, max_backoff)
        self._max_retry_after = max_retry_after
        self._redelivery = Redelivery(log, "telegram", max_deliveries, self._retry_backoff)
        # Whether a chat ("telegram_123") may be served: files of others are not
        # downloaded (the gateway refuses their messages anyway).
        self.admit = admit
        self._username: str | None = None
        self._offset: int | None = None  # next update to fetch: everything below is done
        self._sent_offset: int | None = None  # the offset Telegram has last seen
        self._deliveries: dict[int, int] = {}  # update_id → failed deliveries so far
        self._retry_at: dict[int, float] = {}  # update_id → loop time of its next try
        self._handled: set[int] = set()  # done, but behind one waiting for its retry
        self._notices: set[asyncio.Task[None]] = set()
        self._outage = StorageOutage(log, "telegram", self._retry_backoff)
        self._listening = False
        self._closed = False

    # ------------------------------------------------------------------ receiving

    async def listen(self, on_message: OnMessage) -> None:
        """Polls until cancelled (or closed); raises `TelegramError` if the token is rejected."""
        self._listening = True
        try:
            await self._identify()
            log.info("telegram: polling as @%s", self._username)
            failures = 0
            while not self._closed:
                try:
                    result = await self._api.call(
                        "getUpdates",
                        {
                            "offset": self._offset,
                            "timeout": self._poll_timeout,
                            "allowed_updates": ["message"],
                        },
                        # A poll that hangs (a proxy or NAT dropped it silently) is
                        # abandoned here and a new one opened, after the backoff.
                        timeout=self._poll_timeout + self._poll_margin,
                    )
                except BotApiUnauthorized as exc:
                    raise self._fatal(exc) from None
                except BotApiException as exc:
                    failures += 1
                    self.liveness.failed(self._describe(exc))
                    await self._pause("getUpdates", exc, failures)
                    continue
                self.liveness.ok()
                self._sent_offset = self._offset
                failures = 0
                updates = [u for u in _list(result) if isinstance(u, dict)]
                await self._handle_batch(updates, on_message)
        finally:
            self._listening = False

    async def _identify(self) -> None:
        failures = 0
        while self._username is None:
            try:
                me = await self._api.call("getMe")
            except BotApiUnauthorized as exc:
                raise self._fatal(exc) from None
            except BotApiException as exc:
                failures += 1
                self.liveness.failed(self._describe(exc))
                await self._pause("getMe", exc, failures)
                continue
            self.liveness.ok()
            self._username = (_str(me, "username") if isinstance(me, dict) else None) or ""

    def _fatal(self, exc: BotApiError) -> TelegramError:
        return TelegramError(
            f"Telegram refused the bot token ({self._redact(exc.description)}): check "
            "channels.telegram.token and api_server in gateway.yaml"
        )

    async def _pause(self, what: str, exc: Exception, failures: int) -> None:
        """Waits out the `failures`-th failed poll in a row (Telegram's own wait for a
        429, else the backoff)."""
        if isinstance(exc, BotApiRetryAfter):
            wait = float(exc.retry_after)
        else:
            wait = self._retry_backoff.delay(failures)
        hint = ""
        if isinstance(exc, BotApiConflict):
            hint = " (another instance polls this bot, or a webhook is set)"
        log.warning(
            "telegram: %s failed: %s%s; retrying in %.1fs", what, self._describe(exc), hint, wait
        )
        await asyncio.sleep(wait)

    async def _handle_batch(self, updates: list[Json], on_message: OnMessage) -> None:
        """Handles one getUpdates batch and moves the offset past what is done.

        Telegram's offset acknowledges every update below it, so it never passes an
        update that is not done. One whose handling failed waits for its retry without
        holding up the others: they are handled now and remembered (`_handled`) until
        the offset passes them, and the batch is fetched again at most every second
        until the failed one is due. A storage outage stops the batch: nothing can be
        stored, so it is fetched again from the offset.
        """
        loop = asyncio.get_running_loop()
        waiting: int | None = None  # the oldest update of this batch still to be done
        held: set[int] = set()  # chats with an earlier update still to be done
        delivered = False
        for update in updates:
            update_id = _int(update, "update_id")
            if update_id is None:
                log.warning("telegram: skipping an update without update_id")
                continue
            if update_id in self._handled:
                if waiting is None:
                    self._handled.discard(update_id)
                    self._offset = update_id + 1
                continue
            chat = _chat_of(update)
            due = self._retry_at.get(update_id)
            if (due is not None and due > loop.time()) or chat in held:
                # Its retry is not due, or an earlier message of its chat is not done
                # yet: order within a chat is kept, other chats go on.
                waiting = update_id if waiting is None else waiting
                if chat is not None:
                    held.add(chat)
                continue
            outcome = await self._deliver(update, update_id, on_message)
            if outcome is _Outcome.STALLED:
                return
            delivered = True
            if outcome is _Outcome.RETRY:
                waiting = update_id if waiting is None else waiting
                if chat is not None:
                    held.add(chat)
            elif waiting is None:
                self._offset = update_id + 1
            else:
                self._handled.add(update_id)
        if waiting is not None and not delivered:
            # Only updates waiting for their retry: no busy loop, but new ones from
            # other chats are still fetched (and handled) within a second.
            wait = min(self._retry_at.values(), default=loop.time()) - loop.time()
            await asyncio.sleep(min(max(wait, 0.0), 1.0))

    async def _deliver(self, update: Json, update_id: int, on_message: OnMessage) -> _Outcome:
        """Handles one update: DONE, RETRY (failed, retried later) or STALLED (storage)."""
        try:
            incoming = await self._normalise(update)
            if incoming is not None:
                await on_message(incoming)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not StorageOutage.caused(exc):
                return self._failed(update, update_id, exc)
            # The message could not be stored (disk full, read-only, I/O error): it is
            # not acknowledged, so Telegram keeps it, and it is fetched again until the
            # disk is back. Nothing else can be stored meanwhile either.
            await self._storage_outage(update, update_id, exc)
            return _Outcome.STALLED
        self._outage.stored()
        self._deliveries.pop(update_id, None)
        self._retry_at.pop(update_id, None)
        return _Outcome.DONE

    async def _storage_outage(self, update: Json, update_id: int, exc: Exception) -> None:
        chat_id = _chat_of(update)

        def tell() -> None:  # sent aside: the update loop waits for the disk
            if chat_id is not None:
                self._notify_aside(chat_id, STORAGE_NOTICE)

        what = f"update {update_id} (it stays with Telegram)"
        await asyncio.sleep(self._outage.failed(chat_id, what, exc, tell))

    def _notify_aside(self, chat_id: int, text: str) -> None:
        """Sends a notice without holding up the update loop."""
        task = asyncio.create_task(self._notice(chat_id, text))
        self._notices.add(task)
        task.add_done_callback(self._notices.discard)

    async def _notice(self, chat_id: int, text: str) -> None:
        try:
            await self._api.call("sendMessage", {"chat_id": chat_id, "text": text})
        except BotApiException as err:
            log.warning("telegram: notice to %s failed: %s", chat_id, err)

    def _failed(self, update: Json, update_id: int, exc: Exception) -> _Outcome:
        """An update whose handling raised (not a storage error): retried later, or
        rejected (`Redelivery`) and its chat told."""
        failures = self._deliveries.get(update_id, 0) + 1
        wait = self._redelivery.retry_in(f"update {update_id}", failures, exc)
        if wait is not None:
            self._deliveries[update_id] = failures
            self._retry_at[update_id] = asyncio.get_running_loop().time() + wait
            return _Outcome.RETRY
        self._deliveries.pop(update_id, None)
        self._retry_at.pop(update_id, None)
        chat_id = _chat_of(update)
        if chat_id is not None:
            self._notify_aside(chat_id, rejected_notice(exc))
        return _Outcome.DONE

    async def _normalise(self, update: Json) -> Incoming | None:
        msg = _obj(update, "message")
        if msg is None:
            return None
        chat = _obj(msg, "chat") or {}
        chat_id, message_id = _int(chat, "id"), _int(msg, "message_id")
        if chat_id is None or message_id is None:
            log.warning("telegram: skipping a message without chat or message id")
            return None
        kind = next((k for k in _CONTENT if msg.get(k)), None)
        ident = f"telegram_{chat_id}_{message_id}"
        attachments: list[Attachment] = []
        unsupported: str | None = None
        admitted = self.admit is None or self.admit(f"telegram_{chat_id}")
        if kind in _FILES and not admitted:
            pass  # passed on without the file: the gateway answers with pairing or nothing
        elif kind in _FILES:
            attachment = await self._save_file(msg, ident)
            if attachment is None:
                unsupported = FILE_TOO_LARGE
            else:
                attachments.append(attachment)
        elif kind is None:
            log.debug("telegram: skipping service message %s", ident)
            return None
        elif kind != "text":
            unsupported = kind
        elif not isinstance(msg.get("text"), str):
            # Not what the Bot API sends: answering it as an empty message helps nobody.
            log.warning("telegram: skipping %s: its text is not a string", ident)
            return None
        text = _str(msg, "text")
        entities = _list(msg.get("entities" if text is not None else "caption_entities"))
        if text is None:
            text = _str(msg, "caption") or ""
        command = self._command(text, entities)
        user = _obj(msg, "from")
        sender = _int(user, "id") if user else None
        log.debug("telegram: update %s: %s %s", _int(update, "update_id"), kind, ident)
        return Incoming(
            id=ident,
            channel=self.name,
            chat_id=f"telegram_{chat_id}",
            ts=_date(msg),
            content=text,
            kind="command" if command else "inbound",
            command=command[0] if command else "",
            args=command[1] if command else "",
            sender=str(sender) if sender is not None else None,
            sender_name=_full_name(user) if user else None,
            is_group=_str(chat, "type") in _GROUP_TYPES,
            reply_to=_quote(msg),
            attachments=tuple(attachments),
            unsupported=unsupported,
        )

    def _command(self, text: str, entities: Sequence[Any]) -> tuple[str, str] | None:
        """``/name@bot args`` → (name, args) when a bot_command entity starts the text."""
        head = next(
            (
                e
                for e in entities
                if isinstance(e, dict) and e.get("type") == "bot_command" and _int(e, "offset") == 0
            ),
            None,
        )
        length = _int(head, "length") if head is not None else None
        if length is None:
            return None
        word = _utf16_prefix(text, length)
        name, _, mention = word[1:].partition("@")
        if mention and mention.lower() != (self._username or "").lower():
            return None  # /cmd@other_bot in a group is for another bot: plain text to us
        return name.lower(), text[len(word) :].strip()

    async def _save_file(self, msg: Json, ident: str) -> Attachment | None:
        """Downloads the photo (the largest size within PHOTO_MAX_SIDE and the cap) or
        document; None if too big."""
        photo = [p for p in _list(msg.get("photo")) if isinstance(p, dict) and _str(p, "file_id")]
        if photo:
            fitting = [p for p in photo if (_int(p, "file_size") or 0) <= self._max_file_size]
            if not fitting:
                return None

            def area(p: Json) -> int:
                return (_int(p, "width") or 0) * (_int(p, "height") or 0)

            def side(p: Json) -> int:
                return max(_int(p, "width") or 0, _int(p, "height") or 0)

            within = [p for p in fitting if side(p) <= PHOTO_MAX_SIDE]
            best = max(within, key=area) if within else min(fitting, key=area)
            photo_id = _str(best, "file_id") or ""
            return await self._download(photo_id, ident, "photo.jpg", None, "image/jpeg")
        voice = _obj(msg, "voice")
        doc = voice or _obj(msg, "audio") or _obj(msg, "document")
        doc_id = _str(doc, "file_id")
        if doc is None or doc_id is None:
            return None
        if (_int(doc, "file_size") or 0) > self._max_file_size:
            return None
        mime = _str(doc, "mime_type") or ("audio/ogg" if voice is not None else None)
        name = _str(doc, "file_name") or ("voice.ogg" if voice is not None else None)
        saved = await self._download(doc_id, ident, name, name, mime)
        duration = _int(doc, "duration")
        if saved is not None and duration is not None and (voice is not None or "audio" in msg):
            saved = saved.model_copy(update={"duration": float(duration)})
        return saved

    async def _download(
        self, file_id: str, ident: str, name: str | None, original: str | None, mime: str | None
    ) -> Attachment | None:
        try:
            info = await self._call(
                "getFile", lambda: self._api.call("getFile", {"file_id": file_id})
            )
        except BotApiBadRequest as exc:
            if "too big" in exc.description.lower():
                return None
            raise TelegramError(f"getFile failed: {self._describe(exc)}") from exc
        except BotApiException as exc:
            raise TelegramError(f"getFile failed: {self._describe(exc)}") from exc
        info = info if isinstance(info, dict) else {}
        if (_int(info, "file_size") or 0) > self._max_file_size:
            return None
        file_path = _str(info, "file_path")
        if not file_path:
            raise TelegramError("getFile returned no file_path; the file cannot be downloaded")
        self._inbox.mkdir(parents=True, exist_ok=True)
        target = self._inbox / f"{ident}_{safe_filename(name)}"
        partial = target.with_name(target.name + ".part")
        try:
            size = await self._api.download(file_path, partial, self._max_file_size)
        except BotApiException as exc:
            raise TelegramError(f"downloading {ident} failed: {self._describe(exc)}") from exc
        if size is None:
            return None
        # Durable before the message that names it is stored (off the loop: the fsync
        # of a 20 MB file takes a while on an SD card).
        await asyncio.to_thread(replace_durably, partial, target)
        log.debug("telegram: saved %d bytes for %s", size, ident)
        return Attachment(path=str(target), mime=mime, name=display_name(original), size=size)

    # ------------------------------------------------------------------ sending

    async def draft(self, chat_id: str, reply_to: str, text: str) -> None:
        """Shows the reply to `reply_to` as written so far (see `stream`)."""
        self._streams.update(self._platform_chat(chat_id), reply_to, text)

    async def send(
        self,
        chat_id: str,
        text: str,
        *,
        reply_to: str | None = None,
        files: Sequence[OutFile] = (),
    ) -> None:
        """Sends `text` as HTML parts; a part Telegram cannot parse goes as plain text.
        A reply that was shown while written is edited into its preview message.

        `files` follow, each as a photo (an image Telegram can show, up to 10 MB; else
        a document) or a document. One file with a short text (a caption fits 1,024
        characters) goes as one message: the file with the text under it.
        """
        chat = self._platform_chat(chat_id)
        caption = ""
        short = text.strip() and utf16_len(text) <= CAPTION_LIMIT  # Telegram counts UTF-16
        if len(files) == 1 and reply_to is None and short:
            caption, text = text, ""
        await self._send_text(chat_id, chat, text, reply_to)
        reply = message_in(chat_id, reply_to) if not text.strip() else None
        for index, f in enumerate(files):
            try:
                await self._send_file(chat, f, caption if index == 0 else "", reply)
            except BotApiException as exc:
                done = f" ({index} of {len(files)} files delivered)" if index else ""
                raise self._send_error(exc, f"sending {f.name!r} to {chat_id}{done}") from exc
            reply = None
        if files:
            log.debug("telegram: sent %d file(s) to %s", len(files), chat_id)

    async def _send_file(self, chat: int, f: OutFile, caption: str, reply: int | None) -> None:
        params: Json = {"chat_id": chat}
        if reply is not None:
            params["reply_parameters"] = {"message_id": reply, "allow_sending_without_reply": True}
        if f.image and f.mime != "image/gif" and f.size <= PHOTO_UPLOAD_LIMIT:
            try:
                await self._upload_captioned("sendPhoto", "photo", params, f, caption)
                return
            except BotApiBadRequest as exc:  # dimensions, a format it cannot read...
                log.info("telegram: not taken as a photo (%s); sending a document", exc.description)
        await self._upload_captioned("sendDocument", "document", params, f, caption)

    async def _upload_captioned(
        self, method: str, field: str, params: Json, f: OutFile, caption: str
    ) -> None:
        # Time for the bytes at a slow home uplink (~64 KB/s) on top of the usual timeout.
        timeout = self._api.timeout + f.size / UPLOAD_BYTES_PER_S

        async def upload(fields: Json) -> None:
            async def once() -> None:
                with f.reader() as data:
                    file = (f.name, f.mime, data)
                    await self._api.upload(method, fields, field, file, timeout=timeout)

            # Bounded, unlike a text reply: each try sends the whole file again, and the
            # chat's later replies wait behind it. The engine hears of the failure.
            await self._call(method, once, attempts=UPLOAD_ATTEMPTS)

        if not caption.strip():
            await upload(params)
            return
        await self._formatted(
            caption,
            lambda text, mode: upload({**params, "caption": text, "parse_mode": mode}),
            "caption",
        )

    async def _formatted(
        self, text: str, send: Callable[[str, str | None], Awaitable[T]], what: str
    ) -> T:
        """`send(text, parse_mode)` with `text` as Telegram HTML, and again as it is if
        Telegram cannot parse that HTML; only the plain text when the HTML would show
        nothing (Telegram would call it empty)."""
        html = to_html(text)
        if visible_text(html).strip():
            try:
                return await send(html, "HTML")
            except BotApiBadRequest as exc:
                if "can't parse entities" not in exc.description.lower():
                    raise
                log.warning("telegram: %s HTML rejected (%s); as plain text", what, exc.description)
        return await send(text, None)

    async def _send_text(self, chat_id: str, chat: int, text: str, reply_to: str | None) -> None:
        preview = await self._streams.finish(reply_to)
        parts = split_message(text)
        if not parts:
            log.debug("telegram: nothing to send to %s (empty text)", chat_id)
            return
        reply = message_in(chat_id, reply_to)
        start = 0
        if preview is not None and await self._edit_into(chat, preview, parts[0]):
            start = 1
        for index, part in enumerate(parts[start:], start):
            params = None
            if index == 0 and reply is not None:
                params = {"message_id": reply, "allow_sending_without_reply": True}
            try:
                await self._send_part(chat, part, params)
            except BotApiException as exc:
                done = f" ({index} of {len(parts)} parts delivered)" if index else ""
                raise self._send_error(exc, f"sending to {chat_id}{done}") from exc
        await self._streams.done(reply_to)
        log.debug("telegram: sent %d part(s) to %s", len(parts), chat_id)

    async def _edit_into(self, chat: int, message_id: int, part: str) -> bool:
        """The reply's first part into its preview message; False: send it instead (the
        preview is gone, or too old to edit)."""

        async def edit(text: str, mode: str | None) -> None:
            params = {"chat_id": chat, "message_id": message_id, "text": text, "parse_mode": mode}
            await self._call(
                "editMessageText", functools.partial(self._api.call, "editMessageText", params)
            )

        try:
            await self._formatted(part, edit, "preview")
        except BotApiBadRequest as exc:
            if "not modified" in exc.description.lower():
                return True
            log.warning("telegram: could not edit the preview (%s); sending", exc.description)
            return False
        except BotApiException as exc:
            log.warning("telegram: could not edit the preview (%s); sending", exc)
            return False
        return True

    async def _send_part(self, chat: int, part: str, reply: Json | None) -> None:
        await self._formatted(
            part, lambda text, mode: self._send_message(chat, text, mode, reply), "message"
        )

    async def _send_message(
        self, chat: int, text: str, parse_mode: str | None, reply: Json | None
    ) -> None:
        params = {
            "chat_id": chat,
            "text": text,
            "parse_mode": parse_mode,
            "reply_parameters": reply,
        }
        await self._call(
            "sendMessage", lambda: self._api.call("sendMessage", params), until_sent=True
        )

    async def typing(self, chat_id: str) -> None:
        """One "typing…" action, not retried (the gateway repeats it anyway)."""
        chat = self._platform_chat(chat_id)
        try:
            await self._api.call("sendChatAction", {"chat_id": chat, "action": "typing"})
        except BotApiException as exc:
            raise self._send_error(exc, f"typing in {chat_id}") from exc

    async def set_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        """setMyCommands; an empty description becomes the name (Telegram requires one)."""
        menu = [
            {"command": name, "description": (description.strip() or name)[:256]}
            for name, description in commands
        ]
        try:
            await self._call(
                "setMyCommands", lambda: self._api.call("setMyCommands", {"commands": menu})
            )
        except BotApiException as exc:
            raise TelegramError(
                f"registering the command menu failed: {self._describe(exc)}"
            ) from exc

    async def close(self) -> None:
        """Acknowledges handled updates and closes the HTTP session.

        Cancel `listen` first; a `listen` still running stops after its current poll.
        """
        if self._closed:
            return
        self._closed = True
        for task in list(self._notices):
            task.cancel()
        await self._streams.close()
        if not self._listening and self._offset is not None and self._offset != self._sent_offset:
            # Without this the last batch would be delivered again after a restart.
            with contextlib.suppress(BotApiException):
                await self._api.call(
                    "getUpdates", {"offset": self._offset, "limit": 1, "timeout": 0}, timeout=5
                )
        await self._api.close()

    # ------------------------------------------------------------------ helpers

    async def _call(
        self,
        what: str,
        make: Callable[[], Awaitable[T]],
        *,
        until_sent: bool = False,
        attempts: int | None = None,
    ) -> T:
        """Runs one API call, retrying 429s and network/server errors.

        Most calls get `attempts` tries, and a 429 longer than `max_retry_after` fails at
        once (`attempts` overrides the count). A reply (`until_sent`) is never dropped for a
        temporary error: it is retried
        until Telegram takes it, waiting out any `retry_after` however long and backing
        off to `max_backoff` between network or 5xx failures; only a permanent error
        (403 blocked, 400 chat not found...) ends it.
        """

        def wait_for(exc: BaseException) -> float | None:
            return exc.retry_after if isinstance(exc, BotApiRetryAfter) else None

        return await retry(
            make,
            attempts=None if until_sent else (attempts or self._attempts),
            backoff=self._retry_backoff,
            retryable=lambda exc: isinstance(
                exc, BotApiRetryAfter | BotApiNetworkError | BotApiServerError
            ),
            wait_for=wait_for,
            max_wait=None if until_sent else self._max_retry_after,
            log=log,
            what=f"telegram: {what}",
        )

    def _send_error(self, exc: BotApiException, what: str) -> ChannelSendError:
        migrated = isinstance(exc, BotApiError) and exc.migrate_to_chat_id is not None
        permanent = migrated or isinstance(
            exc, BotApiForbidden | BotApiBadRequest | BotApiUnauthorized | BotApiTooLarge
        )
        if isinstance(exc, BotApiForbidden):
            advice = "the bot was blocked or removed from the chat"
        elif isinstance(exc, BotApiError) and exc.migrate_to_chat_id is not None:
            advice = f"the group became a supergroup: use telegram_{exc.migrate_to_chat_id}"
        elif isinstance(exc, BotApiRetryAfter):
            advice = f"rate limited for {exc.retry_after:g}s"
        elif permanent:
            advice = "Telegram refused the message"
        else:
            advice = "Telegram could not be reached; try again later"
        return ChannelSendError(
            f"{what} failed: {advice}: {self._describe(exc)}", permanent=permanent
        )

    def _describe(self, exc: Exception) -> str:
        text = exc.description if isinstance(exc, BotApiError) else str(exc)
        return f"{type(exc).__name__}: {self._redact(text)}"

    def _redact(self, text: str) -> str:
        return redact(text, self._token, "<token>")

    def _platform_chat(self, chat_id: str) -> int:
        try:
            return int(platform_id(self.name, chat_id))
        except ValueError:
            raise ChannelSendError(
                f"{chat_id!r} is not a Telegram chat id (telegram_<number>)", permanent=True
            ) from None


# ---------------------------------------------------------------------- module helpers


def _quote(msg: Json) -> Quote | None:
    reply = _obj(msg, "reply_to_message")
    if reply is None or (
        msg.get("is_topic_message") and reply.get("forum_topic_created") is not None
    ):
        return None  # in forum topics every message "replies" to the topic's first one
    quote = _obj(msg, "quote")
    if quote is not None:
        quoted = _str(quote, "text") or ""
    else:
        quoted = _str(reply, "text") or _str(reply, "caption") or ""
    user = _obj(reply, "from")
    sender = _int(user, "id") if user is not None else None
    chat = _obj(reply, "chat") or {}
    return Quote(
        id=f"telegram_{_int(chat, 'id')}_{_int(reply, 'message_id')}",
        sender=str(sender) if sender is not None else None,
        content=quoted,
    )


def _utf16_prefix(text: str, units: int) -> str:
    """The first `units` UTF-16 code units of `text` (entity offsets are in UTF-16)."""
    count = 0
    for i, ch in enumerate(text):
        if count >= units:
            return text[:i]
        count += 2 if ord(ch) > 0xFFFF else 1
    return text


def _date(msg: Json) -> datetime:
    """The message's ``date`` (Unix seconds) as an aware UTC datetime."""
    value = msg.get("date")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    return datetime.now(UTC)


def _full_name(user: Json) -> str:
    """ "First Last", as Telegram clients show a user."""
    first, last = _str(user, "first_name") or "", _str(user, "last_name")
    return f"{first} {last}" if last else first


# Typed reads of Telegram objects: a field of the wrong type reads as missing.


def _obj(obj: Json | None, key: str) -> Json | None:
    value = obj.get(key) if obj is not None else None
    return value if isinstance(value, dict) else None


def _str(obj: Json | None, key: str) -> str | None:
    value = obj.get(key) if obj is not None else None
    if not isinstance(value, str):
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = storable(value)
    return value


def _int(obj: Json | None, key: str) -> int | None:
    value = obj.get(key) if obj is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _chat_of(update: Json) -> int | None:
    return _int(_obj(_obj(update, "message"), "chat"), "id")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []

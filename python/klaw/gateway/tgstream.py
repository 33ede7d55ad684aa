"""A reply shown on Telegram while it is being written (`streaming: true`).

Two ways, as Telegram allows:

- **Drafts** (private chats): `sendMessageDraft` animates a 30-second preview in the
  chat; the final `sendMessage` replaces it. Nothing is left behind if the gateway dies
  mid-stream: the preview expires and the reply comes once, as a message.
- **Edits** (groups, and private chats where drafts are refused): one message is sent
  with the first text and edited as the reply grows; the final reply is edited into
  it. Its message id is kept in a small file until then, so a gateway restarted
  mid-stream still edits that message instead of sending the reply a second time.

Previews are best effort: a failed preview call is logged and the reply still goes out
whole, as without streaming. Each chat gets at most one preview call per interval
(Telegram allows about one message per second per chat, 20 per minute in a group).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from klaw.fsutil import atomic_write
from klaw.gateway.botapi import (
    BotApiBadRequest,
    BotApiError,
    BotApiException,
    BotApiRetryAfter,
)

__all__ = ["DRAFT_INTERVAL_S", "EDIT_INTERVAL_S", "GROUP_EDIT_INTERVAL_S", "TelegramStreams"]

log = logging.getLogger("klaw.gateway.telegram")

DRAFT_INTERVAL_S: Final = 0.5
EDIT_INTERVAL_S: Final = 1.0
GROUP_EDIT_INTERVAL_S: Final = 3.0
MAX_PREVIEW: Final = 4096  # Telegram's limit for one message; a longer preview is cut
Call = Callable[[str, dict[str, Any]], Awaitable[Any]]


@dataclass
class _Stream:
    chat: int
    key: str  # the inbound id the reply answers
    edits: bool  # edit a message (else drafts)
    interval: float
    text: str = ""  # the latest text wanted on screen
    shown: str = ""
    message_id: int | None = None
    next_at: float = 0.0
    task: asyncio.Task[None] | None = None
    closed: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class TelegramStreams:
    """The previews of the replies being written, and the edit-mode message ids that
    must survive a restart (`marks`: a JSON file; None keeps them in memory)."""

    def __init__(self, call: Call, marks: Path | None = None) -> None:
        self._call = call
        self._marks_path = marks
        self._marks: dict[str, list[int]] = self._load()
        self._streams: dict[str, _Stream] = {}
        self._no_drafts: set[int] = set()  # chats where sendMessageDraft was refused
        # Replies already sent: a draft arriving after its reply is not shown again.
        self._finished: dict[str, None] = {}

    def update(self, chat: int, key: str, text: str) -> None:
        """The reply to `key` now reads `text`: show it when the chat's interval allows."""
        s = self._streams.get(key)
        if s is None:
            if key in self._finished:
                return
            edits = chat < 0 or chat in self._no_drafts or key in self._marks
            interval = (
                GROUP_EDIT_INTERVAL_S
                if chat < 0
                else EDIT_INTERVAL_S
                if edits
                else DRAFT_INTERVAL_S
            )
            s = self._streams[key] = _Stream(chat, key, edits, interval)
            if key in self._marks:
                s.message_id = self._marks[key][1]
        if s.closed:
            return
        s.text = text
        if s.task is None or s.task.done():
            s.task = asyncio.create_task(self._flush(s), name=f"klaw-tg-preview-{key}")

    async def finish(self, key: str | None) -> int | None:
        """Stops the preview of `key`'s reply before the reply itself goes out; returns the
        message to edit it into (edit mode), None to send it as usual."""
        if key is None:
            return None
        self._finished[key] = None
        if len(self._finished) > 256:
            del self._finished[next(iter(self._finished))]
        s = self._streams.pop(key, None)
        if s is not None:
            s.closed = True
            if s.task is not None:
                # A call in flight ends first (its message id is needed); a wait for
                # the rate limit does not.
                if not s.lock.locked():
                    s.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await s.task
            return s.message_id
        mark = self._marks.get(key)
        return mark[1] if mark else None

    def done(self, key: str | None) -> None:
        """The reply to `key` was delivered: its edit mark goes."""
        if key is not None and self._marks.pop(key, None) is not None:
            self._save()

    async def close(self) -> None:
        """Stops every preview. A call in flight is let finish (bounded by the HTTP
        timeout): a preview message sent but not yet marked would be sent again by the
        next gateway instead of being edited."""
        tasks = []
        for s in list(self._streams.values()):
            s.closed = True
            if s.task is not None and not s.task.done():
                if not s.lock.locked():
                    s.task.cancel()
                tasks.append(s.task)
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ internals

    async def _flush(self, s: _Stream) -> None:
        while not s.closed and s.text != s.shown:
            wait = s.next_at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # the platform's rate limit, not a race
            text = s.text[:MAX_PREVIEW]
            async with s.lock:
                if s.closed:
                    return
                try:
                    await self._show(s, text)
                    s.shown = s.text
                except BotApiRetryAfter as exc:
                    s.next_at = time.monotonic() + exc.retry_after
                    continue
                except BotApiException as exc:
                    refused = isinstance(exc, BotApiError) and exc.status in (400, 404)
                    if not s.edits and refused:
                        # Drafts are refused here (an older Bot API server, a chat kind
                        # without them): edit a message instead.
                        log.info("telegram: no drafts in %s (%s); editing", s.chat, exc)
                        self._no_drafts.add(s.chat)
                        s.edits, s.interval = True, EDIT_INTERVAL_S
                        continue
                    if isinstance(exc, BotApiBadRequest) and "not modified" in str(exc).lower():
                        s.shown = s.text
                    else:
                        log.warning("telegram: preview in %s stopped: %s", s.chat, exc)
                        return
            s.next_at = time.monotonic() + s.interval

    async def _show(self, s: _Stream, text: str) -> None:
        if not s.edits:
            await self._call(
                "sendMessageDraft",
                {"chat_id": s.chat, "draft_id": _draft_id(s.key), "text": text},
            )
        elif s.message_id is None:
            sent = await self._call("sendMessage", {"chat_id": s.chat, "text": text})
            s.message_id = int(sent["message_id"])
            self._marks[s.key] = [s.chat, s.message_id]
            await asyncio.to_thread(self._save)
        else:
            await self._call(
                "editMessageText",
                {"chat_id": s.chat, "message_id": s.message_id, "text": text},
            )

    def _load(self) -> dict[str, list[int]]:
        if self._marks_path is None:
            return {}
        try:
            data = json.loads(self._marks_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("telegram: %s unreadable (%s); starting without it", self._marks_path, exc)
            return {}
        if not isinstance(data, dict):
            return {}
        return {
            str(k): [int(v[0]), int(v[1])]
            for k, v in data.items()
            if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v)
        }

    def _save(self) -> None:
        if self._marks_path is not None:
            atomic_write(self._marks_path, json.dumps(self._marks))


def _draft_id(key: str) -> int:
    """A stable non-zero draft id per reply (drafts with one id animate into each other)."""
    return zlib.crc32(key.encode()) % 2_000_000_000 + 1

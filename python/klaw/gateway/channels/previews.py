"""A reply shown while it is being written (`streaming: true`), for any channel.

Two ways, as the platform allows (the channel's `PreviewApi` says which):

- **Drafts**: an ephemeral preview the platform shows and drops by itself (Telegram's
  `sendMessageDraft`); the final reply is sent as usual and replaces it. Nothing is
  left behind if the gateway dies mid-stream.
- **Edits**: one message is sent with the first text and edited as the reply grows;
  the final reply is edited into it. Its message id is kept in a small file until
  then (`marks`), so a gateway restarted mid-stream still edits that message instead
  of sending the reply a second time.

Previews are best effort: a failed preview call is logged and the reply still goes out
whole, as without streaming. Each chat gets at most one preview call per interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from klaw.fsutil import atomic_write

__all__ = ["DraftsRefused", "PreviewApi", "PreviewRetry", "PreviewStreams", "Unchanged"]

log = logging.getLogger("klaw.gateway")


class PreviewRetry(Exception):
    """The platform asked to wait `after` seconds (a rate limit)."""

    def __init__(self, after: float) -> None:
        super().__init__(f"retry after {after:g} s")
        self.after = after


class DraftsRefused(Exception):
    """This chat (or server) has no drafts: edit a message instead."""


class Unchanged(Exception):
    """The message already shows this text."""


class PreviewApi(Protocol):
    """What a channel does for previews; platform errors other than the three above
    end the preview of that reply (the reply itself is unaffected)."""

    name: str
    limit: int  # the longest preview; longer text is cut

    def drafts(self, chat: int) -> bool: ...

    def interval(self, chat: int, edits: bool) -> float: ...

    async def draft(self, chat: int, key: str, text: str) -> None: ...

    async def post(self, chat: int, key: str, text: str) -> int:
        """Sends the preview message (quoting the inbound `key` where the platform can)."""
        ...

    async def edit(self, chat: int, message_id: int, text: str) -> None: ...


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


class PreviewStreams:
    """The previews of the replies being written, and the edit-mode message ids that
    must survive a restart (`marks`: a JSON file; None keeps them in memory)."""

    def __init__(self, api: PreviewApi, marks: Path | None = None) -> None:
        self._api = api
        self._marks_path = marks
        self._marks: dict[str, list[int]] = self._load()
        self._streams: dict[str, _Stream] = {}
        self._no_drafts: set[int] = set()  # chats where drafts were refused
        # Replies already sent: a draft arriving after its reply is not shown again.
        self._finished: dict[str, None] = {}

    def update(self, chat: int, key: str, text: str) -> None:
        """The reply to `key` now reads `text`: show it when the chat's interval allows."""
        s = self._streams.get(key)
        if s is None:
            if key in self._finished:
                return
            edits = not self._api.drafts(chat) or chat in self._no_drafts or key in self._marks
            s = self._streams[key] = _Stream(chat, key, edits, self._api.interval(chat, edits))
            if key in self._marks:
                s.message_id = self._marks[key][1]
        if s.closed:
            return
        s.text = text
        if s.task is None or s.task.done():
            name = f"klaw-{self._api.name}-preview-{key}"
            s.task = asyncio.create_task(self._flush(s), name=name)

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

    async def done(self, key: str | None) -> None:
        """The reply to `key` was delivered: its edit mark goes (written off the loop:
        the file is fsynced)."""
        if key is not None and self._marks.pop(key, None) is not None:
            await asyncio.to_thread(self._save)

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
            text = s.text[: self._api.limit]
            async with s.lock:
                if s.closed:
                    return
                try:
                    await self._show(s, text)
                    s.shown = s.text
                except PreviewRetry as exc:
                    s.next_at = time.monotonic() + exc.after
                    continue
                except DraftsRefused as exc:
                    log.info("%s: no drafts in %s (%s); editing", self._api.name, s.chat, exc)
                    self._no_drafts.add(s.chat)
                    s.edits, s.interval = True, self._api.interval(s.chat, True)
                    continue
                except Unchanged:
                    s.shown = s.text
                except Exception as exc:
                    log.warning("%s: preview in %s stopped: %s", self._api.name, s.chat, exc)
                    return
            s.next_at = time.monotonic() + s.interval

    async def _show(self, s: _Stream, text: str) -> None:
        if not s.edits:
            await self._api.draft(s.chat, s.key, text)
        elif s.message_id is None:
            s.message_id = await self._api.post(s.chat, s.key, text)
            self._marks[s.key] = [s.chat, s.message_id]
            await asyncio.to_thread(self._save)
        else:
            await self._api.edit(s.chat, s.message_id, text)

    def _load(self) -> dict[str, list[int]]:
        if self._marks_path is None:
            return {}
        try:
            data = json.loads(self._marks_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("%s unreadable (%s); starting without it", self._marks_path, exc)
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

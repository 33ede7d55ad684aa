"""Streamed replies: the text a model has written so far, sent to the gateway as
`draft` messages while the turn runs (channels with `streaming: true`).

Drafts are a preview and nothing else: not logged, not buffered, not confirmed. The
`outbound` that ends the turn is the reply, exactly as without streaming, so a draft
lost on the way (no gateway, a dropped connection) costs nothing but the preview.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final, Protocol

from klaw.wire.protocol import Draft

__all__ = ["DRAFT_INTERVAL_S", "DraftSink", "DraftStream"]

#: At most this often per reply over the socket; each channel throttles further to its
#: platform's limits (Telegram edits: about one per second per chat).
DRAFT_INTERVAL_S: Final = 0.25


class DraftSink(Protocol):
    """The engine server, as the pipeline sees it."""

    def streams(self, channel: str) -> bool: ...

    async def draft(self, msg: Draft) -> None: ...


class DraftStream:
    """One turn's preview: `delta` appends model text, `reset` starts over (a new tool
    round, or a fallback model after a failure mid-stream, whose text replaces the
    half answer instead of following it)."""

    def __init__(
        self,
        sink: DraftSink,
        *,
        channel: str,
        chat_id: str,
        reply_to: str,
        interval_s: float = DRAFT_INTERVAL_S,
    ) -> None:
        self._sink = sink
        self._channel = channel
        self._chat_id = chat_id
        self._reply_to = reply_to
        self._interval = interval_s
        self._text = ""
        self._sent_at = -interval_s  # the first delta goes out at once
        self._later: asyncio.Task[None] | None = None
        self.sent = 0  # drafts handed to the sink (for tests and logs)

    @property
    def text(self) -> str:
        return self._text

    async def delta(self, text: str) -> None:
        self._text += text
        if self._later is not None or not self._text.strip():
            return  # a send is due: it takes the latest text
        wait = self._sent_at + self._interval - time.monotonic()
        if wait <= 0:
            await self._send()
        else:
            # Throttled: the text so far still goes out once the interval is over, even
            # if the model pauses (a slow tool round, a gated test) before its next delta.
            self._later = asyncio.create_task(self._send_after(wait))

    async def reset(self) -> None:
        self._cancel()
        self._text = ""
        self._sent_at = -self._interval

    def close(self) -> None:
        """The turn is over (its outbound follows): no draft may come after it."""
        self._cancel()

    def _cancel(self) -> None:
        if self._later is not None:
            self._later.cancel()
            self._later = None

    async def _send_after(self, wait: float) -> None:
        await asyncio.sleep(wait)  # the throttle interval, not a race
        self._later = None
        await self._send()

    async def _send(self) -> None:
        self._sent_at = time.monotonic()
        self.sent += 1
        await self._sink.draft(
            Draft(
                channel=self._channel,
                chat_id=self._chat_id,
                reply_to=self._reply_to,
                content=self._text,
            )
        )

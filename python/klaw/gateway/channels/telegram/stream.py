"""Telegram's side of streamed replies (`klaw.gateway.channels.previews`): `sendMessageDraft` in
private chats (a 30-second animated preview; the final `sendMessage` replaces it),
edits of one message in groups and where drafts are refused.

Intervals follow Telegram's limits: about one message per second per chat, 20 per
minute in a group.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from klaw.gateway.channels.base import message_in
from klaw.gateway.channels.previews import DraftsRefused, PreviewRetry, PreviewStreams, Unchanged
from klaw.gateway.channels.telegram.botapi import BotApiBadRequest, BotApiError, BotApiRetryAfter

__all__ = ["DRAFT_INTERVAL_S", "EDIT_INTERVAL_S", "GROUP_EDIT_INTERVAL_S", "telegram_previews"]

DRAFT_INTERVAL_S: Final = 0.5
EDIT_INTERVAL_S: Final = 1.0
GROUP_EDIT_INTERVAL_S: Final = 3.0
Call = Callable[[str, dict[str, Any]], Awaitable[Any]]


class _TelegramPreviews:
    name = "telegram"
    limit = 4096  # one message; a longer preview is cut

    def __init__(self, call: Call) -> None:
        self._call = call

    def drafts(self, chat: int) -> bool:
        return chat > 0  # private chats (groups have negative ids)

    def interval(self, chat: int, edits: bool) -> float:
        if chat < 0:
            return GROUP_EDIT_INTERVAL_S
        return EDIT_INTERVAL_S if edits else DRAFT_INTERVAL_S

    async def draft(self, chat: int, key: str, text: str) -> None:
        params = {"chat_id": chat, "draft_id": _draft_id(key), "text": text}
        try:
            await self._request("sendMessageDraft", params)
        except BotApiError as exc:
            # 400/404: drafts are refused here (an older self-hosted Bot API server, a
            # chat kind without them). A 5xx is Telegram's trouble, not a reason to edit.
            if exc.status in (400, 404):
                raise DraftsRefused(exc.description) from exc
            raise

    async def post(self, chat: int, key: str, text: str) -> int:
        params: dict[str, Any] = {"chat_id": chat, "text": text}
        reply = message_in(f"telegram_{chat}", key)
        if reply is not None:
            params["reply_parameters"] = {"message_id": reply, "allow_sending_without_reply": True}
        sent = await self._request("sendMessage", params)
        return int(sent["message_id"])

    async def edit(self, chat: int, message_id: int, text: str) -> None:
        params = {"chat_id": chat, "message_id": message_id, "text": text}
        try:
            await self._request("editMessageText", params)
        except BotApiBadRequest as exc:
            if "not modified" in exc.description.lower():
                raise Unchanged from exc
            raise

    async def _request(self, method: str, params: dict[str, Any]) -> Any:
        """One call; a 429 becomes the `PreviewRetry` the preview loop waits out."""
        try:
            return await self._call(method, params)
        except BotApiRetryAfter as exc:
            raise PreviewRetry(exc.retry_after or 1.0) from exc


def telegram_previews(call: Call, marks: Path | None = None) -> PreviewStreams:
    """Previews over the Bot API `call`; edit marks kept in `marks`."""
    return PreviewStreams(_TelegramPreviews(call), marks)


def _draft_id(key: str) -> int:
    """A stable non-zero draft id per reply (drafts with one id animate into each other)."""
    return zlib.crc32(key.encode()) % 2_000_000_000 + 1

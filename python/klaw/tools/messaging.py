"""`send_message` and `send_file`: the agent writes to a chat (design §6.4).

`send_message` writes to a chat other than the one it answers; `send_file` sends
workspace files (a chart it drew, a report it wrote) to this chat or another.

Delivery goes through the gateway, which checks `channel + chatId` against its
allowlist (`allowedChatIds`, design §9.2) and opens the files itself, inside the
workspace (`klaw.gateway.outfiles`); a refusal or a channel failure comes back to the
model as the tool's error result. What was sent is stored in klaw.db under the
target chat once the gateway confirmed it (the gateway logs it in that chat's JSONL,
files as `meta.attachments`), so the target chat's own conversation sees it.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from klaw.confined import Confined
from klaw.errors import KlawError
from klaw.fsutil import human_size
from klaw.tools.base import Tool, ToolError
from klaw.wire.loglines import line_row, outbound_line
from klaw.wire.protocol import (
    MAX_ATTACHMENTS,
    MAX_UPLOAD_BYTES,
    UPLOAD_ATTEMPTS,
    UPLOAD_BYTES_PER_S,
    Attachment,
    Outbound,
    mime_of,
)

if TYPE_CHECKING:
    from klaw.memory.api import Memory

__all__ = ["SendFile", "SendMessage"]

_CHAT = re.compile(r"^([a-z][a-z0-9]*)_(\S+)$")
MAX_TEXT = 20_000  # a long message is split by the channel; this bounds a runaway model
#: The largest file any channel takes (Telegram's 50 MB); the gateway checks its own.
DELIVERY_TIMEOUT_S = 30.0
UPLOAD_TIMEOUT_S = 60.0  # a Bot API call's own timeout, before the bytes


class Deliver(Protocol):
    def __call__(self, msg: Outbound, timeout: float = ...) -> Any: ...


async def _deliver_and_store(
    deliver: Deliver, memory: Memory | None, out: Outbound, timeout: float
) -> None:
    """Sends `out` through the gateway and stores it under its chat once confirmed."""
    try:
        await deliver(out, timeout=timeout)
    except TimeoutError:
        raise ToolError(
            f"the gateway did not confirm delivery to {out.chat_id} in time; it may or may "
            "not have arrived"
        ) from None
    except KlawError as exc:
        raise ToolError(f"not delivered to {out.chat_id}: {exc}") from None
    if memory is not None:
        row = line_row(outbound_line(out), out.channel, out.chat_id)
        await asyncio.to_thread(memory.store.insert_messages, [row])


def _channel_of(chat_id: str) -> str:
    match = _CHAT.match(chat_id)
    if match is None:
        raise ToolError(
            f"chat_id {chat_id!r} must look like '{{channel}}_{{id}}', e.g. 'telegram_123456'"
        )
    return match.group(1)


class SendMessage(Tool):
    name = "send_message"
    description = (
        "Send a text to another chat, e.g. 'telegram_123456' (your answer already goes "
        "to this one). Only chats the owner allowed receive it; a refusal comes back."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "chat_id": {"type": "string", "minLength": 3, "maxLength": 200},
            "text": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT},
        },
        "required": ["chat_id", "text"],
        "additionalProperties": False,
    }

    def __init__(
        self, deliver: Deliver, memory: Memory | None = None, *, source_chat: str | None = None
    ) -> None:
        self._deliver = deliver
        self._memory = memory
        self._source = source_chat

    async def run(self, args: dict[str, Any]) -> str:
        chat_id = args["chat_id"].strip()
        out = Outbound(
            channel=_channel_of(chat_id),
            chat_id=chat_id,
            content=args["text"],
            meta={
                "source": "send_message",
                **({"from_chat": self._source} if self._source else {}),
            },
        )
        await _deliver_and_store(self._deliver, self._memory, out, DELIVERY_TIMEOUT_S)
        return f"Delivered to {chat_id}."


class SendFile(Tool):
    """`default_chat` is where files go without a `chat_id` (None for a scheduled
    job's chat, which is no conversation: it must name one)."""

    name = "send_file"
    description = (
        "Send files from the workspace to the user: a chart you made, a report, a photo "
        "(images show as photos). `paths` are relative to the workspace; `caption` is "
        "shown with them. They go to the current chat unless `chat_id` ('telegram_123456') "
        "names another chat the owner allowed. Up to 10 files, 50 MB each (Discord: 10 MB)."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "paths": {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": 4096},
                "minItems": 1,
                "maxItems": MAX_ATTACHMENTS,
            },
            "caption": {"type": "string", "maxLength": MAX_TEXT},
            "chat_id": {"type": "string", "minLength": 3, "maxLength": 200},
        },
        "required": ["paths"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        deliver: Deliver,
        workspace: Path,
        memory: Memory | None = None,
        *,
        source_chat: str | None = None,
        default_chat: str | None = None,
    ) -> None:
        self._deliver = deliver
        self._workspace = Confined(workspace)
        self._memory = memory
        self._source = source_chat
        self._default = default_chat

    async def run(self, args: dict[str, Any]) -> str:
        chat_id = (args.get("chat_id") or self._default or "").strip()
        if not chat_id:
            raise ToolError(
                "this run has no chat of its own (a scheduled job): give chat_id, "
                "e.g. 'telegram_123456'"
            )
        channel = _channel_of(chat_id)
        files = await asyncio.to_thread(self._attachments, args["paths"])
        out = Outbound(
            channel=channel,
            chat_id=chat_id,
            content=args.get("caption") or "",
            attachments=files,
            meta={
                "source": "send_file",
                **({"from_chat": self._source} if self._source else {}),
            },
        )
        # As long as the gateway may take: each file gets up to 3 tries of a minute plus
        # its bytes at a slow uplink (the channels use the same UPLOAD_ATTEMPTS),
        # one file after another. Giving up sooner would tell the model "maybe not sent"
        # about a file still on its way, and a second try would send it twice.
        timeout = DELIVERY_TIMEOUT_S + sum(
            UPLOAD_ATTEMPTS * (UPLOAD_TIMEOUT_S + (f.size or 0) / UPLOAD_BYTES_PER_S) for f in files
        )
        await _deliver_and_store(self._deliver, self._memory, out, timeout)
        sent = ", ".join(f"{f.path} ({human_size(f.size or 0)})" for f in files)
        return f"Sent {sent} to {chat_id}."

    def _attachments(self, paths: list[str]) -> list[Attachment]:
        """The files as the gateway will find them, checked now so the model hears of a
        wrong path at once (the gateway checks again when it opens them)."""
        out: list[Attachment] = []
        for path in paths:
            fd, size, rel = self._workspace.open_file(path)
            os.close(fd)
            if size == 0:
                raise ToolError(f"{rel!r} is empty: there is nothing to send")
            if size > MAX_UPLOAD_BYTES:
                raise ToolError(
                    f"{rel!r} is {human_size(size)}; files over {human_size(MAX_UPLOAD_BYTES)} "
                    "cannot be sent"
                )
            if any(a.path == rel for a in out):
                continue
            name = posixpath.basename(rel)
            out.append(Attachment(path=rel, name=name, mime=mime_of(name), size=size))
        return out

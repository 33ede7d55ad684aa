"""`send_message`: the agent writes to a chat other than the one it answers (§6.4).

Delivery goes through the gateway, which checks `channel + chatId` against its
allowlist (`allowedChatIds`, design §9.2); a refusal or a channel failure comes back
to the model as the tool's error result. The sent text is stored in klaw.db under
the target chat once the gateway confirmed it (the gateway logs it in that chat's
JSONL), so the target chat's own conversation sees it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar

from klaw.errors import KlawError
from klaw.tools.base import Tool, ToolError
from klaw.wire.loglines import line_row, outbound_line
from klaw.wire.protocol import Outbound

if TYPE_CHECKING:
    from klaw.memory.api import Memory

__all__ = ["SendMessage"]

Deliver = Callable[[Outbound], Awaitable[None]]
_CHAT = re.compile(r"^([a-z][a-z0-9]*)_(\S+)$")
MAX_TEXT = 20_000  # a long message is split by the channel; this bounds a runaway model


class SendMessage(Tool):
    name = "send_message"
    description = (
        "Send a text message to another chat, e.g. to notify the owner in a different "
        "chat. Your normal answer already goes to the current chat: do not use this for "
        "it. `chat_id` is '{channel}_{id}' such as 'telegram_123456'; the gateway only "
        "delivers to chats the owner allowed, and tells you when it refuses."
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
        match = _CHAT.match(chat_id)
        if match is None:
            raise ToolError(
                f"chat_id {chat_id!r} must look like '{{channel}}_{{id}}', e.g. 'telegram_123456'"
            )
        out = Outbound(
            channel=match.group(1),
            chat_id=chat_id,
            content=args["text"],
            meta={
                "source": "send_message",
                **({"from_chat": self._source} if self._source else {}),
            },
        )
        try:
            await self._deliver(out)
        except TimeoutError:
            raise ToolError(
                f"the gateway did not confirm delivery to {chat_id} in time; it may or may "
                "not have arrived"
            ) from None
        except KlawError as exc:
            raise ToolError(f"not delivered to {chat_id}: {exc}") from None
        if self._memory is not None:
            row = line_row(outbound_line(out), out.channel, chat_id)
            await asyncio.to_thread(self._memory.store.insert_messages, [row])
        return f"Delivered to {chat_id}."

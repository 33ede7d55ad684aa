"""The tools the engine runs for other agents (`klaw mcp serve`, `tool_run` requests).

`klaw mcp serve` is a separate process (an MCP client starts it); it asks the running
engine, which alone opens klaw.db. Offered: memory_search, conversation_search (one
chat, or every chat when none is named), memory_core_get, and memory_save only with
engine.yaml `mcpServe.allowWrite: true`. Anything else is refused here, whatever the
serving process asks for. schedule_list goes through the `schedule` request.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, ClassVar, Final
from zoneinfo import ZoneInfo

from klaw.tools.base import Tool, ToolError, ToolRegistry
from klaw.tools.memory_tools import (
    MAX_TOP_K,
    ConversationSearch,
    MemoryCoreGet,
    MemorySave,
    MemorySearch,
    format_hits,
)
from klaw.wire.protocol import Message, ToolRun, ToolRunResult

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.memory.api import Memory
    from klaw.paths import KlawPaths

__all__ = ["READ_TOOLS", "WRITE_TOOLS", "OutsideTools"]

READ_TOOLS: Final = ("memory_search", "conversation_search", "memory_core_get")
WRITE_TOOLS: Final = ("memory_save",)
#: Chats an unscoped conversation_search looks through at most.
MAX_CHATS: Final = 200


class EveryConversationSearch(Tool):
    """conversation_search for an agent outside any chat: one chat or all of them."""

    name = "conversation_search"
    description = (
        "Search past conversations with Klaw by meaning and keywords: one chat "
        "(`chat_id`, e.g. telegram_123) or every chat. Results cite chat, date and ids."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1},
            "chat_id": {"type": "string", "minLength": 1, "maxLength": 200},
            "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K},
            "since": {"type": "string", "description": "ISO date/datetime, inclusive"},
            "until": {"type": "string", "description": "ISO date/datetime, inclusive"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(self, memory: Memory, paths: KlawPaths, zone: str | None) -> None:
        self.memory, self.paths, self.zone = memory, paths, zone

    def _chats(self) -> list[str]:
        root = self.paths.conversations
        if not root.is_dir():
            return []
        return sorted(p.name for p in root.iterdir() if p.is_dir())[:MAX_CHATS]

    async def run(self, args: dict[str, Any]) -> str:
        rest = {k: v for k, v in args.items() if k != "chat_id"}
        chat = args.get("chat_id")
        if chat is not None:
            if chat not in await asyncio.to_thread(self._chats):
                raise ToolError(f"no chat {chat!r}")
            return await ConversationSearch(self.memory, chat, zone=self.zone).run(rest)
        top_k = int(args.get("top_k", 8))
        hits = []
        for chat_id in await asyncio.to_thread(self._chats):
            hits += await self.memory.asearch_conversation(chat_id, args["query"], top_k)
        hits.sort(key=lambda h: h.score, reverse=True)
        if not hits:
            return f"No earlier messages found for {args['query']!r}."
        return format_hits(hits[:top_k], ZoneInfo(self.zone) if self.zone else None)


class OutsideTools:
    """Answers `tool_run` requests with the tools offered to other agents."""

    def __init__(self, config: EngineConfig, paths: KlawPaths, memory: Memory) -> None:
        from klaw.memory.core import CoreMemory

        zone = config.scheduler.timezone
        tools: list[Tool] = [
            MemorySearch(memory, None, zone),
            EveryConversationSearch(memory, paths, zone),
            MemoryCoreGet(CoreMemory(paths.core_memory)),
        ]
        if config.mcp_serve.allow_write:
            tools.append(MemorySave(memory, None))
        self.registry = ToolRegistry(tools)

    async def __call__(self, req: ToolRun) -> Message:
        if req.name not in self.registry:
            offered = ", ".join(self.registry.names())
            result = f"{req.name!r} is not offered to other agents (offered: {offered})"
            return ToolRunResult(id=req.id, content=result, is_error=True)
        out = await self.registry.dispatch(req.name, req.arguments)
        return ToolRunResult(id=req.id, content=out.content, is_error=out.is_error)

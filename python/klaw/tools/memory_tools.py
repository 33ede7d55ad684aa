"""Memory tools: archival search and save, core memory get/update/delete (design §6.4)."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from datetime import UTC, datetime, time, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, ClassVar
from zoneinfo import ZoneInfo

from klaw.memory.core import SECTIONS, CoreMemoryKeyError
from klaw.tools.base import Tool, ToolError

if TYPE_CHECKING:
    from klaw.memory.api import Memory
    from klaw.memory.core import CoreMemory
    from klaw.memory.rows import Hit
    from klaw.memory.timewords import TimeRange

__all__ = [
    "ConversationSearch",
    "MemoryCoreDelete",
    "MemoryCoreGet",
    "MemoryCoreUpdate",
    "MemorySave",
    "MemorySearch",
    "format_hits",
]

MAX_TOP_K = 50
_SECTION = {"type": "string", "enum": list(SECTIONS)}


def _parse_when(
    value: str, name: str, zone: tzinfo | None, *, end_of_day: bool = False
) -> datetime:
    """An ISO date or datetime; one without an offset is the owner's time (`zone`, None:
    the host's), as the model is told it. A bare `until` date includes that whole day."""
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ToolError(
            f"{name} must be an ISO date or datetime such as 2026-02-24 or "
            f"2026-02-24T18:00:00Z, got {value!r}"
        ) from None
    if end_of_day and len(value.strip()) == 10:
        when = datetime.combine(when.date(), time(23, 59, 59))
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone) if zone else when.astimezone()
    return when


def format_hits(
    hits: list[Hit], zone: tzinfo | None = None, notes: dict[int, str] | None = None
) -> str:
    """Numbered hits, each headed by its citation (`memory/2026-02-24.md#L12-L30`) and
    its day in the owner's zone (`zone`, None: the host's), and a hit's note (a
    superseded fact it holds) by hit id."""
    blocks = []
    for i, h in enumerate(hits, 1):
        date = _day(h.created_at, zone) if h.created_at else "undated"
        note = f"; {notes[h.id]}" if notes and h.id in notes else ""
        blocks.append(
            f"[{i}] {h.citation} ({date}, score {h.score:.3f}{note})\n{h.content.strip()}"
        )
    return "\n\n".join(blocks)


def _day(created_at: str, zone: tzinfo | None) -> str:
    try:
        return datetime.fromisoformat(created_at).astimezone(zone).date().isoformat()
    except ValueError:
        return created_at[:10]


def _filters(args: dict[str, Any], zone: tzinfo | None) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    if "since" in args:
        filters["since"] = _parse_when(args["since"], "since", zone)
    if "until" in args:
        filters["until"] = _parse_when(args["until"], "until", zone, end_of_day=True)
    return filters


class _TimeWords:
    """Reads "last week" / "в прошлом месяце" / "上周" in a query as a date range, in the
    owner's time zone, when the model gave no `since`/`until` itself."""

    def __init__(self, now: Callable[[], datetime] | None, zone: str | None) -> None:
        self._now = now or (lambda: datetime.now(UTC))
        #: The owner's zone (scheduler.timezone); None: the host's.
        self.zone: tzinfo | None = ZoneInfo(zone) if zone else None

    def range(self, query: str, args: dict[str, Any]) -> tuple[str, TimeRange | None]:
        if "since" in args or "until" in args:
            return query, None
        # Imported here: its ~100 rules take ~80 ms to compile, paid at the first search.
        from klaw.memory.timewords import find_time_range, strip_phrase

        now = self._now().astimezone(self.zone)
        found = find_time_range(query, now)
        if found is None:
            return query, None
        # The phrase would only add noise to the keyword leg ("last", "week").
        return strip_phrase(query, found).strip() or query, found

    @staticmethod
    def bounds(r: TimeRange) -> dict[str, datetime]:
        # The store's bounds are inclusive; the range's end is exclusive.
        return {"since": r.since, "until": r.until - timedelta(seconds=1)}


class MemorySearch(Tool):
    name = "memory_search"
    description = (
        "Search archival memory (notes, daily logs, summaries, saved facts); results cite "
        "their source. Time words in the query (last week, 上周) put notes of that time "
        "first. `kind`/`entity`: only retained facts of that kind, or about that person, "
        "place or project."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1},
            "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K},
            "since": {"type": "string", "description": "ISO date/datetime, inclusive"},
            "until": {"type": "string", "description": "ISO date/datetime, inclusive"},
            "source": {"type": "string", "description": "e.g. MEMORY.md or memory_save"},
            "kind": {"type": "string", "enum": ["world", "experience", "opinion", "observation"]},
            "entity": {"type": "string", "minLength": 1},
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        memory: Memory,
        now: Callable[[], datetime] | None = None,
        zone: str | None = None,
    ) -> None:
        self.memory = memory
        self.time_words = _TimeWords(now, zone)

    async def run(self, args: dict[str, Any]) -> str:
        query = args["query"]
        if not query.strip():
            raise ToolError("query must not be empty")
        filters = _filters(args, self.time_words.zone)
        if "source" in args:
            if str(args["source"]).startswith("chat:"):
                raise ToolError("past messages are searched with conversation_search")
            filters["source"] = args["source"]
        for key in ("kind", "entity"):  # retained facts only (klaw.memory.facts)
            if key in args:
                filters[key] = str(args[key])
        top_k = int(args["top_k"]) if "top_k" in args else None
        text, when = self.time_words.range(query, args)
        hits = []
        if when is not None:
            # Notes of that time first, then the rest: undated facts (MEMORY.md) still
            # answer "what did I decide last spring" when no log of that time does.
            hits = await self.memory.asearch(text, top_k, **filters, **_TimeWords.bounds(when))
        want = top_k or self.memory.config.memory.search.top_k
        if len(hits) < want:
            seen = {h.id for h in hits}
            more = await self.memory.asearch(text, want, **filters)
            hits += [h for h in more if h.id not in seen][: want - len(hits)]
        if not hits:
            return f"No memories found for {query!r}."
        from klaw.memory.facts import superseded_notes

        notes = await asyncio.to_thread(superseded_notes, self.memory.store, hits)
        return format_hits(hits, self.time_words.zone, notes)


class ConversationSearch(Tool):
    name = "conversation_search"
    description = (
        "Search this chat's earlier messages, older than what you can see, by meaning and "
        "keywords. Each result cites its date and message ids. Time words in the query "
        "(yesterday, last spring, в прошлом месяце, 上周) narrow it to that time."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1},
            "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K},
            "since": {"type": "string", "description": "ISO date/datetime, inclusive"},
            "until": {"type": "string", "description": "ISO date/datetime, inclusive"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        memory: Memory,
        chat_id: str,
        now: Callable[[], datetime] | None = None,
        zone: str | None = None,
    ) -> None:
        self.memory = memory
        self.chat_id = chat_id  # bound by the engine: a chat only ever searches itself
        self.time_words = _TimeWords(now, zone)

    async def run(self, args: dict[str, Any]) -> str:
        query = args["query"]
        if not query.strip():
            raise ToolError("query must not be empty")
        filters = _filters(args, self.time_words.zone)
        top_k = int(args["top_k"]) if "top_k" in args else None
        text, when = self.time_words.range(query, args)
        note = ""
        if when is not None:
            hits = await self.memory.asearch_conversation(
                self.chat_id, text, top_k, **_TimeWords.bounds(when)
            )
            if not hits:
                note = f"Nothing from {when.phrase!r}; results from any date:\n\n"
        if when is None or not hits:
            hits = await self.memory.asearch_conversation(self.chat_id, text, top_k, **filters)
        if not hits:
            return f"No earlier messages found for {query!r}."
        return note + format_hits(hits, self.time_words.zone)


class MemorySave(Tool):
    name = "memory_save"
    description = "Save a fact or note to archival memory so it can be found later."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "content": {"type": "string", "minLength": 1},
            "source": {"type": "string", "minLength": 1, "description": "label for citations"},
            "durable": {
                "type": "boolean",
                "description": "a lasting fact (kept in long-term memory, MEMORY.md)",
            },
        },
        "required": ["content"],
        "additionalProperties": False,
    }

    def __init__(self, memory: Memory, chat_id: str | None = None) -> None:
        self.memory = memory
        self.chat_id = chat_id

    async def run(self, args: dict[str, Any]) -> str:
        content = args["content"]
        if not content.strip():
            raise ToolError("content must not be empty")
        source = args.get("source", "memory_save").strip() or "memory_save"
        durable = args.get("durable") is True
        ids = await asyncio.to_thread(
            functools.partial(self.memory.save, content, source, self.chat_id, durable=durable)
        )
        return f"Saved to archival memory as source {source!r} ({len(ids)} chunk(s))."


class MemoryCoreGet(Tool):
    name = "memory_core_get"
    description = "Read core memory (facts about the user and the agent), or one section of it."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"section": _SECTION},
        "additionalProperties": False,
    }

    def __init__(self, core: CoreMemory) -> None:
        self.core = core

    async def run(self, args: dict[str, Any]) -> str:
        data = await asyncio.to_thread(self.core.get, args.get("section"))
        return json.dumps(data, ensure_ascii=False, indent=2)


class MemoryCoreUpdate(Tool):
    name = "memory_core_update"
    description = "Set one key of core memory (section 'user' or 'agent') to a value."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "section": _SECTION,
            "key": {"type": "string", "minLength": 1},
            "value": {"type": "string"},
        },
        "required": ["section", "key", "value"],
        "additionalProperties": False,
    }

    def __init__(
        self, core: CoreMemory, on_user_fact: Callable[[str, object], None] | None = None
    ) -> None:
        self.core = core
        # Told (key, value) of each fact about the owner (OpenClaw's write-back to USER.md).
        self.on_user_fact = on_user_fact

    async def run(self, args: dict[str, Any]) -> str:
        section, key = args["section"], args["key"]
        await asyncio.to_thread(self.core.update, section, key, args["value"])
        if section == "user" and self.on_user_fact is not None:
            await asyncio.to_thread(self.on_user_fact, key.strip(), args["value"])
        return f"Core memory {section}.{key.strip()} updated."


class MemoryCoreDelete(Tool):
    name = "memory_core_delete"
    description = "Delete one key from core memory (section 'user' or 'agent')."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"section": _SECTION, "key": {"type": "string", "minLength": 1}},
        "required": ["section", "key"],
        "additionalProperties": False,
    }

    def __init__(self, core: CoreMemory) -> None:
        self.core = core

    async def run(self, args: dict[str, Any]) -> str:
        section, key = args["section"], args["key"]
        try:
            await asyncio.to_thread(self.core.delete, section, key)
        except CoreMemoryKeyError:
            known = ", ".join(sorted(self.core.get(section))) or "none"
            raise ToolError(
                f"Core memory section {section!r} has no key {key!r} (keys: {known})"
            ) from None
        return f"Core memory {section}.{key.strip()} deleted."

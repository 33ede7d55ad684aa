"""Memory tools through the real Memory (real embedding model) and core_memory.json."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from klaw.config import load_engine_config
from klaw.memory import Memory
from klaw.paths import KlawPaths
from klaw.tools import ToolRegistry, builtin_registry


@pytest.fixture
def reg(memory: Memory, klaw_home: KlawPaths) -> ToolRegistry:
    config = load_engine_config(klaw_home.engine_config)
    return builtin_registry(klaw_home, config, memory, chat_id="telegram_1")


def test_builtin_registry_offers_the_built_in_tools(reg: ToolRegistry) -> None:
    assert sorted(reg.names()) == sorted(
        [
            "memory_search",
            "conversation_search",
            "memory_save",
            "memory_core_get",
            "memory_core_update",
            "memory_core_delete",
            "file_read",
            "file_write",
            "file_list",
            "skill_list",
            "skill_load",
            "onboarding_done",  # the pipeline offers it only while BOOTSTRAP.md is pending
            "current_time",
            "docs_list",
            "docs_read",
            "docs_search",
            "web_fetch",  # web_search too once web.search.provider is set (tests/web)
        ]
    )
    for schema in reg.schemas():
        assert schema.parameters["type"] == "object" and schema.description


async def test_save_then_search_cites_sources(
    reg: ToolRegistry, memory: Memory, klaw_home: KlawPaths
) -> None:
    res = await reg.dispatch(
        "memory_save", {"content": "The wifi password is written on the fridge door."}
    )
    assert not res.is_error and "memory_save" in res.content
    (klaw_home.workspace / "memory").mkdir()
    (klaw_home.workspace / "memory" / "2026-02-24.md").write_text(
        "# Tuesday\n\nWent hiking in the mountains near Prague with Anna.\n"
    )
    memory.index_workspace()
    res = await reg.dispatch("memory_search", {"query": "where is the wifi password?"})
    assert not res.is_error
    first = res.content.split("\n\n")[0]
    assert first.startswith("[1] memory_save (") and "fridge" in first
    res = await reg.dispatch("memory_search", {"query": "hiking trip", "top_k": 1})
    assert res.content.startswith("[1] memory/2026-02-24.md#L1-L3 (2026-02-24, score ")
    assert "[2]" not in res.content


async def test_search_filters(reg: ToolRegistry, memory: Memory) -> None:
    memory.save("Old note about the garden tomatoes", source="garden", created_at="2025-06-01")
    memory.save("New note about the garden cucumbers", source="garden", created_at="2026-02-01")
    memory.save("Garden gnome bought", source="shop", created_at="2026-02-01")
    res = await reg.dispatch("memory_search", {"query": "garden", "since": "2026-01-01"})
    assert "tomatoes" not in res.content and "cucumbers" in res.content
    res = await reg.dispatch("memory_search", {"query": "garden", "until": "2025-06-01"})
    assert "tomatoes" in res.content and "cucumbers" not in res.content  # whole day included
    res = await reg.dispatch("memory_search", {"query": "garden", "source": "shop"})
    assert "gnome" in res.content and "cucumbers" not in res.content
    res = await reg.dispatch(
        "memory_search", {"query": "garden", "since": "2026-02-01T00:00:00+03:00"}
    )
    assert "cucumbers" in res.content


async def test_search_errors_and_empty(reg: ToolRegistry) -> None:
    res = await reg.dispatch("memory_search", {"query": "anything at all"})
    assert not res.is_error and res.content.startswith("No memories found")
    res = await reg.dispatch("memory_search", {"query": "x", "since": "last tuesday"})
    assert res.is_error and "ISO date" in res.content
    res = await reg.dispatch("memory_search", {"query": "   "})
    assert res.is_error and "empty" in res.content
    res = await reg.dispatch("memory_search", {"query": "x", "top_k": 0})
    assert res.is_error and "at least 1" in res.content
    res = await reg.dispatch("memory_save", {"content": ""})
    assert res.is_error


async def test_save_records_chat_and_custom_source(reg: ToolRegistry, klaw_home: KlawPaths) -> None:
    res = await reg.dispatch("memory_save", {"content": "Anna likes tulips", "source": "anna"})
    assert "'anna'" in res.content
    record = json.loads(klaw_home.saved_memory.read_text().splitlines()[-1])
    assert record["source"] == "anna" and record["chat_id"] == "telegram_1"
    ts = datetime.fromisoformat(record["ts"].replace("Z", "+00:00"))
    assert abs((datetime.now(UTC) - ts).total_seconds()) < 60


async def test_core_memory_round_trip(reg: ToolRegistry, klaw_home: KlawPaths) -> None:
    res = await reg.dispatch("memory_core_get", {})
    assert json.loads(res.content) == {"user": {}, "agent": {}}
    res = await reg.dispatch(
        "memory_core_update", {"section": "user", "key": "name", "value": "Рома"}
    )
    assert not res.is_error and "user.name" in res.content
    on_disk = json.loads(klaw_home.core_memory.read_text(encoding="utf-8"))
    assert on_disk["user"] == {"name": "Рома"}
    res = await reg.dispatch("memory_core_get", {"section": "user"})
    assert json.loads(res.content) == {"name": "Рома"} and "Рома" in res.content
    res = await reg.dispatch("memory_core_delete", {"section": "user", "key": "name"})
    assert not res.is_error
    assert json.loads(klaw_home.core_memory.read_text())["user"] == {}


async def test_core_memory_errors(reg: ToolRegistry) -> None:
    await reg.dispatch("memory_core_update", {"section": "agent", "key": "mood", "value": "ok"})
    res = await reg.dispatch("memory_core_delete", {"section": "agent", "key": "missing"})
    assert res.is_error and "'missing'" in res.content and "mood" in res.content
    res = await reg.dispatch("memory_core_update", {"section": "system", "key": "k", "value": "v"})
    assert res.is_error and "'user', 'agent'" in res.content
    res = await reg.dispatch("memory_core_update", {"section": "user", "key": " ", "value": "v"})
    assert res.is_error and "non-empty" in res.content
    res = await reg.dispatch("memory_core_get", {"section": "other"})
    assert res.is_error


async def test_corrupt_core_memory_is_an_error_result(
    reg: ToolRegistry, klaw_home: KlawPaths
) -> None:
    klaw_home.core_memory.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.core_memory.write_text("{not json")
    res = await reg.dispatch("memory_core_get", {})
    assert res.is_error and "klaw memory edit" in res.content


async def test_dates_are_the_owners_days(memory: Memory) -> None:
    """A bare date in `since`/`until` and the date shown on a hit are the owner's days
    (scheduler.timezone), as the model's clock is: at UTC+14 the owner's 24th starts at
    10:00 UTC on the 23rd."""
    from klaw.tools.memory_tools import MemorySearch

    memory.save("Dinner with Anna at the harbour", created_at="2026-02-23T11:00:00Z")
    memory.save("Dinner with Anna at the station", created_at="2026-02-23T09:00:00Z")
    search = MemorySearch(memory, zone="Pacific/Kiritimati")
    found = await search.run({"query": "dinner with Anna", "since": "2026-02-24"})
    assert "harbour" in found and "station" not in found
    assert "(2026-02-24, score" in found  # 11:00 UTC on the 23rd is the owner's 24th
    found = await search.run({"query": "dinner with Anna", "until": "2026-02-23"})
    assert "station" in found and "harbour" not in found

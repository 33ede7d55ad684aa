"""`klaw mcp serve` as its own process, driven by the SDK's client, against the real
engine (which alone opens klaw.db): read-only tools by default, memory_save only when
engine.yaml allows it, and a clear error when no engine runs."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from klaw.paths import KlawPaths
from mcp import Client, StdioServerParameters
from scripted_llm import FakeLLM

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from sched_support import engine_running, engine_yaml

READ = ["memory_search", "conversation_search", "core_memory_get", "schedule_list"]


def serve_params() -> StdioServerParameters:
    # The SDK passes only HOME, PATH, ...: the test's Klaw directories are named here.
    env = {k: v for k, v in os.environ.items() if k.startswith(("KLAW_", "XDG_"))}
    return StdioServerParameters(
        command=sys.executable, args=["-m", "klaw.cli.app", "mcp", "serve"], env=env
    )


def text(result: Any) -> str:
    return "\n".join(b.text for b in result.content if b.type == "text")


async def test_other_agents_read_memory_through_the_running_engine(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    klaw_home.core_memory.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.core_memory.write_text(json.dumps({"user": {"name": "Ada"}, "agent": {}}))
    async with engine_running(klaw_home, backend) as server:
        fact = "The wifi password of the cabin is kestrel-42"
        await asyncio.to_thread(server.memory.save, fact, "memory_save")
        async with Client(serve_params()) as client:
            tools = await client.list_tools()
            assert sorted(t.name for t in tools.tools) == sorted(READ)
            assert all(t.annotations and t.annotations.read_only_hint for t in tools.tools)
            hits = await client.call_tool("memory_search", {"query": "cabin wifi", "topK": 3})
            assert not hits.is_error and "kestrel-42" in text(hits)
            core = await client.call_tool("core_memory_get", {})
            assert "Ada" in text(core)
            jobs = await client.call_tool("schedule_list", {})
            assert not jobs.is_error
            chats = await client.call_tool("conversation_search", {"query": "anything"})
            assert not chats.is_error
            # Not offered, and the engine refuses it whatever the process asks for.
            saved = await client.call_tool("memory_save", {"content": "x"})
            assert saved.is_error


async def test_memory_save_is_offered_when_engine_yaml_allows_writes(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    with klaw_home.engine_config.open("a") as f:
        f.write("mcpServe:\n  allowWrite: true\n")
    async with engine_running(klaw_home, backend) as server:
        async with Client(serve_params()) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {*READ, "memory_save"}
            saved = await client.call_tool("memory_save", {"content": "Ada likes rye bread"})
            assert not saved.is_error, text(saved)
        hits = await server.memory.asearch("rye bread", 3)
    assert any("rye bread" in h.content for h in hits)


async def test_without_an_engine_the_agent_reads_how_to_start_it(klaw_home: KlawPaths) -> None:
    async with Client(serve_params()) as client:
        result = await client.call_tool("memory_search", {"query": "x"})
    assert result.is_error and "the engine is not running" in text(result)

"""Built-in tools the engine offers the model (design §6.4).

    from klaw.tools import builtin_registry
    registry = builtin_registry(paths, config, memory)
    request.tools = registry.schemas()
    result = await registry.dispatch("file_read", {"path": "MEMORY.md"})  # never raises

`send_message` and `send_file` are added by the engine (they need the gateway);
schedule_*, subagent_spawn and code_execute come with the scheduler and sandbox.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from klaw.tools.base import DEFAULT_MAX_RESULT_CHARS, Tool, ToolError, ToolRegistry, ToolResult

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.memory.api import Memory
    from klaw.memory.core import CoreMemory
    from klaw.paths import KlawPaths

__all__ = [
    "DEFAULT_MAX_RESULT_CHARS",
    "Tool",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "builtin_registry",
    "builtin_tools",
]


def builtin_tools(
    paths: KlawPaths,
    config: EngineConfig,
    memory: Memory,
    *,
    core: CoreMemory | None = None,
    chat_id: str | None = None,
    now: Callable[[], datetime] | None = None,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    on_user_fact: Callable[[str, object], None] | None = None,
) -> list[Tool]:
    """Memory, file, skill, time and web tools bound to one workspace and memory;
    `on_user_fact` is told each fact about the owner written to core memory."""
    from klaw.memory.core import CoreMemory
    from klaw.memory.docs import Docs
    from klaw.tools.clock import CurrentTime
    from klaw.tools.docs import DocsList, DocsRead, DocsSearch
    from klaw.tools.files import FileList, FileRead, FileWrite, Workspace
    from klaw.tools.memory_tools import (
        ConversationSearch,
        MemoryCoreDelete,
        MemoryCoreGet,
        MemoryCoreUpdate,
        MemorySave,
        MemorySearch,
    )
    from klaw.tools.onboarding import OnboardingDone
    from klaw.tools.skills import SkillCatalog, SkillList, SkillLoad
    from klaw.tools.web import web_tools

    core = core or CoreMemory(paths.core_memory)
    workspace = Workspace(
        paths.workspace, config.files.max_file_size_bytes, max(100, max_result_chars - 300)
    )
    catalog = SkillCatalog.for_paths(paths, config)
    docs = Docs(memory)
    zone = config.scheduler.timezone
    return [
        MemorySearch(memory, now, zone),
        *([ConversationSearch(memory, chat_id, now, zone)] if chat_id else []),
        MemorySave(memory, chat_id),
        MemoryCoreGet(core),
        MemoryCoreUpdate(core, on_user_fact),
        MemoryCoreDelete(core),
        FileRead(workspace),
        FileWrite(workspace),
        FileList(workspace),
        SkillList(catalog),
        SkillLoad(catalog),
        OnboardingDone(paths.workspace),
        CurrentTime(now, zone),
        DocsList(docs),
        DocsRead(docs, max_chars=max(100, max_result_chars - 300)),
        DocsSearch(docs),
        *web_tools(config.web, max_result_chars),
    ]


def builtin_registry(
    paths: KlawPaths,
    config: EngineConfig,
    memory: Memory,
    *,
    core: CoreMemory | None = None,
    chat_id: str | None = None,
    now: Callable[[], datetime] | None = None,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    on_user_fact: Callable[[str, object], None] | None = None,
) -> ToolRegistry:
    """A registry holding `builtin_tools`."""
    tools = builtin_tools(
        paths,
        config,
        memory,
        core=core,
        chat_id=chat_id,
        now=now,
        max_result_chars=max_result_chars,
        on_user_fact=on_user_fact,
    )
    return ToolRegistry(tools, max_result_chars=max_result_chars)

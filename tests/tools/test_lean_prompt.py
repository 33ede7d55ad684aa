"""The lean fixed prompt (klaw.tools.builtin_groups): built-in tools outside engine.yaml
`tools.eager` are folded into one line per group of `tools_load`, through the same
mechanism as MCP servers; a folded tool runs when called directly and its group is
then loaded; the heartbeat's lean set is sent whole; every built-in tool has a group.
Real tools over the real Memory and workspace."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Sequence
from pathlib import Path

import pytest

import klaw.tools
from klaw.config import load_engine_config
from klaw.config.engine import DEFAULT_EAGER_TOOLS
from klaw.engine.pipeline import LEAN_TOOLS
from klaw.errors import ConfigError
from klaw.memory import Memory
from klaw.paths import KlawPaths
from klaw.tools import Tool, ToolRegistry, builtin_registry
from klaw.tools.builtin_groups import ALWAYS_EAGER, GROUPS, eager_problems, fold, pick
from klaw.tools.clock import CurrentTime
from klaw.tools.groups import IDLE_TURNS, LOADER_NAME, Disclosure, ToolGroup

CHAT = "telegram_1"
GROUPED = {tool for _, tools in GROUPS.values() for tool in tools}


@pytest.fixture
def full(memory: Memory, klaw_home: KlawPaths) -> ToolRegistry:
    config = load_engine_config(klaw_home.engine_config)
    return builtin_registry(klaw_home, config, memory, chat_id=CHAT)


def sent(reg: ToolRegistry) -> list[str]:
    return [s.name for s in reg.schemas()]


def lines(reg: ToolRegistry) -> list[str]:
    (loader,) = [s for s in reg.schemas() if s.name == LOADER_NAME]
    return loader.description.split("\nGroups:\n")[1].splitlines()


def test_every_built_in_tool_has_a_group() -> None:
    """A new tool must be given a group (else it would be eager for everyone, silently)."""
    names: set[str] = set()
    for info in pkgutil.iter_modules(klaw.tools.__path__, "klaw.tools."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Tool) and isinstance(cls.__dict__.get("name"), str):
                names.add(cls.__dict__["name"])
    assert names - {LOADER_NAME} == GROUPED | ALWAYS_EAGER
    assert set(DEFAULT_EAGER_TOOLS) <= GROUPED


def test_the_default_sends_the_everyday_tools_and_one_line_per_group(full: ToolRegistry) -> None:
    reg = fold(full, DEFAULT_EAGER_TOOLS, CHAT)
    eager = {n for n in full.names() if n in DEFAULT_EAGER_TOOLS or n in ALWAYS_EAGER}
    assert set(sent(reg)) == eager | {LOADER_NAME}
    assert lines(reg) == [
        "- memory: core memory (facts about the owner and you), archival memory: "
        "memory_core_get, memory_core_update, memory_core_delete",
        "- history: this chat's older messages: conversation_search",
        "- files: workspace files: file_write, file_list",
        "- web: web pages and search: web_fetch",
        "- help: Klaw's own docs, skills: skill_list, docs_list, docs_read, docs_search",
    ]  # in GROUPS order; messaging, schedule and code come with the engine
    for name in full.names():  # every tool still callable
        assert name in reg


def test_star_sends_every_schema_and_an_empty_list_folds_all(full: ToolRegistry) -> None:
    assert fold(full, ["*"], CHAT) is full
    bare = fold(full, [], CHAT)
    assert sent(bare) == ["onboarding_done", LOADER_NAME]  # offered only while pending


async def test_a_folded_tool_runs_unloaded_and_its_group_loads(
    full: ToolRegistry, klaw_home: KlawPaths
) -> None:
    reg = fold(full, DEFAULT_EAGER_TOOLS, CHAT)
    reg.begin_turn()
    (klaw_home.workspace / "a.md").write_text("A\n")
    listed = await reg.dispatch("file_list", {})
    assert not listed.is_error and "a.md" in listed.content
    assert {"file_write", "file_list"} <= set(sent(reg))
    assert not any(ln.startswith("- files:") for ln in lines(reg))
    for _ in range(IDLE_TURNS + 1):
        reg.begin_turn()
    assert "file_list" not in sent(reg)  # folded back after idle turns, like MCP groups


async def test_wrong_arguments_to_a_folded_tool_load_its_schema(full: ToolRegistry) -> None:
    reg = fold(full, DEFAULT_EAGER_TOOLS, CHAT)
    wrong = await reg.dispatch("memory_core_update", {"key": "city"})
    assert wrong.is_error and "Invalid arguments for memory_core_update" in wrong.content
    assert "memory_core_update" in sent(reg)  # the next call sees what it needs


async def test_tools_load_loads_a_group_and_unknown_groups_are_named(full: ToolRegistry) -> None:
    reg = fold(full, DEFAULT_EAGER_TOOLS, CHAT)
    loaded = await reg.dispatch(LOADER_NAME, {"group": "help"})
    assert loaded.content.startswith("Loaded 4 tool(s) of help")
    assert {"docs_list", "docs_read", "docs_search", "skill_list"} <= set(sent(reg))
    unknown = await reg.dispatch(LOADER_NAME, {"group": "nope"})
    assert unknown.is_error and "Groups: memory, history, files, web, help" in unknown.content


class Clocks(ToolGroup):
    name = "mcp__clock"

    def tools(self) -> Sequence[Tool]:
        return [CurrentTime()]

    def summary(self) -> str:
        return "a server's clock"


async def test_built_in_groups_join_a_chats_mcp_groups_and_share_their_state(
    full: ToolRegistry,
) -> None:
    with_mcp = full.only(n for n in full.names() if n != "current_time")
    with_mcp.attach(Disclosure(CHAT, [Clocks()]))
    reg = fold(with_mcp, DEFAULT_EAGER_TOOLS, CHAT)
    assert lines(reg)[0] == "- mcp__clock: a server's clock"
    await reg.dispatch(LOADER_NAME, {"group": "files"})
    view = reg.only(n for n in reg.names() if n != "onboarding_done")  # a turn's view
    assert "file_list" in sent(view)
    await view.dispatch(LOADER_NAME, {"group": "mcp__clock"})
    assert "current_time" in sent(reg)


def test_the_heartbeat_lean_set_is_sent_whole_whatever_is_folded(full: ToolRegistry) -> None:
    reg = fold(full, ["memory_search"], CHAT)
    assert "file_list" not in sent(reg) and "current_time" not in sent(reg)
    lean = pick(reg, LEAN_TOOLS)
    # send_message comes with the engine (the gateway); the rest are in `full`
    assert set(sent(lean)) == LEAN_TOOLS - {"send_message"}
    assert LOADER_NAME not in lean


def test_tools_eager_names_that_are_no_tool_are_reported() -> None:
    assert eager_problems(DEFAULT_EAGER_TOOLS) == []
    assert eager_problems(["*", "onboarding_done"]) == []
    (typo,) = eager_problems(["memory_serch"])
    assert "engine.yaml tools.eager: 'memory_serch' is not a built-in tool" in typo
    assert "known: " in typo and "memory_search" in typo
    (mcp,) = eager_problems(["mcp__time__get_current_time"])
    assert "an MCP server has its own `eager`" in mcp


def test_tools_eager_in_engine_yaml(tmp_path: Path) -> None:
    path = tmp_path / "engine.yaml"
    path.write_text("tools:\n  eager: [memory_search, '*']\n")
    assert load_engine_config(path).tools.eager == ["memory_search", "*"]
    assert load_engine_config(tmp_path / "none.yaml").tools.eager == list(DEFAULT_EAGER_TOOLS)
    path.write_text("tools:\n  eager: ['Memory Search']\n")
    with pytest.raises(ConfigError) as exc:
        load_engine_config(path)
    assert any("tools.eager" in p for p in exc.value.problems)


def test_the_engine_names_a_wrong_tools_eager_entry_at_start(
    memory: Memory, klaw_home: KlawPaths, caplog: pytest.LogCaptureFixture
) -> None:
    from klaw.engine.pipeline import Pipeline
    from klaw.llm.router import Router

    klaw_home.engine_config.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.engine_config.write_text("tools:\n  eager: [memory_search, file_reed]\n")
    config = load_engine_config(klaw_home.engine_config)
    with caplog.at_level("WARNING", logger="klaw.engine"):
        Pipeline(config, klaw_home, memory, Router(config))
    (line,) = [r.getMessage() for r in caplog.records if "tools.eager" in r.getMessage()]
    assert "'file_reed' is not a built-in tool" in line and "file_read" in line

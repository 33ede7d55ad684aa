"""Tool groups (klaw.tools.groups): a group is one line of `tools_load` until loaded,
loaded groups fold back after IDLE_TURNS turns without a call, private groups stay out
of group chats, a group may refuse a call, and the per-turn views share the chat's
state. The groups here hold Klaw's own tools."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from klaw.tools.base import Tool, ToolRegistry
from klaw.tools.clock import CurrentTime
from klaw.tools.groups import IDLE_TURNS, LOADER_NAME, Disclosure, ToolGroup


class Clocks(ToolGroup):
    def __init__(self, name: str, *, private: bool = False, refuse: str | None = None) -> None:
        self.name = name
        self._private = private
        self._refuse = refuse
        self._tools = [CurrentTime()]

    @property
    def private(self) -> bool:
        return self._private

    def tools(self) -> Sequence[Tool]:
        return self._tools

    def summary(self) -> str:
        return "what time it is"

    def admit(self, chat_id: str, tool: Tool, args: dict[str, Any]) -> str | None:
        return self._refuse


def registry(*groups: ToolGroup) -> ToolRegistry:
    reg = ToolRegistry()
    reg.attach(Disclosure("telegram_1", groups))
    return reg


def names(reg: ToolRegistry) -> list[str]:
    return [s.name for s in reg.schemas()]


async def test_one_line_until_loaded_then_folded_after_idle_turns() -> None:
    reg = registry(Clocks("clocks"))
    reg.begin_turn()
    assert names(reg) == [LOADER_NAME]
    assert reg.schemas()[0].description.endswith("Groups:\n- clocks: what time it is")
    loaded = await reg.dispatch(LOADER_NAME, {"group": "clocks"})
    assert loaded.content.startswith("Loaded 1 tool(s) of clocks")
    assert names(reg) == ["current_time"]
    for _ in range(IDLE_TURNS):
        reg.begin_turn()
    assert names(reg) == ["current_time"]
    reg.begin_turn()
    assert names(reg) == [LOADER_NAME]


async def test_a_call_keeps_a_group_loaded_and_works_without_loading() -> None:
    reg = registry(Clocks("clocks"))
    assert not (await reg.dispatch("current_time", {})).is_error  # callable folded
    await reg.dispatch(LOADER_NAME, {"group": "clocks"})
    for _ in range(IDLE_TURNS * 2):
        reg.begin_turn()
        await reg.dispatch("current_time", {})
    assert names(reg) == ["current_time"]


async def test_turn_views_share_the_chat_state_and_lean_views_drop_groups() -> None:
    reg = registry(Clocks("clocks"))
    view = reg.only(n for n in reg.names() if n != "onboarding_done")
    await view.dispatch(LOADER_NAME, {"group": "clocks"})
    assert names(reg) == ["current_time"]
    assert names(reg.only({"current_time"})) == []  # no tools_load: no groups


async def test_private_groups_stay_out_of_group_chats() -> None:
    reg = registry(Clocks("mine", private=True), Clocks("ours"))
    group = reg.without_private_groups()
    assert group.schemas()[0].description.endswith("- ours: what time it is")
    unknown = await group.dispatch(LOADER_NAME, {"group": "mine"})
    assert unknown.is_error and "Unknown tool group 'mine'" in unknown.content


async def test_a_group_turning_private_leaves_group_chats_built_before() -> None:
    # An MCP server's privacy is known once its tools are listed, which may be after
    # a group chat's registry was built.
    late = Clocks("late")
    group = registry(late).without_private_groups()
    assert group.schemas()[0].description.endswith("- late: what time it is")
    late._private = True
    assert group.schemas() == [] and "current_time" not in group


async def test_a_group_is_found_without_its_prefix() -> None:
    reg = registry(Clocks("mcp__time"), Clocks("mcp__clock"))
    loaded = await reg.dispatch(LOADER_NAME, {"group": "Time"})
    assert loaded.content.startswith("Loaded 1 tool(s) of mcp__time")


async def test_a_group_may_refuse_a_call() -> None:
    reg = registry(Clocks("clocks", refuse="Not run: ask the owner"))
    result = await reg.dispatch("current_time", {})
    assert result.is_error and result.content == "Not run: ask the owner"

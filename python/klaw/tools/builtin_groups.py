"""Rarely used built-in tools offered as tool groups: one line each, schemas on demand.

On a fresh install the tool schemas were 85% of a first turn's request (~3,700 of
~4,400 tokens), paid on every model call. engine.yaml `tools.eager` names the built-in
tools whose schemas go in every request; the others are folded into the groups below,
each one line of `tools_load` (klaw.tools.groups, the mechanism MCP servers use), and a
call to a folded tool works without loading it. `tools.eager: ["*"]` sends every schema.

    registry = fold(registry, config.tools.eager, chat_id)   # once per chat, last
    heartbeat = pick(registry, LEAN_TOOLS)                   # named tools, all eager
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Final

from klaw.tools.base import Tool, ToolRegistry
from klaw.tools.groups import LOADER_NAME, Disclosure, ToolGroup, names_line

__all__ = ["ALWAYS_EAGER", "GROUPS", "BuiltinGroup", "eager_problems", "fold", "pick"]

#: group -> (what its line says, its tools). Every built-in tool is in one group, the
#: everyday ones too (they fold when `tools.eager` leaves them out).
GROUPS: Final[dict[str, tuple[str, tuple[str, ...]]]] = {
    "memory": (
        "core memory (facts about the owner and you), archival memory",
        (
            "memory_search",
            "memory_save",
            "memory_core_get",
            "memory_core_update",
            "memory_core_delete",
        ),
    ),
    "history": ("this chat's older messages", ("conversation_search",)),
    "files": ("workspace files", ("file_read", "file_write", "file_list")),
    "messaging": ("other chats, files to send", ("send_message", "send_file")),
    "schedule": (
        "reminders, jobs, subagents",
        ("schedule_add", "schedule_list", "schedule_remove", "subagent_spawn"),
    ),
    "web": ("web pages and search", ("web_fetch", "web_search")),
    "code": ("a sandbox for Python and bash", ("code_execute",)),
    "help": (
        "Klaw's own docs, skills",
        ("docs_search", "docs_read", "docs_list", "skill_list", "skill_load"),
    ),
    "time": ("the clock", ("current_time",)),
}
#: Never folded: offered only while the first-run conversation is pending.
ALWAYS_EAGER: Final = frozenset({"onboarding_done"})
_GROUP_OF: Final = {tool: group for group, (_, tools) in GROUPS.items() for tool in tools}


class BuiltinGroup(ToolGroup):
    """Some of a chat's built-in tools, shown as one line until loaded."""

    def __init__(self, name: str, tools: Sequence[Tool]) -> None:
        self.name = name
        self._tools = list(tools)
        # Its tools are fixed: the line is made once, not at every turn's schemas.
        self._summary = f"{GROUPS[name][0]}: {names_line([t.name for t in self._tools])}"

    def tools(self) -> Sequence[Tool]:
        return self._tools

    def summary(self) -> str:
        return self._summary


def fold(registry: ToolRegistry, eager: Collection[str], chat_id: str) -> ToolRegistry:
    """`registry` with its built-in tools not in `eager` folded into `GROUPS` (after
    every filter of the chat: a group holds only what the chat may call). Tools of no
    group stay eager; MCP groups keep their state beside the built-in ones."""
    if "*" in eager:
        return registry
    keep = set(eager) | ALWAYS_EAGER
    folded: dict[str, list[Tool]] = {}
    sent: list[Tool] = []
    for tool in _own(registry):
        group = _GROUP_OF.get(tool.name)
        if group is None or tool.name in keep:
            sent.append(tool)
        else:
            folded.setdefault(group, []).append(tool)
    if not folded:
        return registry
    out = ToolRegistry(sent, max_result_chars=registry.max_result_chars)
    groups = [BuiltinGroup(name, folded[name]) for name in GROUPS if name in folded]
    base = registry.disclosure or Disclosure(chat_id, [])
    out.attach(base.with_groups(groups))
    return out


def pick(registry: ToolRegistry, names: Collection[str]) -> ToolRegistry:
    """The tools of `names` that `registry` has, every schema sent, folded or not (the
    heartbeat's fixed lean set); no groups."""
    found = [*_own(registry), *_folded(registry)]
    return ToolRegistry(
        [t for t in found if t.name in names], max_result_chars=registry.max_result_chars
    )


def eager_problems(eager: Iterable[str]) -> list[str]:
    """What is wrong with engine.yaml `tools.eager` (names that are no built-in tool)."""
    out: list[str] = []
    for name in eager:
        if name == "*" or name in _GROUP_OF or name in ALWAYS_EAGER:
            continue
        hint = "an MCP server has its own `eager`" if name.startswith("mcp__") else ""
        known = ", ".join(sorted(_GROUP_OF))
        out.append(
            f"engine.yaml tools.eager: {name!r} is not a built-in tool, ignored "
            f"({hint or 'known: ' + known})"
        )
    return out


def _own(registry: ToolRegistry) -> list[Tool]:
    return [t for n in registry.names() if n != LOADER_NAME and (t := registry.get(n))]


def _folded(registry: ToolRegistry) -> list[Tool]:
    if registry.disclosure is None:
        return []
    groups = registry.disclosure.groups.values()
    return [t for g in groups if isinstance(g, BuiltinGroup) for t in g.tools()]

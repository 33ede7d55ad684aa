"""Tool groups: many tools offered to the model as one line, their schemas on demand.

Every schema sent costs its tokens on every model call. A `ToolGroup` (an MCP server's
tools; rarely used built-ins, klaw.tools.builtin_groups) is shown to the model as one
line in the description of `tools_load`; calling `tools_load({"group": ...})` adds that
group's schemas to the following calls of the turn and to the chat's next turns, until
the group has gone `IDLE_TURNS` turns without a call to one of its tools. An `eager`
group's schemas are sent on every call, like built-in tools. A tool of a group is
callable whether or not its schemas were loaded (a model that remembers one from
earlier in the chat, or read its name in the group's line, may call it), and such a
call loads its group: the schemas help the calls that follow.

A group's tools may change while the engine runs (an MCP server starts in the
background, restarts, announces a new list): `ToolGroup.tools()` is asked each time.

    disclosure = Disclosure("telegram_42", [group, ...])
    registry.attach(disclosure)              # klaw.tools.base.ToolRegistry
    registry.begin_turn()                    # the pipeline, once per turn
    registry.schemas()                       # built-ins + tools_load + eager/loaded groups
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from klaw.errors import ToolError
from klaw.llm.types import ToolSchema
from klaw.tools.tool import Tool

__all__ = ["IDLE_TURNS", "LOADER_NAME", "Disclosure", "ToolGroup", "ToolsLoad"]

#: The tool that loads a group's schemas.
LOADER_NAME: Final = "tools_load"
#: Turns a loaded group stays loaded without a call to one of its tools.
IDLE_TURNS: Final = 5
#: Tool names shown in a group's one line, then "and N more".
SHOWN_NAMES: Final = 8


class ToolGroup(ABC):
    """A named set of tools shown as one line until loaded."""

    name: str

    @property
    def private(self) -> bool:
        """Never offered in group chats (the owner's data, or needs the owner's word)."""
        return False

    @property
    def eager(self) -> bool:
        """Schemas in every request, no `tools_load` needed."""
        return False

    @abstractmethod
    def tools(self) -> Sequence[Tool]:
        """The group's tools now (may be empty: a server not started yet)."""

    @abstractmethod
    def summary(self) -> str:
        """One line: what the group offers."""

    def admit(self, chat_id: str, tool: Tool, args: dict[str, Any]) -> str | None:
        """None when `tool` may run in `chat_id` now, else why not (read by the model)."""
        return None


@dataclass
class _State:
    """What a chat loaded, shared by every view of its registry."""

    turn: int = 0
    loaded: dict[str, int] = field(default_factory=dict)  # group -> turn of last use


class Disclosure:
    """A chat's groups and which of them are loaded."""

    def __init__(
        self,
        chat_id: str,
        groups: Iterable[ToolGroup],
        *,
        _state: _State | None = None,
        _keep: Callable[[ToolGroup], bool] | None = None,
    ) -> None:
        self.chat_id = chat_id
        self._all = {g.name: g for g in groups}
        self._state = _state or _State()
        self._keep = _keep
        self._loader: ToolsLoad | None = None

    @property
    def groups(self) -> dict[str, ToolGroup]:
        """The groups offered now (asked each time: a server's privacy may change
        once its tools are listed)."""
        keep = self._keep
        if keep is None:
            return self._all
        return {n: g for n, g in self._all.items() if keep(g)}

    def __bool__(self) -> bool:
        return bool(self._all)

    def with_groups(self, groups: Iterable[ToolGroup]) -> Disclosure:
        """The same chat's state and filter, offering `groups` too."""
        more = [*self._all.values(), *groups]
        return Disclosure(self.chat_id, more, _state=self._state, _keep=self._keep)

    def restricted(self, keep: Callable[[ToolGroup], bool]) -> Disclosure:
        """The same chat's state with only the groups `keep` accepts (when asked)."""
        prev = self._keep
        both = keep if prev is None else (lambda g: prev(g) and keep(g))
        return Disclosure(self.chat_id, self._all.values(), _state=self._state, _keep=both)

    def begin_turn(self) -> None:
        """A new turn: groups idle for `IDLE_TURNS` turns fold back into their line."""
        state = self._state
        state.turn += 1
        for name, last in list(state.loaded.items()):
            if state.turn - last > IDLE_TURNS:
                del state.loaded[name]

    def lazy(self) -> list[ToolGroup]:
        """Groups shown as a line (not eager, not loaded)."""
        return [g for g in self.groups.values() if not g.eager and g.name not in self._state.loaded]

    def offered(self) -> list[Tool]:
        """The tools of eager and loaded groups."""
        return [
            t
            for g in self.groups.values()
            if g.eager or g.name in self._state.loaded
            for t in g.tools()
        ]

    def find(self, name: str) -> tuple[ToolGroup, Tool] | None:
        for group in self.groups.values():
            for tool in group.tools():
                if tool.name == name:
                    return group, tool
        return None

    def load(self, name: str) -> ToolGroup:
        groups = self.groups
        group = groups.get(name.strip())
        if group is None:  # "time" for "mcp__time": models drop the prefix
            want = name.strip().lower()
            same = [g for g in groups.values() if g.name.lower().rpartition("__")[2] == want]
            group = same[0] if len(same) == 1 else None
        if group is None:
            known = ", ".join(groups) or "none"
            raise ToolError(f"Unknown tool group {name!r}. Groups: {known}")
        self._state.loaded[group.name] = self._state.turn
        return group

    def used(self, group: ToolGroup) -> None:
        """One of `group`'s tools was called: it stays (or becomes) loaded."""
        self._state.loaded[group.name] = self._state.turn

    def loader(self) -> ToolsLoad:
        if self._loader is None:  # one per disclosure: it keeps its last schema
            self._loader = ToolsLoad(self)
        return self._loader


class ToolsLoad(Tool):
    """`tools_load`: its description lists the lazy groups, one line each."""

    name = LOADER_NAME
    description = (
        "Load the tools of one of these groups before calling them; their schemas stay "
        "for the rest of this chat."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"group": {"type": "string", "minLength": 1, "maxLength": 100}},
        "required": ["group"],
        "additionalProperties": False,
    }

    def __init__(self, disclosure: Disclosure) -> None:
        self.disclosure = disclosure
        self._last: tuple[list[str], ToolSchema] | None = None

    def schema(self) -> ToolSchema:
        lines = [f"- {g.name}: {g.summary()}" for g in self.disclosure.lazy()]
        # The same schema object while the lines stay: the prompt's caches of encoded
        # and counted schemas then find it without hashing its text again.
        if self._last is not None and self._last[0] == lines:
            return self._last[1]
        schema = ToolSchema(
            self.name, self.description + "\nGroups:\n" + "\n".join(lines), self.parameters
        )
        self._last = (lines, schema)
        return schema

    async def run(self, args: dict[str, Any]) -> str:
        group = self.disclosure.load(str(args["group"]))
        tools = group.tools()
        if not tools:
            return f"Group {group.name} has no tools right now: {group.summary()}"
        lines = [f"- {t.name}: {_first_line(t.description)}" for t in tools]
        return f"Loaded {len(tools)} tool(s) of {group.name}; call them directly:\n" + "\n".join(
            lines
        )


def _first_line(text: str, limit: int = 160) -> str:
    line = " ".join((text or "").strip().splitlines()[:1]).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def names_line(names: Sequence[str], strip: str = "") -> str:
    """`a, b, c and 4 more`: a group's tool names for its one line."""
    short = [n.removeprefix(strip) for n in names]
    shown = ", ".join(short[:SHOWN_NAMES])
    more = len(short) - SHOWN_NAMES
    return shown + (f" and {more} more" if more > 0 else "")

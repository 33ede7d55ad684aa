"""The tool framework: `ToolRegistry` (`Tool` and `ToolResult` are in `klaw.tools.tool`).

The registry is the one place that turns whatever a model asks for into a string it
can read back: unknown names, bad arguments and failing tools all become error
results (`is_error=True`) instead of exceptions, so one bad call never ends a turn
and no traceback or host path reaches the model.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from klaw.errors import KlawError, ToolError
from klaw.llm.types import ToolCall, ToolSchema
from klaw.tools.groups import LOADER_NAME, Disclosure
from klaw.tools.schema import validate
from klaw.tools.tool import Tool, ToolResult

__all__ = ["DEFAULT_MAX_RESULT_CHARS", "Tool", "ToolError", "ToolRegistry", "ToolResult"]

log = logging.getLogger("klaw.tools")

#: ~4k tokens: enough for a page of a file or ten search hits, small enough for a Pi budget.
DEFAULT_MAX_RESULT_CHARS = 16_000


def _truncate(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    note = f"\n[truncated: showing {cap} of {len(text)} characters]"
    return text[: max(0, cap - len(note))] + note


class ToolRegistry:
    """Named tools offered to the model, and the safe way to call them."""

    def __init__(
        self, tools: Iterable[Tool] = (), *, max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    ) -> None:
        if max_result_chars < 200:
            raise ValueError("max_result_chars must be at least 200")
        self.max_result_chars = max_result_chars
        self._tools: dict[str, Tool] = {}
        #: Tool groups offered as one line each (klaw.tools.groups).
        self.disclosure: Disclosure | None = None
        for tool in tools:
            self.register(tool)

    def attach(self, disclosure: Disclosure | None) -> None:
        """Offer `disclosure`'s groups: `tools_load` while one is folded, the tools of
        eager and loaded ones; every group tool is callable."""
        self.disclosure = disclosure if disclosure else None

    def begin_turn(self) -> None:
        if self.disclosure is not None:
            self.disclosure.begin_turn()

    def without_private_groups(self) -> ToolRegistry:
        """This registry without the groups kept out of group chats."""
        out = self.only(self._tools)
        if self.disclosure is not None:
            out.attach(self.disclosure.restricted(lambda g: not g.private))
        return out

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def names(self) -> list[str]:
        """The registered tools' names, and `tools_load` standing for the groups."""
        return [*self._tools, *([LOADER_NAME] if self.disclosure is not None else [])]

    def only(self, names: Iterable[str]) -> ToolRegistry:
        """A registry with those of `names` this one has (same tools, same limits); the
        groups go with `tools_load`."""
        keep = set(names)
        out = ToolRegistry(
            [t for n, t in self._tools.items() if n in keep], max_result_chars=self.max_result_chars
        )
        if LOADER_NAME in keep:
            out.attach(self.disclosure)
        return out

    def get(self, name: str) -> Tool | None:
        tool = self._tools.get(name)
        if tool is None and self.disclosure is not None:
            if name == LOADER_NAME:
                return self.disclosure.loader()
            found = self.disclosure.find(name)
            tool = found[1] if found else None
        return tool

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self) -> list[ToolSchema]:
        out = [tool.schema() for tool in self._tools.values()]
        if self.disclosure is not None:
            if self.disclosure.lazy():
                out.append(self.disclosure.loader().schema())
            out += [tool.schema() for tool in self.disclosure.offered()]
        return out

    async def call(self, call: ToolCall) -> ToolResult:
        """Runs a model's tool call; a call whose arguments were not JSON is an error result."""
        if call.malformed:
            raw = (call.raw_arguments or "")[:200]
            return ToolResult(
                f"The arguments for {call.name!r} were not a JSON object ({call.error}): {raw}",
                is_error=True,
            )
        return await self.dispatch(call.name, call.arguments)

    async def dispatch(self, name: str, args: Any) -> ToolResult:
        """Validates and runs one tool; never raises (except for cancellation)."""
        tool = self.get(name)
        if tool is None:
            known = ", ".join(sorted(self.names())) or "(none)"
            return ToolResult(f"Unknown tool {name!r}. Available tools: {known}", is_error=True)
        if args is None:
            args = {}
        if isinstance(args, dict):
            # Weaker models send `"top_k": null` for an optional argument they skip.
            required = set(tool.parameters.get("required", []))
            args = {k: v for k, v in args.items() if v is not None or k in required}
        found = None
        if name not in self._tools and self.disclosure is not None:
            found = self.disclosure.find(name)
        problems = validate(args, tool.parameters)
        if problems:
            if found is not None and self.disclosure is not None:
                self.disclosure.used(found[0])  # called unloaded: the schema comes next
            return ToolResult(
                f"Invalid arguments for {name}: " + "; ".join(problems[:10]), is_error=True
            )
        if found is not None and self.disclosure is not None:
            refused = found[0].admit(self.disclosure.chat_id, tool, args)
            if refused is not None:
                return ToolResult(refused, is_error=True)
            self.disclosure.used(found[0])
        try:
            content = await tool.run(dict(args))
        except ToolError as exc:
            return ToolResult(_truncate(str(exc), self.max_result_chars), is_error=True)
        except KlawError as exc:  # raised on purpose by klaw code: the message is meant to be read
            log.info("tool %s failed: %s", name, type(exc).__name__)
            return ToolResult(_truncate(f"{name} failed: {exc}", 1000), is_error=True)
        except Exception as exc:
            # Unexpected: the traceback goes to the log, only the kind of failure to the model.
            log.exception("tool %s crashed", name)
            return ToolResult(
                f"{name} failed with an internal error ({type(exc).__name__}); "
                "the details are in the engine log",
                is_error=True,
            )
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False, default=str)
        return ToolResult(_truncate(content, self.max_result_chars))

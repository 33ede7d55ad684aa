"""An MCP server's tools as Klaw tools (`mcp__<server>__<tool>`) and as one `ToolGroup`.

The model sees a server as one line of `tools_load` (klaw.tools.groups) unless the
server is `eager`; a call goes to the server through `McpServer.call` with the
server's timeout, and the result's text (images and binary resources as a note) is
capped by the registry like every tool result. Names are made to fit providers'
rules (64 characters of [a-zA-Z0-9_-]); a clash after that gets `_2`, `_3`.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Final

from klaw.mcp.limits import CONTROLS
from klaw.tools.base import Tool, ToolError
from klaw.tools.groups import ToolGroup, names_line

if TYPE_CHECKING:
    import mcp.types as types

    from klaw.mcp.approvals import Approvals, Mode
    from klaw.mcp.client import McpServer

__all__ = ["PREFIX", "McpGroup", "McpTool", "result_text", "tool_names"]

PREFIX: Final = "mcp__"
MAX_NAME: Final = 64
#: A server's tool description is cut here (some servers write pages).
MAX_DESCRIPTION: Final = 1024
_BAD = re.compile(r"[^A-Za-z0-9_-]")


def tool_names(server: str, tools: list[str]) -> dict[str, str]:
    """Klaw's name for each of `server`'s tools (tool -> mcp__server__tool)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    stem = f"{PREFIX}{server}__"
    for tool in tools:
        base = (stem + _BAD.sub("_", tool))[:MAX_NAME]
        name, n = base, 1
        while name in taken:
            n += 1
            name = base[: MAX_NAME - len(f"_{n}")] + f"_{n}"
        taken.add(name)
        out[tool] = name
    return out


class McpTool(Tool):
    """One tool of an MCP server."""

    description = ""

    def __init__(self, server: McpServer, remote: types.Tool, name: str) -> None:
        self.server = server
        self.remote = remote.name
        # The name and schema come from the server, per instance.
        self.name = name  # type: ignore[misc]
        desc = CONTROLS.sub("", remote.description or remote.title or remote.name).strip()
        if len(desc) > MAX_DESCRIPTION:
            desc = desc[: MAX_DESCRIPTION - 1] + "…"
        self.description = desc  # type: ignore[misc]
        schema = remote.input_schema if isinstance(remote.input_schema, dict) else {}
        self.parameters = schema or {"type": "object", "properties": {}}  # type: ignore[misc]
        hints = remote.annotations
        # A tool the server marks as changing things (annotations without readOnlyHint).
        self.writes = hints is not None and hints.read_only_hint is not True

    async def run(self, args: dict[str, Any]) -> str:
        result = await self.server.call(self.remote, args)
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or f"{self.name} failed (the server gave no reason)")
        return text


def result_text(result: types.CallToolResult) -> str:
    """The text of a tool result: text parts, text resources; the rest as a note."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)  # type: ignore[union-attr]
        elif kind in ("image", "audio"):
            size = len(getattr(block, "data", "")) * 3 // 4
            parts.append(f"[{kind} {getattr(block, 'mime_type', '')}, {size} bytes: not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource: {getattr(block, 'uri', '')}]")
        elif kind == "resource":
            res = getattr(block, "resource", None)
            text = getattr(res, "text", None)
            parts.append(
                text if isinstance(text, str) else f"[resource {getattr(res, 'uri', '')}: binary]"
            )
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts)


class McpGroup(ToolGroup):
    """A server's tools, shown as one line until loaded; approval checked per call."""

    def __init__(self, server: McpServer, approvals: Approvals) -> None:
        self.server = server
        self.approvals = approvals
        self.name = f"{PREFIX}{server.name}"
        self._tools: list[McpTool] = []
        self._listed: object = None  # the server's list they were made from

    @property
    def private(self) -> bool:
        return self.server.config.private or self.mode() != "never"

    @property
    def eager(self) -> bool:
        return self.server.config.eager

    def mode(self) -> Mode:
        """The server's approval mode: as configured, else `first` when one of its
        tools says it writes."""
        configured = self.server.config.approval
        if configured is not None:
            return configured
        return "first" if any(t.writes for t in self.tools()) else "never"

    def tools(self) -> list[McpTool]:
        listed = self.server.tools
        if listed is not self._listed:  # listed again (a restart): new tools
            names = tool_names(self.server.name, [t.name for t in listed])
            self._tools = [McpTool(self.server, t, names[t.name]) for t in listed]
            self._listed = listed
        return self._tools

    def summary(self) -> str:
        server = self.server
        about = (server.config.description or server.description).rstrip(". ")
        tools = self.tools()
        if server.state != "ready" and not tools:
            why = f" ({server.error})" if server.error else ""
            return f"{about + '. ' if about else ''}Not available now: {server.state}{why}."[:300]
        names = names_line([t.name for t in tools], f"{self.name}__")
        return f"{about + '. ' if about else ''}{len(tools)} tools: {names}"

    def admit(self, chat_id: str, tool: Tool, args: dict[str, Any]) -> str | None:
        return self.approvals.check(chat_id, self.server.name, self.mode(), tool.name)

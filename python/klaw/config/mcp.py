"""engine.yaml `mcpServers` (MCP servers whose tools the model gets) and `mcpServe`
(what `klaw mcp serve` offers other agents); docs/mcp.md."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from klaw.config.base import Section

__all__ = ["McpServeConfig", "McpServerConfig", "McpToolFilter", "check_server_names"]

#: A server's name is part of its tools' names (`mcp__<server>__<tool>`), which
#: providers limit to 64 characters of [a-zA-Z0-9_-].
SERVER_NAME = re.compile(r"^[A-Za-z0-9-]{1,24}(?:_[A-Za-z0-9-]+)*$")


class McpToolFilter(Section):
    """Which of a server's tools are offered: names or shell patterns (`get_*`)."""

    allow: list[str] | None = None  # None: every tool the server lists
    deny: list[str] = Field(default_factory=list)


class McpServerConfig(Section):
    """One MCP server: `command` (stdio, a child process) or `url` (streamable HTTP)."""

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    # The child's whole environment besides PATH and HOME (nothing else is inherited).
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    enabled: bool = True
    # Private: its tools are never offered in group chats.
    private: bool = True
    # Schemas in every request; otherwise one line until the model loads them.
    eager: bool = False
    # first: the owner approves the server once per chat; always: every call;
    # never. Unset: first when the server marks a tool as writing, else never.
    approval: Literal["first", "always", "never"] | None = None
    tools: McpToolFilter = Field(default_factory=McpToolFilter)
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 60.0  # per tool call
    # The server's one line for the model; unset: what the server says of itself.
    description: str | None = None

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "give either `command` (a program run over stdio) or `url` (streamable "
                "HTTP), not both nor neither"
            )
        if self.url is not None and not re.match(r"^https?://", self.url):
            raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
        return self

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
        if bad:
            raise ValueError(f"environment variable names must be A-Z, 0-9, _: {bad}")
        return value


def check_server_names(servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
    bad = [name for name in servers if not SERVER_NAME.match(name) or "__" in name]
    if bad:
        raise ValueError(
            f"MCP server names must be 1-24 letters, digits, '-' or single '_' (they "
            f"become part of tool names mcp__<server>__<tool>): {bad}"
        )
    return servers


class McpServeConfig(Section):
    """`klaw mcp serve`: read-only unless `allowWrite` (memory_save)."""

    allow_write: bool = False

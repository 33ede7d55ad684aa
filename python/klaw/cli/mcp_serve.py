"""`klaw mcp serve`: Klaw's memory as an MCP server on stdin/stdout, for other agents.

Each tool call is a request to the running engine over its socket (`tool_run`,
`schedule`): the engine alone opens klaw.db, so this process holds no store and may
run beside it any number of times. Read-only unless engine.yaml says
`mcpServe: {allowWrite: true}` (then memory_save too; the engine checks it again).

    {"mcpServers": {"klaw": {"command": "klaw", "args": ["mcp", "serve"]}}}
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

from klaw import __version__
from klaw.engine import client
from klaw.errors import KlawError
from klaw.wire.protocol import Error, Schedule, ScheduleResult, ToolRun, ToolRunResult

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from klaw.paths import KlawPaths

__all__ = ["build_server", "serve"]

log = logging.getLogger("klaw.mcp.serve")

INSTRUCTIONS = (
    "Klaw is the owner's personal agent. Its long-term memory (notes, daily logs, saved "
    "facts, conversation summaries) is searched with memory_search; past chats with "
    "conversation_search; core_memory_get reads the facts Klaw keeps about the owner; "
    "schedule_list shows its scheduled jobs."
)


async def _run(paths: KlawPaths, name: str, arguments: dict[str, Any]) -> str:
    from mcp.server.mcpserver.exceptions import ToolError as ServeError  # read by the agent

    args = {k: v for k, v in arguments.items() if v is not None}
    try:
        reply = await client.request(paths, ToolRun(name=name, arguments=args), timeout=60.0)
    except KlawError as exc:
        raise ServeError(str(exc)) from None
    if isinstance(reply, Error):
        raise ServeError(f"the engine refused {name}: {reply.message}")
    if not isinstance(reply, ToolRunResult):
        raise ServeError(f"the engine answered {reply.type} to {name}")
    if reply.is_error:
        raise ServeError(reply.content)
    return reply.content


def build_server(paths: KlawPaths, *, allow_write: bool) -> MCPServer:
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    server: MCPServer = MCPServer(
        name="klaw", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    async def memory_search(query: str, topK: int | None = None) -> str:
        """Search Klaw's long-term memory by meaning and keywords; results cite sources."""
        return await _run(paths, "memory_search", {"query": query, "top_k": topK})

    async def conversation_search(
        query: str,
        chatId: str | None = None,
        topK: int | None = None,
    ) -> str:
        """Search past conversations with Klaw: one chat (chatId, e.g. telegram_123) or all."""
        args = {"query": query, "chat_id": chatId, "top_k": topK}
        return await _run(paths, "conversation_search", args)

    async def core_memory_get(section: str | None = None) -> str:
        """Klaw's core memory (facts about the owner and the agent), or one section."""
        return await _run(paths, "memory_core_get", {"section": section})

    async def schedule_list() -> str:
        """Klaw's scheduled jobs: name, schedule, time zone, what each does."""
        from mcp.server.mcpserver.exceptions import ToolError as ServeError

        try:
            reply = await client.request(paths, Schedule(action="list"), timeout=30.0)
        except KlawError as exc:
            raise ServeError(str(exc)) from None
        if isinstance(reply, Error):
            raise ServeError(reply.message)
        if not isinstance(reply, ScheduleResult):
            raise ServeError(f"the engine answered {reply.type}")
        if not reply.jobs:
            return "No scheduled jobs."
        return "\n".join(
            f"- {j.name}: {j.cron} ({j.timezone}){' [paused]' if j.paused else ''}: {j.message}"
            for j in reply.jobs
        )

    for fn in (memory_search, conversation_search, core_memory_get, schedule_list):
        server.add_tool(fn, annotations=read_only, structured_output=False)
    if allow_write:

        async def memory_save(content: str, source: str | None = None) -> str:
            """Save a fact or note to Klaw's long-term memory."""
            return await _run(paths, "memory_save", {"content": content, "source": source})

        server.add_tool(
            memory_save,
            annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
            structured_output=False,
        )
    return server


def serve() -> int:
    """Blocking: serves MCP on stdin/stdout until the client closes it."""
    import anyio

    from klaw.config import load_engine_config
    from klaw.errors import ConfigError
    from klaw.paths import KlawPaths

    # stdout is the protocol: every log line goes to stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    paths = KlawPaths.from_env()
    try:
        config = load_engine_config(paths.engine_config)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    server = build_server(paths, allow_write=config.mcp_serve.allow_write)
    anyio.run(server.run_stdio_async)
    return 0

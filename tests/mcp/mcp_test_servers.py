"""MCP servers written with the SDK for the MCP tests: `python mcp_test_servers.py stdio`
serves over stdin/stdout, `app()` is the streamable HTTP app run on 127.0.0.1.

Tools: echo, env (the names of its environment variables), crash (the process exits
mid-call), hang (never answers), big (10 MB of text), grow (adds a tool `late` and
announces the new list), with `--huge` sprawling (a 25 KB argument schema), and with
`--many N` N more (tool_0 ... tool_N-1). `--pidfile F` writes the process id to F at
start."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from pydantic import Field

READ_ONLY = ToolAnnotations(read_only_hint=True)


def build(many: int = 0, *, writes: bool = False, huge: bool = False) -> MCPServer:
    server: MCPServer = MCPServer(name="testsrv", instructions="A test server for Klaw.")

    async def echo(text: str) -> str:
        """Return the text."""
        return f"echo: {text}"

    async def env() -> str:
        """The names of this process's environment variables."""
        return " ".join(sorted(os.environ))

    async def crash() -> str:
        """Exit the process in the middle of the call."""
        os._exit(3)

    async def hang() -> str:
        """Never answer."""
        await asyncio.Event().wait()
        return ""

    async def big() -> str:
        """Ten megabytes of text."""
        return "x" * (10 * 1024 * 1024)

    async def grow(ctx: Context) -> str:  # type: ignore[type-arg]
        """Add a tool `late` and tell the client the list changed."""
        server.add_tool(echo, name="late", annotations=READ_ONLY, structured_output=False)
        await ctx.session.send_tool_list_changed()
        return "grown"

    for fn in (echo, env, crash, hang, big, grow):
        server.add_tool(fn, annotations=READ_ONLY, structured_output=False)
    if huge:

        async def sprawling(
            text: Annotated[str, Field(description="a very long explanation " * 1000)],
        ) -> str:
            """A tool whose argument schema is 25 KB."""
            return text

        server.add_tool(sprawling, annotations=READ_ONLY, structured_output=False)
    if writes:

        async def write_note(text: str) -> str:
            """Write a note (changes things)."""
            return f"written: {text}"

        server.add_tool(
            write_note, annotations=ToolAnnotations(read_only_hint=False), structured_output=False
        )
    for i in range(many):
        server.add_tool(
            _numbered(i),
            name=f"tool_{i}",
            description=f"Numbered tool {i} of a long list.",
            annotations=READ_ONLY,
            structured_output=False,
        )
    return server


def _numbered(i: int) -> Any:
    async def numbered(x: int) -> str:
        return f"tool {i}: {x}"

    return numbered


def app(seen: list[dict[str, Any]]) -> Any:
    """The streamable HTTP ASGI app; each request's headers are appended to `seen`."""
    inner = build(writes=True).streamable_http_app()

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await inner(scope, receive, send)

    return asgi


def main(argv: list[str]) -> None:
    many = int(argv[argv.index("--many") + 1]) if "--many" in argv else 0
    if "--pidfile" in argv:
        Path(argv[argv.index("--pidfile") + 1]).write_text(str(os.getpid()))
    build(many, writes="--writes" in argv, huge="--huge" in argv).run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])

"""`klaw doctor`'s line per MCP server: the running engine's word on it (ready, or why
it failed), else whether its program can be found; never a FAIL."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from klaw.paths import KlawPaths
from scripted_llm import FakeLLM

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from sched_support import engine_running, engine_yaml, klaw, until

SERVERS = {
    "gone": {"command": "no-such-mcp-server-here"},
    "t": {"command": sys.executable, "args": [str(Path(__file__).parent / "mcp_test_servers.py")]},
}


def lines(out: str, name: str) -> list[str]:
    return [line for line in out.splitlines() if f"MCP server {name}" in line]


async def test_doctor_names_each_server_with_and_without_the_engine(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    with klaw_home.engine_config.open("a") as f:
        f.write("mcpServers: " + json.dumps(SERVERS) + "\n")
    _, out, _ = await klaw("doctor")
    assert lines(out, "gone") == [
        "warn  MCP server gone: command 'no-such-mcp-server-here' not found on PATH"
    ]
    assert lines(out, "t") == [f"ok    MCP server t: {sys.executable} (starts with the engine)"]
    async with engine_running(klaw_home, backend) as server:
        await until(
            lambda: len(server.mcp_status()) == 2 and "starting" not in str(server.mcp_status()), 60
        )
        _, out, _ = await klaw("doctor")
    assert lines(out, "t") == ["ok    MCP server t: ready: 6 tool(s)"]
    (gone,) = lines(out, "gone")
    assert gone.startswith("warn  MCP server gone: failed: FileNotFoundError")

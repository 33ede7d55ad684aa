"""The `mcp` SDK costs seconds and tens of MB to import: an engine with no MCP server
never imports it, and one with servers imports it off the event loop."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.usefixtures("klaw_home")

CHECK = """
import asyncio, sys
from pathlib import Path
from klaw.config import EngineConfig
from klaw.engine.daemon import _pipeline, _start_mcp
from klaw.engine.server import EngineServer
from klaw.memory.api import Memory
from klaw.paths import KlawPaths

paths = KlawPaths.from_env()
config = EngineConfig.model_validate({"mcpServers": {SERVERS}})
memory = Memory.open(paths=paths, config=config)

async def main():
    server = EngineServer(paths, memory=memory)
    manager = _start_mcp(config, paths, memory, server)
    pipeline = _pipeline(config, paths, memory, None, server, mcp=manager)
    registry = pipeline._registry_factory("telegram_1")
    print(len(registry.schemas()) > 0, manager is not None)
    print(sorted(m for m in sys.modules if m == "mcp" or m.startswith(("mcp.", "mcp_types"))))
    if manager is not None:
        await manager.aclose()
    memory.close()

asyncio.run(main())
"""


def run(servers: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", CHECK.replace("{SERVERS}", servers)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_no_server_no_sdk() -> None:
    assert run("{}") == ["True False", "[]"]


def test_a_disabled_server_is_no_server() -> None:
    assert run('{"x": {"command": "x", "enabled": False}}') == ["True False", "[]"]


def test_servers_import_the_sdk_in_their_own_tasks_not_at_start() -> None:
    # The registry is built and offered before any server task ran (the SDK loads in
    # a worker thread when the loop gets to them).
    assert run('{"x": {"command": "no-such-mcp-program"}}') == ["True True", "[]"]

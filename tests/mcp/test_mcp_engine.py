"""MCP servers in the real engine, the model scripted on 127.0.0.1: a server's tools as
one line until `tools_load`, eager servers' schemas in every request, private servers
kept out of group chats, the owner's /approve, and no server process left when the
engine is killed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from klaw.paths import KlawPaths
from klaw.wire.protocol import Command, new_id
from scripted_llm import FakeLLM, call

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sandbox"))
from sandbox_support import say
from sched_support import T, engine_running, engine_yaml, until

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
CHAT = "telegram_100"


def with_servers(paths: KlawPaths, url: str, servers: dict[str, dict[str, Any]]) -> None:
    engine_yaml(paths.engine_config, url, maxToolCallRounds=5)
    with paths.engine_config.open("a") as f:
        f.write("mcpServers: " + json.dumps(servers) + "\n")


def time_server(**keys: Any) -> dict[str, Any]:
    return {"command": str(BIN / "mcp-server-time"), "args": ["--local-timezone", "UTC"], **keys}


def sdk_server(*args: str, **keys: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(HERE / "mcp_test_servers.py"), *args], **keys}


async def ready(server: Any, *names: str) -> None:
    def up() -> bool:
        status = server.mcp_status()
        return all(status.get(n, "").startswith("ready") for n in names)

    await until(up, 60)


async def command(server: Any, name: str, args: str, chat: str = CHAT) -> str:
    got: list[Any] = []

    async def reply(msg: Any) -> None:
        got.append(msg)

    cmd = Command(
        id=new_id(), channel="telegram", chat_id=chat, ts=datetime.now(UTC), name=name, args=args
    )
    await server.handler.handle(cmd, reply)
    return str(got[-1].content)


def tools_of(request: dict[str, Any]) -> dict[str, str]:
    return {t["function"]["name"]: t["function"]["description"] for t in request.get("tools", [])}


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_a_server_is_one_line_until_the_model_loads_it(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    with_servers(klaw_home, llm.url, {"time": time_server()})
    llm.answer(None, [call("c1", "tools_load", '{"group": "mcp__time"}')])
    llm.answer(None, [call("c2", "mcp__time__get_current_time", '{"timezone": "Asia/Tokyo"}')])
    llm.answer("It is late in Tokyo.")
    llm.answer("You're welcome.")
    async with engine_running(klaw_home, backend) as server:
        await ready(server, "time")
        assert await say(server, "What time is it in Tokyo?") == ["It is late in Tokyo."]
        assert await say(server, "Thanks") == ["You're welcome."]
    first, loaded, answered, next_turn = (tools_of(r) for r in llm.requests)
    assert "tools_load" in first and not any(n.startswith("mcp__time__") for n in first)
    assert "- mcp__time: " in first["tools_load"]
    assert "2 tools: get_current_time, convert_time" in first["tools_load"]
    assert {"mcp__time__get_current_time", "mcp__time__convert_time"} <= set(loaded)
    assert "mcp__time" not in loaded.get("tools_load", "")  # no longer folded
    assert '"timezone": "Asia/Tokyo"' in tool_results(llm.requests[2])[-1]
    assert "mcp__time__get_current_time" in answered
    assert "mcp__time__get_current_time" in next_turn  # loaded for the chat's next turns


async def test_an_eager_server_is_in_every_request_and_public_ones_reach_groups(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    servers = {
        "time": time_server(eager=True, private=False),
        "notes": sdk_server(),  # private by default
    }
    with_servers(klaw_home, llm.url, servers)
    llm.answer("private")
    llm.answer("group")
    async with engine_running(klaw_home, backend) as server:
        await ready(server, "time", "notes")
        await say(server, "hi")
        await say(server, "hi all", chat="telegram_-200", group=True)
    private, group = (tools_of(r) for r in llm.requests)
    assert "mcp__time__get_current_time" in private and "- mcp__notes: " in private["tools_load"]
    assert "mcp__time__get_current_time" in group
    assert "mcp__notes" not in group.get("tools_load", "")
    assert not any(n.startswith("mcp__notes") for n in group)


async def test_a_server_that_writes_runs_after_the_owner_approves(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    with_servers(klaw_home, llm.url, {"w": sdk_server("--writes", eager=True)})
    note = call("c1", "mcp__w__write_note", '{"text": "milk"}')
    llm.answer(None, [note])
    llm.answer("I need your approval: send /approve w.")
    llm.answer(None, [call("c2", "mcp__w__write_note", '{"text": "milk"}')])
    llm.answer("Written.")
    async with engine_running(klaw_home, backend) as server:
        await ready(server, "w")
        await say(server, "Note: buy milk")
        refused = tool_results(llm.requests[1])[-1]
        assert refused.startswith("Not run: the owner has not approved the MCP server 'w'")
        assert "/approve w" in refused
        assert "Waiting for approval:\n/approve w" in await command(server, "approve", "")
        assert "from now on" in await command(server, "approve", "w")
        assert await say(server, "Approved, go on") == ["Written."]
    assert tool_results(llm.requests[3])[-1] == "written: milk"
    saved = json.loads((klaw_home.state_dir / "mcp-approvals.json").read_text())
    assert saved == {"approved": [[CHAT, "w"]]}


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie is dead


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
async def test_no_server_process_outlives_the_engine(
    klaw_home: KlawPaths, llm: FakeLLM, how: signal.Signals
) -> None:
    from engine_harness import spawn_engine, wait_socket

    pidfile = klaw_home.state_dir / "server.pid"
    with_servers(klaw_home, llm.url, {"s": sdk_server("--pidfile", str(pidfile))})
    engine = await spawn_engine()
    try:
        await wait_socket(klaw_home, engine)
        await until(lambda: pidfile.exists() and pidfile.read_text().strip() != "", 90)
        child = int(pidfile.read_text())
        assert _alive(child)
        assert os.getpgid(child) == child  # a process group of its own
        engine.send_signal(how)
        await asyncio.wait_for(engine.wait(), T)
        await until(lambda: not _alive(child), T)
    finally:
        if engine.returncode is None:
            engine.kill()
            await engine.wait()

"""The MCP client against real servers: mcp-server-time and mcp-server-git from PyPI over
stdio, servers written here with the SDK over stdio and streamable HTTP on 127.0.0.1;
servers that crash mid-call, hang, answer 10 MB, list 500 tools, cannot start."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from klaw.config.mcp import McpServerConfig
from klaw.mcp.manager import McpManager
from klaw.mcp.tools import McpGroup, McpTool, tool_names
from klaw.tools.base import ToolRegistry
from klaw.tools.groups import LOADER_NAME, Disclosure

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
TEST_SERVER = [str(HERE / "mcp_test_servers.py")]
T = 60.0


@contextlib.asynccontextmanager
async def running(
    environ: dict[str, str] | None = None, **servers: McpServerConfig
) -> AsyncIterator[McpManager]:
    manager = McpManager(servers, environ=environ)
    manager.start()
    try:
        for server in manager.servers.values():
            await server.wait_state("ready", "failed", timeout=T)
        yield manager
    finally:
        await manager.aclose()


def sdk_server(*args: str, **keys: Any) -> McpServerConfig:
    return McpServerConfig(command=sys.executable, args=[*TEST_SERVER, *args], **keys)


def group(manager: McpManager, name: str) -> McpGroup:
    return next(g for g in manager.groups() if isinstance(g, McpGroup) and g.server.name == name)


def tool(manager: McpManager, server: str, name: str) -> McpTool:
    return next(t for t in group(manager, server).tools() if t.remote == name)


async def test_mcp_server_time_from_pypi_over_stdio() -> None:
    cfg = McpServerConfig(
        command=str(BIN / "mcp-server-time"), args=["--local-timezone", "Europe/Berlin"]
    )
    async with running(time=cfg) as manager:
        assert manager.status() == {"time": "ready: 2 tool(s)"}
        g = group(manager, "time")
        assert [t.name for t in g.tools()] == [
            "mcp__time__get_current_time",
            "mcp__time__convert_time",
        ]
        # Its tools say they are read-only: no approval by default, still private.
        assert g.mode() == "never" and g.private
        out = json.loads(
            await tool(manager, "time", "get_current_time").run({"timezone": "Asia/Tokyo"})
        )
        assert out["timezone"] == "Asia/Tokyo" and out["datetime"].endswith("+09:00")


async def test_mcp_server_git_from_pypi_declares_writes_so_approval_is_first(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("hello\n")
    cfg = McpServerConfig(command=str(BIN / "mcp-server-git"), args=["--repository", str(repo)])
    async with running(git=cfg) as manager:
        g = group(manager, "git")
        assert "mcp__git__git_status" in {t.name for t in g.tools()}
        assert g.mode() == "first"
        status = await tool(manager, "git", "git_status").run({"repo_path": str(repo)})
        assert "a.txt" in status


async def test_streamable_http_server_gets_the_configured_headers() -> None:
    import uvicorn
    from mcp_test_servers import app

    seen: list[dict[str, Any]] = []
    config = uvicorn.Config(app(seen), host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    web = uvicorn.Server(config)
    serving = asyncio.create_task(web.serve())
    try:
        async with asyncio.timeout(T):
            while not web.started:
                await asyncio.sleep(0.02)
        port = web.servers[0].sockets[0].getsockname()[1]
        cfg = McpServerConfig(
            url=f"http://127.0.0.1:{port}/mcp", headers={"Authorization": "Bearer t0ken"}
        )
        async with running(notes=cfg) as manager:
            assert manager.status()["notes"].startswith("ready"), manager.status()
            assert await tool(manager, "notes", "echo").run({"text": "hi"}) == "echo: hi"
            # write_note is not read-only: the owner approves this server first.
            assert group(manager, "notes").mode() == "first"
        assert seen and all(h.get("authorization") == "Bearer t0ken" for h in seen)
    finally:
        web.should_exit = True
        await serving


async def test_the_child_gets_only_path_home_and_its_env() -> None:
    environ = {"PATH": os.environ["PATH"], "HOME": "/tmp", "OPENAI_API_KEY": "sk-secret"}
    async with running(environ, t=sdk_server(env={"GREETING": "hi"})) as manager:
        names = set((await tool(manager, "t", "env").run({})).split())
    # Python itself may add LC_CTYPE (PEP 538) in the child.
    assert names - {"LC_CTYPE"} == {"PATH", "HOME", "GREETING"}


async def test_crash_mid_call_is_an_error_then_the_server_is_back() -> None:
    async with running(t=sdk_server()) as manager:
        server = manager.servers["t"]
        registry = ToolRegistry([tool(manager, "t", "crash"), tool(manager, "t", "echo")])
        result = await registry.dispatch("mcp__t__crash", {})
        assert result.is_error and "stopped during the call" in result.content
        assert "exited with 3" in result.content
        async with asyncio.timeout(T):
            while not (server.state == "ready" and server.starts == 2):
                await server.changed.wait()
        ok = await registry.dispatch("mcp__t__echo", {"text": "again"})
        assert ok.content == "echo: again" and not ok.is_error


async def test_a_hanging_call_times_out_and_the_server_still_answers() -> None:
    # 3 s: the echo after the hang must answer within it on a loaded machine too.
    async with running(t=sdk_server(timeout_seconds=3)) as manager:
        registry = ToolRegistry([tool(manager, "t", "hang"), tool(manager, "t", "echo")])
        result = await registry.dispatch("mcp__t__hang", {})
        assert result.is_error and "did not answer within 3 s" in result.content
        assert (await registry.dispatch("mcp__t__echo", {"text": "x"})).content == "echo: x"


async def test_a_10_mb_result_is_capped_like_every_tool_result() -> None:
    async with running(t=sdk_server()) as manager:
        registry = ToolRegistry([tool(manager, "t", "big")], max_result_chars=16_000)
        result = await registry.dispatch("mcp__t__big", {})
    assert not result.is_error and len(result.content) == 16_000
    assert result.content.endswith(f"[truncated: showing 16000 of {10 * 1024 * 1024} characters]")


async def test_500_tools_are_one_line_until_loaded() -> None:
    async with running(t=sdk_server("--many", "494")) as manager:
        g = group(manager, "t")
        assert len(g.tools()) == 500
        registry = ToolRegistry()
        registry.attach(Disclosure("telegram_1", [g]))
        lazy = registry.schemas()
        assert [s.name for s in lazy] == [LOADER_NAME]
        line = lazy[0].description.splitlines()[-1]
        assert line.startswith("- mcp__t: A test server for Klaw. 500 tools: echo, env")
        assert line.endswith("and 492 more")
        loaded = await registry.dispatch(LOADER_NAME, {"group": "mcp__t"})
        assert loaded.content.startswith("Loaded 500 tool(s) of mcp__t")
        assert len(registry.schemas()) == 500  # the loader goes: nothing left folded
        out = await registry.dispatch("mcp__t__tool_493", {"x": 7})
        assert out.content == "tool 493: 7"


async def test_a_server_announcing_new_tools_is_listed_again() -> None:
    async with running(t=sdk_server()) as manager:
        server, g = manager.servers["t"], group(manager, "t")
        assert "late" not in {t.remote for t in g.tools()}
        changed = server.changed
        assert await tool(manager, "t", "grow").run({}) == "grown"
        async with asyncio.timeout(T):
            while "late" not in {t.name for t in server.tools}:
                await changed.wait()
                changed = server.changed
        assert await tool(manager, "t", "late").run({"text": "hi"}) == "echo: hi"
        assert server.starts == 1  # listed again, not restarted


async def test_a_tool_with_a_huge_schema_is_left_out(caplog: pytest.LogCaptureFixture) -> None:
    async with running(t=sdk_server("--huge")) as manager:
        offered = {t.remote for t in group(manager, "t").tools()}
    assert "sprawling" not in offered and "echo" in offered
    assert "tool sprawling left out: its argument schema has" in caplog.text


async def test_allow_and_deny_pick_the_tools() -> None:
    cfg = sdk_server("--many", "3", tools={"allow": ["tool_*", "echo"], "deny": ["tool_1"]})
    async with running(t=cfg) as manager:
        assert [t.remote for t in group(manager, "t").tools()] == ["echo", "tool_0", "tool_2"]


async def test_a_server_that_cannot_start_is_a_status_line_not_a_crash() -> None:
    cfg = McpServerConfig(command="no-such-mcp-server-here")
    async with running(gone=cfg, t=sdk_server()) as manager:
        status = manager.status()
        assert status["gone"].startswith("failed: FileNotFoundError")
        assert "not found on PATH" in status["gone"]
        assert status["t"].startswith("ready")
        summary = group(manager, "gone").summary()
        assert summary.startswith("Not available now: failed")


def test_tool_names_fit_provider_rules_and_never_clash() -> None:
    names = tool_names("srv", ["get.time", "get/time", "x" * 80, "ok-name"])
    assert names["get.time"] == "mcp__srv__get_time"
    assert names["get/time"] == "mcp__srv__get_time_2"
    assert len(names["x" * 80]) == 64
    assert names["ok-name"] == "mcp__srv__ok-name"


@pytest.mark.parametrize("name", ["a__b", "", "x" * 30, "bad name", "ünï"])
def test_bad_server_names_are_refused(name: str) -> None:
    from klaw.config import EngineConfig

    with pytest.raises(ValueError, match="MCP server names"):
        EngineConfig.model_validate({"mcpServers": {name: {"command": "x"}}})


def test_a_server_is_command_or_url() -> None:
    with pytest.raises(ValueError, match="either `command`"):
        McpServerConfig(command="x", url="http://127.0.0.1/mcp")
    with pytest.raises(ValueError, match="either `command`"):
        McpServerConfig()


def test_variables_in_env_and_headers_are_expanded_or_named(tmp_path: Path) -> None:
    from klaw.config import load_engine_config
    from klaw.errors import ConfigError

    path = tmp_path / "engine.yaml"
    path.write_text(
        "mcpServers:\n"
        "  notes:\n"
        "    url: https://notes.example/mcp\n"
        '    headers: {Authorization: "Bearer ${NOTES_TOKEN}"}\n'
        "  gh:\n"
        "    command: gh-mcp\n"
        "    env: {GH_TOKEN: '${GH_TOKEN:-}'}\n"
    )
    env = {"HOME": str(tmp_path), "NOTES_TOKEN": "n0tes"}
    cfg = load_engine_config(path, env)
    assert cfg.mcp_servers["notes"].headers == {"Authorization": "Bearer n0tes"}
    assert cfg.mcp_servers["gh"].env == {"GH_TOKEN": ""}
    with pytest.raises(
        ConfigError, match=r"mcpServers\.notes\.headers\.Authorization.*NOTES_TOKEN"
    ):
        load_engine_config(path, {"HOME": str(tmp_path)})


def raw_server(*args: str, **keys: Any) -> McpServerConfig:
    return McpServerConfig(
        command=sys.executable, args=[str(HERE / "raw_mcp_server.py"), *args], **keys
    )


async def test_a_server_writing_garbage_is_logged_a_few_times_and_its_escapes_never_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, "klaw.mcp"):
        async with running(r=raw_server("garbage", "5000")) as manager:
            server = manager.servers["r"]
            assert server.state == "ready", server.error
            assert await tool(manager, "r", "echo").run({}) == "echoed"
            stderr = list(server.child.stderr) if server.child else []
    garbage = [r for r in caplog.records if "not JSON-RPC" in r.getMessage()]
    assert 1 <= len(garbage) <= 4  # 5,000 lines: a few lines of log, and a count
    assert all("\x1b" not in r.getMessage() for r in caplog.records)
    assert stderr and all("\x1b" not in line and "\x07" not in line for line in stderr)


async def test_an_answer_nested_too_deep_fails_at_once_saying_why() -> None:
    async with running(r=raw_server("deep-list")) as manager:
        server = manager.servers["r"]
        assert server.state == "failed"
        assert "could not be read" in (server.error or ""), server.error
    async with running(r=raw_server("deep-call", timeout_seconds=600)) as manager:
        registry = ToolRegistry([tool(manager, "r", "echo")])
        result = await asyncio.wait_for(registry.dispatch("mcp__r__echo", {}), T)
        assert result.is_error and "could not be read" in result.content


async def test_escapes_in_a_servers_error_never_reach_klaw_doctor() -> None:
    async with running(r=raw_server("refuse")) as manager:
        status = manager.status()["r"]
    assert status.startswith("failed") and "noway" in status
    assert "\x1b" not in status and "\x07" not in status and "\r" not in status


async def test_escapes_in_a_tools_name_and_description_never_reach_the_model() -> None:
    async with running(r=raw_server("ansi")) as manager:
        (only,) = group(manager, "r").tools()
        assert only.name == "mcp__r________etc___2Jpasswd_"  # a name, not a path
        assert "\x1b" not in only.description and "\x07" not in only.description
        assert only.description.startswith("Echo.") and "Really" in only.description
        assert await only.run({}) == "echoed"


async def test_an_http_server_answering_without_end_is_cut_at_32_mb() -> None:
    """The SDK reads an HTTP answer whole: 400 MB took 1.4 GB before this limit."""
    from aiohttp import web

    sent = 0

    async def endless(request: web.Request) -> web.StreamResponse:
        nonlocal sent
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"jsonrpc": "2.0", "id": 0, "result": {"x": "')
        with contextlib.suppress(ConnectionError):
            while sent < 400 * 1024 * 1024:
                await response.write(b"a" * 1024 * 1024)
                sent += 1024 * 1024
        return response

    app = web.Application()
    app.router.add_route("*", "/mcp", endless)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/mcp"
    try:
        async with running(h=McpServerConfig(url=url)) as manager:
            server = manager.servers["h"]
            assert server.state == "failed"
            assert "sent an answer over 32 MB" in (server.error or ""), server.error
    finally:
        await runner.cleanup()
    assert sent < 400 * 1024 * 1024

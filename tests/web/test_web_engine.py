"""`web_search` and `web_fetch` as the model's tool calls in the real engine (scripted
model server, a SearXNG-speaking server and a web site on the loopback): the model
searches, reads the best hit and a refused one, and answers; without a provider
web_search is not offered and the web-search skill is off."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from klaw.paths import KlawPaths
from scripted_llm import FakeLLM, call
from scripted_llm import offered as tool_names  # schemas sent and tools_load's lines

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sandbox"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from sandbox_support import say
from sched_support import engine_running, engine_yaml
from web_servers import SearchApi, Site


@pytest.fixture
async def servers() -> AsyncIterator[tuple[Site, SearchApi]]:
    site, api = Site(), SearchApi()
    await site.start()
    await api.start()
    yield site, api
    await api.close()
    await site.close()


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_the_model_searches_reads_and_cites(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, servers: tuple[Site, SearchApi]
) -> None:
    site, api = servers
    engine_yaml(klaw_home.engine_config, llm.url, maxToolCallRounds=4)
    with klaw_home.engine_config.open("a") as f:
        f.write(
            "web:\n"
            "  fetch:\n"
            f'    allowHosts: ["127.0.0.1:{site.port}"]\n'
            "  search:\n"
            "    provider: searxng\n"
            f"    endpoint: {api.url}\n"
        )
    llm.answer(None, [call("s1", "web_search", json.dumps({"query": "rain tank size"}))])
    llm.answer(
        None,
        [
            call("f1", "web_fetch", json.dumps({"url": f"{site.url}/article", "maxTokens": 500})),
            call("f2", "web_fetch", json.dumps({"url": f"http://127.0.0.1:{api.port}/search"})),
        ],
    )
    llm.answer(f"A 300-litre tank lasts two dry weeks (source: {site.url}/article).")
    async with engine_running(klaw_home, backend) as server:
        reply = await say(server, "How big should my rain tank be?")
    assert reply == [f"A 300-litre tank lasts two dry weeks (source: {site.url}/article)."]
    first = llm.requests[0]
    assert {"web_search", "web_fetch"} <= tool_names(first)
    system = first["messages"][0]["content"]
    assert "web-search" in system  # the skill is offered once a provider is set
    (found,) = tool_results(llm.requests[1])
    assert "1. Rain tanks\n   https://example.org/rain" in found
    page, refused = tool_results(llm.requests[2])[-2:]
    assert "three hundred litres" in page and "NAVMENU" not in page
    assert "Refused" in refused and "loopback" in refused  # the other port is not allowed
    assert api.requests[0][1]["q"] == "rain tank size" and len(api.requests) == 1


async def test_no_web_search_without_a_provider(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    llm.answer("I cannot search the web.")
    async with engine_running(klaw_home, backend) as server:
        assert await say(server, "What's new?") == ["I cannot search the web."]
    names = tool_names(llm.requests[0])
    assert "web_fetch" in names and "web_search" not in names
    assert "web-search" not in llm.requests[0]["messages"][0]["content"]


async def test_a_group_chat_reaches_no_allowed_private_host(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, servers: tuple[Site, SearchApi]
) -> None:
    """allowHosts opens the owner's network to the owner: in a group, anyone could ask
    for the NAS's pages, so web_fetch there reaches public addresses only."""
    site, _ = servers
    engine_yaml(klaw_home.engine_config, llm.url)
    with klaw_home.engine_config.open("a") as f:
        f.write(f'web:\n  fetch:\n    allowHosts: ["127.0.0.1:{site.port}"]\n')
    fetch = call("f1", "web_fetch", json.dumps({"url": f"{site.url}/article"}))
    llm.answer(None, [fetch])
    llm.answer("Not from here.")
    llm.answer(None, [fetch])
    llm.answer("Here it is.")
    async with engine_running(klaw_home, backend) as server:
        assert await say(server, "Read my NAS page", chat="telegram_-100", group=True) == [
            "Not from here."
        ]
        assert await say(server, "Read my NAS page") == ["Here it is."]
    (refused,) = tool_results(llm.requests[1])
    assert "Refused" in refused and "loopback" in refused
    assert "three hundred litres" in tool_results(llm.requests[3])[-1]
    assert site.hits == ["/article"]  # only the owner's call reached it

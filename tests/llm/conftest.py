"""Fixtures: fake LLM servers on 127.0.0.1, closed after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from fake_llm import FakeLLM


@pytest.fixture
async def make_server() -> AsyncIterator[Callable[[], Awaitable[FakeLLM]]]:
    servers: list[FakeLLM] = []

    async def make() -> FakeLLM:
        server = FakeLLM()
        await server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.close()


@pytest.fixture
async def server(make_server: Callable[[], Awaitable[FakeLLM]]) -> FakeLLM:
    return await make_server()

"""Fixtures: fake Telegram Bot API and Discord servers on 127.0.0.1, closed after each test;
for the end-to-end tests, an engine.yaml whose model is the scripted `llm` and the
klaw.db opener the engine is started with."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from fake_discord import FakeDiscord
from fake_telegram import FakeTelegram

from klaw.config import EngineConfig
from klaw.memory import Memory
from klaw.paths import KlawPaths
from scripted_llm import FakeLLM, engine_config


@pytest.fixture
def config(tmp_path: Path, llm: FakeLLM) -> EngineConfig:
    return engine_config(tmp_path, llm.url, debounceMs=0)


@pytest.fixture
def open_memory(klaw_home: KlawPaths, backend: Any, config: EngineConfig) -> Callable[[], Memory]:
    return lambda: Memory.open(paths=klaw_home, config=config, backend=backend)


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    server = FakeTelegram()
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    server = FakeDiscord()
    await server.start()
    yield server
    await server.close()

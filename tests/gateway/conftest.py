"""Fixtures: fake Telegram Bot API and Discord servers on 127.0.0.1, closed after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fake_discord import FakeDiscord
from fake_telegram import FakeTelegram


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

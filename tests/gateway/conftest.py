"""Fixtures: a fake Telegram Bot API server on 127.0.0.1, closed after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fake_telegram import FakeTelegram


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    server = FakeTelegram()
    await server.start()
    yield server
    await server.close()

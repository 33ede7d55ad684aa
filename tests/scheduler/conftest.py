"""Fixtures for scheduler tests: the fake Telegram Bot API of the gateway tests."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gateway"))

from fake_telegram import FakeTelegram


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    server = FakeTelegram()
    await server.start()
    yield server
    await server.close()

"""current_time: IANA zones, a bad zone is an error result."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from klaw.tools import ToolRegistry
from klaw.tools.clock import CurrentTime

FIXED = datetime(2026, 2, 24, 12, 30, 5, tzinfo=UTC)


@pytest.fixture
def reg() -> ToolRegistry:
    return ToolRegistry([CurrentTime(lambda: FIXED)])


async def test_named_zone(reg: ToolRegistry) -> None:
    res = await reg.dispatch("current_time", {"timezone": "Europe/Moscow"})
    assert not res.is_error
    assert res.content == (
        "Tuesday, 2026-02-24 15:30:05 Europe/Moscow (UTC+03:00; ISO 2026-02-24T15:30:05+03:00)"
    )


async def test_negative_offset(reg: ToolRegistry) -> None:
    res = await reg.dispatch("current_time", {"timezone": "America/New_York"})
    assert "07:30:05" in res.content and "UTC-05:00" in res.content


async def test_default_is_local_zone(reg: ToolRegistry) -> None:
    res = await reg.dispatch("current_time", {})
    assert not res.is_error and "2026-02-2" in res.content


async def test_real_clock() -> None:
    res = await ToolRegistry([CurrentTime()]).dispatch("current_time", {"timezone": "UTC"})
    assert not res.is_error and str(datetime.now(UTC).year) in res.content


@pytest.mark.parametrize(
    "zone", ["Mars/Olympus", "Europe", "../../etc/passwd", "/etc/localtime", "UTC+3", " "]
)
async def test_bad_zone_is_an_error_result(reg: ToolRegistry, zone: str) -> None:
    res = await reg.dispatch("current_time", {"timezone": zone})
    assert res.is_error and "IANA" in res.content

"""current_time: IANA zones, a bad zone is an error result."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from klaw.config import load_engine_config
from klaw.paths import KlawPaths
from klaw.tools import ToolRegistry, builtin_registry
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


async def test_default_is_the_owners_zone_not_the_hosts() -> None:
    # 23:30 UTC on New Year's Eve is already New Year's Day at UTC+14, whatever the host's zone.
    eve = datetime(2026, 12, 31, 23, 30, tzinfo=UTC)
    owner = ToolRegistry([CurrentTime(lambda: eve, "Pacific/Kiritimati")])
    res = await owner.dispatch("current_time", {})
    assert res.content == (
        "Friday, 2027-01-01 13:30:00 Pacific/Kiritimati (UTC+14:00; ISO 2027-01-01T13:30:00+14:00)"
    )


async def test_the_engines_clock_tool_speaks_in_scheduler_timezone(
    klaw_home: KlawPaths, memory: Any
) -> None:
    klaw_home.engine_config.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.engine_config.write_text("scheduler:\n  timezone: America/Los_Angeles\n")
    config = load_engine_config(klaw_home.engine_config)
    eve = datetime(2027, 1, 1, 2, 0, tzinfo=UTC)
    reg = builtin_registry(klaw_home, config, memory, now=lambda: eve)
    res = await reg.dispatch("current_time", {})
    assert "2026-12-31 18:00:00 America/Los_Angeles (UTC-08:00" in res.content


async def test_real_clock() -> None:
    res = await ToolRegistry([CurrentTime()]).dispatch("current_time", {"timezone": "UTC"})
    assert not res.is_error and str(datetime.now(UTC).year) in res.content


@pytest.mark.parametrize(
    "zone", ["Mars/Olympus", "Europe", "../../etc/passwd", "/etc/localtime", "UTC+3", " "]
)
async def test_bad_zone_is_an_error_result(reg: ToolRegistry, zone: str) -> None:
    res = await reg.dispatch("current_time", {"timezone": zone})
    assert res.is_error and "IANA" in res.content

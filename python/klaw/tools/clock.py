"""`current_time`: the model has no clock; it asks this one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from klaw.tools.base import Tool, ToolError

__all__ = ["CurrentTime"]


class CurrentTime(Tool):
    name = "current_time"
    description = (
        "The current date, time, weekday and zone; `timezone`: an IANA name such as "
        "Europe/Prague (default: the owner's)."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"timezone": {"type": "string", "minLength": 1, "maxLength": 64}},
        "additionalProperties": False,
    }

    def __init__(self, now: Callable[[], datetime] | None = None, zone: str | None = None) -> None:
        # Injectable so tests (and replays) can pin the clock; must return an aware datetime.
        self._now = now or (lambda: datetime.now(UTC))
        # The owner's zone (scheduler.timezone), the one jobs, caps and daily logs use;
        # None: the host's.
        self._zone = ZoneInfo(zone) if zone else None

    async def run(self, args: dict[str, Any]) -> str:
        now = self._now()
        name = args.get("timezone")
        if name is None:
            local = now.astimezone(self._zone)
            zone = self._zone.key if self._zone else local.tzname() or "local"
        else:
            try:
                tz = ZoneInfo(name.strip())
            except (ZoneInfoNotFoundError, ValueError, OSError):
                raise ToolError(
                    f"Unknown timezone {name!r}: use an IANA name such as Europe/Prague, "
                    "America/New_York or UTC"
                ) from None
            local = now.astimezone(tz)
            zone = tz.key
        return (
            f"{local.strftime('%A, %Y-%m-%d %H:%M:%S')} {zone} "
            f"(UTC{local.strftime('%z')[:3]}:{local.strftime('%z')[3:]}; "
            f"ISO {local.isoformat(timespec='seconds')})"
        )

"""The APScheduler trigger of a job. The schedule it carries (a cron expression, an
interval or one time) and its fire times are klaw.cronexpr's; this class only hands
them to APScheduler. Its module path is what scheduler.db's rows name (see
klaw.scheduler.jobstate): it stays here.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from apscheduler.triggers.base import BaseTrigger

from klaw.cronexpr import Schedule, parse_schedule, zone_named

__all__ = ["CronTrigger"]


class CronTrigger(BaseTrigger):  # type: ignore[misc]
    """The APScheduler trigger of a job: a schedule (cron expression, interval or one
    time) in a named time zone.

    Fire times come from `Cron.next_after`, not from APScheduler's own CronTrigger:
    3.11.3's skips a whole month after a DST change (from 2026-03-01 in Europe/Berlin
    its next "0 0 1 * *" is May 1st). It pickles as text (expression and zone name),
    so scheduler.db never holds code.
    """

    def __init__(self, expr: str, timezone: str) -> None:
        self.cron: Schedule = parse_schedule(expr)
        self.timezone = zone_named(timezone)

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        if previous_fire_time is not None:
            return self.cron.next_after(previous_fire_time, self.timezone)
        return self.cron.next_after(now - timedelta(microseconds=1), self.timezone)

    def __getstate__(self) -> dict[str, object]:
        return {"version": 1, "expr": self.cron.expr, "timezone": self.timezone.key}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.cron = parse_schedule(str(state["expr"]))
        self.timezone = zone_named(str(state["timezone"]))

    def __str__(self) -> str:
        return f"cron[{self.cron.expr!r}, {self.timezone.key}]"

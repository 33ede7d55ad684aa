"""What a scheduled job is: its checked data, as stored with the job in scheduler.db.

A job is data only (no code): APScheduler keeps it as the keyword arguments of one
module-level handler (`klaw.scheduler.service:scheduled_message`), so a job store
written by one version of Klaw is read by the next.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, tzinfo
from typing import Any, Final

from klaw.cronexpr import CronError, Schedule, parse_schedule, zone_named
from klaw.errors import InvalidInput

__all__ = ["HEARTBEAT", "MAX_MESSAGE_CHARS", "JobError", "JobSpec", "check_name"]

#: The job generated from HEARTBEAT.md (its name is reserved).
HEARTBEAT: Final = "heartbeat"
MAX_MESSAGE_CHARS: Final = 20_000
MAX_PRECHECK_CHARS: Final = 4_000
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_CHAT = re.compile(r"^[a-z][a-z0-9]*_\S{1,200}$")


class JobError(InvalidInput):
    """A job Klaw cannot schedule; the message names the field and why."""


def check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise JobError(
            f"job name {name!r}: use 1-64 lowercase letters, digits, '-' or '_' "
            "(it names the job's log folder)"
        )
    return name


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job as the owner (or the model) defined it.

    `cron` is the schedule (a cron expression, `every 30m` or `at 2026-12-01T09:00`,
    see `parse_schedule`) and runs in `timezone` (an IANA name). `model` None:
    `routing.tasks.subagent`. `inject_into` None: the result is only logged.
    `precheck`: a shell command run before the model is woken; exit status 0 wakes
    it, 1 with an empty stderr means nothing to do (no tokens spent), anything else
    is a failed run. `daily_token_cap`: prompt + completion tokens per day (in
    `timezone`) after which the job rests until tomorrow.
    """

    name: str
    cron: str
    message: str
    timezone: str
    model: str | None = None
    inject_into: str | None = None
    precheck: str | None = None
    daily_token_cap: int | None = None
    kind: str = "cron"  # "cron", "heartbeat", "once" (subagent_spawn) or "summaries"
    created: str = field(default="")
    enabled: bool = True  # False: stored paused (an imported job that was off)
    origin: str | None = None  # where an imported job came from, e.g. "openclaw:<id>"

    def __post_init__(self) -> None:
        check_name(self.name)
        if not isinstance(self.message, str) or not self.message.strip():
            raise JobError(f"job {self.name!r}: the message is empty")
        if len(self.message) > MAX_MESSAGE_CHARS:
            raise JobError(
                f"job {self.name!r}: the message has {len(self.message)} characters "
                f"(at most {MAX_MESSAGE_CHARS})"
            )
        if self.inject_into is not None and not _CHAT.match(self.inject_into):
            raise JobError(
                f"job {self.name!r}: injectInto {self.inject_into!r} must look like "
                "'{channel}_{id}', e.g. 'telegram_123456'"
            )
        if self.precheck is not None and (
            not self.precheck.strip() or len(self.precheck) > MAX_PRECHECK_CHARS
        ):
            raise JobError(
                f"job {self.name!r}: the pre-check must be a command of 1-{MAX_PRECHECK_CHARS} "
                "characters"
            )
        if self.daily_token_cap is not None and (
            isinstance(self.daily_token_cap, bool)
            or not isinstance(self.daily_token_cap, int)
            or self.daily_token_cap < 1
        ):
            raise JobError(f"job {self.name!r}: dailyTokenCap must be a positive whole number")
        if self.kind not in ("cron", "heartbeat", "once", "summaries"):
            raise JobError(f"job {self.name!r}: unknown kind {self.kind!r}")
        if self.kind != "once":
            self.parsed()  # raises CronError naming the field
        self.zone()

    def parsed(self) -> Schedule:
        try:
            return parse_schedule(self.cron)
        except CronError as exc:
            raise JobError(f"job {self.name!r}: {exc}") from None

    def zone(self) -> tzinfo:
        try:
            return zone_named(self.timezone)
        except CronError as exc:
            raise JobError(f"job {self.name!r}: {exc}") from None

    def next_times(self, count: int = 3, after: datetime | None = None) -> list[datetime]:
        return self.parsed().next_times(self.zone(), count, after)

    def to_data(self) -> dict[str, Any]:
        """Plain data for the job store (the handler's keyword arguments)."""
        return asdict(self)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> JobSpec:
        known = {f: data[f] for f in cls.__dataclass_fields__ if f in data}
        return cls(**known)

"""What a scheduled job is: its checked data, as stored with the job in scheduler.db.

A job is data only (no code): APScheduler keeps it as the keyword arguments of one
module-level handler (`klaw.scheduler.service:scheduled_message`), so a job store
written by one version of Klaw is read by the next.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass, field
from datetime import datetime, tzinfo
from typing import Any, Final

from klaw.cronexpr import CronError, Schedule, parse_schedule, zone_named
from klaw.errors import InvalidInput
from klaw.lanes import SUBAGENT_CHAT_PREFIX

__all__ = [
    "HEARTBEAT",
    "MAX_MESSAGE_CHARS",
    "JobError",
    "JobSpec",
    "check_name",
    "job_chat",
    "job_folder",
    "name_from",
]

#: The job generated from HEARTBEAT.md (its name is reserved).
HEARTBEAT: Final = "heartbeat"
MAX_MESSAGE_CHARS: Final = 20_000
MAX_PRECHECK_CHARS: Final = 4_000
MAX_NAME_CHARS: Final = 64
#: A name's folder form in UTF-8 (`scheduler_` + it stays under a chat id's 200 bytes).
MAX_FOLDER_BYTES: Final = 160
MAX_TITLE_CHARS: Final = 200
_CHAT = re.compile(r"^[a-z][a-z0-9]*_\S{1,200}$")
_NAME_RULE: Final = (
    f"use 1-{MAX_NAME_CHARS} letters (any script), digits, '-' or '_', starting with a "
    "letter or digit (it names the job's log folder)"
)


class JobError(InvalidInput):
    """A job Klaw cannot schedule; the message names the field and why."""


def _name_char(c: str) -> bool:
    return c in "-_" or unicodedata.category(c)[0] in "LM" or unicodedata.category(c) == "Nd"


def _word(text: str) -> bool:
    first = unicodedata.category(text[0])
    return (first[0] == "L" or first == "Nd") and all(_name_char(c) for c in text)


def check_name(name: object) -> str:
    """`name` in NFC (as typed on any terminal) when it is a job name (`_NAME_RULE`);
    JobError otherwise. Its folder form must be a name too: see `job_folder`."""
    if not isinstance(name, str):
        raise JobError(f"job name {name!r}: {_NAME_RULE}")
    name = unicodedata.normalize("NFC", name)
    if not 0 < len(name) <= MAX_NAME_CHARS or not _word(name):
        raise JobError(f"job name {name!r}: {_NAME_RULE}")
    folder = job_folder(name)
    if not _word(folder) or len(folder.encode()) > MAX_FOLDER_BYTES:
        raise JobError(
            f"job name {name!r}: its log folder name {folder!r} is not one "
            f"({_NAME_RULE}; at most {MAX_FOLDER_BYTES} bytes in UTF-8)"
        )
    return name


def job_folder(name: str) -> str:
    """The form of a job's name its log folder uses (`conversations/scheduler_{it}`):
    compatibility-normalized and case-folded, so names that differ only in case or
    width ("Weather", "weather", "ｗｅａｔｈｅｒ") map to one folder; two jobs may not
    share one (the scheduler refuses the second). ASCII lowercase names are their own."""
    return unicodedata.normalize("NFKC", name).casefold()


def name_from(text: str, limit: int = 48) -> str:
    """A job name made from any text (an imported job's display name): its folder form,
    each run of other characters one '-'; "job" when nothing is left."""
    dashed = "".join(c if _name_char(c) else "-" for c in job_folder(text))
    name = re.sub("-{2,}", "-", dashed).strip("-_")[:limit].rstrip("-_")
    if not name:
        return "job"
    return name if _word(name[0]) else f"j{name}"


def job_chat(name: str) -> str:
    """The chat a job's runs talk in, `scheduler_{folder form}` (their log folder)."""
    return f"{SUBAGENT_CHAT_PREFIX}{job_folder(name)}"


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
    kind: str = "cron"  # "cron", "heartbeat", "once" (subagent_spawn), "summaries", "reflect"
    created: str = field(default="")
    enabled: bool = True  # False: stored paused (`klaw schedule pause`, imported off)
    origin: str | None = None  # where an imported job came from, e.g. "openclaw:<id>"
    title: str | None = None  # the name to show, when it is not the job's name itself

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", check_name(self.name))
        if self.title is not None and (
            not isinstance(self.title, str) or len(self.title) > MAX_TITLE_CHARS
        ):
            raise JobError(
                f"job {self.name!r}: a title is text of at most {MAX_TITLE_CHARS} characters"
            )
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
        if self.kind not in ("cron", "heartbeat", "once", "summaries", "reflect"):
            raise JobError(f"job {self.name!r}: unknown kind {self.kind!r}")
        if self.kind != "once":
            self.parsed()  # raises CronError naming the field
        self.zone()

    @property
    def chat(self) -> str:
        return job_chat(self.name)

    @property
    def shown(self) -> str:
        """How lists name it: the title (an imported job's original name) or the name."""
        return self.title or self.name

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

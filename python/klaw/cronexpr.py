"""Cron expressions for scheduled jobs: Quartz and standard crontab, checked field by
field, and their fire times; also `every …` intervals and `at …` times. A leaf (no
APScheduler): engine.yaml's validation uses it as the scheduler does, whose
APScheduler trigger (klaw.scheduler.cron) carries a schedule from here.

Two dialects, told apart by the number of fields:

- **crontab**, 5 fields: ``minute hour day-of-month month day-of-week``; day-of-week
  0 or 7 is Sunday, 1 Monday. When both day fields are restricted, a day matching
  either fires (as in Vixie cron).
- **Quartz**, 6 or 7 fields: ``second minute hour day-of-month month day-of-week
  [year]``; day-of-week 1 is Sunday, 7 Saturday. One of the two day fields must be
  ``?`` (Quartz has no "either" rule).

Both take ``*``, lists (``1,15``), ranges (``MON-FRI``, wrapping ones such as
``FRI-MON`` too), steps (``*/15``, ``5/10``, ``1-20/3``), month and day names
(``JAN``, ``SUN``), and the Quartz specials ``L`` (last day of the month), ``nL``
(the last weekday n of the month, ``6L`` = last Friday in Quartz) and ``n#m`` (the
m-th weekday n, ``MON#1``). ``W``, ``LW`` and ``L-n`` are refused, each with the
field, its position and the reason.

Every field is expanded to an explicit set and fire times are computed here, so
APScheduler's own conventions (day-of-week 0 = Monday, the host's time zone by
default) and its CronTrigger's DST bug never reach a job.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from klaw.errors import InvalidInput

__all__ = [
    "MIN_EVERY_SECONDS",
    "At",
    "Cron",
    "CronError",
    "Every",
    "Schedule",
    "parse_cron",
    "parse_schedule",
    "zone_named",
]

Dialect = Literal["crontab", "quartz"]

_MONTHS: Final = (
    "JAN",
    "FEB",
    "MAR",
    "APR",
    "MAY",
    "JUN",
    "JUL",
    "AUG",
    "SEP",
    "OCT",
    "NOV",
    "DEC",
)
_DAYS: Final = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")  # index 0 = Sunday
_ITEM = re.compile(r"^(?P<range>\*|\?|[A-Z0-9]+(?:-[A-Z0-9]+)?)(?:/(?P<step>[0-9]+))?$")


_NEAR: Final = timedelta(hours=4)  # wider than any UTC offset change
_SOON: Final = timedelta(hours=1)  # shorter than the time between two offset changes


class CronError(InvalidInput):
    """A cron expression Klaw cannot run; the message names the field and why."""


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str
    low: int
    high: int


_QUARTZ: Final = (
    _Spec("second", 0, 59),
    _Spec("minute", 0, 59),
    _Spec("hour", 0, 23),
    _Spec("day-of-month", 1, 31),
    _Spec("month", 1, 12),
    _Spec("day-of-week", 1, 7),
    _Spec("year", 1970, 2199),
)


@dataclass(frozen=True, slots=True)
class Cron:
    """A checked expression. `weekdays` are 0 = Sunday; `positions` are
    (nth 1-5 or 0 for last, weekday 0 = Sunday); `last_day` is the ``L`` of
    day-of-month."""

    expr: str
    dialect: Dialect
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int] | None  # None: day-of-month not restricted
    last_day: bool
    months: frozenset[int]
    weekdays: frozenset[int] | None  # None: day-of-week not restricted
    positions: frozenset[tuple[int, int]]
    years: frozenset[int] | None
    # crontab only: a day field starting with '*' makes both day fields apply
    # together (Vixie/Debian cron); otherwise a restricted pair means "either".
    day_and: bool = False
    # minute or hour starts with '*' ("*/20", "0 * ..."): across DST changes it
    # follows real time, as Debian cron does (see `_instants`).
    wildcard: bool = False

    def day_matches(self, day: date) -> bool:
        """Whether `day` is one of the expression's days (month/year checked apart)."""
        dom_set = self.days is not None or self.last_day
        dow_set = self.weekdays is not None or bool(self.positions)
        if not (dom_set or dow_set):
            return True
        dom = (self.days is not None and day.day in self.days) or (
            self.last_day and day.day == _month_length(day)
        )
        weekday = (day.weekday() + 1) % 7  # 0 = Sunday
        dow = (self.weekdays is not None and weekday in self.weekdays) or any(
            w == weekday and _is_nth(day, n) for n, w in self.positions
        )
        if dom_set and dow_set:
            return (dom and dow) if self.day_and else (dom or dow)
        return dom if dom_set else dow

    def next_after(self, after: datetime, tz: tzinfo) -> datetime | None:
        """The first fire time strictly after `after`, in `tz`; None if there is none
        within the years the expression allows (or 30 years when it names none).

        Wall-clock rules across DST changes (as Debian cron does): a time skipped when
        the clocks go forward fires at the moment of the change; a time that happens
        twice when they go back fires once, at its first occurrence. A wildcard job
        (minute or hour starting with '*') follows real time instead: it fires in
        both repeated hours and not in the skipped one.
        """
        if after.tzinfo is None:
            raise ValueError("next_after needs an aware datetime")
        # Compared in UTC: within one zone Python compares (and subtracts) wall times
        # and ignores `fold`, so the second 02:00 of an October night equals the first.
        after_utc = after.astimezone(UTC)
        local = after_utc.astimezone(tz)
        wall = local.replace(tzinfo=None, microsecond=0)
        # Near an offset change wall order and real order differ by up to the change:
        # look back by it, and look on by it past the first candidate for an earlier one.
        before = (after_utc - _NEAR).astimezone(tz).utcoffset() or timedelta(0)
        later = (after_utc + _NEAR).astimezone(tz).utcoffset() or timedelta(0)
        shift = abs(later - before)
        limit = max(self.years) if self.years else local.year + 30
        if shift and (soon := self._soon_at_same_offset(after_utc, wall, tz, limit)):
            return soon
        wall -= shift
        best: tuple[datetime, datetime, datetime] | None = None  # (utc, local, wall)
        while (w := self._next_wall(wall, limit)) is not None:
            if best is not None and w > best[2] + shift:
                break
            for when in _instants(w, tz, wildcard=self.wildcard):
                utc = when.astimezone(UTC)
                if utc > after_utc and (best is None or utc < best[0]):
                    best = (utc, when, w)
            wall = w + timedelta(seconds=1)
        return None if best is None else best[1]

    def _soon_at_same_offset(
        self, after_utc: datetime, wall: datetime, tz: tzinfo, limit: int
    ) -> datetime | None:
        """The first fire time after `after` at the UTC offset `after` has, if it comes
        within the hour (else None). Then the offset holds from `after` to it, so no
        time at another offset (a wall time looked back or on to) lies between: it is
        the answer. Spares a job firing every second or minute the walk through every
        wall time of the changed hour and its neighbours (hundreds of ms a call)."""
        offset = after_utc.astimezone(tz).utcoffset()
        w: datetime | None = wall
        for _ in range(64):
            w = self._next_wall(w, limit) if w is not None else None
            if w is None or w - wall > _SOON:
                return None
            for t in _instants(w, tz, wildcard=self.wildcard):
                if t > after_utc and t.utcoffset() == offset:
                    return t if t - after_utc <= _SOON else None
            w += timedelta(seconds=1)
        return None

    def _next_wall(self, w: datetime, limit: int) -> datetime | None:
        """The first matching wall-clock time at or after naive `w`."""
        while w.year <= limit:
            if self.years is not None and w.year not in self.years:
                later = [y for y in self.years if y > w.year]
                if not later:
                    return None
                w = datetime(min(later), 1, 1)
                continue
            if w.month not in self.months:
                w = _first_of_next_month(w)
                continue
            if not self.day_matches(w.date()):
                w = datetime(w.year, w.month, w.day) + timedelta(days=1)
                continue
            hour = _at_least(self.hours, w.hour)
            if hour is None:
                w = datetime(w.year, w.month, w.day) + timedelta(days=1)
                continue
            if hour > w.hour:
                w = w.replace(hour=hour, minute=0, second=0)
            minute = _at_least(self.minutes, w.minute)
            if minute is None:
                w = w.replace(minute=0, second=0) + timedelta(hours=1)
                continue
            if minute > w.minute:
                w = w.replace(minute=minute, second=0)
            second = _at_least(self.seconds, w.second)
            if second is None:
                w = w.replace(second=0) + timedelta(minutes=1)
                continue
            return w.replace(second=second)
        return None

    def next_times(
        self, tz: tzinfo, count: int = 3, after: datetime | None = None
    ) -> list[datetime]:
        """The next `count` fire times after `after` (default now), in `tz`."""
        return _times(self, tz, count, after)


_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_EVERY = re.compile(r"^every\s+((?:\d+[smhd])+)(?:\s+from\s+(\S+))?$", re.IGNORECASE)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
#: The shortest interval: a job wakes a model, so a typo like `every 5s` must not burn tokens.
MIN_EVERY_SECONDS: Final = 60
#: The longest: 100 years (a longer one never fires, and could not be counted in time).
MAX_EVERY_DAYS: Final = 36500


def _times(
    sched: Cron | Every | At, tz: tzinfo, count: int, after: datetime | None
) -> list[datetime]:
    now = after or datetime.now(tz)
    out: list[datetime] = []
    while len(out) < count and (now := sched.next_after(now, tz)) is not None:  # type: ignore[assignment]
        out.append(now)
    return out


@dataclass(frozen=True, slots=True)
class Every:
    """`every 30m` / `every 1h30m from 2026-01-01T09:00`: a fixed interval, counted from
    `anchor` (the Unix epoch when none is given, so `every 1h` fires on the hour)."""

    expr: str
    seconds: int
    anchor: datetime | None  # naive: read in the job's zone

    def next_after(self, after: datetime, tz: tzinfo) -> datetime | None:
        anchor = self.anchor or _EPOCH
        if anchor.tzinfo is None:
            anchor = anchor.replace(tzinfo=tz)
        # In UTC: aware arithmetic within one ZoneInfo zone is wall-clock arithmetic.
        anchor, after = anchor.astimezone(UTC), after.astimezone(UTC)
        if after < anchor:
            return anchor.astimezone(tz)
        steps = int((after - anchor).total_seconds() // self.seconds) + 1
        try:
            return (anchor + timedelta(seconds=steps * self.seconds)).astimezone(tz)
        except OverflowError:  # past the year 9999: no later time
            return None

    def next_times(
        self, tz: tzinfo, count: int = 3, after: datetime | None = None
    ) -> list[datetime]:
        return _times(self, tz, count, after)


@dataclass(frozen=True, slots=True)
class At:
    """`at 2026-12-01T09:00`: once (naive times are read in the job's zone)."""

    expr: str
    when: datetime

    def next_after(self, after: datetime, tz: tzinfo) -> datetime | None:
        when = self.when if self.when.tzinfo is not None else self.when.replace(tzinfo=tz)
        return when.astimezone(tz) if when > after else None

    def next_times(
        self, tz: tzinfo, count: int = 3, after: datetime | None = None
    ) -> list[datetime]:
        return _times(self, tz, count, after)


Schedule = Cron | Every | At


def _iso_time(text: str, what: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CronError(
            f"{what} {text!r} is not an ISO date-time such as 2026-12-01T09:00 "
            "(or 2026-12-01T09:00+01:00)"
        ) from None
    low, high = _QUARTZ[-1].low, _QUARTZ[-1].high  # the years a cron expression may name
    if not low <= when.year <= high:
        raise CronError(f"{what} {text!r}: a year from {low} to {high}")
    return when


def parse_schedule(expr: str) -> Schedule:
    """A cron expression (see `parse_cron`), `every <n>[smhd]... [from <ISO time>]` or
    `at <ISO time>`; raises `CronError` saying what is wrong."""
    if not isinstance(expr, str) or not expr.strip():
        raise CronError("empty schedule")
    text = " ".join(expr.split())
    low = text.lower()
    if low.startswith("every"):
        m = _EVERY.match(text)
        if m is None:
            raise CronError(
                f"interval {text!r}: write e.g. 'every 30m', 'every 2h', 'every 1h30m' "
                "or 'every 1d from 2026-12-01T09:00' (units s, m, h, d)"
            )
        seconds = sum(
            int(n) * _UNITS[u.lower()] for n, u in re.findall(r"(\d+)([smhdSMHD])", m.group(1))
        )
        if seconds < MIN_EVERY_SECONDS:
            raise CronError(f"interval {text!r}: at least every {MIN_EVERY_SECONDS} seconds")
        if seconds > MAX_EVERY_DAYS * _UNITS["d"]:
            raise CronError(f"interval {text!r}: at most every {MAX_EVERY_DAYS} days (100 years)")
        anchor = _iso_time(m.group(2), "start time") if m.group(2) else None
        return Every(text, seconds, anchor)
    if low.startswith("at ") or low == "at":
        return At(text, _iso_time(text[3:].strip(), "time"))
    return parse_cron(text)


def zone_named(name: str) -> ZoneInfo:
    """The IANA zone `name`; `CronError` (a ValueError) saying what is expected."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise CronError(f"unknown time zone {name!r} (an IANA name such as 'Europe/Berlin')") from e


def _at_least(values: frozenset[int], low: int) -> int | None:
    return min((v for v in values if v >= low), default=None)


def _month_length(day: date) -> int:
    return calendar.monthrange(day.year, day.month)[1]


def _is_nth(day: date, n: int) -> bool:
    """Whether `day` is the n-th (0: the last) of its weekday in its month."""
    if n == 0:
        return day.day + 7 > _month_length(day)
    return (day.day - 1) // 7 == n - 1


def _first_of_next_month(w: datetime) -> datetime:
    return datetime(w.year + 1, 1, 1) if w.month == 12 else datetime(w.year, w.month + 1, 1)


def _instants(wall: datetime, tz: tzinfo, *, wildcard: bool) -> list[datetime]:
    """The real times of wall-clock `wall` in `tz`. Usually one. A time repeated by
    the clocks going back: the first, or both for a `wildcard` job. A time skipped by
    the clocks going forward: the moment of the change, or none for a `wildcard` job
    (it runs at its next time that exists)."""
    first = wall.replace(tzinfo=tz, fold=0)
    second = wall.replace(tzinfo=tz, fold=1)
    a, b = first.astimezone(UTC), second.astimezone(UTC)
    if a == b:
        return [first]
    if a < b:  # repeated (clocks went back): fold 0 is the earlier
        return [a.astimezone(tz), b.astimezone(tz)] if wildcard else [a.astimezone(tz)]
    if wildcard:
        return []
    # Skipped (clocks went forward): the first instant whose wall time is later.
    lo, hi = b, a
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if mid.astimezone(tz).replace(tzinfo=None) >= wall:
            hi = mid
        else:
            lo = mid
    return [hi.replace(microsecond=0).astimezone(tz)]


def parse_cron(expr: str) -> Cron:
    """Checks `expr` (5 fields: crontab; 6 or 7: Quartz); raises `CronError`."""
    if not isinstance(expr, str) or not expr.strip():
        raise CronError("empty cron expression")
    parts = expr.upper().split()
    if len(parts) == 5:
        dialect: Dialect = "crontab"
        parts = ["0", *parts]  # seconds
    elif len(parts) in (6, 7):
        dialect = "quartz"
    else:
        raise CronError(
            f"cron expression {expr!r} has {len(parts)} fields: use 5 (crontab: minute hour "
            "day-of-month month day-of-week) or 6-7 (Quartz: second minute hour "
            "day-of-month month day-of-week [year])"
        )
    named = dict(zip(("second", "minute", "hour", "dom", "month", "dow"), parts[:6], strict=True))
    year_text = parts[6] if len(parts) == 7 else None

    def where(i: int) -> str:
        # Field numbers as the user wrote them (crontab has no seconds field).
        number = i + 1 if dialect == "quartz" else i
        return f"field {number} ({_QUARTZ[i].name})"

    ctx = _Ctx(expr, dialect, where)
    seconds = ctx.values(0, named["second"], 0, 59) if dialect == "quartz" else frozenset({0})
    minutes = ctx.values(1, named["minute"], 0, 59)
    hours = ctx.values(2, named["hour"], 0, 23)
    months = ctx.values(4, named["month"], 1, 12, names=_MONTHS, base=1)
    years = None if year_text in (None, "*", "?") else ctx.values(6, year_text, 1970, 2199)
    dom_text, dow_text = named["dom"], named["dow"]
    if dialect == "quartz":
        if (dom_text == "?") == (dow_text == "?"):
            raise CronError(
                f"in {expr!r}: Quartz needs '?' in exactly one of day-of-month (field 4) "
                "and day-of-week (field 6), e.g. '0 0 8 ? * MON-FRI' or '0 0 8 1 * ?'"
            )
    days, last_day = ctx.days_of_month(3, dom_text)
    weekdays, positions = ctx.days_of_week(5, dow_text)
    # crontab with both day fields restricted fires on either (Vixie cron), unless
    # one of them starts with '*' ("*/2"), when both must match.
    day_and = dialect == "crontab" and (dom_text.startswith("*") or dow_text.startswith("*"))
    if day_and and days is not None and positions:
        raise CronError(
            f"in {expr!r}: a day-of-month starting with '*' applies together with the "
            "day-of-week, which cannot then use 'L' or '#'; write the days out instead"
        )
    return Cron(
        expr=expr,
        dialect=dialect,
        seconds=seconds,
        minutes=minutes,
        hours=hours,
        days=days,
        last_day=last_day,
        months=months,
        weekdays=weekdays,
        positions=positions,
        years=years,
        day_and=day_and,
        wildcard=named["minute"].startswith("*") or named["hour"].startswith("*"),
    )


class _Ctx:
    """Parses the fields of one expression; errors name the field and the reason."""

    def __init__(self, expr: str, dialect: Dialect, where: Callable[[int], str]) -> None:
        self.expr = expr
        self.dialect = dialect
        self._where = where

    def fail(self, i: int, text: str, reason: str) -> CronError:
        return CronError(f"{self._where(i)} {text!r} of {self.expr!r}: {reason}")

    def number(
        self,
        i: int,
        text: str,
        token: str,
        low: int,
        high: int,
        names: tuple[str, ...] | None,
        base: int,
    ) -> int:
        if names is not None and token in names:
            return names.index(token) + base
        if not token.isdigit():
            hint = f"; names: {names[0]}..{names[-1]}" if names else ""
            raise self.fail(i, text, f"{token!r} is not a number{hint}")
        value = int(token)
        if not low <= value <= high:
            raise self.fail(i, text, f"{value} is out of range {low}-{high}")
        return value

    def values(
        self,
        i: int,
        text: str,
        low: int,
        high: int,
        *,
        names: tuple[str, ...] | None = None,
        base: int = 0,
    ) -> frozenset[int]:
        """A field of plain values: `*`, lists, ranges, steps, names."""
        out: set[int] = set()
        for item in text.split(","):
            m = _ITEM.match(item)
            if m is None:
                raise self.fail(i, text, f"{item!r} is not a value, range or step")
            rng, step_text = m.group("range"), m.group("step")
            step = 1
            if step_text is not None:
                step = int(step_text)
                if step == 0:
                    raise self.fail(i, text, "a step of 0 never advances")
            if rng in ("*", "?"):
                start, end = low, high
            elif "-" in rng:
                a, b = rng.split("-")
                start = self.number(i, text, a, low, high, names, base)
                end = self.number(i, text, b, low, high, names, base)
            else:
                start = self.number(i, text, rng, low, high, names, base)
                end = high if step_text is not None else start  # "5/10" = from 5 every 10
            if end < start:
                raise self.fail(i, text, f"range {start}-{end} runs backwards")
            out.update(range(start, end + 1, step))
        return frozenset(out)

    def days_of_month(self, i: int, text: str) -> tuple[frozenset[int] | None, bool]:
        if text in ("*", "?"):
            return None, False
        last = False
        plain: list[str] = []
        for item in text.split(","):
            if item == "L":
                last = True
            elif "W" in item:
                raise self.fail(i, text, "'W' (nearest weekday) is not supported")
            elif item.startswith("L-"):
                raise self.fail(i, text, "'L-n' (days before the last) is not supported")
            elif "L" in item:
                raise self.fail(i, text, f"{item!r}: 'L' stands alone in day-of-month")
            else:
                plain.append(item)
        days = self.values(i, ",".join(plain), 1, 31) if plain else frozenset()
        return days, last

    def days_of_week(
        self, i: int, text: str
    ) -> tuple[frozenset[int] | None, frozenset[tuple[int, int]]]:
        """(weekdays 0 = Sunday, positions (nth, weekday)) of a day-of-week field."""
        if text in ("*", "?"):
            return None, frozenset()
        quartz = self.dialect == "quartz"
        low, high, base = (1, 7, 1) if quartz else (0, 7, 0)

        def raw(token: str) -> int:  # as written: Quartz 1-7, crontab 0-7
            return self.number(i, text, token, low, high, _DAYS, base)

        def day(token: str) -> int:  # 0 = Sunday
            return norm(raw(token))

        def norm(value: int) -> int:
            return (value - 1) % 7 if quartz else value % 7

        plain: set[int] = set()
        positions: set[tuple[int, int]] = set()
        for item in text.split(","):
            if "#" in item:
                d, _, n = item.partition("#")
                if not n.isdigit() or not 1 <= int(n) <= 5:
                    raise self.fail(i, text, f"{item!r}: the n in 'day#n' is 1-5")
                positions.add((int(n), day(d)))
            elif item == "L":
                if not quartz:
                    raise self.fail(i, text, "'L' alone in day-of-week is Quartz only (Saturday)")
                plain.add(6)
            elif item.endswith("L"):
                positions.add((0, day(item[:-1])))
            elif re.fullmatch(r"[0-9]*W", item):  # not WED
                raise self.fail(i, text, "'W' is not supported")
            else:
                m = _ITEM.match(item)
                if m is None:
                    raise self.fail(i, text, f"{item!r} is not a day, range or step")
                rng, step_text = m.group("range"), m.group("step")
                step = int(step_text) if step_text else 1
                if step_text is not None and step == 0:
                    raise self.fail(i, text, "a step of 0 never advances")
                if rng in ("*", "?"):
                    seq = [norm(v) for v in range(low, low + 7)]
                elif "-" in rng:
                    a, b = rng.split("-")
                    start, end = raw(a), raw(b)
                    # As written (crontab's 0-7 is the whole week); FRI-MON wraps round.
                    span = (
                        range(start, end + 1)
                        if end >= start
                        else [
                            *range(start, high + 1),
                            *range(low, end + 1),
                        ]
                    )
                    seq = [norm(v) for v in span]
                else:
                    start = raw(rng)
                    seq = [norm(v) for v in range(start, high + 1)] if step_text else [norm(start)]
                plain.update(seq[::step])
        return (frozenset(plain) if plain else None), frozenset(positions)

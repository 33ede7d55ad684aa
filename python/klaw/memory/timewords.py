"""Time words in a search query → a date range, in English, Russian and Chinese.

    >>> r = find_time_range("что я говорил в прошлом месяце про машину", now)
    >>> r.since, r.until, r.phrase        # [1 Feb, 1 Mar) when now is in March
    >>> strip_phrase(text, r)             # "что я говорил про машину"

Standard library only; no clock reads (the caller passes ``now``, timezone-aware, the
owner's local time). Ranges are whole calendar days in ``now``'s timezone: ``since`` is
the local midnight that opens the range, ``until`` the local midnight after it
(exclusive). ``None`` means the text has no time expression, which is most queries.

What each kind of phrase means (today = ``now``'s local date; weeks start on Monday):

- today / yesterday / the day before yesterday (сегодня, вчера, позавчера; 今天, 昨天,
  前天, 大前天): that day. "last night" / 昨晚 covers yesterday and today.
- this / last / the ... before last week, month, year (на этой/прошлой/позапрошлой
  неделе, в прошлом месяце, прошлого года; 本周 这周 上周 上上周 这个月 上个月 今年
  去年 前年, 2025年, в 2025 году, in 2025): the whole calendar unit.
- N days / weeks / months / years ago (3 days ago, две недели назад, 三天前, 两个月前):
  the calendar day, week, month or year that contains today minus N of them, so
  "a week ago" is last week and "a month ago" is last month. Vague counts widen the
  range: a couple (пару) = 2-3, a few / several / несколько / 几 = 2-6, "2-3", "2 or 3",
  两三天前.
- the past / last N days, weeks... (за последние три дня, 最近三天, 过去一周): a rolling
  window, from today minus N (days, weeks, months, years) to the end of today.
- recently, lately, the other day, недавно, на днях, в последнее время, 最近, 近来,
  近期, 这几天, 前几天: the 14 days before today and today ([today - 14, today + 1)).
- month names (in March, в марте, 三月, 3月): the most recent March that has begun,
  this year's if today is in March or later, else last year's. "last March", "в
  прошлом марте" is March of last year; a year next to the month picks it ("в марте
  прошлого года", "去年三月", "March 2025", "2025年3月", "in March two years ago").
- dates: 2026-03-14, 2026/03/14, 14.03.2026, 3/14/2026 (a slash date whose day and month
  could be swapped covers both readings and the days between), "14 марта", "March 14",
  "14th of March", "3月14日", "三月十四号". Without a year: the most recent such day up
  to today (29 February: the last leap year's).
- weekdays (on Tuesday, во вторник, 周二, 星期二, 礼拜二): the most recent such day
  before today (on a Tuesday, "on Tuesday" is a week ago). "this Tuesday", 这周二: the
  Tuesday of this week; 上周二: of last week; "Tuesday last week", "во вторник на
  прошлой неделе": the Tuesday of that week. "last Tuesday" / "в прошлый вторник" is
  ambiguous (the most recent Tuesday, or last week's), so it covers both and the days
  between. Weekends likewise: "last weekend", на прошлых выходных, 上周末.
- seasons are meteorological: spring = March-May, summer = June-August, autumn (fall) =
  September-November, winter = December-February (it spans the new year).
  "last winter" (прошлой зимой): the most recent winter that has ended, so in October
  "last summer" is the summer just gone and in January "last winter" is the one a year
  before the current one. "this winter" (этой зимой, 这个冬天, 今年冬天): the current one if
  we are in it, else the one of the current calendar year nearest to today (for
  winter, of the two that touch this year). A relative year shifts that ("去年夏天",
  "летом прошлого года": this year's summer a year earlier). An explicit year names
  spring-autumn of that year and the winter whose January is in it ("winter 2025" =
  Dec 2024-Feb 2025).

Choosing: the first phrase in the text wins (the longer one when two start together),
with adjacent pieces read together ("в марте" + "прошлого года"). A phrase that lies
wholly in the future (next week, tomorrow, 明年三月, "this Friday" on a Tuesday) or names
a habit (every Tuesday, 每周二) is not a past date: it yields no range and keeps the
words inside it from being read as one. Ranges of "this week / month / year / summer"
run to the end of the unit, past today; clip ``until`` if that matters.

Deliberately conservative: a bare number, a decimal, "14.03" without a year, a
two-digit year, and English "may" / "march" as words never become dates. English month
names need a preposition (in, during), a day, a year or last/this; "last May" / "this
May" / "3 May" need the capital M ("this may take a while"). English weekdays need
on, last, this or a possessive ("Tuesday's"). Seasons without this/last or a year
("in the summer", "летом", "夏天") stay topics. Not covered: times of day and hours ago,
"since March" / "с марта" / 从三月 (open-ended ranges), "between March and May" (only the
first phrase is read), holidays (Christmas, Новый год, 春节), lunar dates, numerals
beyond simple ones (twenty-one, двадцать один, 二〇二六年), and the southern hemisphere.
"""

from __future__ import annotations

import re
from calendar import monthrange
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta, tzinfo

__all__ = ["TimeRange", "asks_about_past", "find_time_range", "strip_phrase"]


@dataclass(frozen=True)
class TimeRange:
    since: datetime  # inclusive, timezone-aware
    until: datetime  # exclusive, timezone-aware
    phrase: str  # the matched words as they appear in the text


def find_time_range(text: str, now: datetime) -> TimeRange | None:
    """The date range a time phrase in `text` names, or None when there is none."""
    tz = now.tzinfo
    if tz is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware: pass the owner's local time")
    today = now.date()
    pieces = _pieces(text, today)
    best = _pick(pieces + _combine(text, pieces), today)
    if best is None or best.m.days is None:
        return None
    lo, hi = best.m.days
    return TimeRange(_midnight(lo, tz), _midnight(hi, tz), text[best.start : best.end])


_PAST = re.compile(
    r"\b(used to|previous(ly)?|former(ly)?|originally|the old|my old|before)\b"
    r"|раньше|прежн|бывш|старый|старого|старом|старую|以前|之前|原来|过去|旧",
    re.IGNORECASE,
)


def asks_about_past(text: str) -> bool:
    """Whether a query is about an earlier time ("last spring", "раньше", "以前的地址"):
    then a newer note must not outrank an older one just for being newer."""
    if _PAST.search(text):
        return True
    from datetime import UTC

    return find_time_range(text, datetime.now(UTC)) is not None


def strip_phrase(text: str, r: TimeRange) -> str:
    """`text` without `r.phrase`, the words around the cut joined back tidily."""
    phrase = r.phrase
    hits = [m.span() for m in re.finditer(re.escape(phrase), text)] if phrase else []
    if not hits:
        return text
    start, end = next(
        ((s, e) for s, e in hits if _whole_words(text, s, e)),
        hits[0],
    )
    left, right = text[:start].rstrip(), text[end:].lstrip()
    if not left:
        return right.lstrip(_JOINERS).lstrip()
    if not right:
        return left.rstrip(_JOINERS).rstrip()
    if right[0] in _CLOSERS:
        return left.rstrip(_JOINERS).rstrip() + right
    sep = "" if _is_cjk(left[-1]) or _is_cjk(right[0]) else " "
    return left + sep + right


# ---------------------------------------------------------------------------------
# Pieces: what one rule read at one place in the text.

_Days = tuple[date, date]  # [first day, day after the last)

_DAY = timedelta(days=1)
_WEEK = timedelta(days=7)
_RECENT_DAYS = 14
_COUPLE = (2, 3)
_FEW = (2, 6)


@dataclass(frozen=True, slots=True)
class _Meaning:
    days: _Days | None = None  # None: meaningful only next to a week or a year ("summer")
    week: date | None = None  # the Monday, when the piece names one whole week
    year: tuple[int, bool] | None = None  # (year, relative), when it names one year
    in_week: Callable[[date], _Days | None] | None = None  # read inside a week (a weekday)
    in_year: Callable[[int, bool], _Days | None] | None = None  # inside a year (a month)
    stop: bool = False  # a time phrase naming no past range: a habit, something to come


_STOP = _Meaning(stop=True)


@dataclass(frozen=True, slots=True)
class _Piece:
    start: int
    end: int
    m: _Meaning


_Rule = Callable[[re.Match[str], date], _Meaning | None]
_RULES: list[tuple[re.Pattern[str], _Rule]] = []


def _rule(pattern: str) -> Callable[[_Rule], _Rule]:
    def register(fn: _Rule) -> _Rule:
        _RULES.append((re.compile(pattern, re.IGNORECASE), fn))
        return fn

    return register


def _pieces(text: str, today: date) -> list[_Piece]:
    out = []
    for pattern, read in _RULES:
        for match in pattern.finditer(text):
            try:
                meaning = read(match, today)
            except (ValueError, OverflowError):  # a day that does not exist, year 0...
                continue
            if meaning is not None:
                out.append(_Piece(match.start(), match.end(), meaning))
    return out


_GAP = re.compile(r"\s*(?:(?:of|in|on|during|в|во|на|的)\s*)?", re.IGNORECASE)


def _combine(text: str, pieces: list[_Piece]) -> list[_Piece]:
    """Adjacent pieces read together: a weekday inside a week, a month inside a year."""
    out = []
    for a in pieces:
        for b in pieces:
            if a.end > b.start or not _GAP.fullmatch(text, a.end, b.start):
                continue
            for x, y in ((a, b), (b, a)):
                days = None
                if x.m.in_week is not None and y.m.week is not None:
                    days = x.m.in_week(y.m.week)
                elif x.m.in_year is not None and y.m.year is not None:
                    days = x.m.in_year(*y.m.year)
                if days is not None:
                    out.append(_Piece(a.start, b.end, _Meaning(days=days)))
    return out


def _pick(pieces: list[_Piece], today: date) -> _Piece | None:
    """The first piece that names a past range, the longest of those starting together.

    Habits and wholly future ranges name no range, and no piece that overlaps them
    counts either, unless it contains them ("this Friday" inside "this Friday last week").
    """

    def stop(p: _Piece) -> bool:
        return p.m.stop or (p.m.days is not None and p.m.days[0] > today)

    stops = [p for p in pieces if stop(p)]

    def ok(p: _Piece) -> bool:
        if p.m.days is None or stop(p):
            return False
        for s in stops:
            overlaps = p.start < s.end and s.start < p.end
            contains = p.start <= s.start and s.end <= p.end and p.end - p.start > s.end - s.start
            if overlaps and not contains:
                return False
        return True

    return min(filter(ok, pieces), key=lambda p: (p.start, -p.end), default=None)


# ---------------------------------------------------------------------------------
# Calendar arithmetic on dates.


def _midnight(d: date, tz: tzinfo) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=tz)


def _one_day(d: date) -> _Days:
    return d, d + _DAY


def _monday(d: date) -> date:
    return d - timedelta(days=d.weekday())


def _add_months(year: int, month: int, k: int) -> tuple[int, int]:
    i = year * 12 + month - 1 + k
    return i // 12, i % 12 + 1


def _month(year: int, month: int) -> _Days:
    return date(year, month, 1), date(*_add_months(year, month, 1), 1)


def _year(year: int) -> _Days:
    return date(year, 1, 1), date(year + 1, 1, 1)


def _months_back(d: date, k: int) -> date:
    y, m = _add_months(d.year, d.month, -k)
    return date(y, m, min(d.day, monthrange(y, m)[1]))


def _week_of(monday: date) -> _Meaning:
    return _Meaning(days=(monday, monday + _WEEK), week=monday)


def _month_offset(today: date, k: int) -> _Meaning:
    return _Meaning(days=_month(*_add_months(today.year, today.month, k)))


def _year_of(year: int, *, relative: bool) -> _Meaning:
    return _Meaning(days=_year(year), year=(year, relative))


def _ago(unit: str, count: tuple[int, int], today: date) -> _Meaning:
    """The calendar unit(s) holding today minus count[0] ... count[1] units."""
    near, far = count
    if unit == "day":
        return _Meaning(days=(today - far * _DAY, today - near * _DAY + _DAY))
    if unit == "week":
        this = _monday(today)
        lo = this - far * _WEEK
        return _Meaning(days=(lo, this - near * _WEEK + _WEEK), week=lo if near == far else None)
    if unit == "month":
        lo_days = _month(*_add_months(today.year, today.month, -far))
        hi_days = _month(*_add_months(today.year, today.month, -near))
        return _Meaning(days=(lo_days[0], hi_days[1]))
    year = today.year - far
    exact = (year, True) if near == far else None
    return _Meaning(days=(_year(year)[0], _year(today.year - near)[1]), year=exact)


def _rolling(unit: str, n: int, today: date) -> _Meaning:
    """From today minus n units to the end of today."""
    if unit == "day":
        lo = today - n * _DAY
    elif unit == "week":
        lo = today - n * _WEEK
    else:
        lo = _months_back(today, n * (12 if unit == "year" else 1))
    return _Meaning(days=(lo, today + _DAY))


def _recent(today: date) -> _Meaning:
    return _Meaning(days=(today - _RECENT_DAYS * _DAY, today + _DAY))


def _day_in_past_year(month: int, day: int, today: date) -> date:
    """The most recent `day` of `month` up to today; ValueError if there is none."""
    for year in range(today.year, today.year - 9, -1):
        if day <= monthrange(year, month)[1] and date(year, month, day) <= today:
            return date(year, month, day)
    raise ValueError(f"no day {day} in month {month}")


def _month_day(month: int, day: int, year: int | None, today: date) -> _Meaning:
    if year is not None:
        return _Meaning(days=_one_day(date(year, month, day)))
    d = _day_in_past_year(month, day, today)

    def in_year(y: int, _relative: bool) -> _Days | None:
        return _one_day(date(y, month, day)) if day <= monthrange(y, month)[1] else None

    return _Meaning(days=_one_day(d), in_year=in_year)


def _month_name(month: int, shift: int | None, year: int | None, today: date) -> _Meaning:
    """A month by name: shift None = most recent begun; -1 = last year's; 0 = this year's."""
    if year is not None:
        return _Meaning(days=_month(year, month))
    if shift is None:
        y = today.year if month <= today.month else today.year - 1
        return _Meaning(days=_month(y, month), in_year=lambda y, _rel: _month(y, month))
    return _Meaning(days=_month(today.year + shift, month))


def _weekday(wd: int, today: date) -> _Meaning:
    """The most recent such weekday before today; inside a week, that week's."""
    d = today - timedelta(days=(today.weekday() - wd - 1) % 7 + 1)
    return _Meaning(days=_one_day(d), in_week=lambda monday: _one_day(monday + timedelta(wd)))


def _last_weekday(wd: int, today: date) -> _Meaning:
    """For "last Tuesday": last week's Tuesday through the most recent one."""
    recent = today - timedelta(days=(today.weekday() - wd - 1) % 7 + 1)
    of_last_week = _monday(today) - _WEEK + timedelta(days=wd)
    return _Meaning(days=(min(recent, of_last_week), max(recent, of_last_week) + _DAY))


def _weekday_of_week(wd: int, weeks: int, today: date) -> _Meaning:
    return _Meaning(days=_one_day(_monday(today) + weeks * _WEEK + timedelta(days=wd)))


def _weekend(weeks: int | None, today: date) -> _Meaning:
    """Saturday and Sunday of this week + `weeks`; None: the latest that has begun."""
    if weeks is None:
        weeks = 0 if today.weekday() >= 5 else -1
    sat = _monday(today) + weeks * _WEEK + timedelta(days=5)
    return _Meaning(days=(sat, sat + 2 * _DAY))


_SEASON_START = {"spring": 3, "summer": 6, "autumn": 9, "winter": 12}


def _season(name: str, start_year: int) -> _Days:
    first = _SEASON_START[name]
    return date(start_year, first, 1), date(*_add_months(start_year, first, 3), 1)


def _this_season(name: str, today: date) -> _Days:
    """The current one if we are in it, else the one of this calendar year nearest today."""
    years = (today.year - 1, today.year) if name == "winter" else (today.year,)
    spans = [_season(name, y) for y in years]  # each touches this calendar year

    def distance(s: _Days) -> tuple[int, int]:
        if s[0] <= today < s[1]:
            return 0, 0
        if s[1] <= today:
            return (today - s[1]).days + 1, 0
        return (s[0] - today).days, 1  # ties go to the past

    return min(spans, key=distance)


def _last_season(name: str, today: date, back: int = 1) -> _Days:
    """The most recent one that has ended (back=2: the one before it)."""
    y = today.year
    while _season(name, y)[1] > today:
        y -= 1
    return _season(name, y - back + 1)


def _season_meaning(name: str, shift: int | None, today: date) -> _Meaning:
    """shift None: no modifier (only a year makes it a range); 0 this; -1 last; -2."""

    def in_year(year: int, relative: bool) -> _Days:
        if not relative:
            return _season(name, year - 1 if name == "winter" else year)
        lo, _ = _this_season(name, today)
        return _season(name, lo.year + year - today.year)

    if shift is None:
        return _Meaning(in_year=in_year)
    if shift == 0:
        return _Meaning(days=_this_season(name, today))
    return _Meaning(days=_last_season(name, today, back=-shift))


# ---------------------------------------------------------------------------------
# Numbers.

_EN_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "fifteen": 15, "twenty": 20, "thirty": 30,
}  # fmt: skip
_RU_NUMBERS = {
    "один": 1, "одну": 1, "одна": 1, "одного": 1, "два": 2, "две": 2, "три": 3,
    "четыре": 4, "пять": 5, "шесть": 6, "семь": 7, "восемь": 8, "девять": 9,
    "десять": 10, "одиннадцать": 11, "двенадцать": 12, "пятнадцать": 15,
    "двадцать": 20, "тридцать": 30,
}  # fmt: skip
_CN_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5,
              "六": 6, "七": 7, "八": 8, "九": 9}  # fmt: skip

_EN_NUM = r"\d{1,3}|a\s+couple(?:\s+of)?|couple(?:\s+of)?|a\s+few|few|several|" + "|".join(
    sorted(_EN_NUMBERS, key=len, reverse=True)
)
_RU_NUM = r"\d{1,3}|пару|пара|несколько|" + "|".join(sorted(_RU_NUMBERS, key=len, reverse=True))
_CN_NUM = r"[零〇一二两三四五六七八九十]{1,3}|\d{1,3}"


def _count(word: str) -> tuple[int, int] | None:
    """An English, Russian or Chinese count: (n, n), or a range for vague ones."""
    w = " ".join(word.lower().split())
    if w.isdigit():
        return int(w), int(w)
    if "couple" in w or w in ("пару", "пара"):
        return _COUPLE
    if w in ("a few", "few", "several", "несколько", "几"):
        return _FEW
    n = _EN_NUMBERS.get(w) or _RU_NUMBERS.get(w)
    if n is None:
        if len(w) == 2 and all(c in _CN_DIGITS for c in w):  # 两三天: two or three days
            a, b = _CN_DIGITS[w[0]], _CN_DIGITS[w[1]]
            return (a, b) if b == a + 1 else None
        n = _cn_int(w)
    return None if n is None else (n, n)


def _cn_int(s: str) -> int | None:
    """一 ... 九十九, or digits."""
    if s.isdigit():
        return int(s)
    if "十" in s:
        tens, _, ones = s.partition("十")
        if len(tens) > 1 or len(ones) > 1:
            return None
        t = _CN_DIGITS.get(tens, -1) if tens else 1
        o = _CN_DIGITS.get(ones, -1) if ones else 0
        return None if t < 1 or o < 0 else t * 10 + o
    return _CN_DIGITS.get(s) if len(s) == 1 else None


def _count_range(a: str, b: str | None) -> tuple[int, int] | None:
    first = _count(a)
    second = _count(b) if b else first
    if first is None or second is None:
        return None
    return min(first[0], second[0]), max(first[1], second[1])


def _unit(word: str) -> str:
    w = word.lower()
    for prefix, unit in (
        ("day", "day"), ("week", "week"), ("month", "month"), ("year", "year"),
        ("д", "day"), ("сут", "day"), ("нед", "week"), ("мес", "month"), ("г", "year"),
        ("л", "year"), ("天", "day"), ("日", "day"), ("周", "week"), ("星期", "week"),
        ("礼拜", "week"), ("月", "month"), ("年", "year"),
    ):  # fmt: skip
        if w.startswith(prefix):
            return unit
    raise ValueError(word)


# ---------------------------------------------------------------------------------
# English.

_EN_MONTHS = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
    "august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
}  # fmt: skip
_EN_ABBR = {"jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8,
            "sep": 9, "sept": 9, "oct": 10, "nov": 11, "dec": 12}  # fmt: skip
_EN_FULL = "|".join(_EN_MONTHS)
_EN_ANY_MONTH = _EN_FULL + "|" + "|".join(sorted(_EN_ABBR, key=len, reverse=True))
_EN_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_EN_SEASONS = {"spring": "spring", "summer": "summer", "autumn": "autumn", "fall": "autumn",
               "winter": "winter"}  # fmt: skip
_POSS = r"(?:['’]s)?"
_YEAR4 = r"(?:19|20)\d{2}"
_NOT_A_COUNT = r"(?!\s+(?:minutes?|hours?|days?|weeks?|months?|years?|times?|people|percent)\b)"


def _en_month(word: str) -> int:
    w = word.lower().rstrip(".")
    return _EN_MONTHS.get(w) or _EN_ABBR[w]


def _capital_may(word: str) -> bool:
    """The word "may" counts as a month in these forms only when written "May"."""
    return word.lower() != "may" or word == "May"


@_rule(
    r"\b(?:earlier\s+)?today" + _POSS + r"\b|\bthis\s+(?:morning|afternoon|evening)\b"
    r"|\btonight" + _POSS + r"\b"
)
def _en_today(m: re.Match[str], today: date) -> _Meaning:
    return _Meaning(days=_one_day(today))


@_rule(r"\byesterday" + _POSS + r"\b")
def _en_yesterday(m: re.Match[str], today: date) -> _Meaning:
    return _Meaning(days=_one_day(today - _DAY))


@_rule(r"\blast\s+night" + _POSS + r"\b|昨晚")
def _last_night(m: re.Match[str], today: date) -> _Meaning:
    return _Meaning(days=(today - _DAY, today + _DAY))


@_rule(r"\bthe\s+day\s+before\s+yesterday\b")
def _en_day_before_yesterday(m: re.Match[str], today: date) -> _Meaning:
    return _Meaning(days=_one_day(today - 2 * _DAY))


@_rule(
    r"\b(?P<later>later\s+)?(?:earlier\s+)?(?P<mod>this\s+past|this|last|next)\s+"
    r"(?P<u>week|month|year)" + _POSS + r"\b"
    r"|\bthe\s+(?P<u2>week|month|year)\s+before\s+last\b"
)
def _en_calendar_unit(m: re.Match[str], today: date) -> _Meaning:
    if m["later"]:
        return _STOP  # "later this week": still to come
    mod = (m["mod"] or "").lower()
    k = -2 if m["u2"] else 0 if mod == "this" else 1 if mod == "next" else -1
    return _calendar_unit(_unit(m["u"] or m["u2"]), k, today)


def _calendar_unit(unit: str, k: int, today: date) -> _Meaning:
    if unit == "week":
        return _week_of(_monday(today) + k * _WEEK)
    if unit == "month":
        return _month_offset(today, k)
    return _year_of(today.year + k, relative=True)


@_rule(
    rf"\b(?P<n>{_EN_NUM})(?:\s*(?:-|–|to|or)\s*(?P<n2>{_EN_NUM}))?\s+"
    r"(?P<u>days?|weeks?|months?|years?)\s+ago\b"
)
def _en_ago(m: re.Match[str], today: date) -> _Meaning | None:
    count = _count_range(m["n"], m["n2"])
    return None if count is None else _ago(_unit(m["u"]), count, today)


@_rule(
    rf"\b(?:(?:in|over|during|for|within)\s+)?the\s+(?:last|past)\s+(?:(?P<n>{_EN_NUM})\s+)?"
    r"(?P<u>days?|weeks?|months?|years?)\b"
)
def _en_rolling(m: re.Match[str], today: date) -> _Meaning | None:
    if m["n"] is None:
        return None if m["u"].lower().endswith("s") else _rolling(_unit(m["u"]), 1, today)
    count = _count(m["n"])
    return None if count is None else _rolling(_unit(m["u"]), count[1], today)


@_rule(r"\b(?:recently|lately|the\s+other\s+day)\b")
def _en_recent(m: re.Match[str], today: date) -> _Meaning:
    return _recent(today)


@_rule(
    r"\b(?:(?P<mod>last|this\s+past|past|this|next|coming|every|each)\s+|(?P<on>on)\s+)?"
    r"(?P<wd>" + "|".join(_EN_WEEKDAYS) + r")(?P<poss>['’]s)?\b"
)
def _en_weekday(m: re.Match[str], today: date) -> _Meaning | None:
    wd = _EN_WEEKDAYS.index(m["wd"].lower())
    mod = " ".join((m["mod"] or "").lower().split())
    if mod in ("every", "each"):
        return _STOP
    if mod == "last":
        return _last_weekday(wd, today)
    if mod in ("this", "next", "coming"):
        return _weekday_of_week(wd, 0 if mod == "this" else 1, today)
    if mod or m["on"] or m["poss"]:
        return _weekday(wd, today)
    return replace(_weekday(wd, today), days=None)  # "Tuesday" alone: only "Tuesday last week"


@_rule(
    r"\b(?:(?P<mod>last|this\s+past|past|this|next)\s+|(?:over|during|at|on)\s+the\s+)"
    r"weekend" + _POSS + r"\b"
)
def _en_weekend(m: re.Match[str], today: date) -> _Meaning:
    mod = (m["mod"] or "").lower()
    return _weekend({"": None, "this": 0, "next": 1}.get(mod, -1), today)


@_rule(
    rf"\b(?:on\s+)?(?P<mon>{_EN_ANY_MONTH})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\b"
    rf"(?:,?\s+(?P<y>\d{{4}})\b)?{_NOT_A_COUNT}"
)
def _en_month_day(m: re.Match[str], today: date) -> _Meaning:
    year = int(m["y"]) if m["y"] else None
    return _month_day(_en_month(m["mon"]), int(m["d"]), year, today)


@_rule(
    rf"\b(?:on\s+)?(?:the\s+)?(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?"
    rf"(?P<mon>{_EN_ANY_MONTH})\b\.?(?:,?\s+(?P<y>\d{{4}})\b)?"
)
def _en_day_month(m: re.Match[str], today: date) -> _Meaning | None:
    if not _capital_may(m["mon"]):
        return None
    year = int(m["y"]) if m["y"] else None
    return _month_day(_en_month(m["mon"]), int(m["d"]), year, today)


@_rule(
    rf"\b(?:(?:back\s+)?in|during)\s+(?:(?:early|late|mid)[\s-]+)?(?P<mon>{_EN_FULL})\b"
    rf"(?!['’]s)(?:,?\s+(?P<y>\d{{4}})\b)?"
)
def _en_in_month(m: re.Match[str], today: date) -> _Meaning:
    year = int(m["y"]) if m["y"] else None
    return _month_name(_en_month(m["mon"]), None, year, today)


@_rule(rf"\b(?P<mod>last|this|next)\s+(?P<mon>{_EN_FULL})\b(?!['’]s)")
def _en_last_month_name(m: re.Match[str], today: date) -> _Meaning | None:
    if not _capital_may(m["mon"]):
        return None
    shift = {"last": -1, "this": 0, "next": 1}[m["mod"].lower()]
    return _month_name(_en_month(m["mon"]), shift, None, today)


@_rule(rf"\b(?P<mon>{_EN_ANY_MONTH})\.?\s+(?:of\s+)?(?P<y>{_YEAR4})\b")
def _en_month_year(m: re.Match[str], today: date) -> _Meaning:
    return _Meaning(days=_month(int(m["y"]), _en_month(m["mon"])))


@_rule(rf"\b(?:in|during)\s+(?:the\s+year\s+)?(?P<y>{_YEAR4})\b(?!\s*%|[.,]\d)")
def _en_in_year(m: re.Match[str], today: date) -> _Meaning:
    return _year_of(int(m["y"]), relative=False)


@_rule(
    r"\b(?P<mod>last|this\s+past|past|this|next)\s+(?P<s>spring|summer|autumn|fall|winter)"
    + _POSS
    + r"\b|\bthe\s+(?P<s2>spring|summer|autumn|fall|winter)\s+before\s+last\b"
)
def _en_season(m: re.Match[str], today: date) -> _Meaning:
    name = _EN_SEASONS[(m["s"] or m["s2"]).lower()]
    mod = " ".join((m["mod"] or "").lower().split())
    if m["s2"]:
        return _season_meaning(name, -2, today)
    if mod == "next":
        return _STOP
    return _season_meaning(name, 0 if mod == "this" else -1, today)


def _season_in(name: str, year: int) -> _Meaning:
    """A season of an explicit year; the winter is the one whose January is in it."""
    return _Meaning(days=_season(name, year - 1 if name == "winter" else year))


@_rule(
    rf"\b(?:(?:in|during)\s+)?(?:the\s+)?(?P<s>spring|summer|autumn|fall|winter)\s+"
    rf"(?:of\s+)?(?P<y>{_YEAR4})\b"
)
def _en_season_year(m: re.Match[str], today: date) -> _Meaning:
    return _season_in(_EN_SEASONS[m["s"].lower()], int(m["y"]))


@_rule(r"\b(?:(?:in|during)\s+)?(?:the\s+)?(?P<s>spring|summer|autumn|winter)\b")
def _en_bare_season(m: re.Match[str], today: date) -> _Meaning:
    """A season alone ("in the summer") is a topic; "in the summer of last year" a range."""
    return _season_meaning(m["s"].lower(), None, today)


# ---------------------------------------------------------------------------------
# Dates in digits (any language).


@_rule(
    r"(?<![\d.\-])(?<!\d/)(?P<y>\d{4})(?P<sep>[-/.])(?P<m>\d{1,2})(?P=sep)(?P<d>\d{1,2})"
    r"(?!\d|[-/.]\d)"
)
def _iso_date(m: re.Match[str], today: date) -> _Meaning:
    return _Meaning(days=_one_day(date(int(m["y"]), int(m["m"]), int(m["d"]))))


@_rule(r"(?<![\d.\-])(?<!\d/)(?P<y>\d{4})-(?P<m>\d{2})(?!\d|[-/.]\d)")
def _iso_month(m: re.Match[str], today: date) -> _Meaning:
    return _Meaning(days=_month(int(m["y"]), int(m["m"])))


@_rule(
    r"(?<![\d/.\-])(?P<a>\d{1,2})(?P<sep>[./])(?P<b>\d{1,2})(?P=sep)(?P<y>\d{4})"
    r"(?!\d|[-/.]\d)"
)
def _dmy_date(m: re.Match[str], today: date) -> _Meaning:
    """14.03.2026 is day-first; a slash date is read both ways when both could be months."""
    a, b, y = int(m["a"]), int(m["b"]), int(m["y"])
    if m["sep"] == "." or b > 12:
        return _Meaning(days=_one_day(date(y, b, a) if b <= 12 else date(y, a, b)))
    if a > 12:
        return _Meaning(days=_one_day(date(y, b, a)))
    first, second = sorted((date(y, a, b), date(y, b, a)))
    return _Meaning(days=(first, second + _DAY))


# ---------------------------------------------------------------------------------
# Russian.

_RU_MOD = (
    r"позапрошл\w*|прошл\w*|эт(?:от|ого|ому|ом|им|а|ой|ою|у|о)"
    r"|текущ\w*|нынешн\w*|следующ\w*|будущ\w*|ближайш\w*"
)
_RU_MONTHS_IN = ("январе", "феврале", "марте", "апреле", "мае", "июне", "июле", "августе",
                 "сентябре", "октябре", "ноябре", "декабре")  # fmt: skip
_RU_MONTHS_OF = ("января", "февраля", "марта", "апреля", "мая", "июня", "июля", "августа",
                 "сентября", "октября", "ноября", "декабря")  # fmt: skip
_RU_WEEKDAYS = ("понедельник", "вторник", "среду", "четверг", "пятницу", "субботу", "воскресенье")
_RU_SEASONS = {"весн": "spring", "лет": "summer", "осен": "autumn", "зим": "winter"}
_RU_SEASON_WORDS = r"весн(?:а|ы|е|у|ой|ою)|лет(?:о|а|у|ом|е)|осен(?:ь|и|ью)|зим(?:а|ы|е|у|ой|ою)"
_RU_YEAR_WORD = r"(?:\s*(?:года|году|г\.?)(?!\w))?"


def _ru_shift(mod: str) -> int:
    """позапрошлый -2, прошлый -1, этот 0, следующий 1."""
    w = mod.lower()
    if w.startswith("позапрошл"):
        return -2
    if w.startswith("прошл"):
        return -1
    if w.startswith(("следующ", "будущ", "ближайш")):
        return 1
    return 0


@_rule(r"\bсегодня\w*")
def _ru_today(m: re.Match[str], today: date) -> _Meaning:
    return _Meaning(days=_one_day(today))


@_rule(r"\bвчера\w*")
def _ru_yesterday(m: re.Match[str], today: date) -> _Meaning:
    return _Meaning(days=_one_day(today - _DAY))


@_rule(r"\bпозавчера\w*")
def _ru_day_before_yesterday(m: re.Match[str], today: date) -> _Meaning:
    return _Meaning(days=_one_day(today - 2 * _DAY))


@_rule(
    rf"\b(?:(?:на|за|в)\s+)?(?P<mod>{_RU_MOD})\s+(?P<u>недел(?:я|и|е|ю|ей)"
    r"|месяц(?:а|е|у|ем)?|год(?:а|у|ом)?)\b"
)
def _ru_calendar_unit(m: re.Match[str], today: date) -> _Meaning:
    return _calendar_unit(_unit(m["u"]), _ru_shift(m["mod"]), today)


@_rule(r"\bпрошлогодн\w*")
def _ru_last_years(m: re.Match[str], today: date) -> _Meaning:
    return _year_of(today.year - 1, relative=True)


@_rule(r"\b(?:(?:в|за)\s+)?(?P<y>\d{4})\s*(?:год(?:а|у|ом)?|г\.?)(?!\w)")
def _ru_year(m: re.Match[str], today: date) -> _Meaning:
    return _year_of(int(m["y"]), relative=False)


@_rule(
    rf"(?<!\w)(?:(?P<n>{_RU_NUM})(?:\s*(?:-|–|или)\s*(?P<n2>{_RU_NUM}))?\s+)?"
    r"(?P<u>дн(?:я|ей)|день|сут(?:ки|ок)|недел(?:ю|и|ь)|месяц(?:а|ев)?|год(?:а)?|лет)\s+"
    r"(?:тому\s+)?назад\b"
)
def _ru_ago(m: re.Match[str], today: date) -> _Meaning | None:
    if m["n"] is None:  # "неделю назад": one
        if m["u"].lower() not in ("день", "сутки", "неделю", "месяц", "год"):
            return None
        return _ago(_unit(m["u"]), (1, 1), today)
    count = _count_range(m["n"], m["n2"])
    return None if count is None else _ago(_unit(m["u"]), count, today)


@_rule(r"\bполгода\s+(?:тому\s+)?назад\b")
def _ru_half_year_ago(m: re.Match[str], today: date) -> _Meaning:
    return _ago("month", (6, 6), today)


@_rule(
    rf"\b(?:(?:за|в\s+течение)\s+)?последн\w*\s+(?:(?P<n>{_RU_NUM})\s+)?"
    r"(?P<u>дн(?:я|ей)|день|сутки|суток|недел\w*|месяц\w*|год(?:а|у)?|лет)\b"
)
def _ru_rolling(m: re.Match[str], today: date) -> _Meaning | None:
    count = _count(m["n"]) if m["n"] else (1, 1)
    return None if count is None else _rolling(_unit(m["u"]), count[1], today)


@_rule(r"\bнедавн\w*|\bна\s+днях\b|\bв\s+последнее\s+время\b")
def _ru_recent(m: re.Match[str], today: date) -> _Meaning:
    return _recent(today)


@_rule(
    rf"\b(?:(?P<prep>в|во|за)\s+)?(?:(?P<mod>{_RU_MOD}|кажд\w*)\s+)?"
    r"(?P<wd>" + "|".join(_RU_WEEKDAYS) + r")\b"
)
def _ru_weekday(m: re.Match[str], today: date) -> _Meaning | None:
    wd = _RU_WEEKDAYS.index(m["wd"].lower())
    mod = (m["mod"] or "").lower()
    if mod.startswith("кажд"):
        return _STOP
    if not mod:
        return _weekday(wd, today) if m["prep"] else None
    shift = _ru_shift(mod)
    if shift == -1:
        return _last_weekday(wd, today)
    return _weekday_of_week(wd, shift, today)


@_rule(rf"\b(?:на|в|за)\s+(?:(?P<mod>{_RU_MOD})\s+)?выходн(?:ых|ые)\b")
def _ru_weekend(m: re.Match[str], today: date) -> _Meaning:
    return _weekend(_ru_shift(m["mod"]) if m["mod"] else None, today)


@_rule(
    rf"\b(?:(?:в|во)\s+)?(?:(?P<mod>{_RU_MOD})\s+)?(?P<mon>{'|'.join(_RU_MONTHS_IN)})\b"
    rf"(?:\s+(?P<y>\d{{4}}){_RU_YEAR_WORD})?"
)
def _ru_in_month(m: re.Match[str], today: date) -> _Meaning:
    month = _RU_MONTHS_IN.index(m["mon"].lower()) + 1
    year = int(m["y"]) if m["y"] else None
    shift = _ru_shift(m["mod"]) if m["mod"] else None
    return _month_name(month, shift if year is None else None, year, today)


@_rule(
    rf"\b(?:в\s+)?(?:начале|середине|конце)\s+(?P<mon>{'|'.join(_RU_MONTHS_OF)})\b"
    rf"(?:\s+(?P<y>\d{{4}}){_RU_YEAR_WORD})?"
)
def _ru_part_of_month(m: re.Match[str], today: date) -> _Meaning:
    year = int(m["y"]) if m["y"] else None
    return _month_name(_RU_MONTHS_OF.index(m["mon"].lower()) + 1, None, year, today)


@_rule(
    rf"\b(?P<d>\d{{1,2}})(?:-?го|-е)?\s+(?P<mon>{'|'.join(_RU_MONTHS_OF)})\b"
    rf"(?:\s+(?P<y>\d{{4}}){_RU_YEAR_WORD})?"
)
def _ru_day_month(m: re.Match[str], today: date) -> _Meaning:
    year = int(m["y"]) if m["y"] else None
    return _month_day(_RU_MONTHS_OF.index(m["mon"].lower()) + 1, int(m["d"]), year, today)


@_rule(
    rf"\b(?:(?:в|во|на|за)\s+)?(?:(?P<mod>{_RU_MOD})\s+)?(?P<s>{_RU_SEASON_WORDS})\b"
    rf"(?:\s+(?P<y>\d{{4}}){_RU_YEAR_WORD})?"
)
def _ru_season(m: re.Match[str], today: date) -> _Meaning:
    word = m["s"].lower()
    name = next(v for k, v in _RU_SEASONS.items() if word.startswith(k))
    if m["y"]:
        return _season_in(name, int(m["y"]))
    if not m["mod"]:
        return _season_meaning(name, None, today)
    shift = _ru_shift(m["mod"])
    return _STOP if shift > 0 else _season_meaning(name, shift, today)


# ---------------------------------------------------------------------------------
# Chinese. No spaces between words, so the guards are on neighbouring characters.

# 上 ends many words (马上 soon, 晚上 evening, 以上 above...): not "last" after them.
_CN_UP = r"(?<![马晚早路身手网线以之楼桌天世加爱看遇赶跟比])"
_CN_WEEK_SHIFT = {"上上个": -2, "上上": -2, "上个": -1, "上": -1, "这个": 0, "这": 0, "本": 0,
                  "下个": 1, "下": 1}  # fmt: skip
_CN_SHIFT = "|".join(_CN_WEEK_SHIFT)  # longest first: dict order above
_CN_WEEKDAYS = "一二三四五六日"
_CN_SEASONS = {"春": "spring", "夏": "summer", "秋": "autumn", "冬": "winter"}
_CN_NUMERAL = "零〇一二两三四五六七八九十"


@_rule(r"今天|今日|今早|今晚")
def _cn_today(m: re.Match[str], today: date) -> _Meaning:
    return _Meaning(days=_one_day(today))


@_rule(r"昨天|昨日|昨儿")
def _cn_yesterday(m: re.Match[str], today: date) -> _Meaning:
    return _Meaning(days=_one_day(today - _DAY))


@_rule(r"(?P<big>大)?(?<![之以提])前天(?![气数])")
def _cn_day_before_yesterday(m: re.Match[str], today: date) -> _Meaning:
    return _Meaning(days=_one_day(today - (3 if m["big"] else 2) * _DAY))


@_rule(rf"{_CN_UP}(?P<p>{_CN_SHIFT})(?:周|星期|礼拜)(?![期刊年岁边围到全转])")
def _cn_week(m: re.Match[str], today: date) -> _Meaning:
    return _calendar_unit("week", _CN_WEEK_SHIFT[m["p"]], today)


@_rule(rf"{_CN_UP}(?P<p>{_CN_SHIFT})周末")
def _cn_weekend(m: re.Match[str], today: date) -> _Meaning:
    return _weekend(_CN_WEEK_SHIFT[m["p"]], today)


@_rule(
    rf"{_CN_UP}(?<![\d{_CN_NUMERAL}几个每上下这本])(?P<p>{_CN_SHIFT}|每个|每)?"
    r"(?:周|星期|礼拜)(?P<d>[一二三四五六日天1-7])(?![\d" + _CN_NUMERAL + "])"
)
def _cn_weekday(m: re.Match[str], today: date) -> _Meaning:
    d = m["d"]
    wd = int(d) - 1 if d.isdigit() else _CN_WEEKDAYS.index("日" if d == "天" else d)
    p = m["p"]
    if p is None:
        return _weekday(wd, today)
    if p.startswith("每"):
        return _STOP
    return _weekday_of_week(wd, _CN_WEEK_SHIFT[p], today)


@_rule(rf"{_CN_UP}(?P<p>上上个|上个|上|这个|这|本|下个|下)月(?![亮光球饼色])")
def _cn_month(m: re.Match[str], today: date) -> _Meaning:
    shift = {"上上个": -2, "上个": -1, "上": -1, "下个": 1, "下": 1}.get(m["p"], 0)
    return _month_offset(today, shift)


@_rule(r"(?<![之以])(?P<p>大前年|前年|去年|今年|明年)|(?<!\d)(?P<y>\d{4})\s*年(?![代级纪])")
def _cn_year(m: re.Match[str], today: date) -> _Meaning:
    if m["y"]:
        return _year_of(int(m["y"]), relative=False)
    shift = {"大前年": -3, "前年": -2, "去年": -1, "今年": 0, "明年": 1}[m["p"]]
    return _year_of(today.year + shift, relative=True)


@_rule(
    rf"(?<![\d{_CN_NUMERAL}几个每第上下这本])(?P<m>\d{{1,2}}|十[一二]?|[一二三四五六七八九])"
    r"\s*月(?:份)?(?![亮光球饼色]|[一两]?次)"
    r"(?:\s*(?P<d>\d{1,2}|[一二三]?十[一二三四五六七八九]?|[一二三四五六七八九])\s*[日号])?"
)
def _cn_month_name(m: re.Match[str], today: date) -> _Meaning | None:
    month = _cn_int(m["m"])
    if month is None or not 1 <= month <= 12:
        return None
    if m["d"]:
        day = _cn_int(m["d"])
        return None if day is None else _month_day(month, day, None, today)
    return _month_name(month, None, None, today)


@_rule(r"(?P<p>这个|上个)?(?P<s>[春夏秋冬])(?:天|季)")
def _cn_season(m: re.Match[str], today: date) -> _Meaning:
    shift = {"这个": 0, "上个": -1}.get(m["p"] or "")
    return _season_meaning(_CN_SEASONS[m["s"]], shift, today)


@_rule(
    rf"(?<![\d{_CN_NUMERAL}])(?P<n>{_CN_NUM}|几|半)\s*(?P<ge>个)?"
    r"(?P<u>天|日|周|星期|礼拜|月|年)(?P<half>半)?(?:以前|之前|前)"
)
def _cn_ago(m: re.Match[str], today: date) -> _Meaning | None:
    unit = _unit(m["u"])
    if m["n"] == "半":  # 半年前: six months; 半个月前: two weeks
        if unit == "year":
            return _ago("month", (6, 6), today)
        return _ago("week", (2, 2), today) if unit == "month" else None
    if unit == "month" and not m["ge"]:
        return None  # 三月前: before March
    count = _count(m["n"])
    if count is None:
        return None
    if m["half"]:
        if unit != "year" or count[0] != count[1]:
            return None
        months = count[0] * 12 + 6
        return _ago("month", (months, months), today)
    return _ago(unit, count, today)


@_rule(
    rf"(?:最近|(?<![附接靠将])近|过去(?:的)?|这)\s*(?P<n>{_CN_NUM}|几)\s*(?:个)?"
    r"(?P<u>天|日|周|星期|礼拜|月|年)(?:来|以来|之内|内|里)?"
)
def _cn_rolling(m: re.Match[str], today: date) -> _Meaning | None:
    count = _count(m["n"])
    return None if count is None else _rolling(_unit(m["u"]), count[1], today)


@_rule(r"最近|近来|近期|这几天|这些天|前几天|前些天|前些日子|这段时间")
def _cn_recent(m: re.Match[str], today: date) -> _Meaning | None:
    if m[0] == "最近":  # also "nearest": 离这里最近的超市
        before = re.split(r"[，。！？、,.!?;；\s]", m.string[max(0, m.start() - 12) : m.start()])
        if "离" in before[-1] or m.string.startswith(("距离", "的距离"), m.end()):
            return None
    return _recent(today)


# ---------------------------------------------------------------------------------
# strip_phrase helpers.

_JOINERS = " ,;:—–-，、；："
_CLOSERS = ",.;:!?)]}…，。；：！？）"


def _is_cjk(ch: str) -> bool:
    return "\u2e80" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff" or "\uff00" <= ch <= "\uffef"


def _word_char(ch: str) -> bool:
    return (ch.isalnum() or ch == "_") and not _is_cjk(ch)


def _whole_words(text: str, start: int, end: int) -> bool:
    """No letters glued to either side of text[start:end] (CJK needs no spaces)."""
    before = start > 0 and _word_char(text[start - 1]) and _word_char(text[start])
    after = end < len(text) and _word_char(text[end]) and _word_char(text[end - 1])
    return not (before or after)

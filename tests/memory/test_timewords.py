"""Time words in queries → date ranges (klaw.memory.timewords), English, Russian, Chinese.

Every test passes a fixed `now`; NOW is Wednesday 18 March 2026, 15:00 at UTC+3, so
this week is Mon 16 - Sun 22 March and last week Mon 9 - Sun 15 March.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from klaw.memory.timewords import TimeRange, find_time_range, strip_phrase

MSK = timezone(timedelta(hours=3))
NOW = datetime(2026, 3, 18, 15, 0, tzinfo=MSK)  # a Wednesday


def at(y: int, m: int, d: int, hour: int = 15, tz: timezone = MSK) -> datetime:
    return datetime(y, m, d, hour, tzinfo=tz)


def days(text: str, now: datetime = NOW) -> tuple[str, str] | None:
    """(first day, day after the last) as ISO dates, after checking the range's shape."""
    r = find_time_range(text, now)
    if r is None:
        return None
    for edge in (r.since, r.until):
        assert edge.tzinfo is now.tzinfo
        assert (edge.hour, edge.minute, edge.second, edge.microsecond) == (0, 0, 0, 0)
    assert r.since < r.until
    assert r.phrase and r.phrase in text
    return r.since.date().isoformat(), r.until.date().isoformat()


def phrase(text: str, now: datetime = NOW) -> str | None:
    r = find_time_range(text, now)
    return None if r is None else r.phrase


# --- English ---------------------------------------------------------------------

ENGLISH = [
    ("what did we talk about today", "2026-03-18", "2026-03-19"),
    ("earlier today you said", "2026-03-18", "2026-03-19"),
    ("this morning's plan", "2026-03-18", "2026-03-19"),
    ("what did I say yesterday", "2026-03-17", "2026-03-18"),
    ("yesterday's meeting", "2026-03-17", "2026-03-18"),
    ("the day before yesterday", "2026-03-16", "2026-03-17"),
    ("last night", "2026-03-17", "2026-03-19"),
    ("3 days ago", "2026-03-15", "2026-03-16"),
    ("three days ago", "2026-03-15", "2026-03-16"),
    ("a day ago", "2026-03-17", "2026-03-18"),
    ("a couple of days ago", "2026-03-15", "2026-03-17"),
    ("a few days ago", "2026-03-12", "2026-03-17"),
    ("2 weeks ago", "2026-03-02", "2026-03-09"),
    ("a week ago", "2026-03-09", "2026-03-16"),
    ("2-3 weeks ago", "2026-02-23", "2026-03-09"),
    ("two months ago", "2026-01-01", "2026-02-01"),
    ("a month ago", "2026-02-01", "2026-03-01"),
    ("5 years ago", "2021-01-01", "2022-01-01"),
    ("this week", "2026-03-16", "2026-03-23"),
    ("earlier this week", "2026-03-16", "2026-03-23"),
    ("last week", "2026-03-09", "2026-03-16"),
    ("this past week", "2026-03-09", "2026-03-16"),
    ("last week's notes", "2026-03-09", "2026-03-16"),
    ("the week before last", "2026-03-02", "2026-03-09"),
    ("this month", "2026-03-01", "2026-04-01"),
    ("last month", "2026-02-01", "2026-03-01"),
    ("the month before last", "2026-01-01", "2026-02-01"),
    ("this year", "2026-01-01", "2027-01-01"),
    ("last year", "2025-01-01", "2026-01-01"),
    ("in 2024", "2024-01-01", "2025-01-01"),
    ("in the past 3 days", "2026-03-15", "2026-03-19"),
    ("over the last week", "2026-03-11", "2026-03-19"),
    ("the past month", "2026-02-18", "2026-03-19"),
    ("the last few days", "2026-03-12", "2026-03-19"),
    ("what did we decide last spring", "2025-03-01", "2025-06-01"),
    ("this spring", "2026-03-01", "2026-06-01"),
    ("last summer", "2025-06-01", "2025-09-01"),
    ("last autumn", "2025-09-01", "2025-12-01"),
    ("last fall", "2025-09-01", "2025-12-01"),
    ("last winter", "2025-12-01", "2026-03-01"),
    ("the winter before last", "2024-12-01", "2025-03-01"),
    ("summer 2024", "2024-06-01", "2024-09-01"),
    ("winter 2025", "2024-12-01", "2025-03-01"),
    ("in the summer of last year", "2025-06-01", "2025-09-01"),
    ("in March", "2026-03-01", "2026-04-01"),
    ("in May", "2025-05-01", "2025-06-01"),
    ("in may", "2025-05-01", "2025-06-01"),
    ("back in mid-August", "2025-08-01", "2025-09-01"),
    ("last March", "2025-03-01", "2025-04-01"),
    ("last May", "2025-05-01", "2025-06-01"),
    ("this March", "2026-03-01", "2026-04-01"),
    ("in March last year", "2025-03-01", "2025-04-01"),
    ("last year in March", "2025-03-01", "2025-04-01"),
    ("in March 2024", "2024-03-01", "2024-04-01"),
    ("January 2025", "2025-01-01", "2025-02-01"),
    ("on March 14", "2026-03-14", "2026-03-15"),
    ("March 20", "2025-03-20", "2025-03-21"),  # not yet this year
    ("March 14th, 2025", "2025-03-14", "2025-03-15"),
    ("14th of March", "2026-03-14", "2026-03-15"),
    ("3 May", "2025-05-03", "2025-05-04"),
    ("May 3", "2025-05-03", "2025-05-04"),
    ("Dec 24", "2025-12-24", "2025-12-25"),
    ("on Tuesday", "2026-03-17", "2026-03-18"),
    ("on Wednesday", "2026-03-11", "2026-03-12"),  # today is Wednesday: a week ago
    ("on Thursday", "2026-03-12", "2026-03-13"),
    ("Monday's call", "2026-03-16", "2026-03-17"),
    ("last Tuesday", "2026-03-10", "2026-03-18"),  # last week's or yesterday: both
    ("last Thursday", "2026-03-12", "2026-03-13"),  # both readings agree
    ("this Monday", "2026-03-16", "2026-03-17"),
    ("Tuesday last week", "2026-03-10", "2026-03-11"),
    ("last week on Friday", "2026-03-13", "2026-03-14"),
    ("on Tuesday two weeks ago", "2026-03-03", "2026-03-04"),
    ("last weekend", "2026-03-14", "2026-03-16"),
    ("over the weekend", "2026-03-14", "2026-03-16"),
    ("recently", "2026-03-04", "2026-03-19"),
    ("what have we discussed lately", "2026-03-04", "2026-03-19"),
    ("the other day", "2026-03-04", "2026-03-19"),
]


@pytest.mark.parametrize(("text", "since", "until"), ENGLISH)
def test_english(text: str, since: str, until: str) -> None:
    assert days(text) == (since, until)


# --- Russian ---------------------------------------------------------------------

RUSSIAN = [
    ("что мы обсуждали сегодня", "2026-03-18", "2026-03-19"),
    ("сегодняшний разговор", "2026-03-18", "2026-03-19"),
    ("что я говорил вчера", "2026-03-17", "2026-03-18"),
    ("вчерашняя встреча", "2026-03-17", "2026-03-18"),
    ("позавчера", "2026-03-16", "2026-03-17"),
    ("3 дня назад", "2026-03-15", "2026-03-16"),
    ("три дня назад", "2026-03-15", "2026-03-16"),
    ("пару дней назад", "2026-03-15", "2026-03-17"),
    ("несколько дней назад", "2026-03-12", "2026-03-17"),
    ("2 недели назад", "2026-03-02", "2026-03-09"),
    ("две недели тому назад", "2026-03-02", "2026-03-09"),
    ("неделю назад", "2026-03-09", "2026-03-16"),
    ("два месяца назад", "2026-01-01", "2026-02-01"),
    ("месяц назад", "2026-02-01", "2026-03-01"),
    ("полгода назад", "2025-09-01", "2025-10-01"),
    ("год назад", "2025-01-01", "2026-01-01"),
    ("5 лет назад", "2021-01-01", "2022-01-01"),
    ("на этой неделе", "2026-03-16", "2026-03-23"),
    ("за эту неделю", "2026-03-16", "2026-03-23"),
    ("на прошлой неделе", "2026-03-09", "2026-03-16"),
    ("за прошлую неделю", "2026-03-09", "2026-03-16"),
    ("итоги прошлой недели", "2026-03-09", "2026-03-16"),
    ("на позапрошлой неделе", "2026-03-02", "2026-03-09"),
    ("в этом месяце", "2026-03-01", "2026-04-01"),
    ("что я говорил в прошлом месяце про машину", "2026-02-01", "2026-03-01"),
    ("в этом году", "2026-01-01", "2027-01-01"),
    ("в прошлом году", "2025-01-01", "2026-01-01"),
    ("отчёт прошлого года", "2025-01-01", "2026-01-01"),
    ("в позапрошлом году", "2024-01-01", "2025-01-01"),
    ("в 2024 году", "2024-01-01", "2025-01-01"),
    ("за последние три дня", "2026-03-15", "2026-03-19"),
    ("за последнюю неделю", "2026-03-11", "2026-03-19"),
    ("прошлой весной", "2025-03-01", "2025-06-01"),
    ("этой весной", "2026-03-01", "2026-06-01"),
    ("прошлым летом", "2025-06-01", "2025-09-01"),
    ("прошлой осенью", "2025-09-01", "2025-12-01"),
    ("прошлой зимой", "2025-12-01", "2026-03-01"),
    ("позапрошлой зимой", "2024-12-01", "2025-03-01"),
    ("летом прошлого года", "2025-06-01", "2025-09-01"),
    ("летом 2024 года", "2024-06-01", "2024-09-01"),
    ("в марте", "2026-03-01", "2026-04-01"),
    ("в мае", "2025-05-01", "2025-06-01"),
    ("в январе", "2026-01-01", "2026-02-01"),
    ("в декабре", "2025-12-01", "2026-01-01"),
    ("в конце мая", "2025-05-01", "2025-06-01"),
    ("в марте прошлого года", "2025-03-01", "2025-04-01"),
    ("в прошлом марте", "2025-03-01", "2025-04-01"),
    ("в марте 2024 года", "2024-03-01", "2024-04-01"),
    ("14 марта", "2026-03-14", "2026-03-15"),
    ("20 марта", "2025-03-20", "2025-03-21"),
    ("1-го мая", "2025-05-01", "2025-05-02"),
    ("14 марта прошлого года", "2025-03-14", "2025-03-15"),
    ("14 марта 2024 г.", "2024-03-14", "2024-03-15"),
    ("во вторник", "2026-03-17", "2026-03-18"),
    ("в среду", "2026-03-11", "2026-03-12"),
    ("в пятницу", "2026-03-13", "2026-03-14"),
    ("в воскресенье", "2026-03-15", "2026-03-16"),
    ("в прошлый вторник", "2026-03-10", "2026-03-18"),
    ("в прошлую пятницу", "2026-03-13", "2026-03-14"),
    ("в этот понедельник", "2026-03-16", "2026-03-17"),
    ("во вторник на прошлой неделе", "2026-03-10", "2026-03-11"),
    ("на прошлой неделе в четверг", "2026-03-12", "2026-03-13"),
    ("на прошлых выходных", "2026-03-14", "2026-03-16"),
    ("недавно", "2026-03-04", "2026-03-19"),
    ("на днях", "2026-03-04", "2026-03-19"),
    ("в последнее время", "2026-03-04", "2026-03-19"),
]


@pytest.mark.parametrize(("text", "since", "until"), RUSSIAN)
def test_russian(text: str, since: str, until: str) -> None:
    assert days(text) == (since, until)


# --- Chinese ---------------------------------------------------------------------

CHINESE = [
    ("今天我们聊了什么", "2026-03-18", "2026-03-19"),
    ("昨天", "2026-03-17", "2026-03-18"),
    ("昨晚", "2026-03-17", "2026-03-19"),
    ("前天", "2026-03-16", "2026-03-17"),
    ("大前天", "2026-03-15", "2026-03-16"),
    ("三天前", "2026-03-15", "2026-03-16"),
    ("3天前", "2026-03-15", "2026-03-16"),
    ("十天以前", "2026-03-08", "2026-03-09"),
    ("两三天前", "2026-03-15", "2026-03-17"),
    ("几天前", "2026-03-12", "2026-03-17"),
    ("两周前", "2026-03-02", "2026-03-09"),
    ("一个星期前", "2026-03-09", "2026-03-16"),
    ("两个月前", "2026-01-01", "2026-02-01"),
    ("十二个月前", "2025-03-01", "2025-04-01"),
    ("半年前", "2025-09-01", "2025-10-01"),
    ("半个月前", "2026-03-02", "2026-03-09"),
    ("一年半前", "2024-09-01", "2024-10-01"),
    ("一年前", "2025-01-01", "2026-01-01"),
    ("两年前", "2024-01-01", "2025-01-01"),
    ("本周", "2026-03-16", "2026-03-23"),
    ("这周", "2026-03-16", "2026-03-23"),
    ("这个星期", "2026-03-16", "2026-03-23"),
    ("上周我们聊了什么", "2026-03-09", "2026-03-16"),
    ("上个星期", "2026-03-09", "2026-03-16"),
    ("上礼拜", "2026-03-09", "2026-03-16"),
    ("上上周", "2026-03-02", "2026-03-09"),
    ("这个月", "2026-03-01", "2026-04-01"),
    ("本月", "2026-03-01", "2026-04-01"),
    ("上个月", "2026-02-01", "2026-03-01"),
    ("上月", "2026-02-01", "2026-03-01"),
    ("今年", "2026-01-01", "2027-01-01"),
    ("去年", "2025-01-01", "2026-01-01"),
    ("前年", "2024-01-01", "2025-01-01"),
    ("2024年", "2024-01-01", "2025-01-01"),
    ("最近三天", "2026-03-15", "2026-03-19"),
    ("过去一周", "2026-03-11", "2026-03-19"),
    ("去年春天", "2025-03-01", "2025-06-01"),
    ("今年春天", "2026-03-01", "2026-06-01"),
    ("去年夏天", "2025-06-01", "2025-09-01"),
    ("去年的秋天", "2025-09-01", "2025-12-01"),
    ("今年冬天", "2025-12-01", "2026-03-01"),
    ("去年冬天", "2024-12-01", "2025-03-01"),
    ("前年夏天", "2024-06-01", "2024-09-01"),
    ("上个冬天", "2025-12-01", "2026-03-01"),
    ("三月", "2026-03-01", "2026-04-01"),
    ("3月", "2026-03-01", "2026-04-01"),
    ("五月份", "2025-05-01", "2025-06-01"),
    ("十二月", "2025-12-01", "2026-01-01"),
    ("去年三月", "2025-03-01", "2025-04-01"),
    ("今年3月", "2026-03-01", "2026-04-01"),
    ("2024年3月", "2024-03-01", "2024-04-01"),
    ("3月14日", "2026-03-14", "2026-03-15"),
    ("三月十四号", "2026-03-14", "2026-03-15"),
    ("3月20号", "2025-03-20", "2025-03-21"),
    ("2025年3月14日", "2025-03-14", "2025-03-15"),
    ("去年3月14日", "2025-03-14", "2025-03-15"),
    ("周二", "2026-03-17", "2026-03-18"),
    ("星期二", "2026-03-17", "2026-03-18"),
    ("礼拜三", "2026-03-11", "2026-03-12"),
    ("星期天", "2026-03-15", "2026-03-16"),
    ("上周二", "2026-03-10", "2026-03-11"),
    ("上个星期五", "2026-03-13", "2026-03-14"),
    ("这周一", "2026-03-16", "2026-03-17"),
    ("上周的周四", "2026-03-12", "2026-03-13"),
    ("上周末", "2026-03-14", "2026-03-16"),
    ("最近我们聊了什么", "2026-03-04", "2026-03-19"),
    ("最近的会议", "2026-03-04", "2026-03-19"),
    ("前几天", "2026-03-04", "2026-03-19"),
]


@pytest.mark.parametrize(("text", "since", "until"), CHINESE)
def test_chinese(text: str, since: str, until: str) -> None:
    assert days(text) == (since, until)


# --- Dates in digits -------------------------------------------------------------

NUMERIC = [
    ("notes from 2026-03-14", "2026-03-14", "2026-03-15"),
    ("memory/2026-03-14.md", "2026-03-14", "2026-03-15"),
    ("2026-03-14T10:00", "2026-03-14", "2026-03-15"),
    ("2026/03/14", "2026-03-14", "2026-03-15"),
    ("14.03.2026", "2026-03-14", "2026-03-15"),
    ("встреча 05.03.2026.", "2026-03-05", "2026-03-06"),  # day first
    ("3/14/2026", "2026-03-14", "2026-03-15"),
    ("14/3/2026", "2026-03-14", "2026-03-15"),
    ("03/04/2026", "2026-03-04", "2026-04-04"),  # 4 March or 3 April: both
    ("2026-02", "2026-02-01", "2026-03-01"),
    ("３月１４日", "2026-03-14", "2026-03-15"),  # full-width digits
]


@pytest.mark.parametrize(("text", "since", "until"), NUMERIC)
def test_numeric_dates(text: str, since: str, until: str) -> None:
    assert days(text) == (since, until)


# --- Boundaries ------------------------------------------------------------------


def test_edges_are_inclusive_then_exclusive() -> None:
    r = find_time_range("yesterday", NOW)
    assert r is not None
    assert r.since == datetime(2026, 3, 17, tzinfo=MSK)
    assert r.until == datetime(2026, 3, 18, tzinfo=MSK)
    assert r.since <= datetime(2026, 3, 17, 0, 0, tzinfo=MSK) < r.until
    assert datetime(2026, 3, 17, 23, 59, 59, 999999, tzinfo=MSK) < r.until
    assert not datetime(2026, 3, 18, 0, 0, tzinfo=MSK) < r.until
    assert not datetime(2026, 3, 16, 23, 59, 59, tzinfo=MSK) >= r.since


@pytest.mark.parametrize(
    ("text", "now", "expected"),
    [
        ("last month", at(2026, 3, 31), ("2026-02-01", "2026-03-01")),
        ("last month", at(2026, 5, 31), ("2026-04-01", "2026-05-01")),
        ("two months ago", at(2026, 3, 31), ("2026-01-01", "2026-02-01")),
        ("the past month", at(2026, 3, 31), ("2026-02-28", "2026-04-01")),
        ("the past month", at(2024, 3, 31), ("2024-02-29", "2024-04-01")),
        ("this month", at(2026, 2, 28), ("2026-02-01", "2026-03-01")),
        ("this month", at(2026, 12, 31), ("2026-12-01", "2027-01-01")),
    ],
)
def test_month_ends(text: str, now: datetime, expected: tuple[str, str]) -> None:
    assert days(text, now) == expected


@pytest.mark.parametrize(
    ("text", "now", "expected"),
    [
        ("in February", at(2024, 3, 10), ("2024-02-01", "2024-03-01")),
        ("в феврале", at(2025, 3, 10), ("2025-02-01", "2025-03-01")),
        ("29 февраля", NOW, ("2024-02-29", "2024-03-01")),
        ("February 29", at(2024, 2, 28), ("2020-02-29", "2020-03-01")),
        ("February 29", at(2024, 2, 29), ("2024-02-29", "2024-03-01")),
        ("2月29日", at(2024, 3, 1), ("2024-02-29", "2024-03-01")),
        ("29.02.2024", NOW, ("2024-02-29", "2024-03-01")),
        ("a year ago", at(2024, 2, 29), ("2023-01-01", "2024-01-01")),
        ("yesterday", at(2024, 3, 1), ("2024-02-29", "2024-03-01")),
        ("yesterday", at(2025, 3, 1), ("2025-02-28", "2025-03-01")),
    ],
)
def test_leap_years(text: str, now: datetime, expected: tuple[str, str]) -> None:
    assert days(text, now) == expected


@pytest.mark.parametrize("text", ["29.02.2025", "30 февраля", "April 31", "2026-02-30", "2月30日"])
def test_days_that_do_not_exist(text: str) -> None:
    assert find_time_range(text, NOW) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("last month", ("2025-12-01", "2026-01-01")),
        ("в прошлом месяце", ("2025-12-01", "2026-01-01")),
        ("上个月", ("2025-12-01", "2026-01-01")),
        ("2 months ago", ("2025-11-01", "2025-12-01")),
        ("last week", ("2025-12-29", "2026-01-05")),
        ("this week", ("2026-01-05", "2026-01-12")),
        ("in December", ("2025-12-01", "2026-01-01")),
        ("в январе", ("2026-01-01", "2026-02-01")),
        ("December 31", ("2025-12-31", "2026-01-01")),
        ("last year", ("2025-01-01", "2026-01-01")),
        ("the past week", ("2026-01-03", "2026-01-11")),
    ],
)
def test_year_wrap_in_january(text: str, expected: tuple[str, str]) -> None:
    assert days(text, at(2026, 1, 10)) == expected  # a Saturday


def test_last_week_across_new_year() -> None:
    assert days("last week", at(2026, 1, 2)) == ("2025-12-22", "2025-12-29")  # a Friday


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("last week", ("2026-03-09", "2026-03-16")),
        ("на прошлой неделе", ("2026-03-09", "2026-03-16")),
        ("上周", ("2026-03-09", "2026-03-16")),
        ("this week", ("2026-03-16", "2026-03-23")),
        ("a week ago", ("2026-03-09", "2026-03-16")),
    ],
)
def test_weeks_on_monday_and_sunday(text: str, expected: tuple[str, str]) -> None:
    monday, sunday = at(2026, 3, 16), at(2026, 3, 22)
    assert days(text, monday) == expected
    assert days(text, sunday) == expected


def test_weekday_names_on_that_weekday_mean_a_week_ago() -> None:
    monday = at(2026, 3, 16)
    assert days("on Monday", monday) == ("2026-03-09", "2026-03-10")
    assert days("в понедельник", monday) == ("2026-03-09", "2026-03-10")
    assert days("周一", monday) == ("2026-03-09", "2026-03-10")
    assert days("on Sunday", monday) == ("2026-03-15", "2026-03-16")
    assert days("last Sunday", monday) == ("2026-03-15", "2026-03-16")
    assert days("last Monday", monday) == ("2026-03-09", "2026-03-10")


@pytest.mark.parametrize(
    ("text", "now", "expected"),
    [
        # December: a new winter has begun.
        ("this winter", at(2025, 12, 10), ("2025-12-01", "2026-03-01")),
        ("last winter", at(2025, 12, 10), ("2024-12-01", "2025-03-01")),
        ("этой зимой", at(2025, 12, 10), ("2025-12-01", "2026-03-01")),
        ("last autumn", at(2025, 12, 10), ("2025-09-01", "2025-12-01")),
        ("прошлой осенью", at(2025, 12, 10), ("2025-09-01", "2025-12-01")),
        # January: still the winter that began in December.
        ("this winter", at(2026, 1, 15), ("2025-12-01", "2026-03-01")),
        ("last winter", at(2026, 1, 15), ("2024-12-01", "2025-03-01")),
        ("прошлой зимой", at(2026, 1, 15), ("2024-12-01", "2025-03-01")),
        ("今年冬天", at(2026, 1, 15), ("2025-12-01", "2026-03-01")),
        ("去年冬天", at(2026, 1, 15), ("2024-12-01", "2025-03-01")),
        ("last summer", at(2026, 1, 15), ("2025-06-01", "2025-09-01")),
        # The first day of spring: the winter has just ended.
        ("last winter", at(2026, 3, 1), ("2025-12-01", "2026-03-01")),
        ("last winter", at(2026, 2, 28), ("2024-12-01", "2025-03-01")),
        # October: the summer just gone.
        ("last summer", at(2026, 10, 5), ("2026-06-01", "2026-09-01")),
        ("this summer", at(2026, 10, 5), ("2026-06-01", "2026-09-01")),
        ("этим летом", at(2026, 10, 5), ("2026-06-01", "2026-09-01")),
        ("去年夏天", at(2026, 10, 5), ("2025-06-01", "2025-09-01")),
        # July: of the two winters touching this year, the nearer (ended 1 March).
        ("this winter", at(2026, 7, 15), ("2025-12-01", "2026-03-01")),
        ("last winter", at(2026, 7, 15), ("2025-12-01", "2026-03-01")),
        ("последней зимой", at(2026, 7, 15), None),  # not a form we read
    ],
)
def test_seasons(text: str, now: datetime, expected: tuple[str, str] | None) -> None:
    assert days(text, now) == expected


@pytest.mark.parametrize(
    ("text", "now"),
    [
        ("this summer", at(2026, 4, 10)),  # still to come
        ("этим летом", at(2026, 4, 10)),
        ("this winter", at(2026, 11, 10)),  # the coming one
        ("next summer", NOW),
        ("今年夏天", at(2026, 4, 10)),
    ],
)
def test_seasons_still_to_come_give_no_range(text: str, now: datetime) -> None:
    assert find_time_range(text, now) is None


# --- Time zones ------------------------------------------------------------------


def test_local_calendar_day_late_evening() -> None:
    late = datetime(2026, 3, 14, 23, 30, tzinfo=MSK)  # 20:30 UTC, same day
    r = find_time_range("today", late)
    assert r is not None
    assert r.since == datetime(2026, 3, 14, tzinfo=MSK)
    assert r.since == datetime(2026, 3, 13, 21, 0, tzinfo=UTC)
    assert r.until == datetime(2026, 3, 15, tzinfo=MSK)


def test_local_calendar_day_differs_from_utc() -> None:
    early = datetime(2026, 3, 15, 1, 30, tzinfo=MSK)  # still 14 March in UTC
    assert days("today", early) == ("2026-03-15", "2026-03-16")
    assert days("today", early.astimezone(UTC)) == ("2026-03-14", "2026-03-15")
    assert days("yesterday", early) == ("2026-03-14", "2026-03-15")
    assert days("вчера", early) == ("2026-03-14", "2026-03-15")
    assert days("昨天", early) == ("2026-03-14", "2026-03-15")


def test_west_of_utc() -> None:
    ny = timezone(timedelta(hours=-5))
    now = datetime(2026, 1, 1, 20, 0, tzinfo=ny)  # already 2 January in UTC
    assert days("this year", now) == ("2026-01-01", "2027-01-01")
    assert days("yesterday", now) == ("2025-12-31", "2026-01-01")
    r = find_time_range("yesterday", now)
    assert r is not None
    assert r.since.utcoffset() == timedelta(hours=-5)


def test_dst_change_inside_the_range() -> None:
    berlin = ZoneInfo("Europe/Berlin")  # clocks went forward on 29 March 2026
    r = find_time_range("yesterday", datetime(2026, 3, 30, 12, 0, tzinfo=berlin))
    assert r is not None
    assert r.since == datetime(2026, 3, 29, tzinfo=berlin)
    assert r.since.utcoffset() == timedelta(hours=1)
    assert r.until.utcoffset() == timedelta(hours=2)
    assert r.until.astimezone(UTC) - r.since.astimezone(UTC) == timedelta(hours=23)


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        find_time_range("yesterday", datetime(2026, 3, 18, 15, 0))


# --- Case and Unicode ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("LAST WEEK", ("2026-03-09", "2026-03-16")),
        ("Last Week", ("2026-03-09", "2026-03-16")),
        ("ВЧЕРА", ("2026-03-17", "2026-03-18")),
        ("На Прошлой Неделе", ("2026-03-09", "2026-03-16")),
        ("В МАРТЕ", ("2026-03-01", "2026-04-01")),
        ("IN MAY", ("2025-05-01", "2025-06-01")),
        ("last\u00a0week", ("2026-03-09", "2026-03-16")),  # no-break space
        ("上周\u3000的事", ("2026-03-09", "2026-03-16")),
    ],
)
def test_case_and_unicode(text: str, expected: tuple[str, str]) -> None:
    assert days(text) == expected


# --- No time expression ----------------------------------------------------------

NO_MATCH = [
    "",
    "how do I reset the router",
    "what is the capital of France",
    "remind me what the wifi password is",
    "summarise my notes about the car",
    "как настроить роутер",
    "что ты знаешь про мою машину",
    "какая погода в Москве",
    "в среде разработки",  # среда is also "environment"
    "что взять с собой летом",  # a season alone is a topic
    "怎么做红烧肉",
    "我的密码是什么",
    "之前天气很好",  # 之前 + 天气, not 前天
    "马上月底了",  # 马上 + 月底, not 上月
    "晚上月亮很美",
    "马上周末了",
    "日本周边",
    "基本周期",
    "一周一次",  # once a week, not Monday
    "三个月的计划",  # a duration
    "离这里最近的超市",  # 最近 = nearest
    # Numbers that are not dates.
    "I have 3 cats",
    "call me at 10",
    "room 1403",
    "version 3.12.1",
    "it costs 14.03",
    "14.03",  # no year: could be a decimal
    "top 10 movies",
    "I need 2025 rows",
    "8-800-555-35-35",
    "2020-2021",
    "order 2025-1234",
    "у меня 3 кота",
    "我有3只猫",
    # "may" and other month words that are not months here.
    "I may go",
    "May I ask something",
    "this may take a while",
    "the last may be the best",
    "5 may apply",
    "it may 10 minutes",
    "the march was long",
    "an august institution",
    "Spring Boot",
    "in the spring",
    "the fall of Rome",
    "at last we met",
    "the last time we talked",
    # Weekdays that are habits or names alone.
    "Tuesday",
    "on Tuesdays",
    "every Tuesday",
    "по вторникам",
    "каждый вторник",
    "每周二",
    # The future.
    "next week",
    "what is planned for tomorrow",
    "next Tuesday",
    "this Friday",  # today is Wednesday
    "на следующей неделе",
    "в следующий вторник",
    "в марте следующего года",
    "что будет завтра",
    "下周",
    "下周二",
    "明天的会议",
    "明年三月",
    "later this week",
    "next week on Tuesday",
    "Tuesday next week",
    "明年夏天",
    "下个月",
]


@pytest.mark.parametrize("text", NO_MATCH)
def test_no_time_expression(text: str) -> None:
    assert find_time_range(text, NOW) is None


# --- Which phrase, and strip_phrase ----------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("what did we decide last week?", "last week"),
        ("What did we decide Last Week", "Last Week"),
        ("что я говорил в прошлом месяце про машину", "в прошлом месяце"),
        ("上周我们聊了什么", "上周"),
        ("in March last year", "in March last year"),
        ("в марте прошлого года", "в марте прошлого года"),
        ("去年三月的账单", "去年三月"),
        ("the day before yesterday", "the day before yesterday"),
        ("позавчера", "позавчера"),
        ("yesterday and last week", "yesterday"),  # the first phrase wins
        ("what did we say yesterday about next week", "yesterday"),
        ("next week and last week", "last week"),
        ("Spring Boot last year", "last year"),
    ],
)
def test_phrase(text: str, expected: str) -> None:
    assert phrase(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("what did we decide last spring", "what did we decide"),
        ("what did we decide last week?", "what did we decide?"),
        ("Last week, what did we decide", "what did we decide"),
        ("what did we decide, last week?", "what did we decide?"),
        ("что я говорил в прошлом месяце про машину", "что я говорил про машину"),
        ("На прошлой неделе, что мы решили?", "что мы решили?"),
        ("上周我们聊了什么", "我们聊了什么"),
        ("我们上周聊了什么？", "我们聊了什么？"),
        ("yesterday's meeting notes", "meeting notes"),
        ("notes from 2026-03-14 about the car", "notes from about the car"),
    ],
)
def test_strip_phrase(text: str, expected: str) -> None:
    r = find_time_range(text, NOW)
    assert r is not None
    assert strip_phrase(text, r) == expected


def test_strip_phrase_prefers_the_whole_word() -> None:
    r = TimeRange(datetime(2025, 5, 1, tzinfo=MSK), datetime(2025, 6, 1, tzinfo=MSK), "May")
    assert strip_phrase("Mayday happened in May", r) == "Mayday happened in"


def test_strip_phrase_without_the_phrase_leaves_the_text() -> None:
    r = find_time_range("last week", NOW)
    assert r is not None
    assert strip_phrase("something else entirely", r) == "something else entirely"


def test_time_range_is_a_frozen_value() -> None:
    r = find_time_range("вчера", NOW)
    assert r is not None
    assert r == TimeRange(
        datetime(2026, 3, 17, tzinfo=MSK), datetime(2026, 3, 18, tzinfo=MSK), "вчера"
    )
    with pytest.raises(AttributeError):
        r.phrase = "x"  # type: ignore[misc]
    assert date(2026, 3, 17) == r.since.date()


def test_asks_about_past() -> None:
    from klaw.memory.timewords import asks_about_past

    for text in [
        "what was my old address",
        "where did I live before",
        "мой прежний номер телефона",
        "какой был пароль раньше",
        "我以前的地址是什么",
        "what did we decide last spring",
        "что я говорил в прошлом месяце",
        "上周我们聊了什么",
    ]:
        assert asks_about_past(text), text
    for text in ["what is my address", "мой номер телефона", "我的地址是什么", "wifi password"]:
        assert not asks_about_past(text), text

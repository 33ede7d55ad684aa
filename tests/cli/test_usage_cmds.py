"""`klaw usage` through the real CLI, on real JSONL files in a temp Klaw home."""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from klaw.cli import usage_cmds
from klaw.cli.app import app
from klaw.cli.testing import CliRunner, Result
from klaw.paths import KlawPaths
from klaw.wire.logfile import Record, encode_record

TODAY = date(2026, 2, 25)
BLOCKS = "█▉▊▋▌▍▎▏"
EIGHTHS = {"█": 8, "▉": 7, "▊": 6, "▋": 5, "▌": 4, "▍": 3, "▎": 2, "▏": 1}


@pytest.fixture
def home(klaw_home: KlawPaths, monkeypatch: pytest.MonkeyPatch) -> KlawPaths:
    # The owner's days are UTC days here, whatever the host's zone (any-hour runs).
    klaw_home.engine_config.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.engine_config.write_text("scheduler:\n  timezone: UTC\n")
    monkeypatch.setattr(usage_cmds, "_today", lambda zone: TODAY)
    return klaw_home


def day(n: int) -> date:
    """The UTC day ``n`` days before TODAY."""
    return TODAY - timedelta(days=n)


def reply(
    i: int, d: date, model: str | None, tokens_in: Any, tokens_out: Any, **extra: Any
) -> Record:
    meta: dict[str, Any] = {"channel": "telegram", "tokens_in": tokens_in}
    meta["tokens_out"] = tokens_out
    if model is not None:
        meta["model"] = model
    meta.update(extra)
    return Record(
        id=f"a{i}", ts=f"{d}T10:{i % 60:02d}:00Z", role="assistant", content="ok", meta=meta
    )


def msg(i: int, d: date, role: str = "user", meta: dict[str, Any] | None = None) -> Record:
    return Record(id=f"u{i}", ts=f"{d}T09:00:00Z", role=role, content="hi", meta=meta or {})


def write(paths: KlawPaths, chat: str, d: date, *lines: Record | bytes) -> Path:
    """Append records (or raw bytes, for damaged lines) to a chat's day file."""
    path = paths.conversations / chat / f"{d.isoformat()}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as fh:
        for line in lines:
            fh.write(line if isinstance(line, bytes) else encode_record(line))
    return path


def run(*args: str) -> Result:
    return CliRunner().invoke(app, ["usage", *args])


def run_json(*args: str) -> dict[str, Any]:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def sample(paths: KlawPaths) -> None:
    write(
        paths,
        "telegram_1",
        day(0),
        msg(1, day(0)),
        reply(1, day(0), "glm-5", 4500, 120),
        reply(2, day(0), "glm-5", 1000, 80),
        reply(3, day(0), "gpt-4o-mini", 700, 30),
    )
    write(paths, "telegram_1", day(2), reply(4, day(2), "glm-5", 2000, 100))
    write(paths, "discord_2", day(0), reply(5, day(0), "gpt-4o-mini", 300, 20))
    write(paths, "scheduler_daily", day(6), reply(6, day(6), "glm-5", 3200, 45))


# ------------------------------------------------------------------------- sums


def test_sums_per_day_model_and_chat_are_exact(home: KlawPaths) -> None:
    sample(home)
    data = run_json()
    assert data["totals"] == {"tokens_in": 11700, "tokens_out": 395, "replies": 6}
    by_day = {d["date"]: d for d in data["by_day"]}
    assert by_day[str(day(0))]["models"] == {
        "glm-5": {"tokens_in": 5500, "tokens_out": 200, "replies": 2},
        "gpt-4o-mini": {"tokens_in": 1000, "tokens_out": 50, "replies": 2},
    }
    assert by_day[str(day(0))]["tokens_in"] == 6500
    assert by_day[str(day(2))]["models"] == {
        "glm-5": {"tokens_in": 2000, "tokens_out": 100, "replies": 1}
    }
    assert by_day[str(day(6))]["replies"] == 1
    assert data["by_model"] == {
        "glm-5": {"tokens_in": 10700, "tokens_out": 345, "replies": 4},
        "gpt-4o-mini": {"tokens_in": 1000, "tokens_out": 50, "replies": 2},
    }
    assert data["by_chat"] == {
        "telegram_1": {"tokens_in": 8200, "tokens_out": 330, "replies": 4},
        "scheduler_daily": {"tokens_in": 3200, "tokens_out": 45, "replies": 1},
        "discord_2": {"tokens_in": 300, "tokens_out": 20, "replies": 1},
    }
    assert list(data["by_chat"]) == ["telegram_1", "scheduler_daily", "discord_2"]  # by tokens


def test_text_report_tables(home: KlawPaths) -> None:
    sample(home)
    result = run()
    assert result.exit_code == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == "Token usage in the last 7 days (2026-02-19 to 2026-02-25, UTC)"
    rows = [line.split() for line in lines]
    assert ["Day", "Model", "Tokens", "in", "Tokens", "out", "Replies"] in rows
    assert ["2026-02-19", "glm-5", "3,200", "45", "1"] in rows
    assert ["2026-02-23", "glm-5", "2,000", "100", "1"] in rows
    assert ["2026-02-25", "glm-5", "5,500", "200", "2"] in rows
    assert ["gpt-4o-mini", "1,000", "50", "2"] in rows  # same day as the line above
    assert ["glm-5", "10,700", "345", "4"] in rows  # per model
    assert ["telegram_1", "8,200", "330", "4"] in rows  # per chat
    assert rows.count(["total", "11,700", "395", "6"]) == 2  # under models and chats
    assert all(len(line) <= 80 for line in lines)


def test_long_model_name_is_shortened_to_fit(home: KlawPaths) -> None:
    long = "openrouter/anthropic/claude-3.5-sonnet:beta-with-a-really-long-suffix-x"
    write(home, "telegram_1", day(0), reply(1, day(0), long, 10, 1))
    result = run()
    assert result.exit_code == 0
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    assert "openrouter/anthropic/claude" in result.stdout and "…" in result.stdout
    assert long in run_json()["by_model"]


def test_chat_filter(home: KlawPaths) -> None:
    sample(home)
    data = run_json("--chat", "telegram_1")
    assert data["chat"] == "telegram_1"
    assert list(data["by_chat"]) == ["telegram_1"]
    assert data["totals"] == {"tokens_in": 8200, "tokens_out": 330, "replies": 4}
    assert "for chat telegram_1" in run("--chat", "telegram_1").stdout.splitlines()[0]

    result = run("--chat", "nope_9")
    assert result.exit_code == 1
    assert "no conversation log for chat 'nope_9'" in result.stderr
    assert "telegram_1" in result.stderr  # the known chats are listed
    assert run("--chat", "../x").exit_code == 1


# ------------------------------------------------------------------- the window


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every path opened through builtins.open while the test runs."""
    paths: list[Path] = []
    real_open = builtins.open

    def spy(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, str | os.PathLike):
            paths.append(Path(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    return paths


def test_day_window_includes_today_and_excludes_older_files(
    home: KlawPaths, opened: list[Path]
) -> None:
    # --days 7 covers TODAY and the 6 days before it; day(7) is the 8th day back.
    inside = write(home, "telegram_1", day(6), reply(1, day(6), "glm-5", 100, 10))
    edge = write(home, "telegram_1", day(7), reply(2, day(7), "glm-5", 1000, 1))
    future = write(home, "telegram_1", day(-1), reply(3, day(-1), "glm-5", 5, 5))
    today = write(home, "telegram_1", day(0), reply(4, day(0), "glm-5", 7, 7))
    home.db.parent.mkdir(parents=True, exist_ok=True)
    home.db.write_bytes(b"not a database")  # must never be opened
    opened.clear()  # forget the writes above

    week = run_json("--days", "7")
    assert week["from"] == "2026-02-19" and week["to"] == "2026-02-25"
    assert week["totals"] == {"tokens_in": 107, "tokens_out": 17, "replies": 2}
    assert len(week["by_day"]) == 7 and week["files_read"] == 2
    # Only the files inside the window were opened (the others not even read); no klaw.db.
    data_files = {p for p in opened if home.data_dir in p.parents}
    assert data_files == {inside, today}
    assert edge not in opened and future not in opened

    eight = run_json("--days", "8")
    assert eight["from"] == "2026-02-18"
    assert eight["totals"] == {"tokens_in": 1107, "tokens_out": 18, "replies": 3}
    assert all(home.db != p for p in opened)

    assert run_json("--days", "1")["totals"]["replies"] == 1  # today only


def test_default_is_seven_days(home: KlawPaths) -> None:
    write(home, "telegram_1", day(7), reply(1, day(7), "glm-5", 1000, 1))
    result = run()
    assert result.exit_code == 0
    assert result.stdout == "no usage recorded in the last 7 days\n"


def test_long_window_chart_starts_at_first_recorded_day(home: KlawPaths) -> None:
    write(home, "telegram_1", day(3), reply(1, day(3), "glm-5", 10, 0))
    result = run("--days", "400")
    assert result.exit_code == 0
    chart = result.stdout.split("Tokens per day (in + out)\n")[1].splitlines()
    assert chart[0] == f"(no usage from {day(399)} to {day(4)})"
    assert [line[:10] for line in chart[1:]] == [str(day(n)) for n in (3, 2, 1, 0)]
    assert [d["date"] for d in run_json("--days", "400")["by_day"]] == [
        str(day(n)) for n in (3, 2, 1, 0)
    ]
    assert run("--days", "99999999999").exit_code == 0  # clamped, no date overflow


# ------------------------------------------------------------ what is (not) usage


def test_lines_without_usage_are_ignored(home: KlawPaths) -> None:
    write(
        home,
        "telegram_1",
        day(0),
        msg(1, day(0)),  # the user
        msg(2, day(0), "tool", {"tool": "calendar-check"}),
        msg(3, day(0), "assistant", {"source": "heartbeat", "channel": "telegram"}),
        msg(4, day(0), "assistant", {"model": "glm-5"}),  # a model but no token counts
        msg(5, day(0), "user", {"tokens_in": 99, "tokens_out": 99}),  # not a reply
        reply(1, day(0), "glm-5", 40, 2),
        reply(2, day(0), None, 5, 1),  # counts without a model
    )
    data = run_json()
    assert data["totals"] == {"tokens_in": 45, "tokens_out": 3, "replies": 2}
    assert data["by_model"] == {
        "glm-5": {"tokens_in": 40, "tokens_out": 2, "replies": 1},
        "(unknown)": {"tokens_in": 5, "tokens_out": 1, "replies": 1},
    }
    assert data["skipped"]["lines"] == 0
    assert "skipped" not in run().stdout


def test_malformed_usage_fields_are_reported_not_summed(home: KlawPaths) -> None:
    write(
        home,
        "telegram_1",
        day(0),
        reply(1, day(0), "glm-5", "120", 3),
        reply(2, day(0), "glm-5", 10, -1),
        reply(3, day(0), "glm-5", True, 1),
        reply(4, day(0), "glm-5", 1.5, 1),
        reply(5, day(0), "glm-5", 8, 2),
    )
    data = run_json()
    assert data["totals"] == {"tokens_in": 8, "tokens_out": 2, "replies": 1}
    assert data["skipped"]["lines"] == 4
    assert data["skipped"]["reasons"] == {"invalid usage": 4}
    assert data["skipped"]["details"][0].startswith(f"telegram_1/{day(0)}.jsonl:1: invalid usage")


# -------------------------------------------------------------- damaged files


def test_torn_last_line_and_invalid_utf8_are_counted_in_footer(home: KlawPaths) -> None:
    name = f"telegram_1/{day(0)}.jsonl"
    write(
        home,
        "telegram_1",
        day(0),
        reply(1, day(0), "glm-5", 100, 10),
        b'{"id": "x", "content": "caf\xe9"}\n',  # Latin-1, not UTF-8
        b"\n",  # a blank line is harmless and not reported
        reply(2, day(0), "glm-5", 50, 5),
        b'{"id": "a3", "ts": "2026-02-25T11:00:00Z", "role": "assis',  # power cut
    )
    write(home, "discord_2", day(1), b"[1, 2]\n", reply(3, day(1), "gpt", 1, 1))

    result = run()
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert ["2026-02-25", "glm-5", "150", "15", "2"] in [line.split() for line in lines]
    footer = lines[-4:]
    assert footer[0] == (
        "skipped 3 unusable lines in 2 files: 1 invalid UTF-8, 1 not a JSON object, "
        "1 torn last line"
    )
    assert f"  discord_2/{day(1)}.jsonl:1: not a JSON object (array)" in footer
    assert f"  {name}:2: invalid UTF-8" in footer
    assert any(line.startswith(f"  {name}:5: torn last line") for line in footer)

    skipped = run_json()["skipped"]
    assert skipped["lines"] == 3 and skipped["files"] == 0
    assert skipped["reasons"] == {
        "invalid UTF-8": 1,
        "not a JSON object": 1,
        "torn last line": 1,
    }


def test_footer_lists_a_few_places_then_counts(home: KlawPaths) -> None:
    write(home, "telegram_1", day(0), *[b"garbage\n"] * 8, reply(1, day(0), "m", 1, 1))
    lines = run().stdout.splitlines()
    assert "skipped 8 unusable lines in 1 file: 8 invalid JSON" in lines
    assert lines[-1] == "  … and 3 more"
    assert sum(line.startswith(f"  telegram_1/{day(0)}.jsonl:") for line in lines) == 5


def test_only_damage_still_says_no_usage(home: KlawPaths) -> None:
    write(home, "telegram_1", day(0), b"\xff\xfe\n")
    result = run()
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "no usage recorded in the last 7 days"
    assert lines[1] == "skipped 1 unusable line in 1 file: 1 invalid UTF-8"


def test_day_file_with_an_impossible_date_is_reported(home: KlawPaths) -> None:
    bad = home.conversations / "telegram_1" / "2026-02-30.jsonl"
    write(home, "telegram_1", day(0), reply(1, day(0), "glm-5", 1, 1))
    bad.write_bytes(encode_record(reply(2, day(0), "glm-5", 1, 1)))
    data = run_json()
    assert data["totals"]["replies"] == 1
    assert data["skipped"]["files"] == 1
    assert data["skipped"]["details"] == [
        "telegram_1/2026-02-30.jsonl: file name is not a valid date"
    ]
    assert "skipped 1 unreadable file" in run().stdout


# ------------------------------------------------------------------- the chart


def bar_eighths(line: str) -> int:
    return sum(EIGHTHS.get(ch, 0) for ch in line[12:])


def test_bar_chart_shows_every_day_with_proportional_bars(home: KlawPaths) -> None:
    write(home, "telegram_1", day(0), reply(1, day(0), "glm-5", 3000, 200))  # 3,200: the peak
    write(home, "telegram_1", day(2), reply(2, day(2), "glm-5", 1500, 100))  # 1,600: half
    write(home, "telegram_1", day(5), reply(3, day(5), "glm-5", 700, 100))  # 800: a quarter
    lines = run().stdout.splitlines()
    start = lines.index("Tokens per day (in + out)") + 1
    chart = lines[start : start + 7]
    assert [line[:10] for line in chart] == [str(day(n)) for n in range(6, -1, -1)]
    assert all(len(line) == 80 for line in chart)  # fits 80 columns, numbers aligned
    assert [line.split()[-1] for line in chart] == [
        "0", "800", "0", "0", "1,600", "0", "3,200"
    ]  # fmt: skip
    widths = [bar_eighths(line) for line in chart]
    assert widths[0] == widths[2] == widths[3] == widths[5] == 0  # zero days: no bar
    assert all(ch not in BLOCKS for ch in chart[0])
    peak = widths[6]
    assert peak == (80 - 10 - 2 - 1 - len("3,200")) * 8  # the peak fills the bar area
    assert abs(widths[4] - peak / 2) <= 1 and abs(widths[1] - peak / 4) <= 1


def test_tiny_day_still_shows_a_sliver(home: KlawPaths) -> None:
    write(home, "telegram_1", day(0), reply(1, day(0), "glm-5", 1_000_000, 0))
    write(home, "telegram_1", day(1), reply(2, day(1), "glm-5", 1, 0))
    chart = run().stdout.split("Tokens per day (in + out)\n")[1].splitlines()
    tiny = next(line for line in chart if line.startswith(f"{day(1)}  "))
    assert bar_eighths(tiny) == 1 and "▏" in tiny


# --------------------------------------------------------------------- --json


def test_json_schema(home: KlawPaths) -> None:
    sample(home)
    data = run_json("--days", "3")
    assert set(data) == {
        "days",
        "from",
        "to",
        "chat",
        "totals",
        "by_day",
        "by_model",
        "by_chat",
        "files_read",
        "skipped",
    }
    assert (data["days"], data["from"], data["to"], data["chat"]) == (
        3,
        "2026-02-23",
        "2026-02-25",
        None,
    )
    sums = {"tokens_in", "tokens_out", "replies"}
    assert set(data["totals"]) == sums
    assert [d["date"] for d in data["by_day"]] == ["2026-02-23", "2026-02-24", "2026-02-25"]
    for entry in data["by_day"]:
        assert set(entry) == sums | {"date", "models"}
        for model_sums in entry["models"].values():
            assert set(model_sums) == sums
    assert data["by_day"][1] == {
        "date": "2026-02-24",
        "tokens_in": 0,
        "tokens_out": 0,
        "replies": 0,
        "models": {},
    }
    for table in (data["by_model"], data["by_chat"]):
        assert all(
            set(v) == sums and all(isinstance(n, int) for n in v.values()) for v in table.values()
        )
    assert data["files_read"] == 3
    assert data["skipped"] == {"lines": 0, "reasons": {}, "files": 0, "details": []}


def test_json_when_empty(home: KlawPaths) -> None:
    data = run_json()
    assert data["totals"] == {"tokens_in": 0, "tokens_out": 0, "replies": 0}
    assert len(data["by_day"]) == 7 and data["by_model"] == {} and data["by_chat"] == {}


# ------------------------------------------------------------ empty and errors


def test_no_conversations_at_all(home: KlawPaths) -> None:
    result = run()
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        "no usage recorded in the last 7 days\n",
        "",
    )
    assert run("--days", "1").stdout == "no usage recorded in the last 1 day\n"


@pytest.mark.parametrize("value", ["0", "-3", "abc", "1.5", ""])
def test_bad_days_is_an_argparse_error(home: KlawPaths, value: str) -> None:
    result = run(f"--days={value}")
    assert result.exit_code == 2
    assert "klaw usage: error: argument --days:" in result.stderr
    assert result.stdout == ""


def test_usage_command_imports_stay_light() -> None:
    """`klaw usage` must start fast and never reach for klaw.db."""
    code = (
        "import sys; from klaw.cli import usage_cmds; "
        "heavy = [m for m in ('klaw.memory.store', 'sqlite3', 'numpy', 'pydantic', 'httpx',"
        " 'subprocess') if m in sys.modules]; print(heavy)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_reply_counts_on_the_owners_day_not_its_files_utc_day(
    klaw_home: KlawPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Usage days are the owner's, like job days and token caps: at UTC+14 a reply at
    12:00 UTC on the 24th belongs to the owner's 25th (its file is named the 24th)."""
    klaw_home.engine_config.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.engine_config.write_text("scheduler:\n  timezone: Pacific/Kiritimati\n")
    kiritimati = ZoneInfo("Pacific/Kiritimati")
    monkeypatch.setattr(usage_cmds, "_today", lambda zone: TODAY if zone == kiritimati else None)
    utc = datetime.combine(TODAY, time(2, 0), kiritimati).astimezone(UTC)
    assert utc.date() == day(1)
    record = Record(
        id="a1",
        ts=utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        role="assistant",
        content="ok",
        meta={"channel": "telegram", "model": "glm-5", "tokens_in": 5, "tokens_out": 1},
    )
    write(klaw_home, "telegram_1", utc.date(), record)
    today = run_json("--days", "1")
    assert today["to"] == TODAY.isoformat()
    assert today["totals"] == {"tokens_in": 5, "tokens_out": 1, "replies": 1}

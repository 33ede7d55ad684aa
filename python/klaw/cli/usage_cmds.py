"""``klaw usage``: LLM token usage per day, model and chat, from the conversation logs.

The JSONL logs are the truth (design §5.2): every assistant reply carries
``meta.model``, ``meta.tokens_in`` and ``meta.tokens_out``. Only the day files
(``conversations/{chat}/YYYY-MM-DD.jsonl``, named by UTC day) that can hold a reply of
the window are opened, and klaw.db is never touched, so this works while the engine
runs. Days are the owner's (``scheduler.timezone``, else the host's zone), the days
in which jobs, token caps, daily logs and summaries are counted: a reply is counted
on the owner's day of its ``ts``, whatever UTC day names its file. Damaged
lines (a torn last line, invalid UTF-8, bad JSON, bad usage fields) are counted and
reported in a footer, never fatal.

The import stays light (CLI start-up budget): paths, the JSONL reader and the stdlib.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from pathlib import Path
from typing import Any

from klaw.cli.logs_cmds import _fit
from klaw.errors import InvalidInput
from klaw.paths import KlawPaths
from klaw.wire.logfile import SkippedLine, chat_files, iter_jsonl, list_chats, validate_chat_id

__all__ = ["usage"]

WIDTH = 80  # every line of the text report fits this many columns
UNKNOWN_MODEL = "(unknown)"
#: With a longer window the chart starts at the first day with usage (no 365 empty rows).
FULL_CHART_DAYS = 31
_EIGHTHS = ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")
_FULL = "█"
_MAX_DETAILS = 5  # damaged lines listed by place in the footer; the rest are counted


def _zone(paths: KlawPaths) -> tzinfo:
    """The owner's zone: engine.yaml's ``scheduler.timezone``, else the host's (also when
    engine.yaml is missing or invalid: usage is read from the logs alone)."""
    if paths.engine_config.is_file():
        from klaw.config import load_engine_config  # pydantic: only when there is a file
        from klaw.errors import ConfigError

        try:
            zone = load_engine_config(paths.engine_config).scheduler.zone()
        except ConfigError:
            zone = None
        if zone is not None:
            return zone
    return datetime.now().astimezone().tzinfo or UTC


def _today(zone: tzinfo) -> date:
    """Today in the owner's zone; replaced in tests."""
    return datetime.now(zone).date()


@dataclass(slots=True)
class Sums:
    tokens_in: int = 0
    tokens_out: int = 0
    replies: int = 0

    def add(self, tokens_in: int, tokens_out: int) -> None:
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        self.replies += 1

    @property
    def total(self) -> int:
        return self.tokens_in + self.tokens_out

    def as_dict(self) -> dict[str, int]:
        return {
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "replies": self.replies,
        }


@dataclass(slots=True)
class Skipped:
    """What could not be used, for the footer: damaged lines (by kind) and whole files
    (a name that is not a date, a file that cannot be read)."""

    root: Path
    lines: Counter[str] = field(default_factory=Counter)
    files_with_bad_lines: set[Path] = field(default_factory=set)
    bad_files: int = 0
    details: list[str] = field(default_factory=list)

    def line(self, path: Path, line_no: int, reason: str) -> None:
        self.lines[_category(reason)] += 1
        self.files_with_bad_lines.add(path)
        self.details.append(f"{self._where(path)}:{line_no}: {reason}")

    def file(self, path: Path, reason: str) -> None:
        self.bad_files += 1
        self.details.append(f"{self._where(path)}: {reason}")

    def _where(self, path: Path) -> str:
        return str(path.relative_to(self.root)) if path.is_relative_to(self.root) else str(path)


@dataclass(slots=True)
class Report:
    first: date
    last: date
    days: int
    chat: str | None
    skipped: Skipped
    by_day_model: dict[tuple[date, str], Sums] = field(default_factory=dict)
    by_day: dict[date, Sums] = field(default_factory=dict)
    by_model: dict[str, Sums] = field(default_factory=dict)
    by_chat: dict[str, Sums] = field(default_factory=dict)
    total: Sums = field(default_factory=Sums)
    files_read: int = 0

    def add(self, day: date, chat: str, model: str, tokens_in: int, tokens_out: int) -> None:
        self.by_day_model.setdefault((day, model), Sums()).add(tokens_in, tokens_out)
        self.by_day.setdefault(day, Sums()).add(tokens_in, tokens_out)
        self.by_model.setdefault(model, Sums()).add(tokens_in, tokens_out)
        self.by_chat.setdefault(chat, Sums()).add(tokens_in, tokens_out)
        self.total.add(tokens_in, tokens_out)

    def span(self) -> list[date]:
        """The days shown in the chart and listed in --json: the whole window, except
        that a window longer than FULL_CHART_DAYS starts at its first day with usage."""
        start = self.first
        if self.days > FULL_CHART_DAYS:
            start = min(self.by_day, default=self.last)
        return [start + timedelta(days=i) for i in range((self.last - start).days + 1)]


def _category(reason: str) -> str:
    """'invalid JSON: Expecting value...' -> 'invalid JSON'; 'torn last line (...)' ->
    'torn last line': the footer counts kinds, not individual messages."""
    return reason.split(":", 1)[0].split(" (", 1)[0]


def _usage_of(record: dict[str, Any]) -> tuple[str, int, int] | str | None:
    """(model, tokens_in, tokens_out) of an assistant reply with usage; None when the
    line carries no usage; a reason string when its usage fields are malformed."""
    if record["role"] != "assistant":
        return None
    meta = record.get("meta") or {}
    if "tokens_in" not in meta and "tokens_out" not in meta:
        return None  # e.g. a heartbeat notice or a fallback message: no LLM call
    counts = []
    for name in ("tokens_in", "tokens_out"):
        value = meta.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"invalid usage: meta.{name} is {value!r}, expected an integer >= 0"
        counts.append(value)
    model = meta.get("model")
    if not isinstance(model, str) or not model.strip():
        model = UNKNOWN_MODEL
    return model, counts[0], counts[1]


def collect(root: Path, days: int, chat: str | None, today: date, zone: tzinfo = UTC) -> Report:
    """Sum the usage of the owner's days ``today - days + 1`` to ``today`` (in `zone`),
    opening only the UTC day files that can hold a reply of those days."""
    first = date.min if days > (today - date.min).days else today - timedelta(days=days - 1)
    report = Report(first=first, last=today, days=days, chat=chat, skipped=Skipped(root))
    files_from, files_to = _utc_days(first, today, zone)
    for chat_id in [chat] if chat is not None else list_chats(root):
        for path in chat_files(root, chat_id):
            try:
                day = date.fromisoformat(path.stem)
            except ValueError:
                report.skipped.file(path, "file name is not a valid date")
                continue
            if files_from <= day <= files_to:
                _read_day_file(report, path, day, chat_id, zone)
    return report


def _utc_days(first: date, last: date, zone: tzinfo) -> tuple[date, date]:
    """The UTC days that overlap the owner's days `first` to `last`."""
    try:
        start = datetime.combine(first, time(), zone).astimezone(UTC).date()
        end = (datetime.combine(last, time(23, 59, 59), zone)).astimezone(UTC).date()
    except OverflowError:  # the window reaches date.min or date.max
        return date.min, date.max
    return start, end


def _day_of(record: dict[str, Any], file_day: date, zone: tzinfo) -> date:
    """The owner's day of a record's ``ts``; the file's day when ts cannot be read."""
    try:
        return datetime.fromisoformat(str(record["ts"])).astimezone(zone).date()
    except (KeyError, ValueError, OverflowError):
        return file_day


def _read_day_file(report: Report, path: Path, file_day: date, chat_id: str, zone: tzinfo) -> None:
    # Every line is either yielded or passed to on_skip, so counting both numbers lines.
    line_no = 0

    def on_skip(skipped: SkippedLine) -> None:
        nonlocal line_no
        line_no = skipped.line_no
        if skipped.reason != "blank line":  # harmless, not damage
            report.skipped.line(path, skipped.line_no, skipped.reason)

    try:
        for record in iter_jsonl(path, on_skip):
            line_no += 1
            found = _usage_of(record)
            if isinstance(found, str):
                report.skipped.line(path, line_no, found)
            elif found is not None:
                day = _day_of(record, file_day, zone)
                if report.first <= day <= report.last:
                    report.add(day, chat_id, *found)
    except OSError as exc:  # vanished or unreadable: report it, keep going
        report.skipped.file(path, f"cannot read: {exc.strerror or exc}")
        return
    report.files_read += 1


# --------------------------------------------------------------------------- output


def _n(value: int) -> str:
    return f"{value:,}"


def _table(headers: list[str], rows: list[list[str]], text_col: int = 1) -> list[str]:
    """Rows under headers; numbers right-aligned; column ``text_col`` (a name) is
    left-aligned and shortened with an ellipsis so that a line fits WIDTH."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    others = sum(w for i, w in enumerate(widths) if i != text_col) + 2 * (len(widths) - 1)
    widths[text_col] = max(min(widths[text_col], WIDTH - others), 8)
    out = []
    for row in [headers, *rows]:
        cells = []
        for i, cell in enumerate(row):
            if i < text_col:
                cells.append(cell.ljust(widths[i]))
            elif i == text_col:
                cells.append(_fit(cell, widths[i]).ljust(widths[i]))
            else:
                cells.append(cell.rjust(widths[i]))
        out.append("  ".join(cells).rstrip())
    return out


def _bar(value: int, peak: int, width: int) -> str:
    """A bar of ``value/peak`` of ``width`` columns in eighth blocks; any non-zero
    value shows at least one eighth."""
    if value <= 0 or peak <= 0:
        return ""
    eighths = max(round(value / peak * width * 8), 1)
    return _FULL * (eighths // 8) + _EIGHTHS[eighths % 8]


def _chart(report: Report) -> list[str]:
    span = report.span()
    lines = []
    if span[0] > report.first:
        lines.append(f"(no usage from {report.first} to {span[0] - timedelta(days=1)})")
    totals = [report.by_day[d].total if d in report.by_day else 0 for d in span]
    peak = max(totals)
    num_w = max(len(_n(t)) for t in totals)
    bar_w = WIDTH - 10 - 2 - 1 - num_w  # "YYYY-MM-DD  " + bar + " " + number
    for d, t in zip(span, totals, strict=True):
        lines.append(f"{d.isoformat()}  {_bar(t, peak, bar_w).ljust(bar_w)} {_n(t).rjust(num_w)}")
    return lines


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _footer(skipped: Skipped) -> list[str]:
    lines = []
    if skipped.lines:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(skipped.lines.items()))
        lines.append(
            f"skipped {_plural(sum(skipped.lines.values()), 'unusable line')} in "
            f"{_plural(len(skipped.files_with_bad_lines), 'file')}: {kinds}"
        )
    if skipped.bad_files:
        lines.append(f"skipped {_plural(skipped.bad_files, 'unreadable file')}")
    lines += [f"  {_fit(d, WIDTH - 2)}" for d in skipped.details[:_MAX_DETAILS]]
    if len(skipped.details) > _MAX_DETAILS:
        lines.append(f"  … and {len(skipped.details) - _MAX_DETAILS} more")
    return lines


def _sums_row(name: str, s: Sums) -> list[str]:
    return [name, _n(s.tokens_in), _n(s.tokens_out), _n(s.replies)]


def _ranked(table: dict[str, Sums]) -> list[tuple[str, Sums]]:
    return sorted(table.items(), key=lambda kv: (-kv[1].total, kv[0]))


def _window(report: Report) -> str:
    unit = "day" if report.days == 1 else "days"
    text = f"the last {report.days} {unit}"
    return text + (f" for chat {report.chat}" if report.chat else "")


def render_text(report: Report) -> list[str]:
    if not report.total.replies:
        return [f"no usage recorded in {_window(report)}", *_footer(report.skipped)]
    lines = [
        f"Token usage in {_window(report)} "
        f"({report.first.isoformat()} to {report.last.isoformat()}, UTC)",
        "",
    ]
    rows = []
    previous: date | None = None
    for (day, model), s in sorted(report.by_day_model.items()):
        rows.append([day.isoformat() if day != previous else "", *_sums_row(model, s)])
        previous = day
    lines += _table(["Day", "Model", "Tokens in", "Tokens out", "Replies"], rows)
    for title, table in (("Model", report.by_model), ("Chat", report.by_chat)):
        rows = [_sums_row(name, s) for name, s in _ranked(table)]
        rows.append(_sums_row("total", report.total))
        lines += ["", *_table([title, "Tokens in", "Tokens out", "Replies"], rows, text_col=0)]
    lines += ["", "Tokens per day (in + out)", *_chart(report)]
    footer = _footer(report.skipped)
    return lines + (["", *footer] if footer else [])


def render_json(report: Report) -> dict[str, Any]:
    by_day = []
    for d in report.span():
        models = {m: s.as_dict() for (day, m), s in sorted(report.by_day_model.items()) if day == d}
        by_day.append(
            {"date": d.isoformat(), **report.by_day.get(d, Sums()).as_dict(), "models": models}
        )
    skipped = report.skipped
    return {
        "days": report.days,
        "from": report.first.isoformat(),
        "to": report.last.isoformat(),
        "chat": report.chat,
        "totals": report.total.as_dict(),
        "by_day": by_day,
        "by_model": {name: s.as_dict() for name, s in _ranked(report.by_model)},
        "by_chat": {name: s.as_dict() for name, s in _ranked(report.by_chat)},
        "files_read": report.files_read,
        "skipped": {
            "lines": sum(skipped.lines.values()),
            "reasons": dict(sorted(skipped.lines.items())),
            "files": skipped.bad_files,
            "details": skipped.details,
        },
    }


def usage(days: int, chat: str | None, json_out: bool) -> int:
    """Print token usage of the owner's last ``days`` days (today included)."""
    paths = KlawPaths.from_env()
    root = paths.conversations
    if chat is not None:
        try:
            validate_chat_id(chat)
        except InvalidInput as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        chats = list_chats(root)
        if chat not in chats:
            known = ", ".join(chats) if chats else "none yet"
            print(
                f"error: no conversation log for chat {chat!r} in {root} (known chats: {known})",
                file=sys.stderr,
            )
            return 1
    zone = _zone(paths)
    report = collect(root, days, chat, _today(zone), zone)
    if json_out:
        print(json.dumps(render_json(report), indent=2, ensure_ascii=False))
    else:
        print("\n".join(render_text(report)))
    return 0

"""The spend log: one JSON line per model call, with its source, model, tokens and cost,
in ``spend/YYYY-MM-DD.jsonl`` under the data directory (named by the UTC day of the
call; readers count the owner's days by each line's ``ts``).

It is what `klaw usage --cost` and `klaw budget` read, and what the engine reads at
start to rebuild the period's spend: budgets hold across restarts. A line is one
``write(2)`` on an ``O_APPEND`` descriptor (whole lines, even from two processes), not
fsynced: a crash of Klaw loses nothing, a power cut at most the last lines the kernel
had not written. A line ``{"ts", "told", "period"}`` records that the owner was told
a cap was reached, so they are told once per period across restarts too.

Lines that cannot be read (torn, not JSON, wrong fields) are skipped and counted.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = ["MAX_LINE", "Call", "SpendLog", "SpendRead", "Told", "read_spend"]

#: A line is ~200 bytes; a longer one is damage and is skipped unread (a file of one
#: endless line must not be read into memory).
MAX_LINE = 64 * 1024


@dataclass(frozen=True, slots=True)
class Call:
    """One model call. `cost` None: its price is unknown (never counted as free)."""

    at: datetime  # aware, UTC
    source: str  # "chat:telegram_1", "job:news", "heartbeat", "subagent:x", "summary"
    model: str  # "glm/glm-5"
    tokens_in: int
    tokens_out: int
    cached_in: int
    cost: float | None
    currency: str | None


@dataclass(frozen=True, slots=True)
class Told:
    """The owner was told that `scope` ("daily", "monthly", "source:heartbeat") was
    reached in `period` ("2026-11-27", "2026-11")."""

    at: datetime
    scope: str
    period: str


@dataclass(slots=True)
class SpendRead:
    """What `read_spend` found besides the entries: lines it skipped, by place."""

    skipped: list[str] = field(default_factory=list)
    files: int = 0


def _ts(at: datetime) -> str:
    # isoformat is a third of strftime's cost; the same text (years 1000-9999).
    return at.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _line(entry: Call | Told) -> bytes:
    data: dict[str, Any]
    if isinstance(entry, Told):
        data = {"ts": _ts(entry.at), "told": entry.scope, "period": entry.period}
    else:
        data = {
            "ts": _ts(entry.at),
            "source": entry.source,
            "model": entry.model,
            "in": entry.tokens_in,
            "out": entry.tokens_out,
            "cached": entry.cached_in,
            "cost": entry.cost,
            "currency": entry.currency,
        }
    return (_ENCODER.encode(data) + "\n").encode()


class SpendLog:
    """The writer: keeps the day's file open (one syscall per call)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._fd = -1
        self._day: date | None = None

    def append(self, entry: Call | Told) -> None:
        day = entry.at.astimezone(UTC).date()
        if day != self._day:
            self._open(day)
        os.write(self._fd, _line(entry))

    def _open(self, day: date) -> None:
        self.close()
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{day.isoformat()}.jsonl"
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._day = day

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._day = -1, None


def _int(data: dict[str, Any], key: str) -> int:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} is {value!r}, expected an integer >= 0")
    return value


def _parse(data: Any) -> Call | Told:
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    at = datetime.fromisoformat(str(data["ts"]))
    if at.tzinfo is None:
        raise ValueError("ts has no zone")
    if "told" in data:
        return Told(at, str(data["told"]), str(data["period"]))
    cost = data.get("cost")
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float)):
        raise ValueError(f"cost is {cost!r}, expected a number or null")
    if cost is not None and not 0 <= cost < math.inf:  # NaN fails too: it would end every cap
        raise ValueError(f"cost is {cost!r}, expected a finite number, 0 or more")
    currency = data.get("currency")
    return Call(
        at=at,
        source=str(data["source"]),
        model=str(data["model"]),
        tokens_in=_int(data, "in"),
        tokens_out=_int(data, "out"),
        cached_in=_int(data, "cached"),
        cost=None if cost is None else float(cost),
        currency=None if currency is None else str(currency),
    )


def read_spend(
    folder: Path, first: date, last: date, found: SpendRead | None = None
) -> Iterator[Call | Told]:
    """The entries of the UTC day files `first` to `last` (a day's line may belong to
    the owner's day before or after: callers filter by `at`)."""
    found = SpendRead() if found is None else found
    if not folder.is_dir():
        return
    day = first
    while day <= last:
        path = folder / f"{day.isoformat()}.jsonl"
        day += timedelta(days=1)
        try:
            fh = open(path, "rb")  # closed below; a missing day is normal
        except FileNotFoundError:
            continue
        except OSError as exc:
            found.skipped.append(f"{path.name}: cannot read: {exc.strerror or exc}")
            continue
        found.files += 1
        with fh:
            n = 0
            while raw := fh.readline(MAX_LINE + 1):
                n += 1
                try:
                    if len(raw) > MAX_LINE:
                        while raw and not raw.endswith(b"\n"):  # skip the rest of it
                            raw = fh.readline(MAX_LINE)
                        raise ValueError(f"line over {MAX_LINE} bytes")
                    if not raw.endswith(b"\n"):
                        raise ValueError("torn last line")
                    yield _parse(json.loads(raw))
                except (ValueError, KeyError, TypeError, RecursionError) as exc:
                    # RecursionError: JSON nested thousands deep; it stopped the engine's start
                    found.skipped.append(f"{path.name}:{n}: {str(exc)[:80] or type(exc).__name__}")

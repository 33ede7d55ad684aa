"""``klaw usage --cost`` and ``klaw budget``: what the model calls cost, from the spend
log (``spend/YYYY-MM-DD.jsonl``, one line per call; klaw/spend/log.py).

Costs stay in each price's currency unless engine.yaml's ``budget.rates`` converts
them into ``budget.currency``. A call whose price is unknown is counted as such and
shown as ``unknown``, never as free. Days are the owner's, as in ``klaw usage``. The
engine keeps writing while these run: both only read.
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, timedelta, tzinfo
from typing import TYPE_CHECKING, Any

from klaw.cli import usage_cmds
from klaw.cli.usage_cmds import WIDTH, _bar, _n, _table, _zone
from klaw.paths import KlawPaths
from klaw.spend.log import Call, SpendRead, read_spend

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.spend.prices import Rates

__all__ = ["budget", "cost"]

BY = ("source", "model", "day")
#: The clock `klaw budget` reads the period by; replaced in tests.
_clock = time.time


@dataclass(slots=True)
class CostSums:
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    unknown: int = 0  # calls of unknown (or unconvertible) cost

    def add(self, call: Call, rates: Rates | None) -> None:
        self.calls += 1
        self.tokens_in += call.tokens_in
        self.tokens_out += call.tokens_out
        if call.cost is None:
            self.unknown += 1
            return
        amount, currency = call.cost, call.currency or ""
        if rates is not None:
            converted = rates.convert(call.cost, call.currency)
            if converted is None:
                self.unknown += 1
                return
            amount, currency = converted, rates.currency
        if amount or currency:
            self.cost[currency or "-"] += amount

    def cells(self, currencies: list[str], unknown: bool) -> list[str]:
        """Calls, tokens, a cost per currency (never added across them), unknown calls."""
        row = [_n(self.calls), _n(self.tokens_in), _n(self.tokens_out)]
        row += [f"{self.cost[c]:.4f}" if c in self.cost else "" for c in currencies]
        return row + ([_n(self.unknown) if self.unknown else ""] if unknown else [])

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "cost": {c: round(v, 6) for c, v in sorted(self.cost.items()) if c != "-"},
            "unknown_cost_calls": self.unknown,
        }


def _config(paths: KlawPaths) -> EngineConfig | None:
    if not paths.engine_config.is_file():
        return None
    from klaw.config import load_engine_config
    from klaw.errors import ConfigError

    try:
        return load_engine_config(paths.engine_config)
    except ConfigError:
        return None


def _rates(config: EngineConfig | None) -> Rates | None:
    """The conversion engine.yaml configures, else None (costs stay per currency)."""
    if config is None or not config.budget.rates:
        return None
    from klaw.spend.prices import Rates

    budget = config.budget
    return Rates(budget.currency, {str(k): v for k, v in budget.rates.items()})


def collect_cost(
    paths: KlawPaths, days: int, by: str, today: date, zone: tzinfo, rates: Rates | None
) -> tuple[date, dict[str, CostSums], CostSums, SpendRead]:
    """Sums of the owner's days ``today - days + 1`` to ``today`` grouped by `by`."""
    first = today - timedelta(days=days - 1)
    found = SpendRead()
    groups: dict[str, CostSums] = defaultdict(CostSums)
    total = CostSums()
    utc_first = first - timedelta(days=1)  # a zone ahead of UTC starts its day before
    for entry in read_spend(paths.spend, utc_first, today + timedelta(days=1), found):
        if not isinstance(entry, Call):
            continue
        day = entry.at.astimezone(zone).date()
        if not first <= day <= today:
            continue
        key = {"source": entry.source, "model": entry.model, "day": day.isoformat()}[by]
        groups[key].add(entry, rates)
        total.add(entry, rates)
    return first, dict(groups), total, found


def _chart(first: date, today: date, by_day: dict[str, CostSums]) -> list[str]:
    """A bar per day for each currency."""
    currencies = sorted({c for s in by_day.values() for c in s.cost if c != "-"})
    lines: list[str] = []
    span = [first + timedelta(days=i) for i in range((today - first).days + 1)]
    for currency in currencies:
        values = [by_day.get(d.isoformat(), CostSums()).cost.get(currency, 0.0) for d in span]
        texts = [f"{v:.4f}" for v in values]
        num_w = max(len(t) for t in texts)
        bar_w = WIDTH - 10 - 2 - 1 - num_w
        peak = max(values)
        lines += ["", f"Cost per day ({currency})"]
        for d, v, t in zip(span, values, texts, strict=True):
            bar = _bar(round(v * 1e6), round(peak * 1e6), bar_w)
            lines.append(f"{d.isoformat()}  {bar.ljust(bar_w)} {t.rjust(num_w)}")
    return lines


def cost(days: int, by: str, json_out: bool) -> int:
    """Print what the model calls of the owner's last `days` days cost, grouped `by`."""
    paths = KlawPaths.from_env()
    config = _config(paths)
    zone = _zone(paths)
    today = usage_cmds._today(zone)  # replaced in tests, as for `klaw usage`
    rates = _rates(config)
    first, groups, total, found = collect_cost(paths, days, by, today, zone, rates)
    ranked = sorted(groups.items(), key=lambda kv: kv[0] if by == "day" else (-kv[1].calls, kv[0]))
    if json_out:
        out = {
            "days": days,
            "from": first.isoformat(),
            "to": today.isoformat(),
            "by": by,
            "converted_to": rates.currency if rates else None,
            "groups": {k: s.as_dict() for k, s in ranked},
            "totals": total.as_dict(),
            "skipped": found.skipped,
        }
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    unit = "day" if days == 1 else "days"
    if not total.calls:
        print(f"no model calls recorded in the last {days} {unit}")
        return 0
    lines = [f"Cost of model calls in the last {days} {unit} ({first} to {today})"]
    if rates is not None:
        lines.append(f"(converted to {rates.currency} at engine.yaml budget.rates)")
    lines.append("")
    currencies = sorted(c for c in total.cost if c != "-")
    unknown = total.unknown > 0
    headers = [by.capitalize(), "Calls", "Tokens in", "Tokens out", *currencies]
    rows = [[k, *s.cells(currencies, unknown)] for k, s in ranked]
    rows.append(["total", *total.cells(currencies, unknown)])
    lines += _table(headers + (["Unknown"] if unknown else []), rows, text_col=0)
    if unknown:
        lines += [
            "",
            f"Unknown: {total.unknown} call(s) whose model has no price"
            + ("" if rates is None else " (or whose currency has no rate)"),
            "(engine.yaml models.<id>.price; docs/costs.md). Never counted as free.",
        ]
    by_day = groups if by == "day" else collect_cost(paths, days, "day", today, zone, rates)[1]
    lines += _chart(first, today, by_day)
    if found.skipped:
        lines += ["", f"skipped {len(found.skipped)} unreadable line(s), e.g. {found.skipped[0]}"]
    print("\n".join(lines))
    return 0


def budget(json_out: bool) -> int:
    """Print each cap, what was spent against it and what is left."""
    import logging

    from klaw.spend import Spend

    logging.getLogger("klaw.spend").setLevel(logging.ERROR)  # the totals below say it
    paths = KlawPaths.from_env()
    config = _config(paths)
    if config is None:
        print(
            f"error: {paths.engine_config} is missing or invalid: `klaw doctor` says why",
            file=sys.stderr,
        )
        return 1
    spend = Spend(config, paths.spend, clock=_clock)
    caps = spend.caps()
    currency = config.budget.currency
    if json_out:
        out = {
            "currency": currency,
            "spent_today": round(spend.spent_today, 6),
            "spent_month": round(spend.spent_month, 6),
            "unknown_cost_calls_today": spend.unpriced_today,
            "caps": [
                {
                    "scope": c.scope,
                    "cap": c.cap,
                    "spent": round(c.spent, 6),
                    "left": round(c.left, 6),
                    "resets": c.resets.isoformat(timespec="minutes"),
                    "sources": {k: round(v, 6) for k, v in sorted(c.sources.items())},
                }
                for c in caps
            ],
        }
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    lines = [
        f"Spent today {spend.spent_today:.4f} {currency}, this month "
        f"{spend.spent_month:.4f} {currency}"
    ]
    if not caps:
        lines.append(
            "No budget set (engine.yaml budget: daily, monthly, perSource; docs/costs.md)."
        )
    else:
        rows = []
        for c in caps:
            who = ""
            if c.sources:
                top = max(c.sources.items(), key=lambda kv: kv[1])[0]
                who = f" ({top})" if c.scope != top else ""
            rows.append(
                [
                    c.scope + who,
                    f"{c.cap:.2f}",
                    f"{c.spent:.4f}",
                    f"{c.left:.4f}" if c.left > 0 else "spent",
                    f"{c.resets:%Y-%m-%d %H:%M}",
                ]
            )
        lines += ["", *_table(["Cap", f"Cap {currency}", "Spent", "Left", "Resets"], rows, 0)]
        lines.append("A per-source cap shows the source of its pattern that spent the most today.")
    if spend.unpriced_today:
        lines += [
            f"{spend.unpriced_today} call(s) today of unknown cost are not counted (a model",
            "without a price, or priced in a currency without a budget.rates entry).",
        ]
    if spend.skipped:
        lines.append(f"skipped {len(spend.skipped)} unreadable spend-log line(s)")
    print("\n".join(lines))
    return 0

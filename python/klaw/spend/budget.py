"""What each model call costs and whether it may be made: the router's meter.

`Spend.admit` runs before every call: it refuses (`BudgetSpent`) when the source or
the whole agent is at or over a cap of the period (`budget.daily`, `budget.monthly`,
`budget.perSource`, days and months of the owner's zone), and otherwise reserves an
estimate of the call's cost. `Spend.settle` replaces the estimate with the cost of the
usage the provider reported and writes the call to the spend log. A call that starts
under a cap may end over it by its own cost; calls running at once each see the
others' reservations, so together they overshoot by at most one call per LLM slot.

Per call this is arithmetic on in-memory totals (no file is read): the totals are
rebuilt from the spend log at start and when the owner's day changes (or the clock is
set back across midnight), so neither a restart nor a clock that was wrong at boot
forgets anything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

from klaw.errors import KlawError
from klaw.spend.log import Call, SpendLog, Told, read_spend
from klaw.spend.prices import Price, PriceTable, Rates

if TYPE_CHECKING:
    from klaw.config import BudgetConfig, EngineConfig

__all__ = ["BudgetSpent", "Cap", "Spend", "Ticket", "source_for_chat"]

log = logging.getLogger("klaw.spend")

#: Tokens one call can be counted for: 1,000 times the largest context window today.
MAX_CALL_TOKENS = 10**9
#: The chats of scheduled jobs and subagents (`klaw.lanes.SUBAGENT_CHAT_PREFIX`).
_JOB_CHAT = "scheduler_"


def source_for_chat(chat_id: str, kind: str | None = None) -> str:
    """The spend source of a turn in `chat_id`: ``heartbeat``, ``job:<name>``,
    ``subagent:<name>`` (a spawned one: `kind` "once") or ``chat:<chat id>``."""
    if not chat_id.startswith(_JOB_CHAT):
        return f"chat:{chat_id}"
    name = chat_id[len(_JOB_CHAT) :]
    if kind == "heartbeat" or (kind is None and name == "heartbeat"):
        return "heartbeat"
    return f"{'subagent' if kind == 'once' else 'job'}:{name}"


class BudgetSpent(KlawError):
    """A cap is reached: calls of `source` stop until `resets` (see `notice`)."""

    def __init__(
        self,
        scope: str,
        source: str,
        cap: float,
        spent: float,
        currency: str,
        resets: datetime,
        *,
        first: bool,
    ) -> None:
        self.scope, self.source, self.cap, self.spent = scope, source, cap, spent
        self.currency, self.resets, self.first = currency, resets, first
        super().__init__(self.notice)

    @property
    def notice(self) -> str:
        """One line for the user."""
        spent, cap = _money(self.spent, self.currency), _money(self.cap, self.currency)
        if self.scope == "daily":
            what = f"Today's budget of {cap} is spent ({spent})"
        elif self.scope == "monthly":
            what = f"This month's budget of {cap} is spent ({spent})"
        else:
            what = f"The daily budget of {self.source} ({cap}) is spent ({spent} today)"
        return f"💸 {what}: no more model calls until {self.resets:%Y-%m-%d %H:%M}."


def _money(amount: float, currency: str) -> str:
    return f"{amount:.2f} {currency}" if amount >= 1 else f"{amount:.4f} {currency}"


@dataclass(slots=True)
class Ticket:
    """An admitted call: its source and the estimate reserved for it."""

    source: str
    reserved: float
    settled: bool = False


@dataclass(frozen=True, slots=True)
class Cap:
    """One cap as `klaw budget` shows it."""

    scope: str  # "daily", "monthly", or the perSource key ("job:*")
    cap: float
    spent: float  # for a pattern: the most any matching source spent today
    resets: datetime
    sources: dict[str, float] = field(default_factory=dict)  # perSource: who spent what

    @property
    def left(self) -> float:
        return max(self.cap - self.spent, 0.0)


class _Period:
    """The owner's current day and month, as local dates and epoch bounds."""

    def __init__(self, ts: float, zone: tzinfo | None) -> None:
        local = datetime.fromtimestamp(ts, zone)  # zone None: the host's, naive
        start = local.replace(hour=0, minute=0, second=0, microsecond=0)
        end = (start + timedelta(days=1, hours=2)).replace(hour=0)  # DST-proof
        month = start.replace(day=1)
        month_end = (month + timedelta(days=32)).replace(day=1)
        self.day: date = start.date()
        self.start, self.end = start.timestamp(), end.timestamp()
        self.month_start, self.month_end = month.timestamp(), month_end.timestamp()
        self.day_key, self.month_key = self.day.isoformat(), self.day.isoformat()[:7]
        self.next_day = end if end.tzinfo else end.astimezone()
        self.next_month = month_end if month_end.tzinfo else month_end.astimezone()


class Spend:
    """Prices, budget and the spend log for one engine (see the module docstring).
    Used from the event loop only: no locks."""

    def __init__(
        self,
        config: EngineConfig,
        folder: Path,
        *,
        clock: Callable[[], float] = time.time,
        shipped: dict[tuple[str, str], Price] | None = None,
    ) -> None:
        self.budget: BudgetConfig = config.budget
        self.prices = PriceTable(config, shipped)
        self.rates = Rates(self.budget.currency, {str(k): v for k, v in self.budget.rates.items()})
        self.folder = folder
        self.log = SpendLog(folder)
        self._clock = clock
        self._zone = config.scheduler.zone()
        self._period = _Period(clock(), self._zone)
        self._day = 0.0  # known costs in the budget's currency
        self._month = 0.0
        self._by_source: dict[str, float] = {}  # today
        self._reserved = 0.0
        self._reserved_by: dict[str, float] = {}
        self._told: set[tuple[str, str]] = set()
        self._caps: dict[str, tuple[str, float] | None] = {}  # source → (key, cap)
        self._warned: set[str] = set()  # models whose cost cannot be counted, logged once
        self.unpriced_today = 0  # calls of unknown (or unconvertible) cost today
        self.skipped: list[str] = []  # spend-log lines the rebuild could not read
        self._unlogged: list[Call] = []  # calls the spend log could not take (a full disk)
        self._rebuild()

    def close(self) -> None:
        self.log.close()

    # ------------------------------------------------------------------ per call

    def admit(self, source: str, model: str, est_in: int, est_out: int) -> Ticket:
        """Before a call of `model` for `source`: raises `BudgetSpent` at or over a cap,
        else reserves the estimate (tokens in and out) until `settle` or `release`."""
        now = self._clock()
        self._follow(now)
        budget = self.budget
        if budget.daily is not None and self._day + self._reserved >= budget.daily:
            self._refuse("daily", source, budget.daily, self._day, now)
        if budget.monthly is not None and self._month + self._reserved >= budget.monthly:
            self._refuse("monthly", source, budget.monthly, self._month, now)
        cap = self._cap(source)
        if cap is not None:
            spent = self._by_source.get(source, 0.0)
            if spent + self._reserved_by.get(source, 0.0) >= cap[1]:
                self._refuse(f"source:{cap[0]}", source, cap[1], spent, now)
        price = self.prices.get(model)
        estimate = 0.0
        if price is not None:
            estimate = self.rates.convert(price.cost(est_in, est_out), price.currency) or 0.0
        self._reserved += estimate
        self._reserved_by[source] = self._reserved_by.get(source, 0.0) + estimate
        return Ticket(source, estimate)

    def release(self, ticket: Ticket) -> None:
        """The call made no usable answer: its reservation goes."""
        if ticket.settled:
            return
        ticket.settled = True
        self._reserved -= ticket.reserved
        left = self._reserved_by.get(ticket.source, 0.0) - ticket.reserved
        if left > 1e-12:
            self._reserved_by[ticket.source] = left
        else:
            self._reserved_by.pop(ticket.source, None)
        if self._reserved < 1e-12:
            self._reserved = 0.0

    def settle(
        self, ticket: Ticket, model: str, tokens_in: int, tokens_out: int, cached_in: int = 0
    ) -> Call:
        """The call answered (by `model`, maybe a fallback): its cost is counted and logged.
        Usage reported below zero counts as zero: it must not give the budget money back;
        above MAX_CALL_TOKENS as that many (a 400-digit count overflowed the float sum)."""
        self.release(ticket)
        usage = (tokens_in, tokens_out, cached_in)
        if min(usage) < 0 or max(usage) > MAX_CALL_TOKENS:
            log.warning(
                "budget: %s reported usage of in %.3g, out %.3g, cached %.3g tokens: counted "
                "as 0 below zero and %d above it",
                model,
                *(float(min(max(n, -1e300), 1e300)) for n in usage),
                MAX_CALL_TOKENS,
            )
            tokens_in, tokens_out, cached_in = (min(max(n, 0), MAX_CALL_TOKENS) for n in usage)
        now = self._clock()
        self._follow(now)
        price = self.prices.get(model)
        cost = None if price is None else price.cost(tokens_in, tokens_out, cached_in)
        call = Call(
            at=datetime.fromtimestamp(now, UTC),
            source=ticket.source,
            model=model,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cached_in=cached_in,
            cost=cost,
            currency=None if price is None else price.currency,
        )
        try:
            self.log.append(call)
        except OSError as exc:  # a full disk must not stop the reply; the total still counts
            log.error("spend log not written (%s): %s", self.folder, exc)
            self._unlogged.append(call)  # and still counts when the day's totals are reread
        self._count(call)
        return call

    def free(self, models: list[str]) -> bool:
        """Whether every model of a chain costs nothing (local): no cap applies."""
        for ref in models:
            price = self.prices.get(ref)
            if price is None or not price.free:
                return False
        return True

    def offline_for(self, source: str) -> str | None:
        """The model that answers a chat over its cap (`budget.offlineModel`), if free."""
        ref = self.budget.offline_model
        if ref is None or not source.startswith("chat:"):
            return None
        price = self.prices.get(ref)
        return ref if price is not None and price.free else None

    # ------------------------------------------------------------------ state

    def caps(self) -> list[Cap]:
        """Every configured cap with what was spent against it (`klaw budget`)."""
        now = self._clock()
        self._follow(now)
        p, budget = self._period, self.budget
        out: list[Cap] = []
        if budget.daily is not None:
            out.append(Cap("daily", budget.daily, self._day, p.next_day))
        if budget.monthly is not None:
            out.append(Cap("monthly", budget.monthly, self._month, p.next_month))
        for key, cap in budget.per_source.items():
            sources = {
                s: v
                for s, v in self._by_source.items()
                if (found := self._cap(s)) is not None and found[0] == key
            }
            out.append(Cap(key, cap, max(sources.values(), default=0.0), p.next_day, sources))
        return out

    def summary(self) -> str:
        """One line for /status; reads only (called from a worker thread)."""
        now, p, budget = self._clock(), self._period, self.budget
        day = self._day if now < p.end else 0.0
        month = self._month if now < p.month_end else 0.0
        cur = budget.currency
        text = f"Spent today {_money(day, cur)}"
        text += f" of {_money(budget.daily, cur)}" if budget.daily is not None else ""
        text += f", this month {_money(month, cur)}"
        text += f" of {_money(budget.monthly, cur)}" if budget.monthly is not None else ""
        if self.unpriced_today and now < p.end:
            text += f"; {self.unpriced_today} call(s) today of unknown cost"
        return text

    @property
    def spent_today(self) -> float:
        return self._day

    @property
    def spent_month(self) -> float:
        return self._month

    def _cap(self, source: str) -> tuple[str, float] | None:
        """The perSource entry for `source`: its own key, else the longest pattern."""
        if source in self._caps:
            return self._caps[source]
        per = self.budget.per_source
        found: tuple[str, float] | None = None
        if source in per:
            found = (source, per[source])
        else:
            matches = sorted((k for k in per if fnmatchcase(source, k)), key=len)
            if matches:
                found = (matches[-1], per[matches[-1]])
        self._caps[source] = found
        return found

    def _refuse(self, scope: str, source: str, cap: float, spent: float, now: float) -> None:
        p = self._period
        period = p.month_key if scope == "monthly" else p.day_key
        resets = p.next_month if scope == "monthly" else p.next_day
        # A per-source cap is each source's own ("job:*": every job): told per source.
        told = f"source:{source}" if scope.startswith("source:") else scope
        first = (told, period) not in self._told
        if first:
            self._told.add((told, period))
            log.warning(
                "budget: %s cap of %.4f %s reached (%.4f spent in %s): calls of %s stop until %s",
                scope,
                cap,
                self.budget.currency,
                spent,
                period,
                source if scope.startswith("source:") else "every source",
                resets,
            )
            try:
                self.log.append(Told(datetime.fromtimestamp(now, UTC), told, period))
            except OSError as exc:
                log.error("spend log not written (%s): %s", self.folder, exc)
        raise BudgetSpent(scope, source, cap, spent, self.budget.currency, resets, first=first)

    def _count(self, call: Call) -> None:
        value = None
        if call.cost is not None:
            value = self.rates.convert(call.cost, call.currency)
        if value is None:
            self.unpriced_today += 1
            if call.model not in self._warned:
                self._warned.add(call.model)
                why = "has no price" if call.cost is None else f"is priced in {call.currency}"
                log.warning(
                    "budget: %s %s: its calls are not counted against the budget (%s) "
                    "(docs/costs.md: models.<id>.price, budget.rates)",
                    call.model,
                    why,
                    self.budget.currency,
                )
            return
        self._month += value
        self._day += value
        self._by_source[call.source] = self._by_source.get(call.source, 0.0) + value

    def _follow(self, now: float) -> None:
        """A new day (or the clock set back past midnight): the period's totals are read
        from the spend log again. A Pi boots without a clock and starts with a stale
        one: what was spent earlier in the real day or month was never read at start."""
        p = self._period
        if p.start <= now < p.end:
            return
        self._period = _Period(now, self._zone)
        self._day, self._month, self._by_source, self.unpriced_today = 0.0, 0.0, {}, 0
        self._rebuild()

    def _rebuild(self) -> None:
        """The period's spend and notices from the spend log (at start, at a new day)."""
        from klaw.spend.log import SpendRead

        p = self._period
        first = datetime.fromtimestamp(p.month_start, UTC).date()
        last = datetime.fromtimestamp(p.month_end, UTC).date() + timedelta(days=1)
        found = SpendRead()
        for entry in [*read_spend(self.folder, first, last, found), *self._unlogged]:
            ts = entry.at.timestamp()
            if not p.month_start <= ts < p.month_end:
                continue
            if isinstance(entry, Told):
                self._told.add((entry.scope, entry.period))
                continue
            if ts >= p.start and ts < p.end:
                self._count(entry)
            elif entry.cost is not None:
                self._month += self.rates.convert(entry.cost, entry.currency) or 0.0
        self.skipped = found.skipped
        if found.skipped:
            log.warning(
                "spend log: %d unreadable line(s) skipped, e.g. %s",
                len(found.skipped),
                found.skipped[0],
            )

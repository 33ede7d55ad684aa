"""Prices, the spend log and the budget meter (klaw.spend) on real files, with the
clock given: periods follow the owner's zone, spend survives a restart, unknown prices
stay unknown, and calls running at once overshoot a cap by at most one call each."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from klaw.config import EngineConfig
from klaw.spend import BudgetSpent, Spend, source_for_chat
from klaw.spend.log import MAX_LINE, Call, SpendLog, SpendRead, Told, read_spend
from klaw.spend.prices import FREE, PRICES_FILE, Price, PriceTable, shipped_prices

COST = 0.013  # one call of 10 + 3 tokens at 1000 USD per million tokens


def config(**budget: Any) -> EngineConfig:
    return EngineConfig.model_validate(
        {
            "providers": {
                "fake": {"endpoint": "https://api.example.com/v1"},
                "cny": {"endpoint": "https://api.example.cn/v1"},
                "glm": {"endpoint": "https://open.bigmodel.cn/api/paas/v4"},
                "ollama": {"endpoint": "http://localhost:11434/v1"},
            },
            "models": {
                "fake/m": {"price": {"input": 1000, "output": 1000, "currency": "USD"}},
                "cny/m": {"price": {"input": 7000, "output": 7000, "currency": "CNY"}},
                "fake/cached": {
                    "price": {"input": 1, "cachedInput": 0.1, "output": 2, "currency": "USD"}
                },
                "fake/nameless": {},
                "glm/glm-5": {},
                "ollama/qwen3:8b": {},
            },
            "routing": {"default": "fake/m", "fallback": []},
            "scheduler": {"timezone": "Pacific/Kiritimati"},  # UTC+14
            "budget": budget,
        }
    )


class Clock:
    def __init__(self, at: datetime) -> None:
        self.now = at.timestamp()

    def __call__(self) -> float:
        return self.now


KIRI = ZoneInfo("Pacific/Kiritimati")


def at(text: str) -> datetime:
    """A wall time of the owner (Kiritimati)."""
    return datetime.fromisoformat(text).replace(tzinfo=KIRI)


def call(spend: Spend, source: str = "chat:telegram_1", model: str = "fake/m") -> Call:
    ticket = spend.admit(source, model, 10, 3)
    return spend.settle(ticket, model, 10, 3)


def test_prices_come_from_the_config_then_the_shipped_list_and_local_models_are_free() -> None:
    table = PriceTable(config())
    assert table.get("fake/m") == Price(1000, 1000, 1000, "USD")
    assert table.get("glm/glm-5") == shipped_prices()[("open.bigmodel.cn", "glm-5")]
    assert table.get("ollama/qwen3:8b") is FREE
    assert table.get("fake/nameless") is None  # unknown, not zero
    assert table.unknown() == ["fake/nameless"]
    assert table.get("fake/cached") is not None
    # 1000 in (400 of them cached), 100 out: 600 × 1 + 400 × 0.1 + 100 × 2 per million
    assert table.get("fake/cached").cost(1000, 100, 400) == pytest.approx(840 / 1e6)  # type: ignore[union-attr]


def test_the_shipped_price_list_is_dated_and_every_entry_is_well_formed() -> None:
    data = json.loads(PRICES_FILE.read_text())
    assert date.fromisoformat(data["checked"])
    for host, entry in data["hosts"].items():
        assert entry["currency"] in {"CNY", "USD"}, host
        assert entry["source"], host
        for model, raw in entry["models"].items():
            assert set(raw) <= {"input", "output", "cachedInput"}, model
            assert raw["input"] > 0 and raw["output"] > 0, model
            assert raw.get("cachedInput", raw["input"]) <= raw["input"], model
    hosts = set(data["hosts"])
    for template in ("open.bigmodel.cn", "api.deepseek.com", "api.anthropic.com"):
        assert template in hosts  # the providers of engine.yaml's template


def test_source_names() -> None:
    assert source_for_chat("telegram_1") == "chat:telegram_1"
    assert source_for_chat("scheduler_heartbeat") == "heartbeat"
    assert source_for_chat("scheduler_news") == "job:news"
    assert source_for_chat("scheduler_look", "once") == "subagent:look"


def test_a_restart_reads_the_days_and_months_spend_and_notices_back(tmp_path: Path) -> None:
    clock = Clock(at("2026-03-10T12:00"))
    cfg = config(daily=0.03, monthly=1.0, perSource={"heartbeat": 0.01})
    spend = Spend(cfg, tmp_path, clock=clock)
    call(spend)
    call(spend, "heartbeat")
    with pytest.raises(BudgetSpent) as refused:
        call(spend, "heartbeat")
    assert refused.value.first and refused.value.scope == "source:heartbeat"
    spend.close()

    again = Spend(cfg, tmp_path, clock=clock)
    assert again.spent_today == pytest.approx(2 * COST)
    assert again.spent_month == pytest.approx(2 * COST)
    with pytest.raises(BudgetSpent) as still:
        call(again, "heartbeat")
    assert not still.value.first  # told once per period, across the restart
    call(again)  # chats go on: only heartbeat is capped
    with pytest.raises(BudgetSpent) as daily:
        call(again)  # 3 × 0.013 ≥ 0.03
    assert daily.value.scope == "daily" and daily.value.first


def test_days_and_months_are_the_owners(tmp_path: Path) -> None:
    clock = Clock(at("2026-03-31T23:30"))  # UTC: 2026-03-31 09:30
    cfg = config(daily=1.0, monthly=1.0)
    spend = Spend(cfg, tmp_path, clock=clock)
    call(spend)
    clock.now = at("2026-04-01T00:10").timestamp()  # a new day and month there (UTC: March 31)
    assert Spend(cfg, tmp_path, clock=clock).spent_today == 0
    assert Spend(cfg, tmp_path, clock=clock).spent_month == 0
    call(spend)  # the running meter rolls over at the owner's midnight too
    assert spend.spent_today == pytest.approx(COST) and spend.spent_month == pytest.approx(COST)
    clock.now = at("2026-04-02T08:00").timestamp()
    rebuilt = Spend(cfg, tmp_path, clock=clock)
    assert rebuilt.spent_today == 0 and rebuilt.spent_month == pytest.approx(COST)
    cap = {c.scope: c for c in rebuilt.caps()}
    assert cap["daily"].resets == at("2026-04-03T00:00")
    assert cap["monthly"].resets == at("2026-05-01T00:00")


def test_unknown_prices_stay_unknown_and_other_currencies_need_a_rate(tmp_path: Path) -> None:
    clock = Clock(at("2026-03-10T12:00"))
    spend = Spend(config(daily=1.0), tmp_path, clock=clock)
    unknown = call(spend, model="fake/nameless")
    assert unknown.cost is None and unknown.currency is None
    cny = call(spend, model="cny/m")
    assert cny.cost == pytest.approx(0.091) and cny.currency == "CNY"
    assert spend.spent_today == 0 and spend.unpriced_today == 2  # neither counted as free
    converted = Spend(config(daily=1.0, rates={"CNY": 0.14}), tmp_path, clock=clock)
    assert converted.spent_today == pytest.approx(0.091 * 0.14)
    assert converted.unpriced_today == 1  # the one without a price
    lines = [json.loads(x) for x in next(tmp_path.iterdir()).read_text().splitlines()]
    assert lines[0]["cost"] is None and lines[1]["cost"] == pytest.approx(0.091)


def test_the_most_specific_per_source_key_wins(tmp_path: Path) -> None:
    cfg = config(perSource={"job:*": 0.05, "job:news": 0.02, "*": 1.0})
    spend = Spend(cfg, tmp_path, clock=Clock(at("2026-03-10T12:00")))
    call(spend, "job:news")
    call(spend, "job:news")
    with pytest.raises(BudgetSpent) as news:
        call(spend, "job:news")
    assert news.value.scope == "source:job:news"
    for _ in range(4):
        call(spend, "job:weather")  # 4 × 0.013 = 0.052
    with pytest.raises(BudgetSpent) as weather:
        call(spend, "job:weather")
    assert weather.value.scope == "source:job:*"
    call(spend, "job:other")  # a cap per source, not one for all of job:*
    for _ in range(3):
        call(spend, "job:other")
    with pytest.raises(BudgetSpent) as other:
        call(spend, "job:other")
    assert other.value.first  # each job hears of its own cap (weather was told before)
    assert weather.value.first
    caps = {c.scope: c for c in spend.caps()}
    assert caps["job:*"].sources.keys() == {"job:weather", "job:other"}
    assert caps["job:*"].spent == pytest.approx(4 * COST)


def test_calls_running_at_once_see_each_others_reservations(tmp_path: Path) -> None:
    spend = Spend(config(daily=0.03), tmp_path, clock=Clock(at("2026-03-10T12:00")))
    call(spend)  # 0.013 spent
    first = spend.admit("chat:a", "fake/m", 10, 3)  # reserves 0.013: 0.026 < 0.03
    second = spend.admit("chat:b", "fake/m", 10, 3)  # 0.026 < 0.03: admitted
    with pytest.raises(BudgetSpent):
        spend.admit("chat:c", "fake/m", 10, 3)  # 0.039 ≥ 0.03: refused before the call
    spend.release(first)  # that call failed: its reservation goes
    third = spend.admit("chat:c", "fake/m", 10, 3)
    spend.settle(second, "fake/m", 10, 3)
    spend.settle(third, "fake/m", 10, 3)
    assert spend.spent_today == pytest.approx(3 * COST)  # over by at most the calls in flight
    with pytest.raises(BudgetSpent):
        spend.admit("chat:d", "fake/m", 10, 3)


def test_damaged_spend_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    log = SpendLog(tmp_path)
    now = datetime(2026, 3, 10, 12, tzinfo=UTC)
    log.append(Call(now, "chat:x", "fake/m", 10, 3, 0, COST, "USD"))
    log.append(Told(now, "daily", "2026-03-10"))
    log.close()
    path = tmp_path / "2026-03-10.jsonl"
    with path.open("ab") as fh:
        fh.write(b'{"ts": "2026-03-10T12:00:00Z", "source": "x", "model": "m", "in": -1}\n')
        fh.write(b"not json\n")
        fh.write(b'{"ts": "' + b"x" * (MAX_LINE * 3) + b'"}\n')  # one endless line
        fh.write(b'{"ts": "2026-03-10T13:00:00Z", "told": "monthly", "period": "2026-03"}\n')
        fh.write(b"[" * 60_000 + b"\n")  # nested too deep for json: RecursionError
        fh.write(b'{"ts": "2026-03-10T12:00:00Z", "source": "x", "model": "m"')  # torn
    found = SpendRead()
    entries = list(read_spend(tmp_path, date(2026, 3, 9), date(2026, 3, 11), found))
    assert [type(e) for e in entries] == [Call, Told, Told]
    assert len(found.skipped) == 5 and found.files == 1
    assert "2026-03-10.jsonl:3" in found.skipped[0]
    assert found.skipped[2].startswith("2026-03-10.jsonl:5: line over")


def test_an_unwritable_spend_log_still_counts_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    def full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    clock = Clock(at("2026-03-10T12:00"))
    spend = Spend(config(daily=1.0), tmp_path, clock=clock)
    monkeypatch.setattr(os, "write", full)
    call(spend)
    assert spend.spent_today == pytest.approx(COST)
    clock.now = at("2026-03-11T08:00").timestamp()  # a new day: the totals are reread
    assert spend.caps()[0].spent == 0 and spend.spent_month == pytest.approx(COST)


def test_a_chain_of_local_models_is_never_capped(tmp_path: Path) -> None:
    spend = Spend(config(daily=0.0), tmp_path, clock=Clock(at("2026-03-10T12:00")))
    assert spend.free(["ollama/qwen3:8b"])
    assert not spend.free(["ollama/qwen3:8b", "fake/m"])  # a paid fallback: checked
    assert not spend.free(["fake/nameless"])  # unknown is not free


def test_a_misspelt_source_is_an_error_naming_file_and_key(tmp_path: Path) -> None:
    from klaw.config import load_engine_config
    from klaw.errors import ConfigError

    path = tmp_path / "engine.yaml"
    path.write_text("budget:\n  daily: 1\n  perSource:\n    hearbeat: 0.1\n")
    with pytest.raises(ConfigError) as bad:
        load_engine_config(path)
    text = str(bad.value)
    assert str(path) in text and "budget.perSource" in text and "'hearbeat' names no source" in text


def test_usage_reported_below_zero_is_no_credit(tmp_path: Path) -> None:
    """A provider (or a proxy) answering `prompt_tokens: -1000000000` must not give the
    budget money back: the call counts as 0 tokens of that kind, and is logged so."""
    spend = Spend(config(daily=0.02), tmp_path, clock=Clock(at("2026-03-10T12:00")))
    call(spend)
    ticket = spend.admit("chat:a", "fake/m", 10, 3)
    made = spend.settle(ticket, "fake/m", -1_000_000_000, -5, -7)
    assert made.cost == 0 and (made.tokens_in, made.tokens_out, made.cached_in) == (0, 0, 0)
    assert spend.spent_today == pytest.approx(COST)
    call(spend)
    with pytest.raises(BudgetSpent):
        call(spend)  # 2 × 0.013 ≥ 0.02: the cap still holds
    found = SpendRead()
    list(read_spend(tmp_path, date(2026, 3, 9), date(2026, 3, 11), found))
    assert found.skipped == []  # what was logged reads back


def test_absurd_usage_is_counted_at_the_per_call_bound_without_overflow(tmp_path: Path) -> None:
    from klaw.spend.budget import MAX_CALL_TOKENS

    spend = Spend(config(daily=0.02), tmp_path, clock=Clock(at("2026-03-10T12:00")))
    ticket = spend.admit("chat:a", "fake/m", 10, 3)
    made = spend.settle(ticket, "fake/m", 10**400, 3)  # int * float: OverflowError before
    assert made.tokens_in == MAX_CALL_TOKENS and made.cost == pytest.approx(1e6, rel=1e-6)
    with pytest.raises(BudgetSpent):
        call(spend)  # counted, not forgotten: the cap is reached
    found = SpendRead()
    assert len(list(read_spend(tmp_path, date(2026, 3, 9), date(2026, 3, 11), found))) == 2
    assert found.skipped == []


def test_a_spend_line_costing_nan_or_infinity_is_skipped_and_the_cap_holds(tmp_path: Path) -> None:
    """NaN compares false with everything: one such line counted would end every cap."""
    path = tmp_path / "2026-03-10.jsonl"
    lines = [
        '{"ts":"2026-03-09T22:00:00Z","source":"x","model":"fake/m","cost":NaN,"currency":"USD"}',
        '{"ts":"2026-03-09T22:00:00Z","source":"x","model":"fake/m","cost":Infinity,'
        '"currency":"USD"}',
        '{"ts":"2026-03-09T22:00:00Z","source":"x","model":"fake/m","cost":1e999,"currency":"USD"}',
    ]
    path.write_text("\n".join(lines) + "\n")
    spend = Spend(config(daily=0.02), tmp_path, clock=Clock(at("2026-03-10T12:00")))
    assert len(spend.skipped) == 3 and all("finite" in s for s in spend.skipped)
    assert spend.spent_today == 0 and spend.spent_month == 0
    call(spend)
    call(spend)
    with pytest.raises(BudgetSpent):
        call(spend)


def test_an_infinite_price_is_an_error_naming_the_key(tmp_path: Path) -> None:
    """`.inf` × 0 cached tokens is NaN: such a price would have switched the budget off."""
    from klaw.config import load_engine_config
    from klaw.errors import ConfigError

    path = tmp_path / "engine.yaml"
    cases = (("input", ".inf"), ("output", "1e999"), ("cachedInput", ".nan"), ("input", "1e308"))
    for key, value in cases:
        price = {"input": "1", "output": "1", "cachedInput": "1"} | {key: value}
        fields = ", ".join(f"{k}: {v}" for k, v in price.items())
        path.write_text(f"models:\n  fake/m:\n    price: {{{fields}, currency: USD}}\n")
        with pytest.raises(ConfigError) as bad:
            load_engine_config(path)
        text = str(bad.value)
        assert str(path) in text and f"price.{key}" in text, text
    path.write_text("budget:\n  daily: .inf\n  rates: {CNY: .inf}\n")
    with pytest.raises(ConfigError) as bad:
        load_engine_config(path)
    assert "budget.daily" in str(bad.value) and "budget.rates" in str(bad.value)


def test_an_openai_style_usage_below_zero_reads_as_zero() -> None:
    from klaw.llm.openai_compat import _usage
    from klaw.llm.types import Usage

    assert _usage({"prompt_tokens": -(10**9), "completion_tokens": 5}) == Usage(0, 5, 0)


def test_a_clock_stale_at_boot_then_set_right_forgets_no_spend(tmp_path: Path) -> None:
    """A Pi has no clock: it boots at the time it last saved (yesterday evening) and is
    set right by NTP later. Today's spend before the restart counts once it is."""
    cfg = config(daily=0.03, monthly=0.05)
    clock = Clock(at("2026-03-10T12:00"))
    before = Spend(cfg, tmp_path, clock=clock)
    call(before)
    call(before)  # 0.026 today
    before.close()
    clock.now = at("2026-03-09T21:00").timestamp()  # the boot: yesterday's time
    booted = Spend(cfg, tmp_path, clock=clock)
    assert booted.spent_today == 0
    clock.now = at("2026-03-10T12:05").timestamp()  # NTP sets it right
    call(booted)  # 0.026 < 0.03: admitted, now 0.039
    assert booted.spent_today == pytest.approx(3 * COST)
    with pytest.raises(BudgetSpent) as refused:
        call(booted)
    assert refused.value.scope == "daily"
    clock.now = at("2026-03-09T23:59").timestamp()  # set back across midnight
    call(booted)  # that day had spent nothing
    assert booted.spent_today == pytest.approx(COST)
    assert booted.spent_month == pytest.approx(4 * COST)  # 0.052: the month's cap is reached
    with pytest.raises(BudgetSpent) as monthly:
        call(booted)
    assert monthly.value.scope == "monthly"

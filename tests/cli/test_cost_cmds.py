"""`klaw usage --cost` and `klaw budget` through the real CLI, on spend-log files
written by the real writer in a temp Klaw home (the owner's days: Asia/Shanghai)."""

from __future__ import annotations

import json
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from klaw.cli import cost_cmds, usage_cmds
from klaw.cli.app import app
from klaw.cli.testing import CliRunner, Result
from klaw.paths import KlawPaths
from klaw.spend.log import Call, SpendLog

TODAY = date(2026, 2, 25)
ZONE = ZoneInfo("Asia/Shanghai")  # UTC+8: the owner's morning is the UTC day before


@pytest.fixture
def home(klaw_home: KlawPaths, monkeypatch: pytest.MonkeyPatch) -> KlawPaths:
    klaw_home.engine_config.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.engine_config.write_text("scheduler:\n  timezone: Asia/Shanghai\n")
    monkeypatch.setattr(usage_cmds, "_today", lambda zone: TODAY)
    noon = datetime.combine(TODAY, time(14), ZONE).timestamp()
    monkeypatch.setattr(cost_cmds, "_clock", lambda: noon)
    return klaw_home


def spent(
    paths: KlawPaths, days_ago: int, hour: int, source: str, model: str, cost: float | None,
    currency: str | None = "USD",
) -> None:  # fmt: skip
    at = datetime.combine(TODAY - timedelta(days=days_ago), time(hour), ZONE)
    log = SpendLog(paths.spend)
    log.append(Call(at, source, model, 1000, 100, 0, cost, currency if cost is not None else None))
    log.close()


def run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def run_json(*args: str) -> dict[str, Any]:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def sample(paths: KlawPaths) -> None:
    spent(paths, 0, 7, "chat:telegram_1", "deepseek/deepseek-chat", 0.02)  # UTC: the day before
    spent(paths, 0, 12, "chat:telegram_1", "glm/glm-5", 0.5, "CNY")
    spent(paths, 1, 23, "heartbeat", "glm/glm-4-plus", 0.01, "CNY")
    spent(paths, 2, 9, "job:news", "fake/nameless", None)  # no price: unknown
    spent(paths, 9, 9, "chat:telegram_1", "glm/glm-5", 5.0, "CNY")  # outside 7 days


def test_cost_by_source_model_and_day_per_currency(home: KlawPaths) -> None:
    sample(home)
    by_source = run_json("usage", "--cost", "--by", "source")
    assert by_source["groups"]["chat:telegram_1"]["cost"] == {"CNY": 0.5, "USD": 0.02}
    assert by_source["groups"]["job:news"] == {
        "calls": 1, "tokens_in": 1000, "tokens_out": 100, "cost": {}, "unknown_cost_calls": 1,
    }  # fmt: skip
    assert by_source["totals"]["calls"] == 4 and by_source["totals"]["unknown_cost_calls"] == 1
    by_day = run_json("usage", "--by", "day", "--days", "3")
    assert set(by_day["groups"]) == {"2026-02-25", "2026-02-24", "2026-02-23"}
    assert by_day["groups"]["2026-02-25"]["calls"] == 2  # 07:00 in Shanghai is today
    assert run_json("usage", "--cost", "--by", "model")["groups"]["glm/glm-5"]["calls"] == 1


def test_the_text_report_says_unknown_and_draws_a_chart_per_currency(home: KlawPaths) -> None:
    sample(home)
    result = run("usage", "--cost")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:8] if line}
    assert rows["Source"] == ["Calls", "Tokens", "in", "Tokens", "out", "CNY", "USD", "Unknown"]
    assert rows["chat:telegram_1"] == ["2", "2,000", "200", "0.5000", "0.0200"]
    assert rows["job:news"] == ["1", "1,000", "100", "1"]  # unknown: no cost column filled
    assert rows["total"] == ["4", "4,000", "400", "0.5100", "0.0200", "1"]
    assert "Unknown: 1 call(s) whose model has no price" in out
    assert "Cost per day (CNY)" in out and "Cost per day (USD)" in out
    assert all(len(line) <= 80 for line in out.splitlines())
    chart = out.split("Cost per day (CNY)")[1].splitlines()[1:8]
    assert chart[-1].startswith("2026-02-25") and chart[-1].endswith("0.5000")


def test_rates_convert_into_the_budgets_currency(home: KlawPaths) -> None:
    sample(home)
    home.engine_config.write_text(
        "scheduler:\n  timezone: Asia/Shanghai\nbudget:\n  currency: USD\n  rates: {CNY: 0.14}\n"
    )
    data = run_json("usage", "--cost")
    assert data["converted_to"] == "USD"
    assert data["totals"]["cost"] == {"USD": pytest.approx(0.02 + 0.51 * 0.14)}


def test_budget_shows_each_cap_and_what_is_left(home: KlawPaths) -> None:
    spent(home, 0, 12, "heartbeat", "fake/m", 0.04)
    spent(home, 0, 13, "job:news", "fake/m", 0.3)
    home.engine_config.write_text(
        "scheduler:\n  timezone: Asia/Shanghai\n"
        "budget:\n  daily: 2\n  monthly: 30\n  perSource: {heartbeat: 0.1, 'job:*': 0.25}\n"
    )
    result = run("budget")
    assert result.exit_code == 0, result.stderr
    assert "job:* (job:news)" in result.stdout and "spent" in result.stdout
    data = run_json("budget")
    assert data["spent_today"] == pytest.approx(0.34)
    caps = {c["scope"]: c for c in data["caps"]}
    assert caps["daily"]["left"] == pytest.approx(1.66)
    assert caps["heartbeat"]["left"] == pytest.approx(0.06)
    assert caps["job:*"] == {
        "scope": "job:*", "cap": 0.25, "spent": 0.3, "left": 0, "resets": "2026-02-26T00:00+08:00",
        "sources": {"job:news": 0.3},
    }  # fmt: skip


def test_no_calls_and_no_budget(home: KlawPaths) -> None:
    assert run("usage", "--cost").stdout.startswith("no model calls recorded")
    result = run("budget")
    assert result.exit_code == 0 and "No budget set" in result.stdout
    assert run("usage", "--cost", "--chat", "x").exit_code == 2

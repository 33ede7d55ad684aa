"""Spend: model prices, the cost of every call, and budgets that hold (docs/costs.md).

`prices` resolves each configured model's price (engine.yaml, else the shipped list,
else unknown); `log` is the spend log, one line per model call with its source;
`budget.Spend` is what the router asks before and after each call. A layer of its
own between the LLM layer and config: the router and the CLI use it, it uses neither.
"""

from __future__ import annotations

from klaw.spend.budget import BudgetSpent, Spend, source_for_chat

__all__ = ["BudgetSpent", "Spend", "source_for_chat"]

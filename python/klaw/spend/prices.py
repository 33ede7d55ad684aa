"""Model prices: engine.yaml's `models.<id>.price`, else the shipped list
(`klaw/defaults/prices.json`, by API host and model id), else unknown.

A model served from this machine (a loopback endpoint: Ollama, the offline model) costs
0. An unknown price is `None` everywhere: its calls are counted and shown as of unknown
cost, never as free. Costs are in the price's own currency; `Rates` converts them when
the owner configured `budget.rates`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Mapping

    from klaw.config import EngineConfig

__all__ = ["FREE", "PRICES_FILE", "Price", "PriceTable", "Rates", "shipped_prices"]

PRICES_FILE: Final = Path(__file__).resolve().parent.parent / "defaults" / "prices.json"
MILLION: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class Price:
    """Per million tokens, in `currency` (None: free, any currency)."""

    input: float
    output: float
    cached_input: float
    currency: str | None

    @property
    def free(self) -> bool:
        return self.input == self.output == self.cached_input == 0

    def cost(self, tokens_in: int, tokens_out: int, cached_in: int = 0) -> float:
        cached = min(max(cached_in, 0), tokens_in)
        return (
            (tokens_in - cached) * self.input
            + cached * self.cached_input
            + tokens_out * self.output
        ) / MILLION


FREE: Final = Price(0.0, 0.0, 0.0, None)


def _price(raw: Mapping[str, Any], currency: str) -> Price:
    cached = raw.get("cachedInput")
    return Price(
        float(raw["input"]),
        float(raw["output"]),
        float(raw["input"] if cached is None else cached),
        currency,
    )


def shipped_prices(path: Path = PRICES_FILE) -> dict[tuple[str, str], Price]:
    """(API host, model id) → price, from the list Klaw ships."""
    data = json.loads(path.read_text(encoding="utf-8"))
    table: dict[tuple[str, str], Price] = {}
    for host, entry in data["hosts"].items():
        for model_id, raw in entry["models"].items():
            table[(host, model_id)] = _price(raw, entry["currency"])
    return table


class PriceTable:
    """Every configured model's price, resolved once (the router asks per call)."""

    def __init__(self, config: EngineConfig, shipped: dict[tuple[str, str], Price] | None = None):
        from klaw.config.engine import is_loopback

        shipped = shipped_prices() if shipped is None else shipped
        self._prices: dict[str, Price | None] = {}
        for ref, model in config.models.items():
            provider_name, _, model_id = ref.partition("/")
            provider = config.providers.get(provider_name)
            price: Price | None = None
            if model.price is not None:
                p = model.price
                cached = p.input if p.cached_input is None else p.cached_input
                price = Price(p.input, p.output, cached, p.currency)
            elif provider is not None and is_loopback(provider.endpoint):
                price = FREE
            elif provider is not None:
                host = (urlsplit(provider.endpoint).hostname or "").lower()
                price = shipped.get((host, model_id))
            self._prices[ref] = price

    def get(self, ref: str) -> Price | None:
        """The price of model `ref` ("glm/glm-5"); None when unknown."""
        return self._prices.get(ref)

    def unknown(self) -> list[str]:
        return sorted(ref for ref, price in self._prices.items() if price is None)


class Rates:
    """Converts a cost into the budget's currency (`budget.rates`); None when it cannot."""

    def __init__(self, currency: str, rates: Mapping[str, float]) -> None:
        self.currency = currency
        self._rates = {currency: 1.0, **rates}

    def convert(self, amount: float, currency: str | None) -> float | None:
        if amount == 0:
            return 0.0  # free is free in any currency
        rate = self._rates.get(currency) if currency is not None else None
        return None if rate is None else amount * rate

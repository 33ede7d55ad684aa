"""Model references → clients, with retries, backoff and the fallback chain (design §8.2–8.3).

A model reference is `provider/model-id` (the id may itself contain `/`, as on
OpenRouter). It must be listed under `models:` and its provider under `providers:`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from klaw.config import EngineConfig, ModelConfig, ProviderConfig
from klaw.errors import KlawError
from klaw.llm.anthropic import AnthropicClient
from klaw.llm.errors import AllProvidersFailed, LlmConfigError, ProviderError
from klaw.llm.gemini import GeminiClient
from klaw.llm.openai_compat import OpenAICompatClient
from klaw.llm.types import (
    DeltaCallback,
    LlmClient,
    LlmRequest,
    LlmResponse,
    images_for_model,
)
from klaw.retry import Backoff, retry
from klaw.spend.budget import BudgetSpent, Ticket

if TYPE_CHECKING:
    from klaw.spend import Spend

__all__ = ["ModelRef", "Router", "Sleep"]

log = logging.getLogger("klaw.llm")

#: Background sources whose answers are written into memory (summaries with their
#: retained facts, the reflect job's bank): never answered by an on-demand offline model.
MEMORY_WRITERS: Final = frozenset({"summary", "reflect"})

Sleep = Callable[[float], Awaitable[None]]
# A provider asking us to wait longer than this is treated as down: fall back instead.
MAX_RETRY_AFTER_S = 30.0


@dataclass(frozen=True)
class ModelRef:
    """A resolved model: where it lives and its per-model parameters."""

    ref: str  # "glm/glm-5"
    provider: str  # "glm"
    model_id: str  # "glm-5"
    config: ModelConfig


class Router:
    """Sends a request along the chain: the model asked for, then `routing.fallback`.

    Each model is tried up to `llm.maxRetries + 1` times when the failure is retryable
    (an HTTP status in `llm.retryOn`, a timeout, an unreachable endpoint), waiting
    `initialBackoffMs × backoffMultiplier^n` or the provider's `Retry-After`. Any other
    failure moves on to the next model at once. Images reach only models with
    `vision: true`; the others read a short note naming each image.
    """

    def __init__(
        self,
        config: EngineConfig,
        *,
        sleep: Sleep = asyncio.sleep,
        max_retry_after_s: float = MAX_RETRY_AFTER_S,
        spend: Spend | None = None,
        on_demand: Mapping[str, Callable[[], Awaitable[None]]] | None = None,
    ) -> None:
        self._config = config
        #: Per provider, what starts it before its first call (the offline model's server).
        self._on_demand = dict(on_demand or {})
        #: Prices, budget and spend log (docs/costs.md); None: calls are not metered.
        self.spend = spend
        self._sleep = sleep
        self._max_retry_after_s = max_retry_after_s
        self._clients: dict[str, LlmClient] = {}

    async def __aenter__(self) -> Router:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
        if self.spend is not None:
            self.spend.close()

    # ------------------------------------------------------------------ resolution

    def resolve(self, ref: str) -> ModelRef:
        """Check `ref` against engine.yaml; raise LlmConfigError naming what is wrong."""
        provider, sep, model_id = ref.partition("/")
        if not sep or not provider or not model_id:
            raise LlmConfigError(f"model reference {ref!r} must look like provider/model-id")
        if provider not in self._config.providers:
            known = ", ".join(sorted(self._config.providers)) or "none"
            raise LlmConfigError(
                f"model {ref!r}: unknown provider {provider!r} (engine.yaml providers: {known})"
            )
        model = self._config.models.get(ref)
        if model is None:
            known = ", ".join(sorted(self._config.models)) or "none"
            raise LlmConfigError(
                f"unknown model {ref!r}: add it under engine.yaml models (known: {known})"
            )
        return ModelRef(ref, provider, model_id, model)

    def chain(self, model: str | None = None, task: str | None = None) -> list[ModelRef]:
        """The models to try, in order, without repeats."""
        routing = self._config.routing
        if model is None and task is not None:
            if task not in type(routing.tasks).model_fields:
                raise LlmConfigError(f"unknown routing task {task!r}")
            model = str(getattr(routing.tasks, task))
        first = model or routing.default
        # The default comes last: a chat on a model of its own (or a task's model)
        # still reaches what the owner configured first when the rest fails.
        refs = list(dict.fromkeys([first, *routing.fallback, routing.default]))
        chain = [self.resolve(first)]  # the model asked for must exist
        for ref in refs[1:]:
            try:
                chain.append(self.resolve(ref))
            except LlmConfigError as exc:  # a bad fallback entry must not sink the rest
                log.warning("routing: skipping fallback %s", exc)
        return chain

    def check(self) -> list[str]:
        """Problems with the routing section (for startup and `klaw doctor`)."""
        routing = self._config.routing
        refs = [routing.default, *routing.fallback, *routing.tasks.model_dump().values()]
        problems: list[str] = []
        for ref in dict.fromkeys(refs):
            try:
                target = self.resolve(ref)
                self._client(target.provider)
            except LlmConfigError as exc:
                problems.append(str(exc))
        return problems + self._budget_problems(refs)

    def _budget_problems(self, refs: list[str]) -> list[str]:
        """Models a budget cannot count (no price, or one in a currency without a rate)."""
        budget = self._config.budget
        if self.spend is None or not budget.active:
            return []
        problems = []
        if budget.offline_model is not None and self.spend.offline_for("chat:") is None:
            problems.append(
                f"budget.offlineModel {budget.offline_model!r} must be a configured model "
                "served on this machine (price 0)"
            )
        for ref in dict.fromkeys(refs):
            price = self.spend.prices.get(ref)
            if price is None:
                problems.append(
                    f"model {ref!r} has no price: its calls are not counted against the "
                    f"budget (set models.{ref}.price; docs/costs.md)"
                )
            elif not price.free and self.spend.rates.convert(1.0, price.currency) is None:
                problems.append(
                    f"model {ref!r} is priced in {price.currency}: add budget.rates."
                    f"{price.currency} to count it against the {budget.currency} budget"
                )
        return problems

    def _client(self, name: str) -> LlmClient:
        client = self._clients.get(name)
        if client is None:
            llm = self._config.llm
            client = build_client(
                name,
                self._config.providers[name],
                llm.request_timeout_ms / 1000,
                llm.stream_idle_timeout_ms / 1000,
            )
            self._clients[name] = client
        return client

    # ------------------------------------------------------------------ calls

    async def complete(
        self,
        request: LlmRequest,
        model: str | None = None,
        task: str | None = None,
        *,
        on_delta: DeltaCallback | None = None,
        on_reset: Callable[[], Awaitable[None]] | None = None,
        source: str = "other",
    ) -> LlmResponse:
        """Answer `request` with the first model of the chain that works.

        `source` names who pays (`klaw.spend.source_for_chat`, "summary"): with a
        `spend` meter the call is checked against the budget first (`BudgetSpent`, or
        `budget.offlineModel` for a chat, its response carrying the notice) and its
        cost is recorded after.

        Raises LlmConfigError for a bad model reference and AllProvidersFailed when the
        whole chain failed. Once streamed text has reached `on_delta`, a failure is final
        (no retry, no fallback): the user has already seen part of an answer. Unless
        `on_reset` is given: then the next attempt goes ahead and `on_reset` is awaited
        before its first delta, so the caller replaces the half answer instead of
        showing a second one after it.
        """
        delivered = False
        dirty = False  # text of a failed attempt is on show: reset before the next

        async def relay(text: str) -> None:
            nonlocal delivered, dirty
            if dirty and on_reset is not None:
                dirty = False
                await on_reset()
            delivered = True
            if on_delta is not None:
                await on_delta(text)

        def restart() -> None:
            # A new attempt after one whose text was shown: reset before its first delta.
            nonlocal delivered, dirty
            if delivered:
                dirty, delivered = True, False

        def failed_after_text() -> bool:
            if not delivered:
                return False
            if on_reset is None:
                return True
            restart()
            return False

        chain = self.chain(model, task)
        if source in MEMORY_WRITERS:
            # What these write stays in memory: better written later by the configured
            # model than now by the tiny offline one (unless it is the one asked for).
            chain = chain[:1] + [t for t in chain[1:] if t.provider not in self._on_demand]
        ticket, note = self._admit(source, chain, request)
        if note is not None:
            chain = [self.resolve(str(self._config.budget.offline_model))]
        try:
            again = restart if on_reset is not None else None
            return await self._along(chain, request, ticket, note, relay, again, failed_after_text)
        finally:
            if ticket is not None and self.spend is not None:
                self.spend.release(ticket)  # no answer: the reservation goes

    def _admit(
        self, source: str, chain: list[ModelRef], request: LlmRequest
    ) -> tuple[Ticket | None, str | None]:
        """(reservation, notice): the notice when an over-budget chat goes offline."""
        if self.spend is None:
            return None, None
        if not self._config.budget.active or self.spend.free([t.ref for t in chain]):
            return Ticket(source, 0.0), None  # no cap applies: nothing to reserve
        first = chain[0]
        chars = sum(len(m.content or "") for m in request.messages)
        out = min(request.max_tokens or first.config.max_tokens or 1024, 1024)
        try:
            # A rough estimate (3 characters a token, 150 a tool schema) is enough:
            # it only keeps calls running at once from all passing the same check.
            estimate = chars // 3 + 150 * len(request.tools)
            return self.spend.admit(source, first.ref, estimate, out), None
        except BudgetSpent as exc:
            if self.spend.offline_for(source) is None:
                raise
            return Ticket(source, 0.0), exc.notice

    async def _along(
        self,
        chain: list[ModelRef],
        request: LlmRequest,
        ticket: Ticket | None,
        note: str | None,
        relay: DeltaCallback,
        restart: Callable[[], None] | None,
        failed_after_text: Callable[[], bool],
    ) -> LlmResponse:
        """Tries each model of `chain` in turn; the answer's cost settles `ticket`."""
        failures: dict[str, ProviderError] = {}
        for target in chain:
            if target.provider in self._on_demand:
                try:
                    await self._on_demand[target.provider]()
                except KlawError as exc:  # not installed, or its server would not start
                    failures[target.ref] = ProviderError(str(exc), provider=target.provider)
                    continue
            client = self._client(target.provider)
            attempt_request = dataclasses.replace(
                request,
                # A model without `vision: true` reads a note naming each image instead.
                messages=images_for_model(request.messages, vision=target.config.vision),
                model=target.model_id,
                max_tokens=request.max_tokens or target.config.max_tokens,
                temperature=(
                    request.temperature
                    if request.temperature is not None
                    else target.config.temperature
                ),
            )
            try:
                response = await self._with_retries(
                    client,
                    attempt_request,
                    target.ref,
                    relay,
                    restart=restart,
                )
                spent = None
                if ticket is not None and self.spend is not None:
                    usage = response.usage
                    spent = self.spend.settle(
                        ticket, target.ref, usage.tokens_in, usage.tokens_out, usage.cached_in
                    )
                # Callers log and bill by the reference they configured ("glm/glm-5").
                return dataclasses.replace(
                    response, model=target.ref, budget_note=note, spent=spent
                )
            except ProviderError as exc:
                failures[target.ref] = exc
                if failed_after_text():
                    break
                log.warning("llm %s failed, trying the next model: %s", target.ref, exc)
        raise AllProvidersFailed(failures)

    async def _with_retries(
        self,
        client: LlmClient,
        request: LlmRequest,
        ref: str,
        relay: DeltaCallback,
        *,
        restart: Callable[[], None] | None = None,
    ) -> LlmResponse:
        llm = self._config.llm
        # Text of the current attempt reached the user: no retry, unless the caller
        # can replace it (`restart`: the router resets before the next attempt's text).
        streamed = False

        async def tracked(text: str) -> None:
            nonlocal streamed
            streamed = True
            await relay(text)

        async def attempt() -> LlmResponse:
            nonlocal streamed
            if streamed and restart is not None:
                restart()
            streamed = False
            return await client.complete(request, tracked)

        def retryable(exc: BaseException) -> bool:
            return (
                isinstance(exc, ProviderError)
                and (restart is not None or not streamed)
                and self._retryable(exc)
            )

        return await retry(
            attempt,
            attempts=llm.max_retries + 1,
            backoff=Backoff(llm.initial_backoff_ms / 1000, llm.backoff_multiplier, math.inf),
            retryable=retryable,
            # A Retry-After over the cap is raised at once: another model will do.
            wait_for=lambda exc: exc.retry_after if isinstance(exc, ProviderError) else None,
            max_wait=self._max_retry_after_s,
            sleep=self._sleep,
            log=log,
            what=f"llm {ref}",
        )

    def _retryable(self, exc: ProviderError) -> bool:
        if exc.status is None:
            return exc.transient
        return exc.status in self._config.llm.retry_on


def build_client(
    name: str, provider: ProviderConfig, timeout_s: float, stream_idle_s: float | None = None
) -> LlmClient:
    """The client speaking `provider.type`; raise LlmConfigError for a type not built yet."""
    kinds: dict[str, type[OpenAICompatClient | AnthropicClient | GeminiClient]] = {
        "openai-compatible": OpenAICompatClient,
        "anthropic": AnthropicClient,
        "gemini": GeminiClient,
    }
    kind = kinds.get(provider.type)
    if kind is None:
        raise LlmConfigError(
            f"provider {name!r}: type {provider.type!r} has no client "
            "(use openai-compatible, anthropic or gemini)"
        )
    return kind(
        name,
        provider.endpoint,
        provider.api_key,
        timeout_s=timeout_s,
        stream_idle_s=stream_idle_s,
    )

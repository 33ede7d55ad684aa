"""Retries with exponential backoff: the one copy of the loop.

`Backoff` is the delay schedule (first delay, growth factor, cap); `retry` runs an
async call until it succeeds, a failure is not retryable, or the attempts run out. A
failure may carry its own wait (a 429's ``Retry-After``): `wait_for` returns it, and a
wait longer than `max_wait` is not waited out but raised at once (the caller decides
what a long rate limit means). The sleep function is injectable so callers can be
driven without real time.

Why not tenacity: measured here, importing it costs 6-7 ms and ~1 MB RSS beyond asyncio
and logging (docs/decisions.md), and its Retry-After handling would still need a
custom wait and stop; these ~60 lines are the whole of what the callers use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Backoff", "retry"]

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays `first`, `first × factor`, ... capped at `cap` seconds."""

    first: float = 1.0
    factor: float = 2.0
    cap: float = 30.0

    def delay(self, failures: int) -> float:
        """The wait after the `failures`-th consecutive failure (1-based)."""
        if failures <= 1:
            return min(self.first, self.cap)
        # Bounded exponent: no float overflow after thousands of failures.
        return min(self.first * self.factor ** min(failures - 1, 64), self.cap)

    def delays(self) -> Iterator[float]:
        """An endless schedule of waits."""
        n = 0
        while True:
            n += 1
            yield self.delay(n)


async def retry(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int | None,
    backoff: Backoff,
    retryable: Callable[[BaseException], bool],
    wait_for: Callable[[BaseException], float | None] = lambda exc: None,
    max_wait: float | None = None,
    sleep: Sleep = asyncio.sleep,
    log: logging.Logger | None = None,
    what: str = "call",
) -> T:
    """Await `call()` until it returns; `attempts=None` retries forever.

    A non-retryable exception, the last attempt's exception, or one whose own wait
    exceeds `max_wait` propagates unchanged.
    """
    failures = 0
    while True:
        try:
            return await call()
        except Exception as exc:
            failures += 1
            if not retryable(exc) or (attempts is not None and failures >= attempts):
                raise
            wait = wait_for(exc)
            if wait is None:
                wait = backoff.delay(failures)
            elif max_wait is not None and wait > max_wait:
                raise
            if log is not None:
                total = "∞" if attempts is None else str(attempts)
                log.warning(
                    "%s failed (%s); retry %d/%s in %.1f s", what, exc, failures, total, wait
                )
            await sleep(wait)

"""klaw.retry: the one backoff loop (waits recorded by an injected sleep, no real time)."""

from __future__ import annotations

import pytest

from klaw.retry import Backoff, retry


class Flaky(Exception):
    def __init__(self, wait: float | None = None) -> None:
        super().__init__("flaky")
        self.wait = wait


def make(fails: list[BaseException]):  # type: ignore[no-untyped-def]
    calls = 0

    async def call() -> str:
        nonlocal calls
        calls += 1
        if fails:
            raise fails.pop(0)
        return "ok"

    return call, lambda: calls


def test_backoff_schedule_is_capped() -> None:
    b = Backoff(first=1, factor=2, cap=5)
    assert [b.delay(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]
    assert b.delay(10_000) == 5  # no overflow


async def test_retries_then_succeeds_with_backoff_waits() -> None:
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    call, calls = make([Flaky(), Flaky()])
    out = await retry(
        call, attempts=5, backoff=Backoff(0.5, 2, 10), retryable=lambda e: True, sleep=sleep
    )
    assert out == "ok" and calls() == 3 and waits == [0.5, 1.0]


async def test_gives_up_after_attempts_and_raises_the_last_error() -> None:
    async def sleep(s: float) -> None:
        pass

    call, calls = make([Flaky(), Flaky(), Flaky()])
    with pytest.raises(Flaky):
        await retry(call, attempts=2, backoff=Backoff(), retryable=lambda e: True, sleep=sleep)
    assert calls() == 2


async def test_non_retryable_raises_at_once() -> None:
    call, calls = make([ValueError("bad")])
    with pytest.raises(ValueError):
        await retry(call, attempts=5, backoff=Backoff(), retryable=lambda e: isinstance(e, Flaky))
    assert calls() == 1


async def test_own_wait_is_used_and_a_too_long_one_raises() -> None:
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    def wait_for(e: BaseException) -> float | None:
        return e.wait if isinstance(e, Flaky) else None

    call, _ = make([Flaky(3.0)])
    await retry(
        call,
        attempts=None,
        backoff=Backoff(),
        retryable=lambda e: True,
        wait_for=wait_for,
        max_wait=10,
        sleep=sleep,
    )
    assert waits == [3.0]
    call, calls = make([Flaky(120.0)])
    with pytest.raises(Flaky):
        await retry(
            call,
            attempts=None,
            backoff=Backoff(),
            retryable=lambda e: True,
            wait_for=wait_for,
            max_wait=60,
            sleep=sleep,
        )
    assert calls() == 1

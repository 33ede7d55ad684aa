"""Smoke mode (`make bench-smoke`, run by `make test`): every benchmark once, small.

`KLAW_BENCH_SMOKE=1` shrinks corpora and skips the speed and memory bars (a bar on a
2,000-row corpus, timed once, would mean nothing); pytest-benchmark's
`--benchmark-disable` runs each benchmarked call once. What is left is whether the bench
still works against today's code, so a broken bench fails CI instead of the next
release's `make bench`.
"""

from __future__ import annotations

import os

SMOKE = os.environ.get("KLAW_BENCH_SMOKE") == "1"


def scaled(full: int, smoke: int) -> int:
    """`full` in a real run, `smoke` in smoke mode."""
    return smoke if SMOKE else full

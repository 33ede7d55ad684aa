"""Peak RSS (bar: ≤ 250 MB) with the model loaded and 100k chunks indexed, after
embedding batches of 400-token chunks; the Python stack beside it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from smoke import SMOKE

HERE = Path(__file__).parent


def peak_mb(mode: str, db: str) -> float:
    out = subprocess.run(
        [sys.executable, str(HERE / "rss_probe.py"), mode, db],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return int(out.stdout.strip().splitlines()[-1]) / 1024


@pytest.mark.benchmark(group="rss-peak")
def test_rss_klaw(benchmark: Any, klaw_store: Any) -> None:
    mb = benchmark.pedantic(lambda: peak_mb("klaw", str(klaw_store.path)), rounds=1)
    benchmark.extra_info["peak_rss_mb"] = mb
    if not SMOKE:
        assert mb <= 250


@pytest.mark.benchmark(group="rss-peak")
def test_rss_python_stack(benchmark: Any, klaw_store: Any) -> None:
    mb = benchmark.pedantic(lambda: peak_mb("python", str(klaw_store.path)), rounds=1)
    benchmark.extra_info["peak_rss_mb"] = mb

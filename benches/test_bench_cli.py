"""CLI start-up wall time (bar: ≤ 150 ms) beside a bare interpreter start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

KLAW = str(Path(sys.executable).with_name("klaw"))


def run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=60)


@pytest.mark.benchmark(group="cli-start")
def test_cli_help(benchmark: Any) -> None:
    benchmark.pedantic(run, args=(KLAW, "--help"), rounds=10, warmup_rounds=1)


@pytest.mark.benchmark(group="cli-start")
def test_cli_memory_show(benchmark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLAW_DATA_DIR", str(tmp_path))
    benchmark.pedantic(run, args=(KLAW, "memory", "show"), rounds=10, warmup_rounds=1)


@pytest.mark.benchmark(group="cli-start")
def test_python_bare_start(benchmark: Any) -> None:
    benchmark.pedantic(run, args=(sys.executable, "-c", "pass"), rounds=10, warmup_rounds=1)

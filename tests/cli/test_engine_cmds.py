"""`klaw engine`, `klaw status`, `klaw sessions`, and `klaw memory search` delegated to a
running engine, as separate processes over the real socket."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from klaw.paths import KlawPaths


def klaw(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "klaw.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def engine(klaw_home: KlawPaths) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "klaw.cli.app", "engine"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=os.environ.copy(),
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # the engine logs when its socket accepts connections
        if "listening on" in line:
            break
    else:
        pytest.fail(f"engine exited early with {proc.wait(10)}")
    yield proc
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    proc.stderr.close()


def test_status_and_sessions_need_a_running_engine(klaw_home: KlawPaths) -> None:
    r = klaw("status")
    assert r.returncode == 1 and "klaw engine" in r.stderr


def test_cli_talks_to_the_running_engine(
    klaw_home: KlawPaths, engine: subprocess.Popen[str]
) -> None:
    r = klaw("status", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["pid"] == engine.pid
    assert klaw("sessions").returncode == 0
    # The engine owns klaw.db: local memory commands refuse, search is delegated.
    r = klaw("memory", "save", "the spare key is under the flowerpot")
    assert r.returncode == 1 and "stop the engine" in r.stderr
    r = klaw("memory", "search", "spare key", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []


def test_delegated_search_finds_what_was_saved(klaw_home: KlawPaths) -> None:
    assert klaw("memory", "save", "the boat is moored at pier 7").returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "klaw.cli.app", "engine"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if "listening on" in line:
                break
        r = klaw("memory", "search", "where is the boat", "--json")
        assert r.returncode == 0, r.stderr
        hits = json.loads(r.stdout)
        assert hits and "pier 7" in hits[0]["content"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        proc.stderr.close()

"""SIGTERM while a large memory file is being indexed: the indexing is cancelled, the
engine exits, and its lock is free only once the process is gone (a second engine can
never run beside a first one that is still working)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from klaw.errors import StoreLocked
from klaw.lock import EngineLock
from klaw.paths import KlawPaths
from scripted_llm import write_engine_yaml


def big_note(n_paragraphs: int) -> str:
    # Distinct paragraphs: nothing comes from the embedding cache.
    return "\n\n".join(
        f"## Note {i}\n\nEntry {i}: the meter read {i * 37 % 9973} kWh on day {i % 365}, "
        f"with remark {i * 7919 % 104729} about the boiler in room {i % 17}. " * 6
        for i in range(n_paragraphs)
    )


def test_sigterm_during_indexing_cancels_it_and_releases_the_lock_at_exit(
    klaw_home: KlawPaths,
) -> None:
    klaw_home.engine_config.parent.mkdir(parents=True)
    write_engine_yaml(klaw_home.engine_config, "http://127.0.0.1:9")
    (klaw_home.workspace / "memory").mkdir()
    (klaw_home.workspace / "memory" / "big.md").write_text(big_note(8000))
    proc = subprocess.Popen(
        [sys.executable, "-m", "klaw.cli.app", "engine"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=os.environ.copy(),
    )
    assert proc.stderr is not None
    seen: list[str] = []
    try:
        for line in proc.stderr:  # indexing of the big file has begun
            seen.append(line)
            if "indexing memory/big.md (" in line:
                break
        else:
            raise AssertionError(f"engine exited early ({proc.wait(10)}): {''.join(seen)}")
        # While the engine lives, it holds the lock.
        try:
            EngineLock(klaw_home.engine_lock).acquire("a test")
        except StoreLocked:
            pass
        else:
            raise AssertionError("the lock was free while the engine ran")
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()  # until the process closes stderr at exit
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stderr.close()
    log = "".join(seen) + rest
    assert "memory watcher cancelled" in log or "indexing cancelled" in log, log[-3000:]
    assert "engine stopped" in log
    assert "stays locked" not in log  # the indexing thread ended within the wait
    # The process is gone, and with it the lock: a second engine may start.
    EngineLock(klaw_home.engine_lock).acquire("a second engine").release()

"""A benchmarked process's memory from /proc and its stop: shared by the engine,
gateway and Discord benchmarks."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["settle", "status", "stop"]

T = 30.0  # upper bound of a polite stop


def status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in kB (VmHWM, not ru_maxrss: see rss_probe.py)."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def settle(proc: subprocess.Popen[Any], deadline_s: float = 60.0) -> dict[str, float]:
    """VmRSS/VmHWM once RSS stops moving: five samples 0.5 s apart within 256 kB
    (or the deadline)."""
    samples: list[int] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        assert proc.poll() is None, f"the process exited with {proc.returncode}"
        samples.append(status(proc.pid)["VmRSS"])
        last = samples[-5:]
        if len(last) == 5 and max(last) - min(last) <= 256:
            break
        time.sleep(0.5)
    st = status(proc.pid)
    return {
        "rss_mb": st["VmRSS"] / 1024,
        "hwm_mb": st["VmHWM"] / 1024,
        "settled_s": time.monotonic() - t0,
    }


def stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL if it is still there after T."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=T)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

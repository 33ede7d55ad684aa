"""A job's pre-check: a shell command that says whether the model need be woken
(design §2.4, "Subagent lifecycle"; docs/scheduler.md "Costs and caps")."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["PRECHECK_TIMEOUT_S", "PrecheckResult", "run_precheck"]

PRECHECK_TIMEOUT_S: Final = 30.0
PRECHECK_OUTPUT_BYTES: Final = 4096


@dataclass(frozen=True, slots=True)
class PrecheckResult:
    wake: bool  # exit 0: there is something to look at
    error: str | None = None  # neither 0 nor 1, or it could not run


def _confine() -> None:  # in the child, before exec
    import resource

    os.setsid()  # its own process group: a timeout kills the whole group
    resource.setrlimit(resource.RLIMIT_CPU, (20, 20))
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))


def run_precheck(command: str, cwd: Path, timeout: float = PRECHECK_TIMEOUT_S) -> PrecheckResult:
    """Runs a job's pre-check with ``sh -c`` in `cwd` (blocking: call it in a thread).

    Confined to what a check needs: its own process group (killed whole on timeout),
    CPU 20 s, 1 GiB address space, 256 files, 16 MiB per written file, no stdin, a
    minimal environment. Exit 0 wakes the model; 1 with nothing on stderr means
    nothing to do (as `grep -q` or `test` say it); anything else, a crash writing a
    traceback and exiting 1 included, is a failed run.
    """
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8"}
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=_confine,
        )
    except OSError as exc:
        return PrecheckResult(False, f"the pre-check could not start: {exc}")
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return PrecheckResult(False, f"the pre-check ran over {timeout:.0f} s and was killed")
    tail = err[-PRECHECK_OUTPUT_BYTES:].decode("utf-8", "replace").strip()
    if proc.returncode == 0:
        return PrecheckResult(True)
    if proc.returncode == 1 and not tail:
        return PrecheckResult(False)
    how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"status {proc.returncode}"
    return PrecheckResult(False, f"the pre-check exited with {how}" + (f": {tail}" if tail else ""))

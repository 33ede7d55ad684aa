"""A job's pre-check: a shell command that says whether the model need be woken
(design §2.4, "Subagent lifecycle"; docs/scheduler.md "Costs and caps")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["PRECHECK_TIMEOUT_S", "PrecheckResult", "run_precheck"]

PRECHECK_TIMEOUT_S: Final = 30.0
PRECHECK_OUTPUT_BYTES: Final = 4096
#: How long past the check's own limit the reaper may take to clean up.
REAPER_GRACE_S: Final = 15.0
_REAPER: Final = Path(__file__).with_name("reaper.py")


@dataclass(frozen=True, slots=True)
class PrecheckResult:
    wake: bool  # exit 0: there is something to look at
    error: str | None = None  # neither 0 nor 1, or it could not run


def _confine() -> None:  # in the child, before exec
    import resource

    os.setsid()  # its own session (and process group)
    resource.setrlimit(resource.RLIMIT_CPU, (20, 20))
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))


def run_precheck(command: str, cwd: Path, timeout: float = PRECHECK_TIMEOUT_S) -> PrecheckResult:
    """Runs a job's pre-check with ``sh -c`` in `cwd` (blocking: call it in a thread).

    Confined to what a check needs: its own session, CPU 20 s, 1 GiB address space,
    256 files, 16 MiB per written file, no stdin, a minimal environment. Exit 0 wakes
    the model; 1 with nothing on stderr means nothing to do (as `grep -q` or `test`
    say it); anything else, a crash writing a traceback and exiting 1 included, is a
    failed run. The check is over when its shell exits (or at `timeout`): whatever
    it started is killed then, even a process that left with ``setsid`` (see
    klaw.scheduler.reaper), and its stderr is a file, not a pipe whose end such a
    process would hold open.
    """
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8"}
    reaper = [sys.executable, "-I", "-S", str(_REAPER), command, str(timeout)]
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                reaper,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,  # the verdict: only the reaper holds this pipe
                stderr=err,
                preexec_fn=_confine,
            )
        except OSError as exc:
            return PrecheckResult(False, f"the pre-check could not start: {exc}")
        try:
            out, _ = proc.communicate(timeout=timeout + REAPER_GRACE_S)
        except subprocess.TimeoutExpired:  # the reaper itself is stuck: its session goes
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        err.seek(max(0, os.fstat(err.fileno()).st_size - PRECHECK_OUTPUT_BYTES))
        tail = err.read().decode("utf-8", "replace").strip()
    verdict = out.decode("ascii", "replace").split()
    if verdict == ["exit", "0"]:
        return PrecheckResult(True)
    if verdict == ["exit", "1"] and not tail:
        return PrecheckResult(False)
    if len(verdict) == 2 and verdict[0] in ("exit", "signal") and verdict[1].isdigit():
        how = "status" if verdict[0] == "exit" else "signal"
        end = f": {tail}" if tail else ""
        return PrecheckResult(False, f"the pre-check exited with {how} {verdict[1]}{end}")
    if verdict != ["timeout"] and proc.returncode != -signal.SIGKILL:  # the reaper failed
        return PrecheckResult(False, f"the pre-check could not run: {tail or proc.returncode}")
    return PrecheckResult(False, f"the pre-check ran over {timeout:.0f} s and was killed")

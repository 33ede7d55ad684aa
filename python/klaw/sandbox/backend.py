"""What both backends share: a `Job`, the in-sandbox wrapper and the blocking `Backend` API.

Backends are blocking (the docker SDK and subprocess pipes are); `Sandbox` calls
them from a worker thread, one run at a time. Every run ends with every process
of the sandbox's user killed, so nothing started by one run (a server left in the
background, a fork bomb) outlives it.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from klaw.sandbox.policy import Policy
from klaw.sandbox.result import Capture, RunResult

__all__ = [
    "CLEANUP",
    "INTERPRETERS",
    "MAX_READ_BYTES",
    "WRAPPER",
    "Backend",
    "Job",
    "Reader",
    "signal_exit",
]

#: language → (interpreter, script name under /code)
INTERPRETERS: dict[str, tuple[str, str]] = {
    "python": ("python3", "main.py"),
    "bash": ("bash", "main.sh"),
}

#: Output read per run before it counts as a flood and the run is killed: the engine
#: never spends its CPU draining gigabytes (the head and tail kept are far smaller).
MAX_READ_BYTES = 8 * 1024 * 1024

#: After every run, as the sandbox's user: kill whatever the script left running
#: (`kill -1` spares only the caller and PID 1), empty /tmp, /dev/shm and POSIX
#: message queues, drop SysV IPC objects: nothing of one run (one chat) is there for
#: the next.
CLEANUP = (
    "kill -KILL -1 2>/dev/null; "
    "rm -rf /tmp/* /tmp/.[!.]* /tmp/..?* /dev/shm/* /dev/mqueue/* 2>/dev/null; "
    "ipcrm --all 2>/dev/null; true"
)

#: Run as `sh -c WRAPPER sh INTERPRETER SCRIPT`: CLEANUP first (a script that killed
#: its wrapper skipped the last one), the script in /output, then CLEANUP.
WRAPPER = f'{CLEANUP}; cd /output || exit 125; "$@"; rc=$?; {CLEANUP}; exit $rc'


@dataclass(frozen=True, slots=True)
class Job:
    language: str
    timeout_s: int

    @property
    def argv(self) -> list[str]:
        interpreter, script = INTERPRETERS[self.language]
        return ["/bin/sh", "-c", WRAPPER, "sh", interpreter, f"/code/{script}"]


def signal_exit(code: int | None) -> int | None:
    """The signal that ended a process, from a shell's 128+N or a negative returncode."""
    if code is None:
        return None
    if code < 0:
        return -code
    if 128 < code < 160:
        return code - 128
    return None


class Reader:
    """Feeds two captures and says when the run has printed too much."""

    def __init__(self) -> None:
        self.stdout = Capture()
        self.stderr = Capture()
        self.flooded = False

    def feed(self, stream: int, data: bytes | memoryview) -> bool:
        """Stream 1 or 2; False once MAX_READ_BYTES were read (stop and kill)."""
        (self.stdout if stream == 1 else self.stderr).feed(data)
        if self.stdout.total + self.stderr.total >= MAX_READ_BYTES:
            self.flooded = True
        return not self.flooded

    def result(self, exit_code: int | None, t0: float, backend: str) -> RunResult:
        result = RunResult(
            exit_code, self.stdout, self.stderr, time.monotonic() - t0, backend=backend
        )
        if self.flooded:
            result.killed_by = "output"
            result.notes.append(
                f"KILLED: it printed more than {MAX_READ_BYTES >> 20} MB, so it was stopped. "
                "Print summaries (counts, head()), or write big results to /output."
            )
        return result


class Backend(ABC):
    name: str

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    @abstractmethod
    def run(self, job: Job) -> RunResult:
        """Runs /code/<script> (already written) with /output staged; blocking."""

    def reap_idle(self) -> None:  # noqa: B027 - only keep-alive backends hold anything
        """Frees what an idle backend holds (the keep-alive container)."""

    def close(self) -> None:  # noqa: B027
        """Stops what the backend started."""

    @abstractmethod
    def status(self) -> dict[str, Any]:
        """Facts for `klaw sandbox status` and `klaw doctor`."""

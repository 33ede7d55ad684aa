"""What one run gives back: capped output (`Capture`) and the `RunResult` the model reads.

Output is kept as a head and a tail per stream with a running count, so a flood of
gigabytes costs a few kilobytes of the engine's memory; the tail survives because
that is where a traceback ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["HEAD_BYTES", "TAIL_BYTES", "Capture", "OutputFile", "RunResult"]

#: Per stream: the first and last bytes kept (~2k tokens each stream at most).
HEAD_BYTES = 6_000
TAIL_BYTES = 2_000

Limit = Literal["timeout", "memory", "output"]


class Capture:
    """One stream's head, tail and total size; `feed` keeps memory bounded."""

    __slots__ = ("_head", "_tail", "head_cap", "tail_cap", "total")

    def __init__(self, head_cap: int = HEAD_BYTES, tail_cap: int = TAIL_BYTES) -> None:
        self.head_cap = head_cap
        self.tail_cap = tail_cap
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, data: bytes | memoryview) -> None:
        self.total += len(data)
        room = self.head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data[-self.tail_cap :]
            if len(self._tail) > self.tail_cap:
                del self._tail[: len(self._tail) - self.tail_cap]

    @property
    def cut(self) -> bool:
        return self.total > len(self._head) + len(self._tail)

    def text(self, name: str) -> str:
        if not self.cut:  # head and tail meet: one piece, decoded whole
            return bytes(self._head + self._tail).decode("utf-8", errors="replace")
        head = self._head.decode("utf-8", errors="replace")
        tail = self._tail.decode("utf-8", errors="replace")
        skipped = self.total - len(self._head) - len(self._tail)
        return (
            f"{head}\n[{name} cut: {skipped} bytes left out of {self.total}; "
            f"the first {len(self._head)} and last {len(self._tail)} are shown]\n{tail}"
        )


@dataclass(frozen=True, slots=True)
class OutputFile:
    path: str  # relative to the chat's output directory
    size: int


@dataclass(slots=True)
class RunResult:
    exit_code: int | None  # None: killed before it could exit
    stdout: Capture
    stderr: Capture
    wall_s: float
    killed_by: Limit | None = None
    backend: str = ""
    files: list[OutputFile] = field(default_factory=list)
    files_dropped: list[str] = field(default_factory=list)  # over maxOutputBytes, removed
    output_dir: str = ""  # where /output's files are kept, relative to the workspace
    notes: list[str] = field(default_factory=list)
    timeout_s: int = 0  # the run's own limit (a call may ask for less than the config's)

    def render(self, *, memory_bytes: int) -> str:
        """The tool result: stable labels the model can read, errors included."""
        code = "none (killed)" if self.exit_code is None else str(self.exit_code)
        lines = [f"exit code: {code}, wall time {self.wall_s:.2f} s"]
        if self.killed_by == "timeout":
            lines.append(
                f"KILLED: the {self.timeout_s} s time limit was reached; every process of the run "
                "was stopped. Make it faster, or do less per call."
            )
        elif self.killed_by == "memory":
            lines.append(
                f"KILLED: the memory limit ({memory_bytes >> 20} MB) was reached. "
                "Process the data in smaller pieces."
            )
        lines.extend(self.notes)
        for name, cap in (("stdout", self.stdout), ("stderr", self.stderr)):
            if cap.total:
                lines.append(f"--- {name} ---")
                lines.append(cap.text(name).rstrip("\n"))
        if not self.stdout.total and not self.stderr.total:
            lines.append("(no output: print() the results you want to see)")
        if self.files:
            shown = ", ".join(f"{f.path} ({f.size} bytes)" for f in self.files[:50])
            more = f" and {len(self.files) - 50} more" if len(self.files) > 50 else ""
            lines.append(f"--- files written to /output (kept in {self.output_dir}) ---")
            lines.append(shown + more)
        if self.files_dropped:
            rest = len(self.files_dropped) - 20
            lines.append(
                "not kept: "
                + ", ".join(self.files_dropped[:20])
                + (f" and {rest} more" if rest > 0 else "")
            )
        return "\n".join(lines)

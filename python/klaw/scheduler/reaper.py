"""Runs one pre-check and leaves nothing behind: ``python -I -S reaper.py COMMAND SECONDS``.

Started by klaw.scheduler.precheck in a session of its own, with the check's limits.
It makes itself a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``), so every process
the check starts stays its descendant even after ``setsid``, a double fork or the
check's own exit; runs ``/bin/sh -c COMMAND`` (stdout to /dev/null, stderr its own);
waits for the shell up to SECONDS; then kills whatever is left, escaped or not, and
reaps it. The verdict is its stdout's one line: ``exit N``, ``signal N`` or
``timeout``. Standard library only: it runs without Klaw on its path.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from types import FrameType

PR_SET_CHILD_SUBREAPER = 36


class _TimedOut(Exception):
    pass


def _alarm(_signum: int, _frame: FrameType | None) -> None:
    raise _TimedOut


def _children() -> list[int]:
    """This process's children, zombies included (from /proc: Linux)."""
    me = str(os.getpid()).encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        if stat[stat.rindex(b")") + 2 :].split()[1] == me:
            found.append(int(name))
    return found


def _kill_all() -> None:
    """SIGKILL to every child until none is left; the children of each one killed
    become ours (subreaper) and go in the next round."""
    while True:
        killable = 0
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
                killable += 1
            except ProcessLookupError:  # reaped meanwhile
                killable += 1
            except PermissionError:  # became another user's (setuid): not ours to kill
                pass
        if not killable:
            return
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def main(command: str, seconds: float) -> str:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    check = os.fork()
    if check == 0:
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.execv("/bin/sh", ["/bin/sh", "-c", command])
        finally:
            os._exit(127)
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        _, status = os.waitpid(check, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except _TimedOut:
        verdict = "timeout"
    else:
        code = os.waitstatus_to_exitcode(status)
        verdict = f"exit {code}" if code >= 0 else f"signal {-code}"
    _kill_all()
    return verdict


if __name__ == "__main__":
    print(main(sys.argv[1], float(sys.argv[2])), flush=True)

"""cgroups for the bubblewrap backend, and the OOM-kill counters of both backends.

A run under bubblewrap gets its own cgroup (memory and pids limits) where one can
be made: cgroup v1 controllers as root (these machines), or a v2 subtree this user
may write (systemd's `Delegate=yes`). Where none can, the rlimits alone apply
(docs/sandbox.md says what that leaves out).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from pathlib import Path

__all__ = [
    "RunCgroup",
    "docker_cgroup_pids",
    "docker_oom_kills",
    "make_run_cgroup",
    "process_uid",
    "sweep_stale",
]

ROOT = Path("/sys/fs/cgroup")
_serial = itertools.count(1)


def _own_paths() -> dict[str, str]:
    """controller ("" for v2) → this process's cgroup path."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            out[name] = path
    return out


class RunCgroup:
    """One run's cgroup directories; `procs` files to join, counters to read, `remove`."""

    def __init__(self, dirs: list[Path], v2: bool) -> None:
        self.dirs = dirs
        self.v2 = v2

    @property
    def procs(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def oom_kills(self) -> int:
        for d in self.dirs:
            count = _oom_count(d)
            if count is not None:
                return count
        return 0

    def kill_all(self) -> None:
        for d in self.dirs:
            if self.v2 and (d / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (d / "cgroup.kill").write_text("1")
                continue
            for _ in range(3):  # v1: a forking process may add members while we kill
                try:
                    pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)

    def remove(self, within_s: float = 5.0) -> bool:
        """Kills the members, waits until they are gone, removes the directories.

        False when one could not be removed in time (it is swept at the next start).
        """
        deadline = time.monotonic() + within_s
        ok = True
        for d in self.dirs:
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        ok = False
                        break
                    self.kill_all()
                    time.sleep(0.002)  # SIGKILLed members take a moment to leave
        return ok


def sweep_stale() -> int:
    """Removes the empty run cgroups of engines that are gone (a crash, a kill -9)."""
    removed = 0
    own = _own_paths()
    parents = {ROOT / c / own[c].lstrip("/") for c in ("memory", "pids", "cpu") if c in own}
    if "" in own:
        parents.add(ROOT / own[""].lstrip("/"))
    for parent in parents:
        try:
            entries = list(parent.glob("klaw-sandbox-*"))
        except OSError:
            continue
        for d in entries:
            pid = d.name.split("-")[2] if d.name.count("-") >= 3 else ""
            if pid.isdigit() and int(pid) != os.getpid() and Path(f"/proc/{pid}").exists():
                continue  # another live engine's
            try:
                d.rmdir()
                removed += 1
            except OSError:
                continue
    return removed


def _oom_count(d: Path) -> int | None:
    for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
        try:
            text = (d / name).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == key:
                return int(parts[1])
    return None


#: The CFS period the CPU quota is a share of (the kernel's default).
CFS_PERIOD_US = 100_000


def _cpu_v1(own: dict[str, str], run: str, cpus: float) -> Path | None:
    """A v1 cpu cgroup with the quota, or None (no controller: the limit is skipped)."""
    controller = next((c for c in ("cpu", "cpu,cpuacct") if c in own), None)
    if controller is None:
        return None
    d = ROOT / controller / own[controller].lstrip("/") / run
    if not d.parent.is_dir():
        d = ROOT / "cpu,cpuacct" / own[controller].lstrip("/") / run
    try:
        d.mkdir()
    except OSError:
        return None
    try:
        _set(d / "cpu.cfs_period_us", str(CFS_PERIOD_US))
        _set(d / "cpu.cfs_quota_us", str(int(cpus * CFS_PERIOD_US)))
    except OSError:
        d.rmdir()
        return None
    return d


def _set(path: Path, value: str) -> None:
    """Writes an existing control file; never creates one (a missing file means the
    controller is not there, and a plain file would limit nothing)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def make_run_cgroup(memory_bytes: int, pids: int, cpus: float = 0.0) -> RunCgroup | None:
    """A fresh cgroup with the memory and pids limits set (and the CPU quota where the
    controller is there), or None where this user cannot make one."""
    own = _own_paths()
    run = f"klaw-sandbox-{os.getpid()}-{next(_serial)}"
    if "memory" in own and "pids" in own:  # v1
        made: list[Path] = []
        try:
            for controller in ("memory", "pids"):
                d = ROOT / controller / own[controller].lstrip("/") / run
                d.mkdir()
                made.append(d)
            mem, pid = made
            _set(mem / "memory.limit_in_bytes", str(memory_bytes))
            swap = mem / "memory.memsw.limit_in_bytes"
            if swap.exists():  # no swap beyond the limit
                _set(swap, str(memory_bytes))
            _set(pid / "pids.max", str(pids))
            cpu = _cpu_v1(own, run, cpus) if cpus > 0 else None
            if cpu is not None:
                made.append(cpu)
            return RunCgroup(made, v2=False)
        except OSError:
            RunCgroup(made, v2=False).remove()
            return None
    if "" in own and (ROOT / "cgroup.controllers").exists():  # v2, delegated to us
        parent = ROOT / own[""].lstrip("/")
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            return None
        if not {"memory", "pids"} <= set(enabled):
            return None  # the limits would not exist in a child: rlimits stand in
        d = parent / run
        try:
            d.mkdir()
        except OSError:
            return None
        cg = RunCgroup([d], v2=True)
        try:
            _set(d / "memory.max", str(memory_bytes))
            _set(d / "pids.max", str(pids))
            if (d / "memory.swap.max").exists():
                _set(d / "memory.swap.max", "0")
            if cpus > 0 and (d / "cpu.max").exists():
                _set(d / "cpu.max", f"{int(cpus * CFS_PERIOD_US)} {CFS_PERIOD_US}")
        except OSError:
            cg.remove()
            return None
        return cg
    return None


def _docker_dirs(container_id: str, controller: str) -> list[Path]:
    return [
        ROOT / controller / "docker" / container_id,
        ROOT / controller / "system.slice" / f"docker-{container_id}.scope",
        ROOT / "system.slice" / f"docker-{container_id}.scope",
        ROOT / "docker" / container_id,
    ]


def docker_cgroup_pids(container_id: str) -> list[int] | None:
    """Host pids of the container's processes, where the host's cgroupfs shows them."""
    for d in _docker_dirs(container_id, "pids"):
        try:
            return [int(p) for p in (d / "cgroup.procs").read_text().split()]
        except OSError:
            continue
    return None


def process_uid(pid: int) -> int | None:
    """The real uid of a live process (None once it is gone or a zombie)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    uid = None
    for line in status.splitlines():
        if line.startswith("State:") and "Z" in line.split()[1]:
            return None
        if line.startswith("Uid:"):
            uid = int(line.split()[1])
    return uid


def docker_oom_kills(container_id: str) -> int | None:
    """The container cgroup's OOM-kill count, where the host's cgroupfs shows it."""
    for d in _docker_dirs(container_id, "memory"):
        count = _oom_count(d)
        if count is not None:
            return count
    return None

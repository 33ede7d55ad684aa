"""The bubblewrap backend: one namespaced process tree per run, the Docker policy by hand.

    prlimit (as, cpu, fsize, nofile, nproc)
      → bwrap: new pid, net (unless allowed), ipc, uts namespaces; --die-with-parent
             read-only root (the built rootfs, else the host's /usr and a few /etc files)
             tmpfs /tmp (sized), /code read-only, /output the staging dir, whitelisted mounts
        → [as root: setpriv to the sandbox uid, no caps, no-new-privs: RLIMIT_NPROC binds]
          → sh wrapper → python3 / bash

Unprivileged (a Pi user), bubblewrap makes a user namespace and the code keeps the
owner's uid there, with user namespaces disabled inside (`--disable-userns`).

Memory and pids limits come from a per-run cgroup where one can be made
(`cgroups.make_run_cgroup`); otherwise from RLIMIT_AS and RLIMIT_NPROC. The run is
killed at its deadline by killing bwrap (its PID namespace dies with it) and the
cgroup's members.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import time
from pathlib import Path, PurePosixPath
from typing import Any

from klaw.errors import SandboxError, SandboxUnavailable
from klaw.sandbox.backend import Backend, Job, Reader, signal_exit
from klaw.sandbox.cgroups import make_run_cgroup, sweep_stale
from klaw.sandbox.policy import ENV, Policy
from klaw.sandbox.result import RunResult

__all__ = ["BwrapBackend", "bwrap_problem", "has_rootfs"]

#: /etc files bound from the host when there is no built rootfs (no shadow, no config).
HOST_ETC = (
    "alternatives",
    "ca-certificates",
    "ssl",
    "ld.so.cache",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "hosts",
    "resolv.conf",
    "host.conf",
    "gai.conf",
    "protocols",
    "services",
    "matplotlibrc",
    "python3",
    "python3.11",
)

#: Without a cgroup, the address-space limit must leave room for the mappings an
#: interpreter reserves without using (libraries, thread stacks, arenas).
AS_HEADROOM = 512 * 1024 * 1024


def host_root_args(*, etc: bool = True) -> list[str]:
    """A read-only root from the host's /usr (merged or not) and a few /etc files."""
    # Directories bubblewrap makes for mount points are 0700 when it runs as root.
    args = ["--ro-bind", "/usr", "/usr", "--perms", "0755", "--dir", "/etc"]
    for top in ("bin", "lib", "lib64", "sbin", "lib32", "libx32"):
        path = Path("/") / top
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), f"/{top}"]
        elif path.is_dir():
            args += ["--ro-bind", str(path), f"/{top}"]
    for name in HOST_ETC if etc else ():
        path = Path("/etc") / name
        if path.exists():
            args += ["--ro-bind", str(path), f"/etc/{name}"]
    return args


def has_rootfs(rootfs: Path) -> bool:
    """Whether `klaw sandbox build` made bubblewrap's root there."""
    return (rootfs / "usr" / "bin" / "python3").exists()


def namespace_args(*, network: bool) -> list[str]:
    """New namespaces for a run; as root, none for users (the uid is dropped inside)."""
    if os.getuid() == 0:
        # As root, bubblewrap reads the bind sources (Klaw's dirs may be 0700) and
        # the uid is dropped inside, after the mounts (`BwrapBackend._drop`).
        args = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        if not network:
            args.append("--unshare-net")
        return [*args, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    args = ["--unshare-all", "--unshare-user", "--disable-userns"]
    return [*args, "--share-net"] if network else args


def bwrap_problem() -> str | None:
    """Why bubblewrap cannot run here, or None when a trial sandbox works."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap is not installed (Debian/Raspberry Pi OS: apt install bubblewrap)"
    argv = [exe, *namespace_args(network=False), "--die-with-parent", *host_root_args(etc=False)]
    argv.append("--")
    if os.getuid() == 0:
        if shutil.which("setpriv") is None:
            return "setpriv (util-linux) is missing: needed to drop root inside bubblewrap"
        argv += ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--no-new-privs"]
        argv += ["--inh-caps=-all", "--"]
    argv.append("true")
    try:
        done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap failed to start: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        hint = "; user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1)"
        return f"bubblewrap cannot make a sandbox: {why[-1] if why else done.returncode}{hint}"
    return None


def _tasks_of(uid: int) -> int:
    """Threads of every process `uid` runs now (what RLIMIT_NPROC counts)."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Threads:"):
                        total += int(line.split()[1])
                        break
        except (OSError, ValueError):
            continue
    return total


def _read_all(fd: int) -> bytes:
    """What bubblewrap wrote to its info pipe (closed when it exited); closes `fd`."""
    chunks = []
    try:
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


class BwrapBackend(Backend):
    name = "bwrap"

    def __init__(self, policy: Policy, *, code_dir: Path, staging: Path, rootfs: Path) -> None:
        super().__init__(policy)
        self.code_dir = code_dir
        self.staging = staging
        self.rootfs = rootfs
        self.runs = 0
        self.last_cgroup: bool | None = None  # whether the last run had its own cgroup
        exe = shutil.which("bwrap")
        if exe is None:
            raise SandboxUnavailable(bwrap_problem() or "bubblewrap is not installed")
        self.exe = exe
        self.etc = code_dir.parent / "etc"
        sweep_stale()  # run cgroups a crashed engine left

    # ------------------------------------------------------------------ argv

    def _root_args(self) -> list[str]:
        if has_rootfs(self.rootfs):
            return ["--ro-bind", str(self.rootfs), "/"]
        return host_root_args()

    def _in_root(self, path: str) -> bool:
        """Whether the read-only root already has `path` (the built rootfs has /mnt)."""
        if has_rootfs(self.rootfs):
            return (self.rootfs / path.lstrip("/")).is_dir()
        return False

    def _write_etc(self) -> None:
        """passwd and group naming the sandbox user, so `whoami`/getpwuid work."""
        self.etc.mkdir(parents=True, exist_ok=True)
        uid, gid = self.policy.uid, self.policy.gid
        (self.etc / "passwd").write_text(
            f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{uid}:{gid}:sandbox:/tmp:/bin/sh\n"
        )
        (self.etc / "group").write_text(f"root:x:0:\nsandbox:x:{gid}:\n")

    def argv(self, job: Job, *, limits_by_cgroup: bool, info_fd: int | None = None) -> list[str]:
        p = self.policy
        limits = [
            f"--cpu={job.timeout_s + 1}",
            f"--fsize={p.output_bytes}",
            "--nofile=1024",
            "--core=0",
        ]
        if not limits_by_cgroup:
            limits += [f"--as={p.memory_bytes + AS_HEADROOM}", f"--nproc={self._nproc()}"]
        argv = ["prlimit", *limits, "--", self.exe]
        root = os.getuid() == 0
        argv += namespace_args(network=p.network)
        argv += ["--die-with-parent", "--new-session"]
        if info_fd is not None:  # bwrap writes the child's pid there once the sandbox is up
            argv += ["--info-fd", str(info_fd)]
        argv += self._root_args()
        argv += ["--ro-bind", str(self.etc / "passwd"), "/etc/passwd"]
        argv += ["--ro-bind", str(self.etc / "group"), "/etc/group"]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        # /dev's own tmpfs is unsized and, unprivileged, writable: shm gets a sized one
        # and the rest of /dev is read-only (device nodes still work).
        argv += ["--perms", "1777", "--size", str(p.tmp_bytes), "--tmpfs", "/dev/shm"]
        argv += ["--remount-ro", "/dev"]
        argv += ["--perms", "1777", "--size", str(p.tmp_bytes), "--tmpfs", "/tmp"]
        argv += ["--ro-bind", str(self.code_dir), "/code"]
        argv += ["--bind", str(self.staging), "/output"]
        made = {"/"}
        for m in p.existing_mounts():
            for parent in reversed(PurePosixPath(m.target).parents):
                if str(parent) not in made and not self._in_root(str(parent)):
                    argv += ["--perms", "0755", "--dir", str(parent)]
                made.add(str(parent))
            argv += ["--bind" if m.writable else "--ro-bind", str(m.host), m.target]
        argv += ["--remount-ro", "/", "--chdir", "/output", "--clearenv"]
        for key, value in ENV.items():
            argv += ["--setenv", key, value]
        argv.append("--")
        if root:
            argv += self._drop()
        argv += job.argv
        return argv

    def _nproc(self) -> int:
        """RLIMIT_NPROC counts every task of the uid, not the run's: as root the run has
        a uid of its own; as the owner, the tasks it already has are added."""
        if os.getuid() == 0:
            return self.policy.pids
        return self.policy.pids + _tasks_of(os.getuid())

    def _drop(self) -> list[str]:
        """Inside the sandbox: to the sandbox's uid, no capabilities, no way back (setuid)."""
        p = self.policy
        return [
            "setpriv",
            f"--reuid={p.uid}",
            f"--regid={p.gid}",
            "--clear-groups",
            "--no-new-privs",
            "--inh-caps=-all",
            "--",
        ]

    # ------------------------------------------------------------------ run

    def run(self, job: Job) -> RunResult:
        self._write_etc()
        cgroup = make_run_cgroup(self.policy.memory_bytes, self.policy.pids, self.policy.cpus)
        self.last_cgroup = cgroup is not None
        info_r, info_w = os.pipe()
        argv = self.argv(job, limits_by_cgroup=cgroup is not None, info_fd=info_w)
        if cgroup is not None:
            # Join the cgroup before anything of the run exists: the shim moves itself.
            argv = [
                "/bin/sh",
                "-c",
                'for f in $KLAW_CGROUP_PROCS; do echo $$ > "$f" || exit 126; done; exec "$@"',
                "sh",
                *argv,
            ]
        env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
        if cgroup is not None:
            env["KLAW_CGROUP_PROCS"] = " ".join(cgroup.procs)
        oom_before = cgroup.oom_kills() if cgroup else 0
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
                close_fds=True,
                pass_fds=(info_w,),
            )
        except OSError as exc:
            os.close(info_r)
            if cgroup is not None:
                cgroup.remove()
            raise SandboxError(f"bubblewrap could not start: {exc}") from exc
        finally:
            os.close(info_w)
        reader = Reader()
        timed_out = False
        try:
            timed_out = self._pump(proc, reader, t0 + job.timeout_s)
            if timed_out or reader.flooded:
                self._kill(proc, cgroup)
            code = proc.wait()
        finally:
            if proc.poll() is None:
                self._kill(proc, cgroup)
                proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            oom = cgroup.oom_kills() - oom_before if cgroup else 0
            if cgroup is not None:
                cgroup.remove()
        self.runs += 1
        result = reader.result(None if timed_out or reader.flooded else code, t0, self.name)
        started = _read_all(info_r)
        err = reader.stderr.text("stderr")
        if not started and not timed_out:  # bwrap failed before the code could run
            raise SandboxError(f"bubblewrap could not make the sandbox: {err.strip()[:300]}")
        if timed_out:
            result.killed_by = "timeout"
        elif result.killed_by is None and (
            oom > 0 or (cgroup is None and err.rstrip().endswith("MemoryError"))
        ):
            result.killed_by = "memory"
        if result.killed_by is None and signal_exit(code) == signal.SIGKILL and cgroup is None:
            result.notes.append("The process was killed (SIGKILL), probably by a memory limit.")
        return result

    @staticmethod
    def _pump(proc: subprocess.Popen[bytes], reader: Reader, deadline: float) -> bool:
        """Reads both pipes until they close; True when the deadline came first."""
        assert proc.stdout is not None and proc.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, 1)
        sel.register(proc.stderr, selectors.EVENT_READ, 2)
        try:
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    return True
                for key, _ in sel.select(timeout=min(left, 1.0)):
                    data = os.read(key.fd, 65536)
                    if not data:
                        sel.unregister(key.fileobj)
                    elif not reader.feed(key.data, data):
                        return False
            # Pipes closed; the process may still be exiting (or a child keeps it alive).
            left = deadline - time.monotonic()
            try:
                proc.wait(timeout=max(0.0, left))
            except subprocess.TimeoutExpired:
                return True
            return False
        finally:
            sel.close()

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes], cgroup: Any) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if cgroup is not None:
            cgroup.kill_all()

    def status(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "root": str(self.rootfs) if has_rootfs(self.rootfs) else "host /usr (no built rootfs)",
            "runs": self.runs,
            "cgroup": self.last_cgroup,
        }

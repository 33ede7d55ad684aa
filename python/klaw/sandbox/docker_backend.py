"""The Docker backend (docker SDK): a warm keep-alive container and `exec`, or a container per run.

Every container gets the whole policy: memory (no swap beyond it), CPUs, pids, a
read-only root, a sized tmpfs /tmp, no network unless allowed, every capability
dropped, no-new-privileges, the sandbox's non-root user, only Klaw's mounts and the
whitelisted ones, an environment of Klaw's own (`policy.ENV`: nothing from the host),
and no log driver (a flood is not written to disk by dockerd).

Keep-alive: one container (`klaw-sandbox-<id>`, PID 1 a shell that only reaps)
serves runs through `exec`; it is replaced after `keepAliveMaxExecutions` runs,
removed after `keepAliveIdleTimeoutMin` idle minutes, and made again when it died.
At the deadline every process of the sandbox's user in it is killed (`kill -1`
from that user: the process tree, not only the shell); when even that cannot run
(a fork bomb holding every pid), the container is killed and made anew.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from klaw.errors import SandboxError, SandboxUnavailable
from klaw.sandbox.backend import CLEANUP, Backend, Job, Reader, signal_exit
from klaw.sandbox.cgroups import docker_cgroup_pids, docker_oom_kills, process_uid
from klaw.sandbox.policy import ENV, Policy
from klaw.sandbox.result import RunResult

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

__all__ = ["DEFAULT_DOCKER_HOST", "DockerBackend", "docker_problem"]

log = logging.getLogger("klaw.sandbox")

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"

#: How long a run's stream may outlast its deadline before the engine is taken as stuck.
STREAM_GRACE_S = 15.0
#: How long SIGKILLed leftovers of a run get to disappear before the container is replaced.
LEFTOVER_WAIT_S = 2.0

#: PID 1 of the keep-alive container: waits (reaping what runs leave) and nothing else.
KEEPALIVE = ["/bin/sh", "-c", 'trap "exit 0" TERM; while :; do sleep 3600 & wait; done']


def docker_problem(base_url: str) -> str | None:
    """Why no Docker engine answers at `base_url`, or None when one does."""
    if base_url.startswith("unix://") and not Path(base_url[7:]).exists():
        return f"no Docker engine: {base_url[7:]} does not exist"
    try:
        import docker
    except ImportError:
        return "the docker Python package is not installed (pip install docker)"
    try:
        client = docker.DockerClient(base_url=base_url, timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # any failure to talk to it means "not usable"
        return f"the Docker engine at {base_url} does not answer: {type(exc).__name__}"
    return None


def _read(stream: Any, timeout_s: int, kill: Callable[[], None]) -> tuple[Reader, bool, bool]:
    """Reads a run's demuxed output until it ends, calling `kill` at the deadline or
    once when it floods. Returns (reader, timed out, stuck): a stream still open
    STREAM_GRACE_S after the deadline (a wedged engine) is closed under the read."""
    reader = Reader()
    timed_out = threading.Event()

    def deadline() -> None:
        timed_out.set()
        kill()

    timer = threading.Timer(timeout_s, deadline)
    guard = threading.Timer(timeout_s + STREAM_GRACE_S, stream.close)
    for clock in (timer, guard):
        clock.daemon = True
        clock.start()
    stuck = False
    try:
        for out, err in stream:
            if reader.flooded:
                continue  # draining what was in flight after the kill
            if (out and not reader.feed(1, out)) or (err and not reader.feed(2, err)):
                kill()
    except Exception as exc:  # closed under the read: the engine is stuck
        log.warning("sandbox: the run's stream did not end (%s)", exc)
        stuck = True
    finally:
        timer.cancel()
        guard.cancel()
        stream.close()
    return reader, timed_out.is_set() and not reader.flooded, stuck


class DockerBackend(Backend):
    name = "docker"

    def __init__(
        self,
        policy: Policy,
        *,
        base_url: str,
        image: str,
        code_dir: Path,
        staging: Path,
        keep_alive: bool,
        idle_s: float,
        max_runs: int,
        instance: str,
    ) -> None:
        super().__init__(policy)
        self.base_url = base_url
        self.image = image
        self.code_dir = code_dir
        self.staging = staging
        self.keep_alive = keep_alive
        self.idle_s = idle_s
        self.max_runs = max_runs
        digest = hashlib.sha256(instance.encode()).hexdigest()[:10]
        self.container_name = f"klaw-sandbox-{digest}"
        self.instance = instance
        self._client: docker.DockerClient | None = None
        self._container: Container | None = None
        self.created_at: float | None = None
        self.last_used: float | None = None
        self.container_runs = 0
        self.runs = 0
        self.recycled = 0

    # ------------------------------------------------------------------ container

    def _host_config(self) -> dict[str, Any]:
        import docker

        p = self.policy
        volumes = {
            str(self.code_dir): {"bind": "/code", "mode": "ro"},
            str(self.staging): {"bind": "/output", "mode": "rw"},
        }
        for m in p.existing_mounts():
            volumes[str(m.host)] = {"bind": m.target, "mode": "rw" if m.writable else "ro"}
        return {
            # PID 1 (keep-alive) under a uid of its own: the runs' `kill -1` and ptrace
            # cannot reach it. A run per container runs as the sandbox's user.
            "user": f"{self._init_uid}:{self._init_uid}" if self.keep_alive else self._user,
            "environment": dict(ENV),
            "working_dir": "/output",
            "read_only": True,
            "privileged": False,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "network_mode": "bridge" if p.network else "none",
            "mem_limit": p.memory_bytes,
            "memswap_limit": p.memory_bytes,  # no swap beyond the limit
            "nano_cpus": int(p.cpus * 1e9),
            "pids_limit": p.pids,
            "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={p.tmp_bytes},mode=1777"},
            "volumes": volumes,
            "ulimits": [
                docker.types.Ulimit(name="fsize", soft=p.output_bytes, hard=p.output_bytes),
                docker.types.Ulimit(name="nofile", soft=1024, hard=1024),
                docker.types.Ulimit(name="core", soft=0, hard=0),
            ],
            "log_config": docker.types.LogConfig(type="none"),
            "labels": {"klaw.sandbox": "1", "klaw.instance": self.instance},
        }

    def _image_check(self) -> None:
        import docker.errors

        try:
            self.client.images.get(self.image)
        except docker.errors.ImageNotFound:
            raise SandboxError(
                f"the sandbox image {self.image} is not built: run `klaw sandbox build`"
            ) from None

    def _translate(self, exc: Exception) -> SandboxError:
        import docker.errors

        if isinstance(exc, docker.errors.ImageNotFound):
            return SandboxError(f"the sandbox image {self.image} is missing: `klaw sandbox build`")
        if isinstance(exc, docker.errors.APIError):
            return SandboxError(f"the Docker engine refused: {exc.explanation or exc}")
        return SandboxUnavailable(
            f"the Docker engine at {self.base_url} stopped answering ({type(exc).__name__})"
        )

    def _remove_stale(self) -> None:
        import docker.errors

        try:
            old = self.client.containers.get(self.container_name)
        except docker.errors.NotFound:
            return
        old.remove(force=True)

    def _warm(self) -> Container:
        """The keep-alive container, made (again) when missing, dead or used up."""
        c = self._container
        if c is not None:
            try:
                c.reload()
                alive = c.status == "running"
            except Exception:
                alive = False
            if not alive or self.container_runs >= self.max_runs:
                self._drop(recycled=alive)
                c = None
        if c is None:
            self._image_check()
            self._remove_stale()
            c = self.client.containers.run(
                self.image,
                KEEPALIVE,
                name=self.container_name,
                detach=True,
                **self._host_config(),
            )
            self._container = c
            self.created_at = time.time()
            self.container_runs = 0
        return c

    @property
    def client(self) -> docker.DockerClient:
        """The SDK client, made on first use (and again after the engine went away)."""
        if self._client is None:
            import docker

            # Reads on an exec's stream block while the code is quiet: allow the longest run.
            timeout = self.policy.timeout_s + 60
            self._client = docker.DockerClient(base_url=self.base_url, timeout=timeout)
        return self._client

    def _reconnect(self) -> None:
        self._container = None  # whatever it was, it is looked up again next time
        self.created_at = None
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def _drop(self, *, recycled: bool = False) -> None:
        c, self._container = self._container, None
        self.created_at = None
        if c is None:
            return
        if recycled:
            self.recycled += 1
        try:
            c.remove(force=True)
        except Exception as exc:  # gone already, or the engine is down: nothing to free
            log.info("sandbox container %s not removed: %s", self.container_name, exc)

    # ------------------------------------------------------------------ run

    def run(self, job: Job) -> RunResult:
        if self.base_url.startswith("unix://") and not os.path.exists(self.base_url[7:]):
            # Checked first: the SDK leaks a socket per request it cannot connect.
            self._reconnect()
            raise SandboxUnavailable(
                f"the Docker engine at {self.base_url} is not running (its socket is gone)"
            )
        try:
            if self.keep_alive:
                return self._run_exec(job)
            return self._run_once(job)
        except SandboxError:
            raise
        except Exception as exc:
            error = self._translate(exc)
            if isinstance(error, SandboxUnavailable):
                self._reconnect()  # the pooled connections died with the engine
            raise error from exc

    def _run_exec(self, job: Job) -> RunResult:
        import docker.errors

        c = self._warm()
        api = self.client.api
        oom_before = docker_oom_kills(c.id) if c.id else None
        t0 = time.monotonic()
        exec_id = api.exec_create(c.id, job.argv, user=self._user)["Id"]
        killers: list[threading.Thread] = []
        dead = threading.Event()  # the container itself had to be killed

        def kill() -> None:
            t = threading.Thread(target=self._kill_runs, args=(c, dead), daemon=True)
            killers.append(t)
            t.start()

        stream = api.exec_start(exec_id, stream=True, demux=True)
        reader, timed_out, stuck = _read(stream, job.timeout_s, kill)
        if stuck:
            dead.set()
        for killer in killers:
            killer.join()
        try:
            code = api.exec_inspect(exec_id).get("ExitCode")
        except docker.errors.NotFound:  # the container was killed with the exec in it
            code = None
        self.container_runs += 1
        self.runs += 1
        self.last_used = time.time()
        result = reader.result(None if timed_out else code, t0, self.name)
        if timed_out:
            result.killed_by = "timeout"
        elif result.killed_by is None and self._oom(c, oom_before, code):
            result.killed_by = "memory"
        if dead.is_set() or not self._clean_after(c):
            self._drop(recycled=not dead.is_set())
        elif self.container_runs >= self.max_runs:
            self._drop(recycled=True)
        return result

    @property
    def _init_uid(self) -> int:
        return 65533 if self.policy.uid == 65534 else 65534

    @property
    def _user(self) -> str:
        return f"{self.policy.uid}:{self.policy.gid}"

    def _clean_after(self, c: Container) -> bool:
        """True once no process of the sandbox's user is left in the container.

        The wrapper kills what the script started, but the script may kill the wrapper
        first; PID 1 runs as another uid, so `kill -1` as the sandbox's user reaches
        everything of the run and nothing of the container's. False: recycle it.
        """
        left = self._leftovers(c)
        if left == []:
            return True
        self._kill_runs(c, threading.Event())  # left over, or no cgroupfs to look in
        deadline = time.monotonic() + LEFTOVER_WAIT_S
        while (left := self._leftovers(c)) and time.monotonic() < deadline:
            time.sleep(0.01)  # SIGKILLed processes take a moment to go
        if left:
            log.warning("sandbox: %d processes outlived their run; container replaced", len(left))
        return not left

    def _leftovers(self, c: Container) -> list[int] | None:
        """Host pids of the sandbox user's processes in the container; None: unknown."""
        pids = docker_cgroup_pids(str(c.id)) if c.id else None
        if pids is None:
            return None
        return [pid for pid in pids if process_uid(pid) == self.policy.uid]

    def _oom(self, c: Container, before: int | None, code: int | None) -> bool:
        after = docker_oom_kills(c.id) if c.id else None
        if before is not None and after is not None:
            return after > before
        # No cgroupfs view: SIGKILL that Klaw did not send is the OOM killer's.
        return signal_exit(code) == 9

    def _kill_runs(self, c: Container, dead: threading.Event) -> None:
        """Kills every process of the sandbox's user (PID 1 runs as another) and cleans
        up after them; kills the container when even that cannot run (sets `dead`)."""
        try:
            c.exec_run(["/bin/sh", "-c", CLEANUP], user=self._user)
            return
        except Exception as exc:  # no pid left to exec with: a fork bomb
            log.info("sandbox: kill by exec failed (%s); killing the container", exc)
        dead.set()
        try:
            c.kill()
        except Exception as exc:
            log.info("sandbox: container kill failed: %s", exc)

    def _run_once(self, job: Job) -> RunResult:
        """`docker run --rm` per call: a fresh container, killed whole at the deadline."""
        self._image_check()
        api = self.client.api
        c = self.client.containers.create(self.image, job.argv, **self._host_config())
        try:
            stream = api.attach(str(c.id), stdout=True, stderr=True, stream=True, demux=True)
            t0 = time.monotonic()
            c.start()

            def kill() -> None:
                try:
                    c.kill()
                except Exception as exc:
                    log.info("sandbox: container kill failed: %s", exc)

            reader, timed_out, _ = _read(stream, job.timeout_s, kill)
            code = c.wait(timeout=STREAM_GRACE_S).get("StatusCode")
            c.reload()
            oom = bool(c.attrs.get("State", {}).get("OOMKilled"))
            self.runs += 1
            self.last_used = time.time()
            result = reader.result(None if timed_out or reader.flooded else code, t0, self.name)
            if timed_out:
                result.killed_by = "timeout"
            elif result.killed_by is None and (oom or signal_exit(code) == 9):
                result.killed_by = "memory"
            return result
        finally:
            try:
                c.remove(force=True)
            except Exception as exc:
                log.info("sandbox: container not removed: %s", exc)

    # ------------------------------------------------------------------ upkeep

    def reap_idle(self) -> None:
        if self._container is not None and self.last_used is not None:
            if time.time() - self.last_used >= self.idle_s:
                log.info("sandbox: keep-alive container idle, removed")
                self._drop()

    def close(self) -> None:
        self._drop()
        if self._client is not None:
            self._client.close()

    def status(self) -> dict[str, Any]:
        age = None if self.created_at is None else time.time() - self.created_at
        return {
            "backend": self.name,
            "engine": self.base_url,
            "image": self.image,
            "keep_alive": self.keep_alive,
            "container": self.container_name if self._container is not None else None,
            "container_age_s": age,
            "container_runs": self.container_runs,
            "runs": self.runs,
            "recycled": self.recycled,
        }

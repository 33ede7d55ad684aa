"""`Sandbox`: the engine's one owner of code execution (backend choice, runs, upkeep).

    sandbox = Sandbox.open(config.code_execution, paths)   # None when no backend can run
    result = await sandbox.run("telegram_1", "python", "print(1)", timeout=None)
    text = sandbox.render(result)                           # what the model reads

Runs are serialised on one worker thread, in the order they were asked for: one
container's limits cover one run at a time, and /output is staged per run. The
event loop only waits; the docker SDK and the pipes block that thread, never it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from klaw.sandbox.backend import INTERPRETERS, Backend, Job
from klaw.sandbox.outputs import Outputs
from klaw.sandbox.policy import Policy
from klaw.sandbox.result import RunResult

if TYPE_CHECKING:
    from klaw.config import CodeExecutionConfig
    from klaw.paths import KlawPaths

__all__ = ["Choice", "Sandbox", "choose_backend", "docker_url"]

log = logging.getLogger("klaw.sandbox")

#: How often idle keep-alive containers are looked at.
UPKEEP_S = 30.0


def docker_url(cfg: CodeExecutionConfig, env: dict[str, str] | None = None) -> str:
    from klaw.sandbox.docker_backend import DEFAULT_DOCKER_HOST

    env = dict(os.environ) if env is None else env
    return cfg.docker_host or env.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST


@dataclass(frozen=True, slots=True)
class Choice:
    backend: str | None  # "docker", "bwrap" or None (no code_execute)
    reason: str  # one line: why this one (and why not the others)


def choose_backend(cfg: CodeExecutionConfig) -> Choice:
    """What `codeExecution.backend` gives on this machine now, and why."""
    from klaw.sandbox.bwrap import bwrap_problem
    from klaw.sandbox.docker_backend import docker_problem

    if cfg.backend == "off":
        return Choice(None, "codeExecution.backend is off")
    url = docker_url(cfg)
    docker_why = docker_problem(url) if cfg.backend in ("auto", "docker") else None
    if cfg.backend == "docker" or (cfg.backend == "auto" and docker_why is None):
        if docker_why is None:
            return Choice("docker", f"Docker engine at {url}")
        return Choice(None, f"codeExecution.backend is docker, but {docker_why}")
    bwrap_why = bwrap_problem()
    if bwrap_why is None:
        why = f" ({docker_why})" if docker_why else ""
        return Choice("bwrap", f"bubblewrap{why}")
    if cfg.backend == "bwrap":
        return Choice(None, f"codeExecution.backend is bwrap, but {bwrap_why}")
    return Choice(None, f"{docker_why}; and {bwrap_why}")


class Sandbox:
    def __init__(
        self,
        backend: Backend,
        policy: Policy,
        outputs: Outputs,
        code_dir: Path,
        *,
        reason: str = "",
    ) -> None:
        self.backend = backend
        self.policy = policy
        self.outputs = outputs
        self.code_dir = code_dir
        self.reason = reason
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="klaw-sandbox")
        self.queued = 0

    @classmethod
    def open(
        cls,
        cfg: CodeExecutionConfig,
        paths: KlawPaths,
        *,
        choice: Choice | None = None,
        rootfs: Path | None = None,
    ) -> Sandbox | None:
        """The sandbox `cfg` asks for, or None (logged) when no backend can run.

        Raises ConfigError for mounts that would expose what must stay out. `rootfs`
        is bubblewrap's root (default: the one `klaw sandbox build` made, if any).
        """
        choice = choice or choose_backend(cfg)
        if choice.backend is None:
            log.info("code_execute is off: %s", choice.reason)
            return None
        url = docker_url(cfg)
        socket = Path(url[7:]) if url.startswith("unix://") else None
        policy = Policy.from_config(cfg, paths, docker_socket=socket)
        root = paths.state_dir / "sandbox"
        code_dir = root / "code"
        staging = paths.workspace / ".sandbox-staging"
        outputs = Outputs(
            paths.workspace, staging, uid=policy.uid, gid=policy.gid, cap_bytes=policy.output_bytes
        )
        backend: Backend
        if choice.backend == "docker":
            from klaw.sandbox.docker_backend import DockerBackend

            backend = DockerBackend(
                policy,
                base_url=url,
                image=cfg.docker_image,
                code_dir=code_dir,
                staging=staging,
                keep_alive=cfg.keep_alive,
                idle_s=cfg.keep_alive_idle_timeout_min * 60.0,
                max_runs=cfg.keep_alive_max_executions,
                instance=str(paths.state_dir),
            )
        else:
            from klaw.sandbox.bwrap import BwrapBackend

            backend = BwrapBackend(
                policy,
                code_dir=code_dir,
                staging=staging,
                rootfs=rootfs or paths.data_dir / "sandbox" / "rootfs",
            )
        log.info("code_execute runs under %s", choice.reason)
        return cls(backend, policy, outputs, code_dir, reason=choice.reason)

    # ------------------------------------------------------------------ runs

    def timeout_for(self, requested: int | None) -> int:
        limit = self.policy.timeout_s
        return limit if requested is None else max(1, min(int(requested), limit))

    async def run(
        self, chat_id: str, language: str, code: str, timeout: int | None = None
    ) -> RunResult:
        """Runs `code` for `chat_id`; RunResult even when the code fails or is killed.

        Raises SandboxError when the sandbox itself cannot run it.
        """
        if language not in INTERPRETERS:
            raise ValueError(f"language must be one of {sorted(INTERPRETERS)}")
        job = Job(language, self.timeout_for(timeout))
        loop = asyncio.get_running_loop()
        self.queued += 1
        try:
            return await loop.run_in_executor(self._worker, self._run_blocking, chat_id, job, code)
        finally:
            self.queued -= 1

    def _run_blocking(self, chat_id: str, job: Job, code: str) -> RunResult:
        _, script = INTERPRETERS[job.language]
        self.code_dir.mkdir(parents=True, exist_ok=True)
        self.code_dir.chmod(0o755)  # the sandbox's user reads the script
        for old in self.code_dir.iterdir():
            old.unlink()
        path = self.code_dir / script
        path.write_bytes(code.encode("utf-8", "replace"))  # a lone surrogate is valid JSON
        path.chmod(0o644)
        staged = self.outputs.prepare(chat_id)
        try:
            result = self.backend.run(job)
        finally:
            files, dropped = self.outputs.collect(staged)
        result.files, result.files_dropped = files, dropped
        result.timeout_s = job.timeout_s
        result.output_dir = str(self.outputs.chat_dir(chat_id).relative_to(self.outputs.workspace))
        return result

    def render(self, result: RunResult) -> str:
        return result.render(memory_bytes=self.policy.memory_bytes)

    # ------------------------------------------------------------------ upkeep

    async def upkeep(self, stop: asyncio.Event, every_s: float = UPKEEP_S) -> None:
        """Removes an idle keep-alive container until `stop` is set."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
            if not stop.is_set():
                await loop.run_in_executor(self._worker, self.backend.reap_idle)

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._worker, self.backend.close)
        self._worker.shutdown(wait=False)

    def status(self) -> dict[str, Any]:
        facts = dict(self.backend.status())
        facts.update(
            reason=self.reason,
            timeout_s=self.policy.timeout_s,
            memory_mb=self.policy.memory_bytes >> 20,
            cpus=self.policy.cpus,
            pids=self.policy.pids,
            network=self.policy.network,
            queued=self.queued,
        )
        return facts

"""The sandbox policy: one set of limits both backends apply (docs/sandbox.md).

`Policy.from_config` turns `codeExecution` into numbers and checked mounts. What is
not configurable is written here, not read: no privileges, no capabilities, a
read-only root, a non-root user, an empty environment, and no host path but the
whitelisted mounts, `/code` (the script, read-only) and `/output` (the chat's files).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from klaw.config.loader import parse_size, substitute_env
from klaw.errors import ConfigError
from klaw.mounts import Mount, parse_mount

if TYPE_CHECKING:
    from klaw.config import CodeExecutionConfig
    from klaw.paths import KlawPaths

__all__ = ["ENV", "Policy", "sandbox_ids"]

#: The whole environment of sandboxed code: nothing comes from the host (API keys stay out).
ENV: dict[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "OPENBLAS_NUM_THREADS": "1",  # one CPU's worth of threads, not one per host core
    "OMP_NUM_THREADS": "1",
}


def sandbox_ids() -> tuple[int, int]:
    """The uid:gid sandboxed code runs as: the owner's, or nobody's when Klaw runs as root.

    Files the code leaves in /output then belong to the owner (on a Pi, the user
    running Klaw); as root, never root.
    """
    uid = os.getuid()
    if uid == 0:
        return 65534, 65534
    return uid, os.getgid()


def _within(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


@dataclass(frozen=True, slots=True)
class Policy:
    timeout_s: int
    memory_bytes: int
    cpus: float
    pids: int
    output_bytes: int
    tmp_bytes: int
    network: bool
    mounts: tuple[Mount, ...]
    uid: int
    gid: int

    @classmethod
    def from_config(
        cls,
        cfg: CodeExecutionConfig,
        paths: KlawPaths,
        *,
        docker_socket: Path | None = None,
    ) -> Policy:
        """Checks the mounts against what must never be inside; ConfigError names the key."""
        env = {**os.environ, "KLAW_WORKSPACE": str(paths.workspace)}
        mounts: list[Mount] = []
        problems: list[str] = []
        # Klaw's dirs (config holds tokens, data the owner's memory, state the script),
        # and the chats' outputs with /output's staging dir (service.STAGING).
        secret = [paths.config_dir, paths.data_dir, paths.state_dir]
        secret += [paths.workspace / "outputs", paths.workspace / ".sandbox-staging"]
        sockets = [Path("/var/run/docker.sock"), Path("/run/docker.sock")]
        if docker_socket is not None:
            sockets.append(docker_socket)
        home = Path(os.environ.get("HOME") or Path.home())
        for i, entry in enumerate(cfg.volume_mounts):
            key = f"codeExecution.volumeMounts[{i}]"
            try:
                mount = parse_mount(substitute_env(entry, env) if "${" in entry else entry)
            except ValueError as exc:
                problems.append(f"{key}: {exc}")
                continue
            host = Path(os.path.realpath(mount.host))
            # Neither a parent of those, the home or the Docker socket, nor inside them.
            bad = [p for p in (*secret, *sockets, home) if _within(Path(os.path.realpath(p)), host)]
            bad += [p for p in (*secret, *sockets) if _within(host, Path(os.path.realpath(p)))]
            if bad or host == Path("/"):
                what = str(bad[0]) if bad else "/"
                problems.append(f"{key}: {entry!r} would expose {what} to sandboxed code")
                continue
            mounts.append(Mount(host, mount.target, mount.writable))
        targets = [m.target for m in mounts]
        if len(set(targets)) != len(targets):
            problems.append("codeExecution.volumeMounts: two mounts share a sandbox path")
        hosts = [m.host for m in mounts]
        if len(set(hosts)) != len(hosts):
            problems.append("codeExecution.volumeMounts: a host path is mounted twice")
        if problems:
            raise ConfigError("engine.yaml", problems)
        uid, gid = sandbox_ids()
        return cls(
            timeout_s=cfg.timeout,
            memory_bytes=parse_size(cfg.max_memory),
            cpus=float(cfg.max_cpus),
            pids=cfg.max_processes,
            output_bytes=parse_size(cfg.max_output_bytes),
            tmp_bytes=parse_size(cfg.tmp_size),
            network=cfg.allow_network,
            mounts=tuple(mounts),
            uid=uid,
            gid=gid,
        )

    def existing_mounts(self) -> list[Mount]:
        """The mounts whose host path exists now (a missing skills dir is no error)."""
        return [m for m in self.mounts if m.host.exists()]

"""`klaw sandbox build | status`: the code_execute image and what the engine runs it with.

`build` works on this machine directly (docker SDK, debootstrap); `status` asks the
running engine (container age, runs) and, when it is down, says what it would pick.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from klaw.paths import KlawPaths

__all__ = ["sandbox_build", "sandbox_status"]


def _config() -> Any:
    from klaw.config import load_engine_config

    return load_engine_config(KlawPaths.from_env().engine_config)


def sandbox_build(force: bool = False) -> int:
    from klaw.errors import ConfigError, SandboxError
    from klaw.sandbox.docker_backend import docker_problem
    from klaw.sandbox.image import build
    from klaw.sandbox.service import docker_url

    try:
        cfg = _config()
    except ConfigError as exc:
        print(f"klaw: {exc}", file=sys.stderr)
        return 1
    ce = cfg.code_execution
    url: str | None = docker_url(ce)
    why = docker_problem(url) if url else None
    if why is not None:
        print(f"{why}: building bubblewrap's root only")
        url = None
    paths = KlawPaths.from_env()
    try:
        built = build(ce, paths, docker_url=url, force=force, say=print)
    except SandboxError as exc:
        print(f"klaw: {exc}", file=sys.stderr)
        return 1
    if built.image:
        print(f"image  {built.image} ({built.how})")
    if built.rootfs:
        print(f"rootfs {built.rootfs}")
    return 0


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1f}"
    return "-" if value is None else str(value)


def sandbox_status(json_out: bool = False) -> int:
    from klaw.engine import client
    from klaw.errors import ConfigError, KlawError
    from klaw.wire.protocol import Status, StatusResult

    facts: dict[str, Any] | None = None
    engine = "running"
    try:
        reply = asyncio.run(client.request(KlawPaths.from_env(), Status()))
        if isinstance(reply, StatusResult):
            facts = dict(reply.sandbox) if reply.sandbox is not None else {"backend": None}
    except KlawError:
        engine = "not running"
    if facts is None or facts.get("backend") is None:
        from klaw.sandbox.service import choose_backend

        try:
            choice = choose_backend(_config().code_execution)
        except ConfigError as exc:
            print(f"klaw: {exc}", file=sys.stderr)
            return 1
        facts = {**(facts or {}), "backend": choice.backend, "reason": choice.reason}
    facts["engine"] = engine if "engine" not in facts else f"{engine}; docker {facts['engine']}"
    if json_out:
        print(json.dumps(facts, indent=2))
        return 0
    order = ["backend", "reason", "engine", "image", "root", "keep_alive", "container"]
    order += ["container_age_s", "container_runs", "runs", "recycled", "cgroup", "queued"]
    order += ["timeout_s", "memory_mb", "cpus", "pids", "network"]
    for key in [*order, *sorted(set(facts) - set(order))]:
        if key in facts:
            print(f"{key:<16} {_fmt(facts[key])}")
    if facts.get("backend") is None:
        print("code_execute is not offered to the model (see docs/sandbox.md)")
    return 0

"""`klaw sandbox status | build` and `klaw doctor`'s sandbox line, as real processes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from sandbox_support import CACHE, URL, bwrap_or_skip, docker_engine, say, with_sandbox

from klaw.paths import KlawPaths
from scripted_llm import FakeLLM, call

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from sched_support import engine_running, engine_yaml, klaw

__all__ = ["docker_engine"]


def write_config(paths: KlawPaths, text: str) -> None:
    paths.engine_config.parent.mkdir(parents=True, exist_ok=True)
    paths.engine_config.write_text(text)


async def test_status_without_an_engine_says_what_it_would_pick_and_why(
    klaw_home: KlawPaths,
) -> None:
    bwrap_or_skip()
    write_config(klaw_home, "codeExecution:\n  dockerHost: unix:///nonexistent/docker.sock\n")
    rc, out, err = await klaw("sandbox", "status", "--json")
    assert rc == 0, err
    facts = json.loads(out)
    assert facts["backend"] == "bwrap" and facts["engine"] == "not running"
    assert "no Docker engine: /nonexistent/docker.sock does not exist" in facts["reason"]
    write_config(klaw_home, "codeExecution:\n  backend: off\n")
    rc, out, _ = await klaw("sandbox", "status")
    assert rc == 0 and "codeExecution.backend is off" in out
    assert "code_execute is not offered to the model" in out
    write_config(klaw_home, "codeExecution:\n  backend: docker\n  dockerHost: unix:///nope.sock\n")
    rc, out, _ = await klaw("doctor")
    assert "warn  sandbox: none, code_execute is not offered" in out
    assert "codeExecution.backend is docker, but no Docker engine" in out


async def test_status_of_a_running_engine_counts_runs_and_shows_the_container(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, docker_engine: str
) -> None:
    with_sandbox(klaw_home, llm.url, {"backend": "docker", "dockerHost": URL})
    llm.answer(None, [call("c1", "code_execute", '{"language": "bash", "code": "echo 1"}')])
    llm.answer("ran")
    async with engine_running(klaw_home, backend) as server:
        assert await say(server, "run") == ["ran"]
        rc, out, err = await klaw("sandbox", "status", "--json")
        assert rc == 0, err
        facts = json.loads(out)
        assert facts["backend"] == "docker" and facts["image"] == "klaw-sandbox:latest"
        assert facts["runs"] == 1 and facts["container_runs"] == 1
        assert facts["container"].startswith("klaw-sandbox-") and facts["container_age_s"] >= 0
        assert facts["engine"] == f"running; docker {URL}"
        rc, text, _ = await klaw("sandbox", "status")
        assert "container_runs   1" in text and "network          False" in text
    rc, out, _ = await klaw("doctor")
    assert f"ok    sandbox: docker, Docker engine at {URL}, image klaw-sandbox:latest" in out


async def test_build_is_a_no_op_when_the_image_is_current(
    klaw_home: KlawPaths, docker_engine: str
) -> None:
    engine_yaml(klaw_home.engine_config, "http://127.0.0.1:9")
    with klaw_home.engine_config.open("a") as f:
        f.write(f"codeExecution:\n  dockerHost: {URL}\n")
    rc, out, err = await klaw("sandbox", "build")
    assert rc == 0, err
    assert (
        "klaw-sandbox:latest is up to date" in out and "image  klaw-sandbox:latest (cached)" in out
    )
    assert CACHE.exists()

"""The Docker backend's container: its policy as the engine reports it, keep-alive
recycling, idle removal, a container that died, and a missing image."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sandbox_support import IMAGE, docker_client, docker_engine, open_sandbox

from klaw.errors import SandboxError
from klaw.paths import KlawPaths
from klaw.sandbox.docker_backend import DockerBackend
from klaw.sandbox.service import Sandbox

__all__ = ["docker_engine"]

CHAT = "telegram_9"


@pytest.fixture
async def keepalive(klaw_home: KlawPaths, docker_engine: str) -> AsyncIterator[Sandbox]:
    (klaw_home.workspace / "skills").mkdir(parents=True)
    sb = open_sandbox(klaw_home, "docker", keepAliveMaxExecutions=3, maxProcesses=40)
    yield sb
    await sb.aclose()


def backend(sb: Sandbox) -> DockerBackend:
    assert isinstance(sb.backend, DockerBackend)
    return sb.backend


def container(sb: Sandbox) -> Any:
    return docker_client().containers.get(backend(sb).container_name)


async def test_the_container_carries_the_whole_policy(
    keepalive: Sandbox, klaw_home: KlawPaths
) -> None:
    await keepalive.run(CHAT, "bash", "true")
    attrs = container(keepalive).attrs
    host = attrs["HostConfig"]
    assert host["ReadonlyRootfs"] is True and host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["NetworkMode"] == "none"
    assert (host["Memory"], host["MemorySwap"]) == (256 << 20, 256 << 20)
    assert (host["NanoCpus"], host["PidsLimit"]) == (1_000_000_000, 40)
    assert host["Tmpfs"] == {"/tmp": f"rw,nosuid,nodev,size={64 << 20},mode=1777"}
    assert host["LogConfig"]["Type"] == "none"
    binds = sorted(host["Binds"])
    assert binds == sorted(
        [
            f"{klaw_home.state_dir / 'sandbox' / 'code'}:/code:ro",
            f"{klaw_home.workspace / '.sandbox-staging'}:/output:rw",
            f"{klaw_home.workspace / 'skills'}:/skills:ro",
        ]
    )
    assert not any("docker.sock" in b for b in binds)
    # PID 1 runs as a uid of its own, the runs (exec) as the sandbox's: out of reach.
    user = attrs["Config"]["User"]
    assert user in ("65533:65533", "65534:65534") and not user.startswith("0")
    assert user != f"{keepalive.policy.uid}:{keepalive.policy.gid}"
    env = {e.split("=", 1)[0] for e in attrs["Config"]["Env"]}
    assert env <= {"PATH", "HOME", "LANG", "LC_ALL", "PYTHONDONTWRITEBYTECODE"} | {
        "PYTHONUNBUFFERED",
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
    }


async def test_the_container_is_recycled_after_max_runs_and_made_again_when_it_died(
    keepalive: Sandbox,
) -> None:
    ids = []
    for _ in range(4):
        r = await keepalive.run(CHAT, "bash", "echo $HOSTNAME")
        assert r.exit_code == 0
        ids.append(r.stdout.text("stdout").strip())
    assert ids[0] == ids[1] == ids[2] != ids[3]  # three runs (keepAliveMaxExecutions), then new
    assert keepalive.status()["recycled"] == 1
    container(keepalive).kill()
    r = await keepalive.run(CHAT, "bash", "echo $HOSTNAME")
    assert r.exit_code == 0 and r.stdout.text("stdout").strip() not in ids
    assert keepalive.status()["container_runs"] == 1


async def test_an_idle_container_is_removed_and_the_next_run_makes_one(
    keepalive: Sandbox,
) -> None:
    await keepalive.run(CHAT, "bash", "true")
    b = backend(keepalive)
    b.reap_idle()  # not idle long enough: kept
    assert keepalive.status()["container"] == b.container_name
    b.idle_s = 0.0  # keepAliveIdleTimeoutMin is whole minutes; the rule is the same
    b.reap_idle()
    assert keepalive.status()["container"] is None
    assert b.container_name not in [c.name for c in docker_client().containers.list(all=True)]
    r = await keepalive.run(CHAT, "bash", "echo back")
    assert r.stdout.text("stdout") == "back\n"


async def test_closing_removes_the_container_and_a_stale_one_is_replaced(
    klaw_home: KlawPaths, docker_engine: str
) -> None:
    first = open_sandbox(klaw_home, "docker")
    await first.run(CHAT, "bash", "true")
    name = backend(first).container_name
    # Klaw killed without closing: the next engine finds its container and replaces it.
    second = open_sandbox(klaw_home, "docker")
    r = await second.run(CHAT, "bash", "echo fresh")
    assert r.stdout.text("stdout") == "fresh\n"
    await second.aclose()
    assert name not in [c.name for c in docker_client().containers.list(all=True)]
    await first.aclose()  # its container is gone already: nothing to remove, no error


@pytest.mark.parametrize("keep_alive", [True, False])
async def test_a_missing_image_says_how_to_build_it(
    klaw_home: KlawPaths, docker_engine: str, keep_alive: bool
) -> None:
    sb = open_sandbox(klaw_home, "docker", dockerImage="klaw-sandbox:absent", keepAlive=keep_alive)
    with pytest.raises(
        SandboxError, match=r"klaw-sandbox:absent is not built: run `klaw sandbox build`"
    ):
        await sb.run(CHAT, "bash", "true")
    await sb.aclose()
    assert IMAGE != "klaw-sandbox:absent"

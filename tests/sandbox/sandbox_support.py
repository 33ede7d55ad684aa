"""The real sandbox backends for tests: a Docker engine of the tests' own, bubblewrap,
and a `Sandbox` built from a config like the engine builds it.

The Docker engine is Debian's `dockerd`, started as root on a private socket with
`--iptables=false --bridge=none` and explicit default ulimits (which this VM needs),
its data root kept in KLAW_TEST_SANDBOX_DIR (default ~/.cache/klaw-test-sandbox) so
the image is built once per machine, and stopped when the session ends. Where it
cannot run, its tests are skipped with the reason, and KLAW_REQUIRE_SANDBOX=1 (set
by .ci/run) turns that skip into a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from klaw.config import CodeExecutionConfig
from klaw.paths import KlawPaths
from klaw.sandbox.service import Choice, Sandbox
from klaw.wire.protocol import Inbound, InboundMeta, Outbound, new_id

# engine_yaml and engine_running live with the scheduler tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))

# The user's real home: the tests' conftest points HOME at a throwaway directory.
REAL_HOME = Path(pwd.getpwuid(os.getuid()).pw_dir)
CACHE = Path(os.environ.get("KLAW_TEST_SANDBOX_DIR") or REAL_HOME / ".cache/klaw-test-sandbox")
SOCKET = Path(tempfile.gettempdir()) / "klaw-test-dockerd" / "docker.sock"
URL = f"unix://{SOCKET}"
IMAGE = "klaw-sandbox:latest"
_STARTED: list[subprocess.Popen[bytes]] = []  # the dockerds this session started on SOCKET


def unavailable(reason: str) -> None:
    """Skip, or fail where the sandbox must be tested (CI sets KLAW_REQUIRE_SANDBOX=1)."""
    if os.environ.get("KLAW_REQUIRE_SANDBOX") == "1":
        pytest.fail(f"KLAW_REQUIRE_SANDBOX=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def _answers() -> bool:
    from klaw.sandbox.docker_backend import docker_problem

    return docker_problem(URL) is None


def start_dockerd() -> subprocess.Popen[bytes] | None:
    """Our dockerd on SOCKET (None when one answers there already); skips when impossible."""
    if _answers():
        return None
    exe = shutil.which("dockerd")
    if exe is None:
        unavailable("dockerd is not installed (apt install docker.io)")
    if os.getuid() != 0:
        unavailable("dockerd needs root here")
    if dockerd_pids():  # one is there but does not answer (yet, or any more)
        stop_dockerd(force=True)
    run = SOCKET.parent
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    (CACHE / "docker").mkdir(parents=True, exist_ok=True)
    argv = [
        exe,
        "--data-root", str(CACHE / "docker"),
        "--exec-root", str(run / "exec"),
        "--pidfile", str(run / "dockerd.pid"),
        "-H", URL,
        "--iptables=false", "--ip6tables=false", "--bridge=none",
        "--storage-driver=overlay2",
        "--default-ulimit", "nofile=1024:1024",
        "--default-ulimit", "nproc=1024:1024",
    ]  # fmt: skip
    with open(run / "dockerd.log", "wb") as log:  # the daemon keeps its own copy of the fd
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while not _answers():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            tail = (run / "dockerd.log").read_text(errors="replace")[-800:]
            unavailable(f"dockerd did not start: {tail}")
        time.sleep(0.1)  # polling a daemon's socket until it answers, not a race
    _STARTED.append(proc)
    return proc


def live_processes() -> Iterator[tuple[int, int, str]]:
    """(pid, uid, command line) of every live process on the host (zombies left out)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            uid = entry.stat().st_uid
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().split(") ", 1)[1][:1]
        except (OSError, IndexError):
            continue
        if state != "Z":
            yield int(entry.name), uid, cmd


def dockerd_pids() -> list[int]:
    """Live dockerd processes serving SOCKET (found by command line: pidfiles go stale)."""
    want = f"-H {URL}"
    return [
        pid
        for pid, _, cmd in live_processes()
        if cmd.startswith("/usr/sbin/dockerd ") and want in cmd
    ]


def stop_dockerd(proc: subprocess.Popen[bytes] | None = None, *, force: bool = False) -> None:
    """Stops the dockerd on SOCKET if this session started it, or anyway with `force`,
    and waits until it has exited (containers stop with it)."""
    if proc is None and not _STARTED and not force:
        return
    pids = dockerd_pids()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while dockerd_pids():
        if time.monotonic() > deadline:
            for pid in dockerd_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)  # waiting for a process to exit, with a deadline
    for started in [proc, *_STARTED]:
        if started is not None:
            started.wait()
    _STARTED.clear()


def cache_paths() -> KlawPaths:
    """Where the image build keeps its rootfs between sessions (also bubblewrap's root)."""
    return KlawPaths(CACHE / "c", CACHE / "data", CACHE / "s", CACHE / "k", CACHE / "ws")


def ensure_image() -> None:
    from klaw.sandbox.image import build

    if shutil.which("debootstrap") is None:
        unavailable("debootstrap is not installed (apt install debootstrap)")
    build(CodeExecutionConfig(), cache_paths(), docker_url=URL, say=lambda _m: None)


def rootfs() -> Path:
    return cache_paths().data_dir / "sandbox" / "rootfs"


def config(**keys: Any) -> CodeExecutionConfig:
    """codeExecution as a user writes it (camelCase keys), on the tests' Docker engine."""
    return CodeExecutionConfig.model_validate({"dockerHost": URL, **keys})


def open_sandbox(
    paths: KlawPaths, backend: str, *, root: Path | None = None, **keys: Any
) -> Sandbox:
    """The Sandbox the engine would open for `backend` ("docker" or "bwrap")."""
    cfg = config(backend=backend, **keys)
    reason = "Docker engine (tests)" if backend == "docker" else "bubblewrap (tests)"
    sandbox = Sandbox.open(cfg, paths, choice=Choice(backend, reason), rootfs=root)
    assert sandbox is not None
    return sandbox


def docker_client() -> Any:
    import docker

    return docker.DockerClient(base_url=URL, timeout=30)


def bwrap_or_skip() -> None:
    from klaw.sandbox.bwrap import bwrap_problem

    why = bwrap_problem()
    if why is not None:
        unavailable(why)


CHAT = "telegram_100"


def with_sandbox(paths: KlawPaths, url: str, keys: dict[str, Any], **processing: Any) -> None:
    from sched_support import engine_yaml

    engine_yaml(paths.engine_config, url, **processing)
    lines = ["codeExecution:", *(f"  {k}: {json.dumps(v)}" for k, v in keys.items())]
    with paths.engine_config.open("a") as f:
        f.write("\n".join(lines) + "\n")


async def say(server: Any, text: str, chat: str = CHAT, group: bool = False) -> list[Any]:
    got: list[Any] = []

    async def reply(msg: Any) -> None:
        got.append(msg)

    msg = Inbound(
        id=new_id(),
        ts=datetime.now(UTC),
        channel="telegram",
        chat_id=chat,
        content=text,
        meta=InboundMeta(group=group),
    )
    await server.handler.handle(msg, reply)
    return [m.content for m in got if isinstance(m, Outbound)]


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[str]:
    """A running Docker engine with the sandbox image; its URL."""
    proc = start_dockerd()
    try:
        ensure_image()
        yield URL
    finally:
        stop_dockerd(proc)

"""The code sandbox's cost per call (the sandbox issue, item 8), each beside a baseline:

* a trivial run, `print(1)` in Python (group `sandbox-python`) and `echo 1` in bash
  (`sandbox-bash`), through `Sandbox.run` as `code_execute` calls it: Docker with its
  keep-alive container (warm: the container is made before the timed calls, and
  `keepAliveMaxExecutions` is raised so none is recycled among them), Docker with
  one container per run (cold: `keepAlive: false`), and bubblewrap (one namespaced
  process tree per run, on the host's /usr: the same interpreter as the baseline);
  beside the call a user makes with no sandbox, `subprocess.run([python3|bash, "-c",
  code])` in this process, with the sandbox's environment (`policy.ENV`, whose PATH
  also picks the same python3, the system's rather than a shim). A sandboxed figure
  is the whole call: the code file written, /output staged and collected, the worker
  thread, the backend; `in_backend_p50_ms` is the backend's share (`RunResult.wall_s`).
  p50/p95 are of the timed calls (warm-up excluded); no bar: wall time on a shared
  machine moves with its load (`loadavg_1m` is recorded);
* memory the keep-alive container holds after a few runs (group `sandbox-memory`):
  its cgroup's usage as Docker reports it (`container_mb`, page cache included;
  `container_anon_mb` without it), its processes' RSS, and its containerd shim (a
  host process per container that the cgroup does not count); beside it the same
  idle program (the container's PID 1, a shell waiting on `sleep`) on the host in a
  memory cgroup of its own with the same limits, after the same runs made in it.
  With no sandbox nothing is held between calls; that program is the nearest thing
  held, so the difference is what the container itself costs. `engine_mb` is the
  Docker engine's RSS (dockerd + containerd): paid once, whatever the containers.

"vs klaw" is against Klaw's default: Docker's keep-alive exec.

On a Pi 5, from the design's figures (klaw-design.md §6.5 and §12, design/klaw.md
§Sandbox), not measured here: `docker run --rm` takes 2–5 s per container start (an
SD card and ARM), against ~330 ms for a container per run measured earlier on these
machines, and the keep-alive `exec` ~100 ms against ~55–65 ms, for ~40 MB of RAM
held; a bare `bwrap` cost +4.7 ms per process here. What a Pi adds: its Cortex-A76 cores
start Python ~2–3x slower, which every variant and the baseline pay alike (the
interpreter's start dominates a trivial run); and SD-card I/O, which only the cold
path pays, for the container's layers, its state and its removal on each run, so
the cold run's gap to the warm one widens there (~6–15x its figure here, against
~1.5–2x for exec).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from smoke import scaled

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tests" / "sandbox"))
import sandbox_support as ss  # noqa: E402
from sandbox_support import docker_engine  # noqa: E402

from klaw.paths import KlawPaths  # noqa: E402
from klaw.sandbox.docker_backend import KEEPALIVE  # noqa: E402
from klaw.sandbox.policy import ENV  # noqa: E402
from klaw.sandbox.service import Sandbox  # noqa: E402

__all__ = ["docker_engine"]

T = 60.0
CHAT = "telegram_1"
WARM_ROUNDS = scaled(100, 1)  # keep-alive exec, bubblewrap, the baseline
COLD_ROUNDS = scaled(30, 1)  # a container per run
WARMUP = 3
MEMORY_RUNS = scaled(5, 1)  # runs made before memory is read

CODE = {"python": "print(1)", "bash": "echo 1"}
INTERPRETER = {"python": "python3", "bash": "bash"}
LANGUAGES = [
    pytest.param("python", marks=pytest.mark.benchmark(group="sandbox-python"), id="python"),
    pytest.param("bash", marks=pytest.mark.benchmark(group="sandbox-bash"), id="bash"),
]


@pytest.fixture
def paths(tmp_path: Path) -> KlawPaths:
    """A Klaw home of its own: the keep-alive container's name comes from its state dir,
    and bubblewrap finds no built rootfs there, so it runs on the host's /usr."""
    p = KlawPaths(
        tmp_path / "config", tmp_path / "data", tmp_path / "state", tmp_path / "cache",
        tmp_path / "workspace",
    )  # fmt: skip
    p.workspace.mkdir(parents=True)
    return p


@contextlib.contextmanager
def _sandbox(
    loop: asyncio.AbstractEventLoop, paths: KlawPaths, backend: str, **keys: Any
) -> Iterator[Sandbox]:
    """The Sandbox the engine opens; closed after (the keep-alive container removed)."""
    sb = ss.open_sandbox(paths, backend, **keys)
    try:
        yield sb
    finally:
        loop.run_until_complete(sb.aclose())


def _pct(values: list[float], q: int) -> float:
    """The q-th percentile (1 ≤ q ≤ 99)."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _measure(benchmark: Any, call: Callable[[], Any], rounds: int) -> tuple[list[float], list[Any]]:
    """WARMUP + `rounds` calls, one a round; the timed calls' seconds and results (in
    smoke mode, `--benchmark-disable` makes it one call, no warm-up)."""
    times: list[float] = []
    results: list[Any] = []

    def one() -> None:
        t0 = time.perf_counter()
        results.append(call())
        times.append(time.perf_counter() - t0)

    benchmark.pedantic(one, rounds=rounds, warmup_rounds=WARMUP, iterations=1)
    return times[-rounds:], results[-rounds:]


def _record(benchmark: Any, backend: str, times: list[float], **extra: Any) -> None:
    benchmark.extra_info.update(
        {
            "backend": backend,
            "p50_ms": statistics.median(times) * 1000,
            "p95_ms": _pct(times, 95) * 1000,
            "calls": len(times),
            **extra,
            "loadavg_1m": os.getloadavg()[0],
        }
    )


def _sandboxed(
    benchmark: Any, loop: asyncio.AbstractEventLoop, sb: Sandbox, lang: str, rounds: int
) -> None:
    times, results = _measure(
        benchmark, lambda: loop.run_until_complete(sb.run(CHAT, lang, CODE[lang])), rounds
    )
    for r in results:
        assert (r.exit_code, r.stdout.text("stdout"), r.killed_by) == (0, "1\n", None)
    _record(
        benchmark,
        sb.backend.name,
        times,
        in_backend_p50_ms=statistics.median(r.wall_s for r in results) * 1000,
    )


# --------------------------------------------------------------------------- per call


@pytest.mark.parametrize("lang", LANGUAGES)
def test_docker_exec_klaw(
    benchmark: Any, loop: asyncio.AbstractEventLoop, paths: KlawPaths, docker_engine: str, lang: str
) -> None:
    """Docker, keep-alive container made beforehand, one `exec` a call (the default)."""
    with _sandbox(loop, paths, "docker", keepAlive=True, keepAliveMaxExecutions=10_000) as sb:
        loop.run_until_complete(sb.run(CHAT, lang, CODE[lang]))  # makes the container
        _sandboxed(benchmark, loop, sb, lang, WARM_ROUNDS)
        status = sb.status()
        assert status["recycled"] == 0
        benchmark.extra_info["keep_alive"] = True


@pytest.mark.parametrize("lang", LANGUAGES)
def test_docker_run_per_call(
    benchmark: Any, loop: asyncio.AbstractEventLoop, paths: KlawPaths, docker_engine: str, lang: str
) -> None:
    """Docker, a fresh container a call (`keepAlive: false`): create, start, wait, remove."""
    with _sandbox(loop, paths, "docker", keepAlive=False) as sb:
        _sandboxed(benchmark, loop, sb, lang, COLD_ROUNDS)
        benchmark.extra_info["keep_alive"] = False


@pytest.mark.parametrize("lang", LANGUAGES)
def test_bwrap(
    benchmark: Any, loop: asyncio.AbstractEventLoop, paths: KlawPaths, lang: str
) -> None:
    """bubblewrap, one namespaced process tree a call: prlimit, bwrap, setpriv (as root)
    and the sh wrapper, in a cgroup made and removed per call where one can be made (as
    root on cgroup v1 here); more than the bare `bwrap` of the design's +4.7 ms."""
    ss.bwrap_or_skip()
    with _sandbox(loop, paths, "bwrap") as sb:
        _sandboxed(benchmark, loop, sb, lang, WARM_ROUNDS)
        benchmark.extra_info["root"] = "host /usr"
        benchmark.extra_info["cgroup"] = bool(getattr(sb.backend, "last_cgroup", False))


@pytest.mark.parametrize("lang", LANGUAGES)
def test_subprocess_baseline(benchmark: Any, lang: str) -> None:
    """No sandbox: `subprocess.run([interpreter, "-c", code])` in this process."""
    exe = shutil.which(INTERPRETER[lang], path=ENV["PATH"])
    assert exe is not None
    argv = [exe, "-c", CODE[lang]]

    def call() -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, env=dict(ENV), timeout=T)

    times, results = _measure(benchmark, call, WARM_ROUNDS)
    for r in results:
        assert (r.returncode, r.stdout) == (0, "1\n")
    _record(benchmark, "none", times, interpreter=exe)


# --------------------------------------------------------------------------- memory


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0  # a zombie, or a kernel thread


def _pids(match: Callable[[str], bool]) -> list[int]:
    """Host processes whose command line (NUL-separated) `match` accepts."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if match((entry / "cmdline").read_text(errors="replace")):
                    out.append(int(entry.name))
    return out


def _mb(kb: int) -> float:
    return kb / 1024


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _engine_kb() -> int:
    """RSS of the dockerd on the benches' socket and of the containerd it started."""
    dockerd = _pids(lambda c: c.split("\0", 1)[0].endswith("dockerd") and ss.URL in c)
    containerd = [p for p in _pids(lambda c: c.startswith("containerd\0")) if _ppid(p) in dockerd]
    return sum(_rss_kb(p) for p in dockerd + containerd)


@pytest.mark.benchmark(group="sandbox-memory")
def test_memory_keepalive_container_klaw(
    benchmark: Any, loop: asyncio.AbstractEventLoop, paths: KlawPaths, docker_engine: str
) -> None:
    """The keep-alive container after MEMORY_RUNS python runs. Docker's usage is its
    cgroup's: anonymous memory and the page cache charged to it; `held_mb` adds the
    shim. The figure timed is only the reading (`docker stats` waits ~1 s for a second
    sample), as in the baseline: compare the MB in extra_info, not the times."""
    with _sandbox(loop, paths, "docker", keepAlive=True) as sb:
        for _ in range(MEMORY_RUNS):
            r = loop.run_until_complete(sb.run(CHAT, "python", CODE["python"]))
            assert r.exit_code == 0
        client = ss.docker_client()
        try:
            container = client.containers.get(sb.backend.container_name)  # type: ignore[attr-defined]

            def read() -> dict[str, Any]:
                stats: dict[str, Any] = container.stats(stream=False)["memory_stats"]
                top = container.top()
                col = top["Titles"].index("PID")
                pids = [int(p[col]) for p in top["Processes"]]
                shim = _pids(lambda c: "containerd-shim" in c and str(container.id) in c)
                return {
                    "stats": stats,
                    "pids": pids,
                    "processes_kb": sum(_rss_kb(p) for p in pids),
                    "shim_kb": sum(_rss_kb(p) for p in shim),
                }

            got = benchmark.pedantic(read, rounds=1)
        finally:
            client.close()
        stats = got["stats"]
        detail = stats.get("stats") or {}
        anon = detail.get("total_rss", detail.get("rss", detail.get("anon", 0)))
        processes_kb, shim_kb = got["processes_kb"], got["shim_kb"]
        benchmark.extra_info.update(
            {
                "backend": "docker",
                "runs": MEMORY_RUNS,
                "container_mb": stats["usage"] / 2**20,
                "container_anon_mb": anon / 2**20,
                "processes": len(got["pids"]),
                "processes_rss_mb": _mb(processes_kb),
                "shim_mb": _mb(shim_kb),
                "held_mb": stats["usage"] / 2**20 + _mb(shim_kb),
                "engine_mb": _mb(_engine_kb()),
            }
        )


def _cgroup_memory(d: Path) -> tuple[int, int]:
    """(usage, anonymous) bytes of a memory cgroup, v1 or v2."""
    if (d / "memory.usage_in_bytes").exists():
        usage = int((d / "memory.usage_in_bytes").read_text())
        key = "total_rss"
    else:
        usage = int((d / "memory.current").read_text())
        key = "anon"
    stat = dict(line.split() for line in (d / "memory.stat").read_text().splitlines())
    return usage, int(stat.get(key, 0))


@pytest.mark.benchmark(group="sandbox-memory")
def test_memory_idle_program_baseline(benchmark: Any, paths: KlawPaths) -> None:
    """The keep-alive container's PID 1 program (`sh` waiting on `sleep`) as host
    processes in a memory cgroup of their own (the container's limits), after the same
    MEMORY_RUNS plain `python3 -c` runs in that cgroup. Without a cgroup (no root, no
    delegation) only the RSS is recorded."""
    from klaw.sandbox.cgroups import make_run_cgroup
    from klaw.sandbox.policy import Policy

    policy = Policy.from_config(ss.config(), paths)
    cg = make_run_cgroup(policy.memory_bytes, policy.pids)
    join = ["/bin/sh", "-c", 'for f in $PROCS; do echo $$ > "$f"; done; exec "$@"', "sh"]
    env = {**ENV, "PROCS": " ".join(cg.procs) if cg else ""}
    python3 = shutil.which("python3", path=ENV["PATH"])
    assert python3 is not None
    for _ in range(MEMORY_RUNS):
        subprocess.run([*join, python3, "-c", CODE["python"]], env=env, check=True, timeout=T)
    idle = subprocess.Popen([*join, *KEEPALIVE], env=env, start_new_session=True)
    try:

        def children() -> list[int]:
            sleeps = _pids(lambda c: c.startswith("sleep\0"))
            return [pid for pid in sleeps if _ppid(pid) == idle.pid]

        deadline = time.monotonic() + T
        while not children():  # the shell has not started its `sleep` yet
            assert time.monotonic() < deadline and idle.poll() is None
            time.sleep(0.01)

        def read() -> dict[str, Any]:
            pids = [idle.pid, *children()]
            usage = _cgroup_memory(cg.dirs[0]) if cg else None
            return {"pids": pids, "rss_kb": sum(_rss_kb(p) for p in pids), "usage": usage}

        got = benchmark.pedantic(read, rounds=1)
    finally:
        idle.terminate()
        idle.wait(timeout=T)
        if cg is not None:
            cg.remove()
    processes_kb = got["rss_kb"]
    extra: dict[str, Any] = {
        "backend": "none",
        "runs": MEMORY_RUNS,
        "processes": len(got["pids"]),
        "processes_rss_mb": _mb(processes_kb),
    }
    if got["usage"] is not None:
        usage, anon = got["usage"]
        extra.update(cgroup_mb=usage / 2**20, cgroup_anon_mb=anon / 2**20, held_mb=usage / 2**20)
    else:
        extra["held_mb"] = _mb(processes_kb)
    benchmark.extra_info.update(extra)

"""Containment under attack, against a real Docker engine (keep-alive and one container
per run) and a real bubblewrap: network, writes, host files and secrets, fork bombs,
memory hogs, CPU burners, output floods, and what one run leaves for the next."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sandbox_support import bwrap_or_skip, docker_engine, live_processes, open_sandbox

from klaw.paths import KlawPaths
from klaw.sandbox.service import Sandbox
from klaw.tools.code import CodeExecute

__all__ = ["docker_engine"]

CHAT = "telegram_42"
BACKENDS = ["docker", "docker-once", "bwrap"]


@pytest.fixture(params=BACKENDS)
async def sandbox(request: pytest.FixtureRequest, klaw_home: KlawPaths) -> AsyncIterator[Sandbox]:
    kind = request.param
    if kind.startswith("docker"):
        request.getfixturevalue("docker_engine")
    else:
        bwrap_or_skip()
    (klaw_home.workspace / "skills" / "weather").mkdir(parents=True)
    (klaw_home.workspace / "skills" / "weather" / "SKILL.md").write_text("# weather\n")
    sb = open_sandbox(
        klaw_home,
        "docker" if kind.startswith("docker") else "bwrap",
        keepAlive=kind != "docker-once",
        maxMemory="128m",
        maxProcesses=48,
        timeout=20,
    )
    yield sb
    await sb.aclose()


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on the host's 127.0.0.1; the list records every connection."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    seen: list[str] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, addr = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            seen.append(str(addr))
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], seen
    done.set()
    t.join()
    srv.close()


def sandbox_pids(uid: int, marker: str) -> list[int]:
    """Host processes of the sandbox's uid whose command line holds `marker`."""
    return [pid for pid, owner, cmd in live_processes() if owner == uid and marker in cmd]


def gone(uid: int, marker: str, within_s: float = 10.0) -> bool:
    """True once no live process matches (SIGKILLed ones take a moment to leave)."""
    deadline = time.monotonic() + within_s
    while sandbox_pids(uid, marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # polling for a condition with a deadline, not a race
    return True


async def test_network_out_fails_to_the_host_and_elsewhere(
    sandbox: Sandbox, listener: tuple[int, list[str]]
) -> None:
    port, seen = listener
    code = f"""
import socket
for host, port in [("127.0.0.1", {port}), ("10.255.255.53", 53), ("1.1.1.1", 443)]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print("CONNECTED", host)
    except OSError as e:
        print("blocked", host, type(e).__name__)
try:
    socket.getaddrinfo("deb.debian.org", 80)
    print("RESOLVED")
except OSError as e:
    print("no dns", type(e).__name__)
"""
    r = await sandbox.run(CHAT, "python", code)
    out = r.stdout.text("stdout")
    assert r.exit_code == 0, sandbox.render(r)
    assert "CONNECTED" not in out and "RESOLVED" not in out
    assert out.count("blocked") == 3 and "no dns" in out
    assert seen == []  # nothing reached the host's loopback


async def test_allow_network_under_bubblewrap_shares_the_hosts_network(
    klaw_home: KlawPaths, listener: tuple[int, list[str]]
) -> None:
    # docs/sandbox.md warns of exactly this: the host's 127.0.0.1 is reachable.
    bwrap_or_skip()
    port, seen = listener
    sb = open_sandbox(klaw_home, "bwrap", allowNetwork=True)
    try:
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5).close()"
        r = await sb.run(CHAT, "python", code)
        assert r.exit_code == 0, sb.render(r)
        assert "The network is reachable." in CodeExecute(sb, CHAT).schema().description
    finally:
        await sb.aclose()
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.02)  # the listener thread accepts what is already queued
    assert len(seen) == 1


async def test_writes_outside_tmp_and_output_fail_and_output_is_kept_per_chat(
    sandbox: Sandbox, klaw_home: KlawPaths
) -> None:
    code = """
import os
for path in ["/x", "/etc/x", "/usr/x", "/code/x", "/skills/x", "/var/x", "/root/x", "/home/x"]:
    try:
        open(path, "w").write("x")
        print("WROTE", path)
    except OSError as e:
        print("refused", path, e.errno)
open("/tmp/t.txt", "w").write("tmp ok")
os.makedirs("/output/plots", exist_ok=True)
open("/output/plots/chart.svg", "w").write("<svg/>")
print(open("/tmp/t.txt").read())
"""
    r = await sandbox.run(CHAT, "python", code)
    out = r.stdout.text("stdout")
    assert r.exit_code == 0, sandbox.render(r)
    assert "WROTE" not in out and out.count("refused") == 8 and "tmp ok" in out
    kept = klaw_home.workspace / "outputs" / CHAT / "plots" / "chart.svg"
    assert kept.read_text() == "<svg/>"
    assert [f.path for f in r.files] == ["plots/chart.svg"]
    assert "files written to /output (kept in outputs/telegram_42)" in sandbox.render(r)
    # Another chat's /output does not hold this chat's files; this chat's next run does.
    other = await sandbox.run("telegram_7", "bash", "ls -A /output | wc -l")
    assert other.stdout.text("stdout").strip() == "0"
    again = await sandbox.run(CHAT, "bash", "cat /output/plots/chart.svg")
    assert again.stdout.text("stdout") == "<svg/>" and again.files == []


async def test_host_files_and_the_owners_environment_are_invisible(
    sandbox: Sandbox, klaw_home: KlawPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GLM_API_KEY", "sk-secret-glm-4242")
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:secret-token-4242")
    klaw_home.config_dir.mkdir(parents=True, exist_ok=True)
    secret = klaw_home.config_dir / "engine.yaml"
    secret.write_text("apiKey: sk-secret-in-file-4242\n")
    (klaw_home.workspace / "MEMORY.md").write_text("owner secret 4242\n")
    marker = klaw_home.workspace.parent / "host-marker.txt"  # any host file outside the mounts
    marker.write_text("host file 4242\n")
    code = f"""
import os
print(sorted(os.environ.items()))
for path in [{str(secret)!r}, {str(klaw_home.workspace / "MEMORY.md")!r}, {str(marker)!r},
             {str(Path.home())!r}, "/var/run/docker.sock", "/run/docker.sock"]:
    print(path, os.path.exists(path))
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        print(open(f"/proc/{{pid}}/environ", "rb").read())
    except OSError as e:
        print(pid, "environ unreadable")
print(os.getuid(), os.getgid())
"""
    r = await sandbox.run(CHAT, "python", code)
    out = r.stdout.text("stdout")
    assert r.exit_code == 0, sandbox.render(r)
    assert "4242" not in out and "KLAW_" not in out
    assert " True" not in out  # none of the host paths exists inside
    uid = int(out.split()[-2])
    assert uid != 0 and uid == sandbox.policy.uid


async def test_a_fork_bomb_is_stopped_by_the_pids_limit(sandbox: Sandbox) -> None:
    code = """
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "741"])
        n += 1
except OSError as e:
    print("forks", n, type(e).__name__)
"""
    r = await sandbox.run(CHAT, "python", code)
    out = r.stdout.text("stdout").split()
    assert r.exit_code == 0 and out[0] == "forks" and out[2] == "BlockingIOError"
    assert 0 < int(out[1]) < sandbox.policy.pids
    # Every child went with the run; the sandbox still works.
    assert gone(sandbox.policy.uid, "sleep 741")
    bomb = await sandbox.run(CHAT, "bash", ":(){ :|:& };:", timeout=3)
    assert bomb.killed_by in ("timeout", None)
    after = await sandbox.run(CHAT, "python", "print('still here')")
    assert after.stdout.text("stdout") == "still here\n" and after.exit_code == 0


async def test_a_memory_hog_is_killed_and_reported(sandbox: Sandbox) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 * 1024))\n"
    r = await sandbox.run(CHAT, "python", code)
    assert r.killed_by == "memory", sandbox.render(r)
    assert "KILLED: the memory limit (128 MB) was reached" in sandbox.render(r)
    after = await sandbox.run(CHAT, "python", "print(2 + 2)")
    assert after.stdout.text("stdout") == "4\n"


async def test_a_cpu_burner_and_its_whole_process_tree_die_at_the_timeout(
    sandbox: Sandbox,
) -> None:
    code = (
        "sleep 731 & setsid sh -c 'sleep 732' & python3 -c 'while True: pass' & while :; do :; done"
    )
    r = await sandbox.run(CHAT, "bash", code, timeout=2)
    assert r.killed_by == "timeout" and r.exit_code is None
    assert "KILLED: the 2 s time limit was reached" in sandbox.render(r)
    for marker in ("sleep 731", "sleep 732", "while True: pass"):
        assert gone(sandbox.policy.uid, marker), marker


async def test_an_output_flood_is_cut_without_the_engines_memory_growing(
    sandbox: Sandbox,
) -> None:
    def rss_kb() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    await sandbox.run(CHAT, "python", "print(1)")  # warm: container and threads exist
    before = rss_kb()
    r = await sandbox.run(CHAT, "bash", "yes 'flood flood flood'; echo never")
    grown_mb = (rss_kb() - before) / 1024
    assert r.killed_by == "output"
    text = sandbox.render(r)
    assert len(text) < 12_000 and "stdout cut:" in text and "KILLED: it printed more than" in text
    assert grown_mb < 24, grown_mb
    # stderr's tail survives a flood on stdout: where a traceback ends.
    r = await sandbox.run(
        CHAT, "python", "import sys\nprint('x' * 100000)\nraise SystemExit('the end of it')"
    )
    assert r.exit_code == 1 and r.stderr.text("stderr").strip() == "the end of it"
    assert "stdout cut: 92001 bytes left out of 100001" in sandbox.render(r)


async def test_nothing_of_one_run_is_left_for_the_next(sandbox: Sandbox) -> None:
    first = (
        "echo secret > /tmp/left.txt; echo shm > /dev/shm/left; ipcmk -M 4096 >/dev/null; "
        "(sleep 733 &) ; nohup sleep 734 >/dev/null 2>&1 &"
    )
    r = await sandbox.run(CHAT, "bash", first)
    assert r.exit_code == 0, sandbox.render(r)
    assert gone(sandbox.policy.uid, "sleep 733") and gone(sandbox.policy.uid, "sleep 734")
    second = await sandbox.run(
        "telegram_7",
        "bash",
        "ls -A /tmp /dev/shm | grep -vc ':$'; ipcs -m | grep -c '^0x'; echo end",
    )
    # Only the empty lines `ls` prints between the two directories; no segment left.
    assert second.stdout.text("stdout") == "1\n0\nend\n", sandbox.render(second)


async def test_a_script_that_kills_its_wrapper_leaves_nothing_behind(sandbox: Sandbox) -> None:
    code = (
        "echo left > /tmp/left; (setsid sleep 745 </dev/null >/dev/null 2>&1 &); "
        "kill -9 $PPID; sleep 0.2"
    )
    await sandbox.run(CHAT, "bash", code)
    assert gone(sandbox.policy.uid, "sleep 745")
    after = await sandbox.run("telegram_7", "bash", "ls -A /tmp; echo end")
    assert after.stdout.text("stdout") == "end\n" and after.exit_code == 0


async def test_runs_asked_for_at_once_run_one_at_a_time_in_order(sandbox: Sandbox) -> None:
    runs = [
        sandbox.run(CHAT, "bash", f"echo {i} >> /output/order.txt; sleep 0.05") for i in range(8)
    ]
    results = await asyncio.gather(*runs)
    assert all(r.exit_code == 0 for r in results)
    final = await sandbox.run(CHAT, "bash", "cat /output/order.txt")
    assert final.stdout.text("stdout").split() == [str(i) for i in range(8)]


async def test_skills_are_readable_at_skills_and_bad_code_is_a_normal_result(
    sandbox: Sandbox,
) -> None:
    r = await sandbox.run(CHAT, "bash", "cat /skills/weather/SKILL.md")
    assert r.stdout.text("stdout") == "# weather\n"
    r = await sandbox.run(CHAT, "python", "def broken(:\n")
    assert r.exit_code == 1 and "SyntaxError" in r.stderr.text("stderr")
    text = sandbox.render(r)
    assert text.startswith("exit code: 1, wall time") and "--- stderr ---" in text
    r = await sandbox.run(CHAT, "python", "print('ünïcode ✓')")
    assert r.stdout.text("stdout") == "ünïcode ✓\n"
    r = await sandbox.run(CHAT, "bash", "printf '\\xff\\xfe ok'")
    assert r.stdout.text("stdout") == "\ufffd\ufffd ok"


async def test_etc_and_mounts_are_readable_and_odd_code_is_just_code(
    klaw_home: KlawPaths,
) -> None:
    bwrap_or_skip()
    data = klaw_home.workspace.parent / "exports"
    data.mkdir()
    (data / "in.csv").write_text("a,b\n")
    sb = open_sandbox(
        klaw_home,
        "bwrap",
        volumeMounts=["${KLAW_WORKSPACE}/skills:ro", f"{data}:/mnt/data/in:ro"],
    )
    try:
        r = await sb.run(
            CHAT, "bash", "head -c 0 /etc/hosts && echo etc-ok; whoami; cat /mnt/data/in/in.csv"
        )
        assert r.stdout.text("stdout") == "etc-ok\nsandbox\na,b\n", sb.render(r)
        # What the code prints is never taken for bubblewrap's own failure.
        r = await sb.run(CHAT, "bash", "echo 'bwrap: cannot find source path' >&2; exit 1")
        assert r.exit_code == 1 and "bwrap:" in r.stderr.text("stderr")
        # A lone surrogate is valid JSON; the script gets U+FFFD, not an engine error.
        r = await sb.run(CHAT, "python", "print(len('\ud83d'))")
        assert r.stdout.text("stdout") == "1\n"
        r = await sb.run(CHAT, "bash", "sleep 60", timeout=1)
        assert r.killed_by == "timeout"
    finally:
        await sb.aclose()
    own = [p for p in Path("/sys/fs/cgroup").glob(f"*/**/klaw-sandbox-{os.getpid()}-*")]
    assert own == []  # every run's cgroup removed, the killed one's too


def test_a_run_cgroup_carries_memory_pids_and_cpu_limits() -> None:
    from klaw.sandbox.cgroups import make_run_cgroup

    cg = make_run_cgroup(64 << 20, 12, 0.5)
    if cg is None:
        pytest.skip("no cgroup can be made here (bubblewrap then relies on rlimits)")
    try:
        wanted = {"memory.max", "pids.max", "cpu.max", "memory.limit_in_bytes", "cpu.cfs_quota_us"}
        files = {
            p.name: p.read_text().strip() for d in cg.dirs for p in d.iterdir() if p.name in wanted
        }
        if cg.v2:
            assert files["memory.max"] == str(64 << 20) and files["pids.max"] == "12"
            assert files.get("cpu.max", "50000 100000") == "50000 100000"
        else:
            assert files["memory.limit_in_bytes"] == str(64 << 20) and files["pids.max"] == "12"
            if Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists():
                assert files["cpu.cfs_quota_us"] == "50000"  # half of one CPU
    finally:
        cg.remove()
    assert not any(d.exists() for d in cg.dirs)


def test_nproc_is_not_ignored_because_klaw_runs_as_root() -> None:
    # The design's measurement: RLIMIT_NPROC binds only below root, hence the uid drop.
    from klaw.sandbox.policy import sandbox_ids

    uid, gid = sandbox_ids()
    assert uid != 0 and gid != 0
    assert (uid, gid) == ((65534, 65534) if os.getuid() == 0 else (os.getuid(), os.getgid()))

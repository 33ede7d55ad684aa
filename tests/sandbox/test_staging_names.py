"""Whatever names the code leaves in /output, the staging directory is emptied before
the next run (hostile 4: one `os.makedirs('/output/.klaw-flat-1/x')` used to make every
later run of every chat fail "could not be emptied", on both backends, across restarts),
and a file name that is not UTF-8 reaches the model spelled out (it failed the turn).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from sandbox_support import URL, bwrap_or_skip, docker_engine, open_sandbox, say, with_sandbox

from klaw.paths import KlawPaths
from klaw.sandbox.outputs import Outputs
from scripted_llm import FakeLLM, call

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from sched_support import engine_running

__all__ = ["docker_engine"]

# Names Klaw itself uses while it flattens the tree, made by the code first: as a
# directory holding a directory (the rename would go into its own child), as a file,
# as a link out of the sandbox, as an empty directory, one under another, and a name
# that is not UTF-8.
HOSTILE = r"""
import os
os.makedirs("/output/.klaw-flat-1/x")
os.makedirs("/output/.klaw-flat-2/.klaw-flat-3/y/z")
open("/output/.klaw-flat-4", "w").write("a file")
os.symlink("/", "/output/.klaw-flat-5")
os.makedirs("/output/.klaw-flat-6")
os.makedirs("/output/d/.klaw-flat-1/e")
os.makedirs(b"/output/\xff\xfe/\xff")
os.makedirs("/output/locked/inner/deeper")
os.chmod("/output/locked/inner", 0)
print("made")
"""


def test_names_klaw_uses_while_emptying_are_no_obstacle(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    out = Outputs(ws, ws / ".sandbox-staging", uid=os.getuid(), gid=os.getgid(), cap_bytes=1 << 20)
    staged = out.prepare("a")
    stage = out.staging
    (stage / ".klaw-flat-1" / "x").mkdir(parents=True)
    (stage / ".klaw-flat-2" / ".klaw-flat-3" / "y").mkdir(parents=True)
    (stage / ".klaw-flat-4").write_text("a file")
    (stage / ".klaw-flat-5").symlink_to(victim)
    (stage / ".klaw-flat-6").mkdir()
    (stage / "d" / ".klaw-flat-1" / "e").mkdir(parents=True)
    os.makedirs(os.fsencode(stage) + b"/\xff\xfe/\xff")
    (stage / "kept.txt").write_text("kept")
    out.collect(staged)
    assert list(stage.iterdir()) == []
    assert (out.chat_dir("a") / "kept.txt").read_text() == "kept"
    assert (victim / "precious.txt").read_text() == "keep me"
    other = out.prepare("b")
    assert list(stage.iterdir()) == []
    assert out.collect(other) == ([], [])


def test_names_that_are_not_utf8_are_kept_spelled_out_and_a_clash_is_dropped(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    out = Outputs(ws, ws / ".sandbox-staging", uid=os.getuid(), gid=os.getgid(), cap_bytes=1 << 20)
    staged = out.prepare("a")
    stage = os.fsencode(out.staging)
    os.makedirs(stage + b"/d\xe9j\xe0")
    with open(stage + b"/d\xe9j\xe0/\xff.txt", "wb") as f:
        f.write(b"bytes")
    (out.staging / "d\\xe9j\\xe0").mkdir()
    (out.staging / "d\\xe9j\\xe0" / "\\xff.txt").write_text("four characters")
    kept, dropped = out.collect(staged)
    assert [f.path for f in kept] == ["d\\xe9j\\xe0/\\xff.txt"]
    assert dropped == ["d\\xe9j\\xe0/\\xff.txt (another file has that name)"]
    assert (out.chat_dir("a") / "d\\xe9j\\xe0" / "\\xff.txt").is_file()
    again = out.prepare("a")  # the kept copy comes back under its spelled-out name
    assert (out.staging / "d\\xe9j\\xe0" / "\\xff.txt").is_file()
    assert out.collect(again) == ([], [])


@pytest.fixture(params=["docker", "bwrap"])
def sandbox_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_engine")
    else:
        bwrap_or_skip()
    return str(request.param)


async def test_a_run_that_makes_klaws_own_names_leaves_later_runs_working(
    klaw_home: KlawPaths, sandbox_backend: str
) -> None:
    for start in range(2):  # the engine started anew: the same staging directory
        sandbox = open_sandbox(klaw_home, sandbox_backend, timeout=20)
        try:
            made = await sandbox.run("telegram_1", "python", HOSTILE)
            assert made.stdout.text("stdout") == "made\n", sandbox.render(made)
            other = await sandbox.run(f"telegram_{start + 2}", "bash", "ls -A /output | wc -l")
            assert other.exit_code == 0, sandbox.render(other)
            assert other.stdout.text("stdout") == "0\n", sandbox.render(other)
        finally:
            await sandbox.aclose()


async def test_a_file_name_that_is_not_utf8_reaches_the_model_spelled_out(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, sandbox_backend: str
) -> None:
    keys = {"backend": sandbox_backend}
    if sandbox_backend == "docker":
        keys["dockerHost"] = URL
    with_sandbox(klaw_home, llm.url, keys, maxToolCallRounds=3)
    code = "open(b'/output/\\xff\\xfe.txt', 'w').write('x'); open('/output/ok.txt', 'w'); print(1)"
    llm.answer(None, [call("c1", "code_execute", json.dumps({"language": "python", "code": code}))])
    llm.answer("Two files written.")
    async with engine_running(klaw_home, backend) as server:
        assert await say(server, "Write the files") == ["Two files written."]
    result = next(m["content"] for m in llm.requests[1]["messages"] if m["role"] == "tool")
    assert "\\xff\\xfe.txt (1 bytes)" in result and "ok.txt (0 bytes)" in result
    kept = klaw_home.workspace / "outputs" / "telegram_100"
    assert sorted(p.name for p in kept.iterdir()) == ["\\xff\\xfe.txt", "ok.txt"]
    assert (kept / "\\xff\\xfe.txt").read_text() == "x"

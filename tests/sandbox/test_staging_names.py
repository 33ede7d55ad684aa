"""Whatever names the code leaves in /output, the staging directory is emptied before
the next run (hostile 4: one `os.makedirs('/output/.klaw-flat-1/x')` used to make every
later run of every chat fail "could not be emptied", on both backends, across restarts).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sandbox_support import bwrap_or_skip, docker_engine, open_sandbox

from klaw.paths import KlawPaths
from klaw.sandbox.outputs import Outputs

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


@pytest.fixture(params=["docker", "bwrap"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_engine")
    else:
        bwrap_or_skip()
    return str(request.param)


async def test_a_run_that_makes_klaws_own_names_leaves_later_runs_working(
    klaw_home: KlawPaths, backend: str
) -> None:
    for start in range(2):  # the engine started anew: the same staging directory
        sandbox = open_sandbox(klaw_home, backend, timeout=20)
        try:
            made = await sandbox.run("telegram_1", "python", HOSTILE)
            assert made.stdout.text("stdout") == "made\n", sandbox.render(made)
            other = await sandbox.run(f"telegram_{start + 2}", "bash", "ls -A /output | wc -l")
            assert other.exit_code == 0, sandbox.render(other)
            assert other.stdout.text("stdout") == "0\n", sandbox.render(other)
        finally:
            await sandbox.aclose()

"""Starting on a read-only filesystem (a real read-only tmpfs): one clear line naming
the path and the cure, exit 1, no traceback; doctor tells read-only from permissions."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from klaw.paths import KlawPaths
from scripted_llm import write_engine_yaml

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@contextlib.contextmanager
def read_only(where: Path) -> Iterator[None]:
    """An empty read-only tmpfs mounted at `where`."""
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(where)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def klaw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "klaw.cli.app", *args],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=120,
        check=False,
    )


def one_error(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, stderr
    return errors[0]


@pytest.mark.parametrize("daemon", ["engine", "gateway"])
def test_a_read_only_state_dir_is_one_clear_line(klaw_home: KlawPaths, daemon: str) -> None:
    klaw_home.engine_config.parent.mkdir(parents=True)
    write_engine_yaml(klaw_home.engine_config, "http://127.0.0.1:9")
    with read_only(klaw_home.state_dir):
        done = klaw(daemon)
    assert done.returncode == 1
    line = one_error(done.stderr)
    assert str(klaw_home.state_dir) in line
    assert "read-only" in line
    assert "chown" not in line  # permissions are not the problem here


def test_a_read_only_data_dir_stops_the_engine_with_one_line(klaw_home: KlawPaths) -> None:
    klaw_home.engine_config.parent.mkdir(parents=True)
    write_engine_yaml(klaw_home.engine_config, "http://127.0.0.1:9")
    with read_only(klaw_home.data_dir):
        done = klaw("engine")
    assert done.returncode == 1
    line = one_error(done.stderr)
    assert "read-only" in line
    assert str(klaw_home.data_dir) in line


def test_doctor_advises_remounting_a_read_only_dir(klaw_home: KlawPaths) -> None:
    assert klaw("init").returncode == 0
    with read_only(klaw_home.state_dir):
        done = klaw("doctor")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    report = [ln for ln in done.stdout.splitlines() if "state dir" in ln]
    assert any("read-only" in ln for ln in report), done.stdout
    assert "chown" not in done.stdout.split("state dir", 1)[1].split("\n\n")[0]

"""One engine per data dir (hostile case 18): a second `klaw engine`, or `klaw reindex`,
started with only XDG_STATE_HOME changed finds the same klaw.db and scheduler.db and
must be refused, not merely kept apart by the ledger."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from sched_support import T, engine_running, engine_yaml

from klaw.paths import KlawPaths
from scripted_llm import FakeLLM


async def _klaw_elsewhere(state_home: Path, *args: str) -> tuple[int, str]:
    """`klaw ARGS` as a process whose state dir differs from the test's (the XDG
    variable only, as a user's second login session or service unit would)."""
    env = {k: v for k, v in os.environ.items() if k != "KLAW_STATE_DIR"}
    env["XDG_STATE_HOME"] = str(state_home)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "klaw.cli.app", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 2 * T)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"`klaw {' '.join(args)}` was not refused: it kept running") from None
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_a_second_engine_with_another_state_dir_is_refused(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, tmp_path: Path
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    elsewhere = tmp_path / "other-state"
    async with engine_running(klaw_home, backend):
        rc, out = await _klaw_elsewhere(elsewhere, "engine")
        assert rc == 1, out
        assert "another engine is already running" in out
        assert f"{klaw_home.data_dir} (klaw.db, scheduler.db) is in use" in out
        assert "another state dir (XDG_STATE_HOME or KLAW_STATE_DIR)" in out

        rc, out = await _klaw_elsewhere(elsewhere, "reindex")
        assert rc == 1 and f"{klaw_home.data_dir} (klaw.db, scheduler.db) is in use" in out
    assert not (elsewhere / "klaw" / "engine.sock").exists()
    # The first engine's lock went with it: an engine elsewhere may start now.
    rc, out = await _klaw_elsewhere(elsewhere, "reindex")
    assert rc == 0, out

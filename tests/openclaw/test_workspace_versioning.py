"""Versioned memory through the real engine: the OpenClaw write-back of facts the model
saves is one commit each, while the owner's hand edit of MEMORY.md, made while Klaw
runs and not committed, stays theirs (issue 25 item 7)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from sched_support import engine_running
from test_workspace import CHAT, say, writeback_yaml

from klaw.memory.versioning import AUTHOR_EMAIL, versioner
from klaw.paths import KlawPaths
from scripted_llm import FakeLLM, call


def git(ws: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ws), *args], capture_output=True, text=True, check=True
    ).stdout


async def test_write_back_commits_and_the_owners_edit_stays_uncommitted(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    writeback_yaml(klaw_home, llm.url)
    with klaw_home.engine_config.open("a") as f:
        f.write("memory:\n  git: true\n")
    ws = klaw_home.workspace
    (ws / "MEMORY.md").write_text("# MEMORY.md\n\n- Mara prefers tea.\n", encoding="utf-8")
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    bike = json.dumps({"content": "Mara's bike is blue", "durable": True})
    llm.answer(None, [call("c1", "memory_save", bike)])
    llm.answer("Noted.")
    lena = json.dumps({"content": "Lena visits in May", "durable": True})
    llm.answer(None, [call("c2", "memory_save", lena)])
    llm.answer("Noted.")
    async with engine_running(klaw_home, backend) as server:
        # memory.git: true made the repository at start, with the memory files as they were
        assert git(ws, "log", "--format=%s") == "memory: start versioning workspace memory\n"
        await say(server, "My bike is blue.")
        assert versioner(ws).flush(60)
        with (ws / "MEMORY.md").open("a", encoding="utf-8") as f:
            f.write("- Added by hand: the spare key is in the shed.\n")
        await say(server, "Lena visits in May.")
        assert versioner(ws).flush(60)
    subjects = git(ws, "log", f"--author=<{AUTHOR_EMAIL}>", "--format=%s").splitlines()
    assert subjects[:2] == [
        "memory: write back a durable fact to MEMORY.md",
        "memory: write back a saved fact to " + subjects[1].rsplit(" ", 1)[-1],
    ]
    assert len(subjects) == 5  # baseline, then a daily-log and a MEMORY.md commit per fact
    on_disk = (ws / "MEMORY.md").read_text(encoding="utf-8")
    assert on_disk == (
        "# MEMORY.md\n\n- Mara prefers tea.\n- Mara's bike is blue\n"
        "- Added by hand: the spare key is in the shed.\n- Lena visits in May\n"
    )
    assert git(ws, "show", "HEAD:MEMORY.md") == (
        "# MEMORY.md\n\n- Mara prefers tea.\n- Mara's bike is blue\n- Lena visits in May\n"
    )
    assert git(ws, "status", "--porcelain", "--", "MEMORY.md") == " M MEMORY.md\n"
    assert "+- Added by hand: the spare key is in the shed." in git(ws, "diff", "MEMORY.md")

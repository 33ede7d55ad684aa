"""Every place Klaw writes workspace memory files today commits through versioned memory:
the OpenClaw write-back (saved facts, durable facts, summaries, the owner's facts) and the
agent's file_write of a memory file. Real git repositories, real config files."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from klaw.config import load_engine_config
from klaw.memory.versioning import AUTHOR_EMAIL, is_memory_path, versioner
from klaw.openclaw.writeback import WriteBack
from klaw.tools.files import FileWrite, Workspace

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="git is not installed",
)


def git(ws: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ws), *args], capture_output=True, text=True, check=True
    ).stdout


def klaw_subjects(ws: Path) -> list[str]:
    return git(ws, "log", f"--author=<{AUTHOR_EMAIL}>", "--format=%s").splitlines()


def setup(tmp_path: Path, git_setting: str = "true") -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "USER.md").write_text("# USER.md\n\n- **Name:** Mara\n")
    cfg = tmp_path / "engine.yaml"
    cfg.write_text(
        "compatibility:\n  openclaw:\n    enabled: true\n"
        f"memory:\n  git: {git_setting}\nscheduler:\n  timezone: UTC\n"
    )
    return ws, cfg


def test_write_back_commits_each_append(tmp_path: Path) -> None:
    ws, cfg_path = setup(tmp_path)
    cfg = load_engine_config(cfg_path)
    wb = WriteBack(ws, cfg)
    when = datetime(2026, 11, 26, 9, 30, tzinfo=UTC)
    wb.saved("The wifi password is on the fridge", durable=True, when=when)
    wb.summary("telegram_1", "We planned the trip.", when)
    wb.user_fact("home_city", "Prague")
    assert versioner(ws).flush(30)
    assert klaw_subjects(ws) == [
        "memory: write back the owner's home city to USER.md",
        "memory: write back the summary of telegram_1 to 2026-11-26.md",
        "memory: write back a durable fact to MEMORY.md",
        "memory: write back a saved fact to 2026-11-26.md",
        "memory: start versioning workspace memory",
    ]
    assert git(ws, "status", "--porcelain") == ""
    assert git(ws, "show", "HEAD:USER.md").endswith("- **Home city:** Prague\n")


def test_write_back_without_git_writes_files_and_makes_no_repository(tmp_path: Path) -> None:
    ws, cfg_path = setup(tmp_path, git_setting="null")
    wb = WriteBack(ws, load_engine_config(cfg_path))
    wb.saved("a fact", when=datetime(2026, 11, 26, 9, 30, tzinfo=UTC))
    assert versioner(ws).flush(5)
    assert (ws / "memory" / "2026-11-26.md").read_text().startswith("# 2026-11-26")
    assert not (ws / ".git").exists()


async def test_file_write_of_a_memory_file_is_a_commit_other_files_are_not(
    tmp_path: Path,
) -> None:
    ws, _ = setup(tmp_path)
    git(ws, "init", "-q")
    tool = FileWrite(Workspace(ws, 1 << 20))
    await tool.run({"path": "memory/notes.md", "content": "- a note\n"})
    await tool.run({"path": "memory/notes.md", "content": "- another\n", "append": True})
    await tool.run({"path": "outputs/plot.txt", "content": "not memory"})
    assert versioner(ws).flush(30)
    assert klaw_subjects(ws) == [
        "memory: append to memory/notes.md",
        "memory: write memory/notes.md",
    ]
    assert git(ws, "show", "HEAD:memory/notes.md") == "- a note\n- another\n"
    assert "outputs" not in git(ws, "ls-files")


def test_memory_paths() -> None:
    assert is_memory_path("MEMORY.md") and is_memory_path("./memory/2026-01-01.md")
    assert is_memory_path("bank/entities/anna.md") and is_memory_path("USER.md")
    assert not is_memory_path("memory") and not is_memory_path("memory/x.png")
    assert not is_memory_path("SOUL.md") and not is_memory_path("../memory/x.md")

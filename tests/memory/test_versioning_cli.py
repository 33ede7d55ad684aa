"""`klaw memory log|undo|condense` in-process on a real Klaw home, a real git repository
and the real embedding model (undo and --apply reindex)."""

from __future__ import annotations

import subprocess
from datetime import datetime, timedelta
from pathlib import Path

from klaw.cli.app import app
from klaw.cli.testing import CliRunner
from klaw.config import load_engine_config
from klaw.memory import Memory
from klaw.memory.versioning import versioner
from klaw.paths import KlawPaths


def home(klaw_home: KlawPaths, git: str = "true") -> Path:
    klaw_home.engine_config.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.engine_config.write_text(
        f"memory:\n  git: {git}\n  prompt:\n    memoryMdTokens: 300\nscheduler:\n  timezone: UTC\n"
    )
    ws = klaw_home.workspace
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    return ws


def test_log_and_undo_with_reindex(klaw_home: KlawPaths) -> None:
    ws = home(klaw_home)
    day = ws / "memory" / "2026-11-26.md"
    day.write_text("# 2026-11-26\n\n- The heating engineer comes on Friday.\n")
    runner = CliRunner()
    first = runner.invoke(app, ["memory", "log"])
    assert first.exit_code == 0, first.stderr
    assert "memory: start versioning workspace memory" in first.stdout
    git = versioner(ws)
    with git.change([day], "retain a fact", "summary of telegram_1 messages 1-50"):
        with day.open("a") as f:
            f.write("- W @Mara keeps bees on the roof.\n")
    assert git.flush(30)
    shown = runner.invoke(app, ["memory", "log", "-n", "1"])
    assert "memory: retain a fact" in shown.stdout
    assert "summary of telegram_1 messages 1-50" in shown.stdout
    assert "memory/2026-11-26.md" in shown.stdout
    undone = runner.invoke(app, ["memory", "undo"])
    assert undone.exit_code == 0, undone.stderr
    assert "undone as" in undone.stdout and "indexed" in undone.stdout
    assert "bees" not in day.read_text()
    cfg = load_engine_config(klaw_home.engine_config)
    with Memory.open(paths=klaw_home, config=cfg) as mem:
        hits = mem.search("bees on the roof", top_k=5)
        assert not any("bees" in h.content for h in hits)
        assert any("heating engineer" in h.content for h in mem.search("heating engineer"))
    again = runner.invoke(app, ["memory", "undo", "HEAD~5"])
    assert again.exit_code == 1 and "klaw:" in again.stderr


def test_log_without_a_repository_says_how_to_start(klaw_home: KlawPaths) -> None:
    home(klaw_home, git="null")
    result = CliRunner().invoke(app, ["memory", "log"])
    assert result.exit_code == 1
    assert "not a git repository" in result.stderr and "memory.git: true" in result.stderr


def test_condense_proposes_then_applies_and_archives(klaw_home: KlawPaths) -> None:
    ws = home(klaw_home)
    lines = "".join(f"- fact {i}: something the owner wrote down, number {i}.\n" for i in range(80))
    (ws / "MEMORY.md").write_text("# MEMORY.md\n\n" + lines)
    old = (datetime.now() - timedelta(days=400)).date().isoformat()
    (ws / "memory" / f"{old}.md").write_text(f"# {old}\n\n- an old day\n")
    runner = CliRunner()
    shown = runner.invoke(app, ["memory", "condense"])
    assert shown.exit_code == 0, shown.stderr
    assert "over its share" in shown.stdout and "MEMORY.proposed.md" in shown.stdout
    assert "1 daily log(s) older than 90 days" in shown.stdout
    assert (ws / "MEMORY.md").read_text().endswith("number 79.\n")  # untouched so far
    applied = runner.invoke(app, ["memory", "condense", "--apply"])
    assert applied.exit_code == 0, applied.stderr
    assert "MEMORY.md condensed" in applied.stdout
    assert "number 79." not in (ws / "MEMORY.md").read_text()
    assert (ws / "memory" / "archive" / f"{old}.md").is_file()
    archived = list((ws / "memory" / "archive").glob("MEMORY-*.md"))
    assert len(archived) == 1 and "number 79." in archived[0].read_text()
    subjects = subprocess.run(
        ["git", "-C", str(ws), "log", "--format=%s", "-n", "2"], capture_output=True, text=True
    ).stdout.splitlines()
    assert subjects == ["memory: archive 1 daily log", "memory: condense MEMORY.md"]
    nothing = runner.invoke(app, ["memory", "condense", "--apply"])
    assert "no proposal to apply" in nothing.stdout


def test_doctor_says_whether_memory_is_versioned_and_memory_md_fits(
    klaw_home: KlawPaths,
) -> None:
    ws = home(klaw_home, git="null")
    (ws / "MEMORY.md").write_text("# MEMORY.md\n\n- short\n")
    out = CliRunner().invoke(app, ["doctor"]).stdout
    assert "ok    memory versioning: off (the workspace is no git repository" in out
    assert "ok    MEMORY.md: " in out and "within its share of the prompt (300)" in out
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "MEMORY.md").write_text("- a long line of the owner's notes\n" * 200)
    out = CliRunner().invoke(app, ["doctor"]).stdout
    assert "ok    memory versioning: on (" in out
    assert "warn  MEMORY.md: " in out and "over its share of the prompt (300)" in out
    assert "klaw memory condense" in out

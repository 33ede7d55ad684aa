"""Old daily logs move to memory/archive/ (issue 25 item 6): nothing deleted, still
indexed where they are now, one commit per run, the owner's uncommitted edits left be."""

from __future__ import annotations

import subprocess
from datetime import date, timedelta
from pathlib import Path

from klaw.memory.archive import archive_logs, due_logs
from klaw.memory.versioning import AUTHOR_EMAIL, versioner

TODAY = date(2026, 11, 27)


def day(n: int) -> str:
    return (TODAY - timedelta(days=n)).isoformat()


def git(ws: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ws), *args], capture_output=True, text=True, check=True
    ).stdout


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory" / "trips").mkdir(parents=True)
    for n in (200, 120, 91, 90, 3):
        (ws / "memory" / f"{day(n)}.md").write_text(f"# {day(n)}\n\n- what happened\n")
    (ws / "memory" / f"{day(150)}-dentist.md").write_text("# session note\n")
    (ws / "memory" / "trips" / f"{day(300)}.md").write_text("# in a subfolder: not a log\n")
    (ws / "memory" / "notes.md").write_text("# no date\n")
    return ws


def test_due_logs_are_those_older_than_the_threshold(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    names = [p.name for p in due_logs(ws, 90, TODAY)]
    assert names == [f"{day(200)}.md", f"{day(150)}-dentist.md", f"{day(120)}.md", f"{day(91)}.md"]


def test_archive_moves_commits_once_and_leaves_the_owners_edit(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    vg = versioner(ws)
    vg.setting = True
    assert vg.active  # baseline commit of memory/
    edited = ws / "memory" / f"{day(120)}.md"
    edited.write_text(edited.read_text() + "- the owner's uncommitted line\n")
    report = archive_logs(ws, 90, TODAY)
    assert vg.flush(30)
    assert sorted(report.moved) == sorted(
        f"memory/archive/{n}" for n in (f"{day(200)}.md", f"{day(150)}-dentist.md", f"{day(91)}.md")
    )
    assert report.skipped == [
        f"memory/{day(120)}.md: edited and not committed; commit or revert it first"
    ]
    assert edited.exists()  # left where it is, with the edit
    assert (ws / "memory" / "archive" / f"{day(200)}.md").read_text().endswith("- what happened\n")
    assert not (ws / "memory" / f"{day(200)}.md").exists()
    subjects = git(ws, "log", f"--author=<{AUTHOR_EMAIL}>", "--format=%s").splitlines()
    assert subjects[0] == "memory: archive 3 daily logs"
    assert git(ws, "status", "--porcelain") == f" M memory/{day(120)}.md\n"
    # a second run has nothing to do; the name already archived is never overwritten
    (ws / "memory" / f"{day(200)}.md").write_text("# a new file with an old name\n")
    git(ws, "add", "memory")
    git(ws, "-c", "user.name=o", "-c", "user.email=o@o", "commit", "-qm", "owner")
    again = archive_logs(ws, 90, TODAY)
    assert again.moved == [f"memory/archive/{day(120)}.md"]  # committed by the owner now
    assert f"memory/{day(200)}.md: memory/archive/{day(200)}.md exists already" in again.skipped


def test_archive_without_git_moves_the_files(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    report = archive_logs(ws, 90, TODAY, dry_run=True)
    assert len(report.moved) == 4 and (ws / "memory" / f"{day(200)}.md").exists()
    report = archive_logs(ws, 90, TODAY)
    assert len(report.moved) == 4
    assert not (ws / ".git").exists()
    assert sorted(p.name for p in (ws / "memory" / "archive").iterdir()) == sorted(
        Path(m).name for m in report.moved
    )


def test_an_archived_log_is_found_where_it_is_now_with_its_day(memory) -> None:  # type: ignore[no-untyped-def]
    """Indexed before and after the move: the hit cites the archived file, its lines
    resolve there, and its day still comes from the name."""
    ws = memory.paths.workspace
    old = ws / "memory" / f"{day(200)}.md"
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_text(f"# {day(200)}\n\n- The dentist appointment moved to Thursday.\n")
    memory.index_workspace()
    [before] = [h for h in memory.search("dentist appointment", top_k=3) if "dentist" in h.content]
    assert before.source == f"memory/{day(200)}.md"
    archive_logs(ws, 90, TODAY)
    report = memory.index_workspace()
    assert f"memory/{day(200)}.md" in report.removed
    hits = [h for h in memory.search("dentist appointment", top_k=3) if "dentist" in h.content]
    assert [h.source for h in hits] == [f"memory/archive/{day(200)}.md"]
    hit = hits[0]
    lines = (ws / hit.source).read_text().splitlines()
    assert hit.start_line is not None and hit.end_line is not None
    assert "dentist" in "\n".join(lines[hit.start_line - 1 : hit.end_line])
    assert hit.created_at[:10] == before.created_at[:10]


def test_an_archive_folder_leading_outside_moves_nothing(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "memory" / "archive").symlink_to(outside)
    report = archive_logs(ws, 90, TODAY)
    assert report.moved == [] and "leads outside the workspace" in report.skipped[0]
    assert list(outside.iterdir()) == []
    assert len(due_logs(ws, 90, TODAY)) == 4


def test_no_filter_of_the_repositorys_config_runs(tmp_path: Path) -> None:
    """A clean filter named in .git/config is a program: `git status` or `git add`
    would run it; the archive and its commit use neither."""
    ws = workspace(tmp_path)
    vg = versioner(ws)
    vg.setting = True
    assert vg.active
    marker = tmp_path / "filter-ran"
    git(ws, "config", "filter.evil.clean", f"touch {marker}; cat")
    (ws / ".gitattributes").write_text("*.md filter=evil\n")
    edited = ws / "memory" / f"{day(120)}.md"
    edited.write_text(edited.read_text() + "- an uncommitted line\n")
    report = archive_logs(ws, 90, TODAY)
    assert vg.flush(30)
    assert len(report.moved) == 3 and len(report.skipped) == 1
    assert not marker.exists()

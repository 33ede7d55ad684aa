"""Versioned memory (issue 25 item 7): real git repositories in tmp dirs, the git CLI."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from klaw.memory.versioning import AUTHOR_EMAIL, GitError, MemoryGit

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="git is not installed",
)


def git(ws: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_AUTHOR_NAME="Owner",
        GIT_AUTHOR_EMAIL="owner@example.org",
        GIT_COMMITTER_NAME="Owner",
        GIT_COMMITTER_EMAIL="owner@example.org",
    )
    done = subprocess.run(
        ["git", "-C", str(ws), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout


def owner_repo(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\n- owner line one\n- owner line two\n")
    (ws / "memory" / "2026-03-01.md").write_text("# 2026-03-01\n\n- morning\n")
    git(ws, "init", "-q")
    git(ws, "add", ".")
    git(ws, "commit", "-qm", "owner: start")
    return ws


def head_file(ws: Path, path: str) -> str:
    return git(ws, "show", f"HEAD:{path}")


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def test_a_change_is_one_commit_by_klaw_with_what_and_why(tmp_path: Path) -> None:
    ws = owner_repo(tmp_path)
    vg = MemoryGit(ws)
    log_path = ws / "memory" / "2026-03-01.md"
    with vg.change([log_path], "retain 2 facts from telegram_1", "summary of messages 1-50"):
        append(log_path, "\n## Retain\n- W @Anna lives in Lisbon\n")
    assert vg.flush(30)
    assert head_file(ws, "memory/2026-03-01.md") == log_path.read_text()
    assert git(ws, "log", "-1", "--format=%ae|%s|%b").strip() == (
        f"{AUTHOR_EMAIL}|memory: retain 2 facts from telegram_1|summary of messages 1-50"
    )
    assert git(ws, "status", "--porcelain") == ""
    [entry] = vg.log_entries(5)
    assert entry.paths == ("memory/2026-03-01.md",)
    assert entry.subject == "memory: retain 2 facts from telegram_1"


def test_owner_uncommitted_edit_in_the_same_file_stays_uncommitted(tmp_path: Path) -> None:
    """The owner edited MEMORY.md (not committed); Klaw appends: the commit holds HEAD's
    text plus Klaw's lines only, and the file on disk is exactly as both left it."""
    ws = owner_repo(tmp_path)
    memory_md = ws / "MEMORY.md"
    memory_md.write_text("# Memory\n\n- owner line one EDITED\n- owner line two\n")
    vg = MemoryGit(ws)
    with vg.change(["MEMORY.md"], "save a durable fact"):
        append(memory_md, "- Klaw's fact\n")
    assert vg.flush(30)
    on_disk = memory_md.read_text()
    assert on_disk == "# Memory\n\n- owner line one EDITED\n- owner line two\n- Klaw's fact\n"
    assert head_file(ws, "MEMORY.md") == (
        "# Memory\n\n- owner line one\n- owner line two\n- Klaw's fact\n"
    )
    # the owner's edit is still theirs to commit: a modification, unstaged
    assert git(ws, "status", "--porcelain") == " M MEMORY.md\n"
    assert "EDITED" in git(ws, "diff")


def test_a_rewrite_merges_onto_head_and_an_overlap_is_left_out(tmp_path: Path) -> None:
    ws = owner_repo(tmp_path)
    memory_md = ws / "MEMORY.md"
    lines = [f"- note {i}\n" for i in range(8)]
    memory_md.write_text("".join(lines))
    git(ws, "commit", "-qam", "owner: notes")
    memory_md.write_text("".join(["- owner's new first line\n", *lines]))  # uncommitted
    vg = MemoryGit(ws)
    with vg.change([memory_md], "mark note 6"):  # a rewrite that is no append
        memory_md.write_text(memory_md.read_text().replace("note 6", "note 6 (seen)"))
    assert vg.flush(30)
    assert head_file(ws, "MEMORY.md") == "".join(lines).replace("note 6", "note 6 (seen)")
    assert memory_md.read_text().startswith("- owner's new first line\n")
    # Klaw's change touching the very line the owner changed cannot be separated
    memory_md.write_text(memory_md.read_text().replace("note 3", "note 3 by the owner"))
    before_head = git(ws, "rev-parse", "HEAD")
    with vg.change([memory_md], "rewrite note 3"):
        memory_md.write_text(memory_md.read_text().replace("by the owner", "by Klaw"))
    assert vg.flush(30)
    assert git(ws, "rev-parse", "HEAD") == before_head  # nothing committed
    assert "note 3 by Klaw" in memory_md.read_text()  # the file is as written


def test_new_file_and_several_paths_in_one_commit(tmp_path: Path) -> None:
    ws = owner_repo(tmp_path)
    vg = MemoryGit(ws)
    page, ops = ws / "bank" / "entities" / "anna.md", ws / "bank" / "opinions.md"
    with vg.change([page, ops], "reflect 2026-03-01", "3 new facts"):
        page.parent.mkdir(parents=True)
        page.write_text("# Anna\n")
        ops.write_text("# Opinions\n")
    assert vg.flush(30)
    [entry] = vg.log_entries()
    assert sorted(entry.paths) == ["bank/entities/anna.md", "bank/opinions.md"]
    assert git(ws, "status", "--porcelain") == ""


def test_no_repository_no_setting_is_a_no_op(tmp_path: Path) -> None:
    ws = tmp_path / "plain"
    ws.mkdir()
    vg = MemoryGit(ws)
    with vg.change(["MEMORY.md"], "x"):
        (ws / "MEMORY.md").write_text("x\n")
    assert vg.flush(5)
    assert not (ws / ".git").exists()
    assert vg.log_entries() == []
    off = MemoryGit(owner_repo(tmp_path), enabled=False)
    assert not off.active


def test_memory_git_true_initialises_with_gitignore_and_baseline(tmp_path: Path) -> None:
    ws = tmp_path / "fresh"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2026-01-01.md").write_text("# day\n")
    (ws / "outputs").mkdir()
    (ws / "outputs" / "plot.png").write_bytes(b"\x89PNG")
    (ws / ".env").write_text("TOKEN=secret\n")
    (ws / "SOUL.md").write_text("owner's soul\n")
    vg = MemoryGit(ws, enabled=True)
    assert vg.active
    tracked = set(git(ws, "ls-files").split())
    assert tracked == {".gitignore", "memory/2026-01-01.md"}
    status = git(ws, "status", "--porcelain", "--ignored")
    assert "!! .env" in status and "!! outputs/" in status
    assert "?? SOUL.md" in status  # the owner's other files stay theirs to add


def test_undo_reverts_one_change_keeps_later_ones_and_owner_edits(tmp_path: Path) -> None:
    ws = owner_repo(tmp_path)
    vg = MemoryGit(ws)
    day = ws / "memory" / "2026-03-01.md"
    with vg.change([day], "first fact"):
        append(day, "- fact one\n")
    with vg.change([day], "second fact"):
        append(day, "- fact two\n")
    assert vg.flush(30)
    first = vg.log_entries()[1].commit
    (ws / "MEMORY.md").write_text("owner's uncommitted rewrite\n")
    new, paths = vg.undo(first)
    assert paths == ["memory/2026-03-01.md"]
    assert day.read_text() == "# 2026-03-01\n\n- morning\n- fact two\n"
    assert head_file(ws, "memory/2026-03-01.md") == day.read_text()
    assert (ws / "MEMORY.md").read_text() == "owner's uncommitted rewrite\n"
    assert vg.log_entries()[0].subject == "memory: undo memory: first fact"
    assert git(ws, "status", "--porcelain") == " M MEMORY.md\n"
    assert new == git(ws, "rev-parse", "HEAD").strip()


def test_undo_refuses_an_owner_commit_and_an_overlap(tmp_path: Path) -> None:
    ws = owner_repo(tmp_path)
    vg = MemoryGit(ws)
    with pytest.raises(GitError, match="not a change of Klaw's"):
        vg.undo("HEAD")
    with pytest.raises(GitError, match="no change of Klaw's"):
        vg.undo()
    day = ws / "memory" / "2026-03-01.md"
    with vg.change([day], "fact"):
        append(day, "- fact one\n")
    assert vg.flush(30)
    day.write_text("# 2026-03-01\n\n- morning\n- fact one, corrected by the owner\n")
    with pytest.raises(GitError, match=r"memory/2026-03-01\.md was changed again"):
        vg.undo()
    assert "corrected by the owner" in day.read_text()


def test_undo_of_a_created_file_removes_it(tmp_path: Path) -> None:
    ws = owner_repo(tmp_path)
    vg = MemoryGit(ws)
    page = ws / "bank" / "entities" / "bob.md"
    with vg.change([page], "new page"):
        page.parent.mkdir(parents=True)
        page.write_text("# Bob\n")
    assert vg.flush(30)
    vg.undo()
    assert not page.exists()
    assert "bank/entities/bob.md" not in git(ws, "ls-files")


def test_no_program_the_repository_names_runs(tmp_path: Path) -> None:
    """Hooks, a signing program, a clean filter (run when the index is written)."""
    ws = owner_repo(tmp_path)
    marker = tmp_path / "ran"
    script = tmp_path / "evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\ncat\n")
    script.chmod(0o755)
    for name in ("pre-commit", "post-commit", "commit-msg", "reference-transaction"):
        hook = ws / ".git" / "hooks" / name
        hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
        hook.chmod(0o755)
    git(ws, "config", "commit.gpgSign", "true")
    git(ws, "config", "gpg.program", str(script))
    git(ws, "config", "filter.evil.clean", str(script))
    (ws / ".gitattributes").write_text("*.md filter=evil\n")
    (ws / "memory" / "2026-03-01.md").write_text("an uncommitted edit\n")  # racily clean
    vg = MemoryGit(ws)
    with vg.change(["MEMORY.md"], "x"):
        append(ws / "MEMORY.md", "- x\n")
    assert vg.flush(30)
    assert not marker.exists()
    assert vg.log_entries()[0].subject == "memory: x"


def test_a_commit_never_blocks_the_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`change` returns while git is held up: the commit runs on the worker thread."""
    import threading

    ws = owner_repo(tmp_path)
    vg = MemoryGit(ws)
    gate, entered = threading.Event(), threading.Event()
    real = subprocess.run

    def held(*a: object, **kw: object) -> object:
        entered.set()
        gate.wait()  # untimed waits only: under libfaketime (test-any-hour) a timed one hangs
        return real(*a, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "run", held)
    try:
        with vg.change(["MEMORY.md"], "x"):
            append(ws / "MEMORY.md", "- x\n")
        entered.wait()  # the worker is in git, held: the writer got here without waiting
    finally:
        gate.set()
    assert vg.flush(30)
    monkeypatch.undo()
    assert vg.log_entries()[0].subject == "memory: x"


def test_names_git_would_quote_are_committed_and_listed(tmp_path: Path) -> None:
    """Cyrillic, spaces, a tab: git quotes such names in its plain output; Klaw reads
    and writes NUL-separated records instead."""
    ws = owner_repo(tmp_path)
    vg = MemoryGit(ws)
    names = ["memory/заметки о поездке.md", "bank/entities/tab\there.md"]
    paths = [ws / n for n in names]
    with vg.change(paths, "notes with unusual names"):
        for p in paths:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("- a note\n")
    assert vg.flush(30)
    assert sorted(vg.log_entries(1)[0].paths) == sorted(names)
    assert git(ws, "status", "--porcelain") == ""
    vg.undo()
    assert not any(p.exists() for p in paths)
    assert git(ws, "status", "--porcelain") == ""


def test_a_message_with_control_characters_is_logged_whole(tmp_path: Path) -> None:
    """What and why can carry a model's or a chat's text: `log` still reads them."""
    ws = owner_repo(tmp_path)
    vg = MemoryGit(ws)
    with vg.change(["MEMORY.md"], "fact\x1e\x1f\x00 from a chat", "why\x1e\x1f it"):
        append(ws / "MEMORY.md", "- x\n")
    assert vg.flush(30)
    [entry] = vg.log_entries(1)
    assert entry.subject == "memory: fact from a chat" and entry.body == "why   it"

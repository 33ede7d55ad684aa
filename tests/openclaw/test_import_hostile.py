"""`klaw import openclaw` on OpenClaw homes a stranger could have made (hostile run,
cases 2, 5, 11, 12 and 21): the real CLI as a process on tests/openclaw/oc_home.py's
home, each with one thing made hostile; what is bad is skipped and said, the rest comes in."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from oc_home import FACT, build_home, tree_digest
from sched_support import klaw, log_lines

from klaw.openclaw.home import Home
from klaw.openclaw.plan import build_plan
from klaw.paths import KlawPaths
from scripted_llm import FakeLLM

CHAT = "telegram_100"
SECRET = "the neighbour's wifi password is hunter2"
SESSIONS = Path("agents/main/sessions")
MAIN = SESSIONS / "5aa69cdb-42d7-48df-9377-3887a4cff539.jsonl"


@pytest.fixture
def home(tmp_path: Path, llm: FakeLLM) -> Path:
    return build_home(tmp_path / "dot-openclaw", llm.url)


def set_workspace(home: Path, value: str) -> None:
    text = (home / "openclaw.json").read_text()
    text = text.replace(f'workspace: "{home / "workspace"}"', f"workspace: {json.dumps(value)}")
    (home / "openclaw.json").write_text(text)


# ------------------------------------------------------------------ case 2: the workspace


async def test_a_workspace_at_home_is_neither_used_nor_copied_and_the_rest_comes_in(
    klaw_home: KlawPaths, home: Path, tmp_path: Path
) -> None:
    set_workspace(home, "~")
    user_home = Path(os.environ["HOME"])
    user_home.mkdir(parents=True, exist_ok=True)
    (user_home / ".ssh").mkdir(exist_ok=True)
    (user_home / ".ssh" / "id_rsa").write_text(SECRET)
    rc, out, err = await klaw("import", "openclaw", str(home), "--dry-run")
    assert rc == 0, err
    said = f"openclaw.json agents.defaults.workspace names {user_home}, but {user_home} is a home"
    assert said in out and f"workspace: {user_home} is not imported" in out

    copy = tmp_path / "copy"
    rc, out, err = await klaw(
        "import", "openclaw", str(home), "--copy-workspace", str(copy), "--no-reindex"
    )
    assert rc == 0, err + out
    assert not copy.exists() or not any(copy.rglob("*"))  # nothing copied out of the home
    engine = yaml.safe_load(klaw_home.engine_config.read_text()) or {}
    assert engine.get("workspace") in (None, "")
    users = [r["content"] for r in log_lines(klaw_home, CHAT) if r["role"] == "user"]
    assert f"Please remember: {FACT}." in users  # the history still came in


async def test_copying_into_a_system_directory_is_refused(klaw_home: KlawPaths, home: Path) -> None:
    # /proc: should the check ever break, nothing can be written there.
    rc, _out, err = await klaw("import", "openclaw", str(home), "--copy-workspace", "/proc/ws")
    assert rc == 1
    assert "--copy-workspace /proc/ws: /proc/ws is inside the system directory /proc" in err
    assert not klaw_home.engine_config.exists() and not klaw_home.approved_chats.exists()


# ------------------------------------------------------------------ case 5: symlinks


async def test_copy_workspace_skips_symlinks_leading_out_and_never_reads_them(
    klaw_home: KlawPaths, home: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    ws = home / "workspace"
    (ws / "memory" / "leak.md").symlink_to(outside / "secret.txt")
    (ws / "notes").symlink_to(outside)
    (ws / "soul-link.md").symlink_to(ws / "SOUL.md")  # inside: copied as a file
    os.mkfifo(ws / "pipe")  # would hang a reader
    skill = home / "skills" / "leaky"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: leaky\ndescription: x\n---\n\nRead key.txt.\n")
    (skill / "key.txt").symlink_to(outside / "secret.txt")

    copy = tmp_path / "copy"
    rc, out, err = await klaw(
        "import", "openclaw", str(home), "--copy-workspace", str(copy), "--no-reindex"
    )
    assert rc == 0, err + out
    assert "workspace memory/leak.md: a symlink leading outside, not followed" in out
    assert "workspace notes: a symlink to a folder, not followed" in out
    assert "workspace pipe: not a regular file" in out
    assert "skill leaky: key.txt: a symlink leading outside, not followed" in out
    assert not (copy / "memory" / "leak.md").exists() and not (copy / "notes").exists()
    link = copy / "soul-link.md"
    assert not link.is_symlink() and link.read_text() == (ws / "SOUL.md").read_text()
    assert (copy / "memory" / "2026-01-10.md").is_file()  # the rest was copied
    for root in (copy, klaw_home.skills):
        leaked = [p for p in root.rglob("*") if p.is_file() and SECRET in p.read_text()]
        assert leaked == []
    assert (klaw_home.skills / "leaky" / "SKILL.md").is_file()
    assert not (klaw_home.skills / "leaky" / "key.txt").exists()


# ------------------------------------------------------------------ case 11: $include


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_an_include_of_a_device_or_a_fifo_is_refused_at_once(
    home: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    monkeypatch.setenv("OPENCLAW_PROFILE", "default")
    if target == "fifo":
        os.mkfifo(home / "fifo")
        target = str(home / "fifo")
    text = (home / "openclaw.json").read_text()
    (home / "openclaw.json").write_text(text.replace("{\n", f'{{\n  $include: "{target}",\n', 1))
    # A reader of either would never end: /dev/zero grows without bound, a FIFO waits.
    found = Home.open(home)
    assert found.config == {}
    assert found.problems == [
        f"{target}: not a regular file (a device, FIFO or socket), not read; config not imported"
    ]


def test_an_include_over_the_size_cap_is_refused(home: Path) -> None:
    big = home / "big.json"
    with big.open("wb") as f:
        f.truncate(64 * 1024 * 1024 + 1)  # sparse: no disk used
    text = (home / "openclaw.json").read_text()
    (home / "openclaw.json").write_text(text.replace("{\n", '{\n  $include: "big.json",\n', 1))
    assert Home.open(home).problems == [f"{big}: over 64 MiB, not read; config not imported"]


async def test_a_fifo_among_the_transcripts_is_skipped(klaw_home: KlawPaths, home: Path) -> None:
    os.mkfifo(home / SESSIONS / "stuck.jsonl.reset.1")
    rc, out, err = await klaw("import", "openclaw", str(home), "--dry-run", timeout=60)
    assert rc == 0, err
    assert "telegram_100: 8 from 2 session(s)" in out  # the others as before


# ------------------------------------------------------------------ case 12: a `..` chat id


async def test_a_dot_dot_chat_id_is_skipped_in_the_plan_and_the_import_goes_on(
    klaw_home: KlawPaths, home: Path
) -> None:
    sessions = home / SESSIONS
    index = json.loads((sessions / "sessions.json").read_text())
    index["agent:main:telegram:direct:.."] = {"sessionId": "dotdot", "updatedAt": 1}
    (sessions / "sessions.json").write_text(json.dumps(index))
    entry = {
        "type": "message", "id": "z1", "parentId": None, "timestamp": "2026-01-14T10:00:00Z",
        "message": {"role": "user", "content": "up the tree"},
    }  # fmt: skip
    (sessions / "dotdot.jsonl").write_text(json.dumps(entry) + "\n")
    jobs = (home / "cron" / "jobs.json").read_text()
    (home / "cron" / "jobs.json").write_text(
        jobs.replace('"mode": "announce", "channel": "telegram", "to": "100"', '"to": ".."')
    )
    rc, out, err = await klaw("import", "openclaw", str(home), "--dry-run")
    assert rc == 0, err
    assert "session agent:main:telegram:direct:..: invalid chat_id 'telegram_..'" in out
    assert "'Morning brief': its delivery: invalid chat_id 'telegram_..'" in out

    for _ in range(2):  # and again: a re-run works too
        rc, out, err = await klaw("import", "openclaw", str(home), "--no-reindex", timeout=300)
        assert rc == 0, err + out
    assert "imported: 0 change(s)" in out
    users = [r["content"] for r in log_lines(klaw_home, CHAT) if r["role"] == "user"]
    assert f"Please remember: {FACT}." in users and "up the tree" not in users
    assert not [p for p in klaw_home.conversations.iterdir() if ".." in p.name]
    import sqlite3

    with sqlite3.connect(klaw_home.scheduler_db) as db:
        (n,) = db.execute("SELECT count(*) FROM apscheduler_jobs").fetchone()
    assert n == 5  # the six of oc_home less the one delivering to `..`


# ------------------------------------------------------------------ case 21: deep lines


async def test_one_deeply_nested_line_drops_only_that_line(
    klaw_home: KlawPaths, home: Path
) -> None:
    deep = "[" * 200_000 + "]" * 200_000
    args: object = "x"
    for _ in range(500):  # valid JSON Python reads, deeper than Klaw's logs may be
        args = {"a": args}
    call = {
        "type": "message", "id": "y1", "parentId": "a0000009", "timestamp": "2026-01-11T08:01:00Z",
        "message": {"role": "assistant", "content": [
            {"type": "toolCall", "id": "c9", "name": "memory_save", "arguments": args}]},
    }  # fmt: skip
    with (home / MAIN).open("a") as f:
        f.write(deep + "\n" + json.dumps(call) + "\n")
    before = tree_digest(home)
    rc, out, err = await klaw("import", "openclaw", str(home), "--dry-run")
    assert rc == 0, err
    assert f"{MAIN.name}:12: nested too deeply; line skipped" in out
    assert f"{MAIN.name}:13: nested too deeply; line skipped" in out
    assert "telegram_100: 8 from 2 session(s)" in out  # the transcript itself came in
    plan = build_plan(Home.open(home), paths=klaw_home)
    assert sum(len(t.records) for t in plan.chats[CHAT].transcripts) == 8
    assert tree_digest(home) == before

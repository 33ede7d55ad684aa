"""`klaw logs`, `klaw memory show`, `klaw memory edit` through the real CLI."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from klaw.cli import logs_cmds
from klaw.cli.app import app
from klaw.cli.testing import CliRunner
from klaw.memory.core import CoreMemory
from klaw.paths import KlawPaths
from klaw.wire.logfile import JsonlWriter, Record, encode_record


@pytest.fixture
def paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KlawPaths:
    for var, sub in [
        ("KLAW_DATA_DIR", "data"),
        ("KLAW_CONFIG_DIR", "config"),
        ("KLAW_STATE_DIR", "state"),
        ("KLAW_CACHE_DIR", "cache"),
        ("KLAW_WORKSPACE", "ws"),
    ]:
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("VISUAL", raising=False)
    return KlawPaths.from_env()


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def rec(i: int, ts: str, content: str = "", role: str = "user") -> Record:
    return Record(id=f"m{i}", ts=ts, role=role, content=content or f"message {i}")


def write_chats(paths: KlawPaths) -> None:
    w = JsonlWriter(paths.conversations, fsync="never")
    w.append("telegram_1", rec(1, "2026-02-24T10:00:00Z"))
    w.append("telegram_1", rec(2, "2026-02-25T10:00:00Z", "line one\nline two", "assistant"))
    w.append("telegram_1", rec(3, "2026-02-25T10:05:00Z", "Привет " + "очень " * 40))
    w.append("discord_2", rec(4, "2026-02-25T10:01:00Z"))


# ---------------------------------------------------------------------------- logs


def test_logs_chat_last_two(paths: KlawPaths, runner: CliRunner) -> None:
    write_chats(paths)
    result = runner.invoke(app, ["logs", "--chat", "telegram_1", "-n", "2"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].split() == [
        "2026-02-25T10:00:00Z",
        "telegram_1",
        "assistant",
        "line",
        "one",
        "line",
        "two",
    ]
    assert lines[1].startswith("2026-02-25T10:05:00Z  telegram_1  user       Привет очень")
    assert lines[1].endswith("…") and len(lines[1]) == 80  # truncated to the terminal
    assert result.stderr == ""


def test_logs_all_chats_merged_by_time(paths: KlawPaths, runner: CliRunner) -> None:
    write_chats(paths)
    result = runner.invoke(app, ["logs", "-n", "3"])
    assert result.exit_code == 0, result.output
    assert [line.split()[1] for line in result.stdout.splitlines()] == [
        "telegram_1",
        "discord_2",
        "telegram_1",
    ]


def test_logs_reports_skipped_lines(paths: KlawPaths, runner: CliRunner) -> None:
    write_chats(paths)
    day = paths.conversations / "discord_2" / "2026-02-25.jsonl"
    with open(day, "ab") as fh:
        fh.write(b"not json\n" + encode_record(rec(5, "2026-02-25T11:00:00Z")) + b'{"id":')
    result = runner.invoke(app, ["logs", "--chat", "discord_2"])
    assert result.exit_code == 0
    assert [line.split()[-1] for line in result.stdout.splitlines()] == ["4", "5"]
    assert f"{day}:2: invalid JSON" in result.stderr
    assert f"{day}:4: torn last line" in result.stderr


def test_logs_missing_chat(paths: KlawPaths, runner: CliRunner) -> None:
    write_chats(paths)
    result = runner.invoke(app, ["logs", "--chat", "telegram_999"])
    assert result.exit_code == 1
    assert "no conversation log for chat 'telegram_999'" in result.stderr
    assert "discord_2, telegram_1" in result.stderr
    bad = runner.invoke(app, ["logs", "--chat", "../etc"])
    assert bad.exit_code == 1 and "invalid chat_id" in bad.stderr


def test_logs_no_conversations_yet(paths: KlawPaths, runner: CliRunner) -> None:
    result = runner.invoke(app, ["logs"])
    assert result.exit_code == 0
    assert "no conversations yet" in result.stderr


def test_logs_follow_picks_up_new_lines_and_rollover(
    paths: KlawPaths, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_chats(paths)
    writer = JsonlWriter(paths.conversations, fsync="never")
    steps: list[Callable[[], object]] = [
        lambda: writer.append("telegram_1", rec(6, "2026-02-25T23:59:59Z", "late")),
        lambda: writer.append("telegram_1", rec(7, "2026-02-26T00:00:01Z", "next day")),
        lambda: None,
    ]
    polls = iter(steps)

    def fake_sleep(_: float) -> None:
        step = next(polls, None)
        if step is None:
            raise KeyboardInterrupt  # what Ctrl-C does
        step()

    monkeypatch.setattr(logs_cmds, "_sleep", fake_sleep)
    result = runner.invoke(app, ["logs", "--chat", "telegram_1", "-n", "1", "--follow"])
    assert result.exit_code == 0, result.output
    contents = [line.split(maxsplit=3)[3] for line in result.stdout.splitlines()]
    assert contents[0].startswith("Привет очень") and contents[0].endswith("…")
    assert contents[1:] == ["late", "next day"]


def test_logs_command_imports_stay_light() -> None:
    """`klaw logs` must not pull in the archival memory stack or heavy libraries."""
    code = (
        "import sys; from klaw.cli import logs_cmds; "
        "heavy = [m for m in ('klaw.memory.store', 'numpy', 'pydantic', 'httpx', 'subprocess')"
        " if m in sys.modules]; print(heavy)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------- memory show


def test_memory_show_not_initialised(paths: KlawPaths, runner: CliRunner) -> None:
    result = runner.invoke(app, ["memory", "show"])
    assert result.exit_code == 0
    assert "not initialised yet" in result.stdout


def test_memory_show_empty_and_full(paths: KlawPaths, runner: CliRunner) -> None:
    mem = CoreMemory(paths.core_memory)
    mem.reset()
    assert "core memory is empty" in runner.invoke(app, ["memory", "show"]).stdout
    mem.update("user", "name", "Роман")
    result = runner.invoke(app, ["memory", "show"])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"user": {"name": "Роман"}, "agent": {}}
    assert "Роман" in result.stdout


def test_memory_show_corrupt(paths: KlawPaths, runner: CliRunner) -> None:
    paths.memory_dir.mkdir(parents=True)
    paths.core_memory.write_text("{nope")
    result = runner.invoke(app, ["memory", "show"])
    assert result.exit_code == 1
    assert "not valid core memory" in result.stderr and "klaw memory edit" in result.stderr


# --------------------------------------------------------------------- memory edit


def make_editor(tmp_path: Path, new_content: str | None, exit_code: int = 0) -> str:
    """A tiny $EDITOR: writes `new_content` into the file it is given (or leaves it)."""
    script = tmp_path / "fake-editor"
    body = "" if new_content is None else f"open(sys.argv[1], 'w').write({new_content!r})\n"
    script.write_text(f"#!{sys.executable}\nimport sys\n{body}sys.exit({exit_code})\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_memory_edit_valid(
    paths: KlawPaths, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    CoreMemory(paths.core_memory).update("user", "name", "Roman")
    new = json.dumps({"user": {"name": "Roma"}, "agent": {"rule": "be brief"}})
    monkeypatch.setenv("EDITOR", make_editor(tmp_path, new))
    result = runner.invoke(app, ["memory", "edit"])
    assert result.exit_code == 0, result.output
    assert "saved" in result.stdout
    assert CoreMemory(paths.core_memory).get() == {
        "user": {"name": "Roma"},
        "agent": {"rule": "be brief"},
    }
    assert sorted(p.name for p in paths.memory_dir.iterdir()) == ["core_memory.json"]


def test_memory_edit_creates_file_when_missing(
    paths: KlawPaths, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VISUAL", make_editor(tmp_path, '{"user": {"city": "Prague"}}'))
    monkeypatch.setenv("EDITOR", "false")  # VISUAL wins
    result = runner.invoke(app, ["memory", "edit"])
    assert result.exit_code == 0, result.output
    assert CoreMemory(paths.core_memory).get("user") == {"city": "Prague"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"user": {"name": "Roma"', "invalid JSON at line 1"),
        ('{"user": {}, "friends": {}}', "unknown sections"),
        ('{"user": ["Roma"]}', "must be an object"),
    ],
)
def test_memory_edit_invalid_keeps_original(
    paths: KlawPaths,
    runner: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    content: str,
    message: str,
) -> None:
    CoreMemory(paths.core_memory).update("user", "name", "Roman")
    before = paths.core_memory.read_bytes()
    monkeypatch.setenv("EDITOR", make_editor(tmp_path, content))
    result = runner.invoke(app, ["memory", "edit"])
    assert result.exit_code == 1
    assert message in result.stderr and "core memory unchanged" in result.stderr
    assert paths.core_memory.read_bytes() == before
    assert (paths.memory_dir / "core_memory.rejected.json").read_text() == content
    assert not list(paths.memory_dir.glob("core_memory.edit-*"))  # the temp copy is gone


def test_memory_edit_no_change_and_editor_failure(
    paths: KlawPaths, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    CoreMemory(paths.core_memory).update("user", "name", "Roman")
    monkeypatch.setenv("EDITOR", make_editor(tmp_path, None))
    result = runner.invoke(app, ["memory", "edit"])
    assert result.exit_code == 0 and "no changes" in result.stdout
    monkeypatch.setenv("EDITOR", make_editor(tmp_path, "{}", exit_code=3))
    result = runner.invoke(app, ["memory", "edit"])
    assert result.exit_code == 1 and "status 3" in result.stderr
    monkeypatch.setenv("EDITOR", str(tmp_path / "no-such-editor"))
    result = runner.invoke(app, ["memory", "edit"])
    assert result.exit_code == 1 and "cannot run editor" in result.stderr
    assert CoreMemory(paths.core_memory).get("user") == {"name": "Roman"}
    assert sorted(p.name for p in paths.memory_dir.iterdir()) == ["core_memory.json"]


def test_memory_edit_repairs_a_corrupt_file(
    paths: KlawPaths, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths.memory_dir.mkdir(parents=True)
    paths.core_memory.write_text('{"user": {"name": "Roman",}}')  # trailing comma
    monkeypatch.setenv("EDITOR", make_editor(tmp_path, '{"user": {"name": "Roman"}}'))
    assert runner.invoke(app, ["memory", "edit"]).exit_code == 0
    assert CoreMemory(paths.core_memory).get("user") == {"name": "Roman"}

"""The owner's approvals of MCP servers (klaw.mcp.approvals) on a real state file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from klaw.mcp.approvals import Approvals

MODES = {"git": "first", "shell": "always", "time": "never"}
CHAT = "telegram_1"


def test_first_is_once_per_chat_and_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "mcp-approvals.json"
    a = Approvals(path)
    assert a.check(CHAT, "git", "first", "mcp__git__git_commit") is not None
    assert a.approve(CHAT, "", MODES, group=False) == (
        "Waiting for approval:\n/approve git (asked for mcp__git__git_commit)"
    )
    assert "from now on" in a.approve(CHAT, "git", MODES, group=False)
    assert a.check(CHAT, "git", "first", "mcp__git__git_commit") is None
    again = Approvals(path)
    assert again.check(CHAT, "git", "first", "x") is None
    assert again.check("telegram_2", "git", "first", "x") is not None  # another chat


def test_always_lets_one_call_run(tmp_path: Path) -> None:
    a = Approvals(tmp_path / "a.json")
    assert a.check(CHAT, "shell", "always", "t") is not None
    assert "the next call" in a.approve(CHAT, "shell", MODES, group=False)
    assert a.check(CHAT, "shell", "always", "t") is None
    assert a.check(CHAT, "shell", "always", "t") is not None
    assert not (tmp_path / "a.json").exists()  # one-call approvals are not kept


def test_never_groups_and_unknown_servers(tmp_path: Path) -> None:
    a = Approvals(tmp_path / "a.json")
    assert a.check(CHAT, "time", "never", "t") is None
    assert "needs no approval" in a.approve(CHAT, "time", MODES, group=False)
    assert "private chat" in a.approve("telegram_-5", "git", MODES, group=True)
    assert "No MCP server 'nope'" in a.approve(CHAT, "nope", MODES, group=False)
    assert a.approve(CHAT, "", MODES, group=False) == "Nothing waits for approval here."


def test_a_damaged_file_approves_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "a.json"
    path.write_text('{"approved": [["telegram_1", "git"]')  # cut short
    a = Approvals(path)
    assert a.check(CHAT, "git", "first", "t") is not None
    assert "MCP approvals start empty" in caplog.text


def test_a_tampered_file_approves_only_pairs_of_names(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A dict's keys or a two-letter string unpacked as (chat, server) approved them; one
    bad entry dropped every approval, and the next save then wrote over them."""
    path = tmp_path / "a.json"
    entries = [[CHAT, "git"], {"telegram_2": 1, "git": 2}, "ab", 5, [CHAT], [CHAT, 7], ["", "x"]]
    path.write_text(json.dumps({"approved": entries}))
    a = Approvals(path)
    assert a.check(CHAT, "git", "first", "t") is None  # the good entry holds
    assert a.check("telegram_2", "git", "first", "t") is not None
    assert a.check("a", "b", "first", "t") is not None
    assert "6 entr(ies) are not a [chat, server] pair" in caplog.text


def test_json_nested_too_deep_approves_nothing_and_starts(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text('{"approved": ' + "[" * 100_000)  # RecursionError, not ValueError
    assert Approvals(path).check(CHAT, "git", "first", "t") is not None


def test_an_unreadable_file_is_kept_aside_not_written_over(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    damaged = '{"approved": [["telegram_1", "git"], ["telegram_1", "cal"]'  # cut short
    path.write_text(damaged)
    a = Approvals(path)
    assert "from now on" in a.approve(CHAT, "time", {"time": "first"}, group=False)
    assert (tmp_path / "a.json.bad").read_text() == damaged  # the owner can mend it
    assert json.loads(path.read_text()) == {"approved": [[CHAT, "time"]]}
    assert "from now on" in a.approve(CHAT, "git", {"git": "first"}, group=False)
    assert (tmp_path / "a.json.bad").read_text() == damaged  # moved once, not again

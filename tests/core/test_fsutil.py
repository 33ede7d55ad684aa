"""klaw.fsutil.atomic_write: the old file or the new one, never a mix; mode 600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from klaw.fsutil import atomic_write


def test_replaces_content_with_mode_600(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    target.write_text("old")
    atomic_write(target, "новое 新")
    assert target.read_text(encoding="utf-8") == "новое 新"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]  # no temp file left


def test_mkdir_and_bytes(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "f.bin"
    atomic_write(target, b"\x00\xff", mkdir=True, mode=0o644)
    assert target.read_bytes() == b"\x00\xff"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_failure_keeps_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("old")
    # A directory where the rename must land: os.replace fails after the temp is written.
    blocker = tmp_path / "d"
    blocker.mkdir()
    (blocker / "x").write_text("keep")
    with pytest.raises(OSError):
        atomic_write(blocker, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "f"]


def test_missing_directory_is_an_error_without_mkdir(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        atomic_write(tmp_path / "nope" / "f", "x")
    assert not (tmp_path / "nope").exists()


def test_symlinked_temp_name_is_not_followed(tmp_path: Path) -> None:
    # O_EXCL|O_NOFOLLOW: even a planted link at a temp name cannot redirect the write.
    outside = tmp_path / "outside"
    outside.write_text("untouched")
    target = tmp_path / "t"
    atomic_write(target, "x")
    assert outside.read_text() == "untouched"
    assert os.path.islink(target) is False

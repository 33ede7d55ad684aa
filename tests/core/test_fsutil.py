"""klaw.fsutil: the old file or the new one, never a mix; mode 600; no temp file left."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from klaw.errors import NotWritable
from klaw.fsutil import (
    atomic_path,
    atomic_write,
    atomic_write_at,
    create_exclusive,
    ensure_writable_dir,
)


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


def test_a_name_of_255_bytes_can_be_replaced(tmp_path: Path) -> None:
    # The temp name must stay within NAME_MAX too (".{name}.{random}.tmp" would not).
    target = tmp_path / ("я" * 127 + "x")  # 255 bytes in UTF-8
    target.write_text("old")
    atomic_write(target, "new")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_write_at_a_directory_descriptor(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("old")
    dfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        atomic_write_at(dfd, "f", "new", mode=0o640)
        atomic_write_at(dfd, "g", b"\x01")
        with pytest.raises(IsADirectoryError):
            (tmp_path / "d").mkdir()
            atomic_write_at(dfd, "d", "x")
    finally:
        os.close(dfd)
    assert (tmp_path / "f").read_text() == "new"
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o640
    assert (tmp_path / "g").read_bytes() == b"\x01"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "f", "g"]  # no temp left


def test_atomic_path_replaces_on_success_only(tmp_path: Path) -> None:
    target = tmp_path / "model.onnx"
    target.write_text("old")
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and not tmp.exists()
        tmp.write_text("new")
        assert target.read_text() == "old"  # nothing visible before the block ends
    assert target.read_text() == "new"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("download broke")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


def test_create_exclusive_never_overwrites(tmp_path: Path) -> None:
    target = tmp_path / "core_memory.json"
    assert create_exclusive(target, "first")
    assert not create_exclusive(target, "second")
    assert target.read_text() == "first"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["core_memory.json"]  # no temp left


def test_ensure_writable_dir_names_the_cure(tmp_path: Path) -> None:
    ensure_writable_dir(tmp_path / "new" / "dir")
    assert (tmp_path / "new" / "dir").is_dir()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(NotWritable, match=str(blocker)):
        ensure_writable_dir(blocker / "below")  # a file where a directory should be

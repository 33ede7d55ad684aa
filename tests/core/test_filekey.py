"""`klaw.filekey`: a stat proves a file unchanged only when it is not racy."""

from __future__ import annotations

import os
from pathlib import Path

from filetick import next_tick
from klaw.filekey import RACY_COARSE_NS, RACY_NS, file_key


def test_a_file_changed_just_now_is_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"one")
    st = path.stat()
    assert file_key(st) is None
    later = max(st.st_mtime_ns, st.st_ctime_ns) + RACY_NS + 1
    assert file_key(st, later) == (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_dev)
    # Stamped after the moment given (a clock set back): not trusted either.
    assert file_key(st, st.st_ctime_ns - 1) is None


def test_an_edit_with_size_and_mtime_put_back_changes_the_key(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"AAAA")
    st = path.stat()
    far = max(st.st_mtime_ns, st.st_ctime_ns) + 10 * RACY_NS
    key = file_key(st, far)
    next_tick(path)
    path.write_bytes(b"BBBB")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    st2 = path.stat()
    assert (st2.st_size, st2.st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert file_key(st2, far) != key


def test_a_file_swapped_for_another_changes_the_key(tmp_path: Path) -> None:
    path, other = tmp_path / "f", tmp_path / "g"
    path.write_bytes(b"AAAA")
    other.write_bytes(b"BBBB")
    st = path.stat()
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, path)
    far = max(st.st_mtime_ns, st.st_ctime_ns, path.stat().st_ctime_ns) + 10 * RACY_NS
    assert file_key(path.stat(), far) != file_key(st, far)


def _stat(mtime_ns: int, ctime_ns: int) -> os.stat_result:
    base = tuple(os.stat(__file__)[:10])
    return os.stat_result(base, {"st_mtime_ns": mtime_ns, "st_ctime_ns": ctime_ns})


def test_whole_second_times_are_trusted_only_after_the_coarse_window() -> None:
    """A filesystem stamping whole seconds (ext3, FAT) can keep a ctime across a write
    for a second or two: RACY_COARSE_NS then, RACY_NS otherwise."""
    second = 1_000_000_000
    fine = _stat(5 * second + 123, 5 * second + 456)
    coarse = _stat(5 * second, 5 * second)
    after = 5 * second + 456 + RACY_NS + 1
    assert file_key(fine, after) is not None
    assert file_key(coarse, after) is None
    assert file_key(coarse, 5 * second + RACY_COARSE_NS + 1) is not None

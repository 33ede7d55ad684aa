"""Helpers for the caches that trust a file's stat (`klaw.filekey`)."""

from __future__ import annotations

from pathlib import Path


def next_tick(path: Path) -> None:
    """Rewrites `path` (same bytes) until the kernel stamps a later ctime: the file
    clock's tick has passed, so the next write gets another ctime. Untimed: it waits
    on the kernel's clock, not on ours."""
    before = path.stat().st_ctime_ns
    data = path.read_bytes()
    for _ in range(10_000_000):
        path.write_bytes(data)
        if path.stat().st_ctime_ns != before:
            return
    raise AssertionError("the file clock never moved")

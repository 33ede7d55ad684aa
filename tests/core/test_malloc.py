"""`klaw.malloc`: freed heap goes back to the OS after a trim."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import threading
from klaw.malloc import limit_arenas, trim
limit_arenas()
def rss():
    return int(open('/proc/self/status').read().split('VmRSS:')[1].split()[0]) // 1024
def churn():
    # Freed in an order that leaves the top of the heap in use: no automatic release.
    blocks = [bytes(1000 + i % 7) for i in range(60_000)]
    keep = blocks[-1]
    del blocks[:-1]
    return keep
keep = []
t = threading.Thread(target=lambda: keep.append(churn()))
t.start(); t.join()
before = rss()
trim()
print(before, rss())
"""


def test_trim_returns_freed_heap_to_the_os() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    before, after = map(int, out.stdout.split())
    assert after < before - 20, (before, after)  # ~60 MB were freed before the trim

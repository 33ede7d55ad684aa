"""When a file's stat proves that what was read from it before is still what it holds.

Size and mtime prove nothing (both can be put back after an edit: `touch -d`, `utime`),
but the ctime cannot be set from user space: every write, chmod, rename or `utime`
moves it to the kernel's clock. With the inode and device (a file swapped for another)
the key changes whenever the bytes may have.

One gap remains: the kernel stamps times from a coarse clock (a tick, 1-10 ms; a second
or two on filesystems such as ext3 or FAT), so a write in the same tick as the stat
taken before a read can leave the key unchanged while the bytes moved. As git does for
its index ("racy git"), a key stamped too near the moment it was taken is not trusted:
the file is read again next time (kernels since 6.13 stamp the change after a stat from
a fine clock; a Pi's may not). Too near is RACY_NS (ten ticks at 100 Hz), or
RACY_COARSE_NS when the file's times are whole seconds (a coarse filesystem). Under a
clock set back (libfaketime, a Pi before NTP) file times look recent and nothing is
kept: slower, never stale.
"""

from __future__ import annotations

import os
import time

__all__ = ["RACY_COARSE_NS", "RACY_NS", "FileKey", "file_key"]

FileKey = tuple[int, int, int, int, int]

#: A file changed less than this before its stat is read again next time.
RACY_NS = 100_000_000
#: The same where file times are whole seconds.
RACY_COARSE_NS = 2_000_000_000
_SECOND = 1_000_000_000


def file_key(st: os.stat_result, taken_ns: int | None = None) -> FileKey | None:
    """(mtime, ctime, size, inode, device) of `st`, or None when it must not be trusted:
    changed within RACY_NS (coarse times: RACY_COARSE_NS) of `taken_ns` (the wall clock
    just before the stat, now by default), or stamped after it."""
    if taken_ns is None:
        taken_ns = time.time_ns()
    racy = RACY_NS
    if st.st_mtime_ns % _SECOND == 0 and st.st_ctime_ns % _SECOND == 0:
        racy = max(racy, RACY_COARSE_NS)
    if max(st.st_mtime_ns, st.st_ctime_ns) > taken_ns - racy:
        return None
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_dev)

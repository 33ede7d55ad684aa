"""Whether the heartbeat has anything new to look at, without waking the model.

A heartbeat whose last run was silent is skipped while nothing it reads has changed
(docs/scheduler.md "Costs and caps"): the digest covers the checklist itself, the
workspace files and folders it names (size and mtime, never their contents), each
owner chat's newest conversation file (a new message changes it), and the owner's
date when the checklist speaks of days ("today", "tomorrow", "сегодня", "今天" …).
Not the hour: a checklist about the next hours of a calendar or the weather looks
outside the workspace, which no digest sees; it wants a pre-check or
`skipUnchanged: false`. Only stats: a digest costs well under a millisecond on a Pi
and no token.
"""

from __future__ import annotations

import hashlib
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Final
from zoneinfo import ZoneInfo

__all__ = ["heartbeat_digest"]

#: Bounds, so that a checklist naming `/` or a huge folder stays cheap.
MAX_ENTRIES: Final = 5000
MAX_CHATS: Final = 1000

_DAY_WORDS: Final = re.compile(
    r"\b(today|tonight|tomorrow|yesterday|this (?:morning|afternoon|evening|week)|daily|"
    r"сегодня|завтра|вчера|утр|вечер|недел)|今天|明天|昨天|今晚|本周|这周",
    re.IGNORECASE,
)
# Path-like words: with a slash, or a name with a short extension.
_PATHS: Final = re.compile(r"[\w.\-/]*[\w\-]/[\w.\-/]*|[\w\-]+\.[A-Za-z0-9]{1,5}\b")


def _named(text: str, workspace: Path) -> list[Path]:
    """The workspace paths the checklist names that exist inside the workspace."""
    root = workspace.resolve()
    out: set[Path] = set()
    for word in _PATHS.findall(text):
        word = word.removeprefix("./").rstrip(".")
        if not word or word.startswith(("/", "~")) or ".." in word.split("/"):
            continue
        try:
            path = (root / word).resolve()
        except (OSError, RuntimeError):
            continue
        if path != root and path.is_relative_to(root) and path.exists():
            out.add(path)
    return sorted(out)


def _stat_line(path: Path, root: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return f"{path.relative_to(root)}:gone"
    return f"{path.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}"


def _folder(path: Path, root: Path, budget: list[int]) -> list[str]:
    lines = [_stat_line(path, root)]
    for dirpath, dirnames, filenames in os.walk(path):  # symlinked folders not followed
        dirnames.sort()
        for name in sorted(filenames):
            if budget[0] <= 0:
                return [*lines, "…"]
            budget[0] -= 1
            lines.append(_stat_line(Path(dirpath, name), root))
    return lines


def _chats(conversations: Path) -> list[str]:
    """Each owner chat's newest conversation file (the jobs' own chats left out: the
    heartbeat's own run writes to its chat)."""
    lines: list[str] = []
    try:
        chats = sorted(
            (e for e in os.scandir(conversations) if e.is_dir(follow_symlinks=False)),
            key=lambda e: e.name,
        )
    except OSError:
        return lines
    for entry in chats[:MAX_CHATS]:
        if entry.name.startswith("scheduler_"):
            continue
        try:
            files = [f for f in os.scandir(entry.path) if f.is_file(follow_symlinks=False)]
        except OSError:
            continue
        if files:
            newest = max(files, key=lambda f: f.name)
            st = newest.stat(follow_symlinks=False)
            lines.append(f"{entry.name}/{newest.name}:{st.st_size}:{st.st_mtime_ns}")
    return lines


def heartbeat_digest(
    checklist: str, workspace: Path, conversations: Path, zone: ZoneInfo | None, now: datetime
) -> str:
    """A digest of what a heartbeat run with `checklist` would read (module docstring)."""
    root = workspace.resolve()
    parts = [checklist]
    budget = [MAX_ENTRIES]
    for path in _named(checklist, workspace):
        parts.extend(_folder(path, root, budget) if path.is_dir() else [_stat_line(path, root)])
    parts.append("--chats")
    parts.extend(_chats(conversations))
    local = now.astimezone(zone)  # None: the host's zone
    if _DAY_WORDS.search(checklist):
        parts.append(f"day:{local.date().isoformat()}")
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()

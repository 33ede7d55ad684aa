"""The segment's last summary for the context (design §3.3–3.4).

Summaries are Markdown files in `$XDG_DATA_HOME/klaw/summaries/{chat_id}/`, written
by background summarization (klaw.scheduler.summaries). The newest one (the highest
ordinal) is used when it summarizes the current segment; one from before `/new`
belongs to the old segment and is left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MAX_SUMMARY_BYTES", "Covered", "last_summary", "latest_summary"]

MAX_SUMMARY_BYTES = 16 * 1024  # more could never fit beside the window

_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})_msg_(\d+)_(\d+)\.md$")
_TS = r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z)"
_COVERS = re.compile(rf"^_{_TS} – {_TS}, \d+ messages?, to (\S+)\._$", re.M)


@dataclass(frozen=True, slots=True)
class Covered:
    """The newest summary of a chat: its path, last ordinal, the messages it covers."""

    path: Path
    to_ordinal: int
    from_ts: str  # the first message covered ("" when the file does not say)
    to_ts: str
    to_id: str  # the last message covered (times have whole seconds: ids tell apart)
    text: str

    def of_segment(self, segment_start: str) -> bool:
        """Whether it summarizes the segment that began at `segment_start` (ISO UTC).

        Told by the messages it covers, never by the file's mtime: a restored or
        copied file, or a clock set after the file was written (a Pi has no clock
        of its own), must not move a summary into or out of a segment.
        """
        return bool(self.from_ts) and self.from_ts >= segment_start


def last_summary(folder: Path) -> Covered | None:
    """The summary with the highest ordinal in `folder` (None when there is none)."""
    best: tuple[int, Path] | None = None
    try:
        names = [p for p in folder.iterdir() if p.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return None
    for p in names:
        m = _NAME.match(p.name)
        if m and (best is None or int(m.group(3)) > best[0]):
            best = (int(m.group(3)), p)
    if best is None:
        return None
    text = best[1].read_text(encoding="utf-8", errors="replace")
    covers = _COVERS.search(text)
    return Covered(
        path=best[1],
        to_ordinal=best[0],
        from_ts=covers.group(1) if covers else "",
        to_ts=covers.group(2) if covers else "",
        to_id=covers.group(3) if covers else "",
        text=text,
    )


def latest_summary(root: Path, chat_id: str, since: str | None) -> str | None:
    """The text of the chat's newest summary when it covers messages from `since`
    (the segment start, ISO UTC) on."""
    newest = last_summary(root / chat_id)
    if newest is None or not newest.of_segment(since or ""):
        return None
    text = newest.text.encode()[:MAX_SUMMARY_BYTES].decode("utf-8", "replace").strip()
    return text or None

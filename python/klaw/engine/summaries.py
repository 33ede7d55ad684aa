"""The segment's last summary for the context (design §3.3–3.4).

Summaries are Markdown files in `$XDG_DATA_HOME/klaw/summaries/{chat_id}/`, written
by background summarization (klaw.scheduler.summaries). The newest one (the highest
ordinal) is used when it summarizes the current segment; one from before `/new`
belongs to the old segment and is left out.
"""

from __future__ import annotations

from pathlib import Path

from klaw.scheduler.summaries import last_summary

__all__ = ["MAX_SUMMARY_BYTES", "latest_summary"]

MAX_SUMMARY_BYTES = 16 * 1024  # more could never fit beside the window


def latest_summary(root: Path, chat_id: str, since: str | None) -> str | None:
    """The text of the chat's newest summary when it covers messages from `since`
    (the segment start, ISO UTC) on."""
    newest = last_summary(root / chat_id)
    if newest is None or not newest.of_segment(since or ""):
        return None
    text = newest.text.encode()[:MAX_SUMMARY_BYTES].decode("utf-8", "replace").strip()
    return text or None

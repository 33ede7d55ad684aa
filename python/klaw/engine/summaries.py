"""The segment's last summary for the context (design §3.3–3.4).

Summaries are Markdown files in `$XDG_DATA_HOME/klaw/summaries/{chat_id}/`, named
`YYYY-MM-DD_{from}_{to}.md` by whoever writes them (background summarization, or
an import). The newest one written since the segment began is used; one from
before `/new` belongs to the old segment and is left out.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["MAX_SUMMARY_BYTES", "latest_summary"]

MAX_SUMMARY_BYTES = 16 * 1024  # more could never fit beside the window


def latest_summary(root: Path, chat_id: str, since: str | None) -> str | None:
    """The text of the chat's newest summary written at or after `since` (ISO UTC)."""
    folder = root / chat_id
    try:
        entries = [e for e in os.scandir(folder) if e.name.endswith(".md") and e.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return None
    for entry in sorted(entries, key=lambda e: (e.stat().st_mtime, e.name), reverse=True):
        written = datetime.fromtimestamp(entry.stat().st_mtime, UTC)
        if since and written.strftime("%Y-%m-%dT%H:%M:%SZ") < since:
            return None  # older ones are older still
        with open(entry.path, "rb") as f:
            text = f.read(MAX_SUMMARY_BYTES).decode("utf-8", "replace").strip()
        if text:
            return text
    return None

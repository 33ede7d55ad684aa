"""Write-back to the OpenClaw workspace (design §4.6; `compatibility.openclaw`, off by
default), so going back to OpenClaw loses nothing Klaw learned.

- `sync.daily_logs`: each fact saved with `memory_save` and each conversation summary
  is appended to `memory/YYYY-MM-DD.md` (the day in the owner's zone), OpenClaw's
  daily log, created with its `# YYYY-MM-DD` heading when the day has none yet;
- `sync.memory_md`: a fact saved as durable (`memory_save` with `durable`) is also
  appended to MEMORY.md, OpenClaw's long-term memory;
- `sync.user_md`: a fact about the owner written to core memory
  (`memory_core_update`, section `user`) is appended to USER.md as `- **Key:** value`.

Only ever appended, one `write` on an O_APPEND descriptor then fsync: what the owner
wrote is never rewritten, a file edited by hand meanwhile keeps the edit (and is
re-indexed by the workspace watcher like any change), and a crash leaves at most a
missing last entry. A line that would start inside the owner's last line gets a
newline first.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from klaw.memory.versioning import versioner

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.memory.api import Memory

__all__ = ["WriteBack"]

log = logging.getLogger("klaw.openclaw")

_LOCK = threading.Lock()  # appends from tool threads and the summarizer, one at a time


def _append(path: Path, text: str, header: str = "") -> None:
    with _LOCK:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            lead = header
            if size:
                last = os.pread(fd, 1, size - 1)
                lead = "" if last == b"\n" else "\n"
            os.write(fd, (lead + text).encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)


def _one_line(text: str) -> str:
    return " ".join(text.split())


class WriteBack:
    """The write-back, a subscriber of memory, the summarizer and core memory's tool:
    the composition roots (klaw.engine.daemon, the memory CLI) wire it with
    `subscribe`, `Summarizer.on_written` and the tool registry's `on_user_fact`."""

    def __init__(self, workspace: Path, config: EngineConfig) -> None:
        self.workspace = workspace
        sync = config.compatibility.openclaw
        self.enabled = sync.enabled
        self.daily_logs = sync.enabled and sync.sync.daily_logs
        self.memory_md = sync.enabled and sync.sync.memory_md
        self.user_md = sync.enabled and sync.sync.user_md
        self.zone = config.scheduler.zone()
        self.git = versioner(workspace, config)  # each append is one commit (memory.git)

    @classmethod
    def subscribe(cls, workspace: Path, config: EngineConfig, memory: Memory) -> WriteBack | None:
        """The write-back when `compatibility.openclaw` is on, told of every fact
        `memory` saves; None when it is off."""
        if not config.compatibility.openclaw.enabled:
            return None
        writeback = cls(workspace, config)
        memory.on_saved.append(writeback.saved)
        return writeback

    def _now(self, when: datetime | None) -> datetime:
        return (when or datetime.now(self.zone)).astimezone(self.zone)

    def saved(self, text: str, durable: bool = False, when: datetime | None = None) -> None:
        """A fact from `memory_save` (a `Memory.on_saved` subscriber)."""
        try:
            now = self._now(when)
            why = "A fact saved with memory_save, written back to the OpenClaw workspace."
            if self.daily_logs:
                day = now.strftime("%Y-%m-%d")
                path = self.workspace / "memory" / f"{day}.md"
                with self.git.change([path], f"write back a saved fact to {day}.md", why):
                    _append(path, f"- {now:%H:%M} {_one_line(text)}\n", header=f"# {day}\n\n")
            if durable and self.memory_md:
                path = self.workspace / "MEMORY.md"
                with self.git.change([path], "write back a durable fact to MEMORY.md", why):
                    _append(path, f"- {_one_line(text)}\n", header="# MEMORY.md\n\n")
        except OSError as exc:  # the fact is saved in Klaw's memory either way
            log.warning("write-back of a saved fact failed: %s", exc)

    def summary(self, chat_id: str, text: str, when: datetime | None = None) -> None:
        """A conversation summary (a `Summarizer.on_written` subscriber)."""
        if not self.daily_logs:
            return
        try:
            now = self._now(when)
            day = now.strftime("%Y-%m-%d")
            path = self.workspace / "memory" / f"{day}.md"
            with self.git.change(
                [path],
                f"write back the summary of {chat_id} to {day}.md",
                "A background summary, written back to the OpenClaw workspace's daily log.",
            ):
                _append(
                    path,
                    f"\n## Conversation summary ({chat_id}, {now:%H:%M})\n\n{text.strip()}\n",
                    header=f"# {day}\n",
                )
        except OSError as exc:
            log.warning("write-back of a summary failed: %s", exc)

    def user_fact(self, key: str, value: object) -> None:
        """A fact about the owner written to core memory (`memory_core_update`'s
        `on_user_fact`)."""
        if not self.user_md:
            return
        label = key.replace("_", " ").strip().capitalize()
        values = value if isinstance(value, list) else [value]
        text = "".join(f"- **{label}:** {_one_line(str(v))}\n" for v in values)
        try:
            with self.git.change(
                ["USER.md"],
                f"write back the owner's {label.lower()} to USER.md",
                "Written to core memory (memory_core_update) and back to the OpenClaw workspace.",
            ):
                _append(self.workspace / "USER.md", text, header="# USER.md\n\n")
        except OSError as exc:
            log.warning("write-back to USER.md failed: %s", exc)

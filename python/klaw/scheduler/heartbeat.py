"""HEARTBEAT.md → the `heartbeat` job (design §4.4).

The workspace's HEARTBEAT.md is a checklist the agent walks on a schedule
(`scheduler.heartbeat.cron`, hourly by default) as a subagent with its own short
history: never the owner's conversation. The job is (re)made at engine start and
whenever the file changes. Only a checklist with items makes it: a file that is
missing, empty, or holds only prose, headings and comments (`klaw init`'s template,
OpenClaw's) removes it, since every run wakes the model (~2,000 prompt tokens) for
nothing. The model is told to answer with the silent JSON when nothing needs the owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Final

from klaw.scheduler.jobs import HEARTBEAT, MAX_MESSAGE_CHARS, JobError, JobSpec
from klaw.workspace_text import has_items, workspace_text

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.scheduler.service import Scheduler

__all__ = ["HEARTBEAT_FILE", "HeartbeatWatcher", "heartbeat_spec", "sync_heartbeat"]

log = logging.getLogger("klaw.scheduler")

HEARTBEAT_FILE: Final = "HEARTBEAT.md"
#: How often the file's size and mtime are looked at (one stat: nothing to a Pi).
POLL_S: Final = 2.0

PROMPT: Final = """Run the checklist from HEARTBEAT.md:

{checklist}

If nothing requires the user's attention, reply with only this JSON:
{{"silent": true, "reason": "brief description of what was checked"}}
Otherwise reply with a short message for the user: only what needs their attention."""


def heartbeat_spec(text: str | None, config: EngineConfig, zone: str) -> JobSpec | None:
    """The job for HEARTBEAT.md's `text` (None: no job). Raises `JobError` when the
    file is too long to be a checklist or the config's heartbeat keys are wrong."""
    if text is None or not has_items(text):
        return None
    message = PROMPT.format(checklist=workspace_text(text))
    if len(message) > MAX_MESSAGE_CHARS:
        raise JobError(
            f"{HEARTBEAT_FILE} has {len(text)} characters; a checklist of at most "
            f"{MAX_MESSAGE_CHARS - len(PROMPT)} is run (each run sends all of it)"
        )
    hb = config.scheduler.heartbeat
    return JobSpec(
        name=HEARTBEAT,
        cron=hb.cron,
        message=message,
        timezone=zone,
        model=hb.model,
        inject_into=hb.inject_into,
        precheck=hb.precheck,
        daily_token_cap=hb.daily_token_cap,
        kind="heartbeat",
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None


async def sync_heartbeat(scheduler: Scheduler, path: Path, config: EngineConfig, zone: str) -> str:
    """Makes the `heartbeat` job match the file: "added", "updated", "removed" or
    "unchanged". A bad file keeps the job as it was (and says why in the log)."""
    text = await asyncio.to_thread(_read, path)
    try:
        spec = heartbeat_spec(text, config, zone)
    except JobError as exc:
        log.error("%s: %s; the heartbeat job is left as it was", path, exc)
        return "unchanged"
    current = await scheduler.get(HEARTBEAT)
    if spec is not None and current is not None and not current.enabled:
        spec = dataclasses.replace(spec, enabled=False)  # paused by the owner: stays so
    if spec is None:
        if current is None:
            return "unchanged"
        await scheduler.remove(HEARTBEAT)
        log.info("%s is gone or empty: heartbeat job removed", path.name)
        return "removed"
    if current is not None and current.to_data() == spec.to_data():
        return "unchanged"
    times = await scheduler.add(spec, replace=True)
    log.info(
        "heartbeat job %s from %s: %s, next %s",
        "updated" if current else "added",
        path.name,
        spec.cron,
        times[0].isoformat() if times else "never",
    )
    return "updated" if current else "added"


class HeartbeatWatcher:
    """Keeps the heartbeat job in step with HEARTBEAT.md while the engine runs."""

    def __init__(self, scheduler: Scheduler, workspace: Path, config: EngineConfig, zone: str):
        self.scheduler = scheduler
        self.path = workspace / HEARTBEAT_FILE
        self.config = config
        self.zone = zone
        self.synced = asyncio.Event()  # set after each sync (tests wait on it)

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    async def run(self, stop: asyncio.Event) -> None:
        last: tuple[int, int, int] | str | None = "never"
        while not stop.is_set():
            stamp = await asyncio.to_thread(self._stamp)
            if stamp != last:
                await sync_heartbeat(self.scheduler, self.path, self.config, self.zone)
                last = stamp
                self.synced.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_S)

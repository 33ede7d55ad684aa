"""BOOT.md: the workspace's start-up checklist, run once each time the engine starts.

As OpenClaw's `boot-md` hook does at gateway start, but as an isolated background
run (a subagent with its own short history, never the owner's conversation): its
reply goes where the heartbeat's goes (`scheduler.heartbeat.injectInto`) unless it is
silent (the silent JSON, or OpenClaw's `NO_REPLY`). A BOOT.md that is missing or only
headings and comments runs nothing. The run is in the scheduler's ledger like any job
(`klaw schedule history boot-md`).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

from klaw.scheduler.jobs import MAX_MESSAGE_CHARS, JobSpec
from klaw.workspace_text import has_tasks, workspace_text

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.scheduler.service import Scheduler

__all__ = ["BOOT_FILE", "BOOT_JOB", "boot_spec", "run_boot"]

log = logging.getLogger("klaw.scheduler")

BOOT_FILE: Final = "BOOT.md"
BOOT_JOB: Final = "boot-md"
PROMPT: Final = """The engine has just started. Follow BOOT.md, your start-up checklist:

{checklist}

If nothing requires the user's attention, reply with only this JSON:
{{"silent": true, "reason": "brief description of what was checked"}}
Otherwise reply with a short message for the user: only what needs their attention."""


def boot_spec(text: str | None, config: EngineConfig, zone: str) -> JobSpec | None:
    if text is None or not has_tasks(text):
        return None
    message = PROMPT.format(checklist=workspace_text(text))
    if len(message) > MAX_MESSAGE_CHARS:
        log.warning("%s is too long to run (%d characters); not run", BOOT_FILE, len(text))
        return None
    hb = config.scheduler.heartbeat
    return JobSpec(
        name=BOOT_JOB,
        cron="",
        message=message,
        timezone=zone,
        model=hb.model,
        inject_into=hb.inject_into,
        kind="once",
    )


async def run_boot(
    scheduler: Scheduler, workspace: Path, config: EngineConfig, zone: str
) -> datetime | None:
    """Starts the BOOT.md run (not waited for); its due time, or None when there is none."""

    def read() -> str | None:
        try:
            return (workspace / BOOT_FILE).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    spec = boot_spec(await asyncio.to_thread(read), config, zone)
    if spec is None:
        return None
    due = scheduler.run_once(spec)
    log.info("%s: start-up run %s", BOOT_FILE, due.isoformat())
    return due

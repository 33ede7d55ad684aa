"""What the owner and the model may do with jobs, checked once for both doors: the
`klaw schedule` CLI (through the engine socket) and the `schedule_*` tools.

Each refusal names what is wrong: a bad cron (field and reason), an unknown model
(and the known ones), an unknown chat, a duplicate name, a reserved name.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Final

from klaw.errors import InvalidInput
from klaw.scheduler.boot import BOOT_JOB
from klaw.scheduler.jobs import HEARTBEAT, JobError, JobSpec, check_name
from klaw.scheduler.ledger import Run
from klaw.scheduler.reflect import REFLECT_JOB
from klaw.scheduler.summaries import SUMMARY_JOB
from klaw.wire.protocol import JobRun, Schedule, ScheduledJob, ScheduleResult

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from klaw.config import EngineConfig
    from klaw.memory.api import Memory
    from klaw.scheduler.service import Scheduled, Scheduler

__all__ = ["BUILT_IN", "ScheduleControl", "system_zone"]

log = logging.getLogger("klaw.scheduler")

#: The jobs Klaw makes itself, and what each is made from.
BUILT_IN: Final = {
    HEARTBEAT: "HEARTBEAT.md's checklist",
    SUMMARY_JOB: "engine.yaml's `summarization`",
    REFLECT_JOB: "engine.yaml's `memory.reflect`",
    BOOT_JOB: "BOOT.md",
}


def system_zone() -> str:
    """The host's IANA time zone name ('UTC' when it has none)."""
    try:
        from tzlocal import get_localzone_name

        return get_localzone_name() or "UTC"
    except Exception:  # no /etc/localtime, an odd TZ: jobs still need a zone
        return "UTC"


class ScheduleControl:
    def __init__(
        self,
        scheduler: Scheduler,
        config: EngineConfig,
        memory: Memory | None,
        conversations: Path,
        admitted: Callable[[str], bool] = lambda _chat: False,
    ) -> None:
        self.scheduler = scheduler
        self.config = config
        self.memory = memory
        self.conversations = conversations
        #: Whether the gateway's allowlist admits a chat (gateway.yaml `allowedChatIds`,
        #: approved chats): such a chat is a target before it has written.
        self.admitted = admitted

    @property
    def default_zone(self) -> str:
        return self.config.scheduler.timezone or system_zone()

    async def add(
        self,
        name: str,
        cron: str,
        message: str,
        *,
        model: str | None = None,
        inject_into: str | None = None,
        timezone: str | None = None,
        precheck: str | None = None,
        daily_token_cap: int | None = None,
    ) -> tuple[JobSpec, list[datetime]]:
        """Adds a cron job; returns it with its next three fire times (its zone)."""
        if check_name(name) == HEARTBEAT:
            raise JobError(
                "the name 'heartbeat' is kept for the job made from HEARTBEAT.md; "
                "edit that file instead, or pick another name"
            )
        if name == BOOT_JOB:
            raise JobError(f"the name {BOOT_JOB!r} is kept for the BOOT.md run; pick another name")
        if name == SUMMARY_JOB:
            raise JobError(
                f"the name {SUMMARY_JOB!r} is kept for background summaries "
                "(engine.yaml `summarization`); pick another name"
            )
        if name == REFLECT_JOB:
            raise JobError(
                f"the name {REFLECT_JOB!r} is kept for the bank's reflect job "
                "(engine.yaml `memory.reflect`); pick another name"
            )
        spec = JobSpec(
            name=name,
            cron=cron,
            message=message,
            timezone=timezone or self.default_zone,
            model=model or None,
            inject_into=inject_into or None,
            precheck=precheck or None,
            daily_token_cap=daily_token_cap,
        )
        await self.check_targets(spec)
        times = await self.scheduler.add(spec)
        return spec, times

    async def spawn(
        self, name: str, message: str, *, model: str | None, inject_into: str | None
    ) -> datetime:
        """A one-off subagent run now (`subagent_spawn`)."""
        spec = JobSpec(
            name=name,
            cron="",
            message=message,
            timezone=self.default_zone,
            model=model or None,
            inject_into=inject_into or None,
            kind="once",
        )
        await self.check_targets(spec)
        return self.scheduler.run_once(spec)

    async def check_targets(self, spec: JobSpec) -> None:
        if spec.model is not None and spec.model not in self.config.models:
            known = ", ".join(sorted(self.config.models)) or "none"
            raise JobError(f"unknown model {spec.model!r} (engine.yaml `models`: {known})")
        if spec.inject_into is not None and not await asyncio.to_thread(
            self._known_chat, spec.inject_into
        ):
            raise JobError(
                f"unknown chat {spec.inject_into!r}: Klaw has not talked in it yet and the "
                "gateway's allowlist does not admit it (injectInto must be a chat that has "
                "written to Klaw, or one in gateway.yaml allowedChatIds or approved with "
                "`klaw pair approve`)"
            )

    def _known_chat(self, chat_id: str) -> bool:
        if self.memory is not None and self.memory.store.get_session(chat_id) is not None:
            return True
        return (self.conversations / chat_id).is_dir() or self.admitted(chat_id)

    async def remove(self, name: str, *, owner: bool = True) -> JobSpec:
        """Removes a job. The built-in ones are the owner's (`owner` False: the model's
        `schedule_remove`, which is refused them and told where they come from)."""
        if not owner and name in BUILT_IN:
            raise JobError(
                f"{name!r} is a built-in job, made from {BUILT_IN[name]}: only the owner "
                "can change it there"
            )
        return await self.scheduler.remove(name)

    async def jobs(self) -> list[Scheduled]:
        return await self.scheduler.jobs()

    async def pause(self, name: str, paused: bool = True) -> Scheduled:
        """`klaw schedule pause|resume`: the heartbeat stays paused across HEARTBEAT.md
        edits; the summaries job follows engine.yaml."""
        if name == SUMMARY_JOB:
            raise JobError(
                f"{SUMMARY_JOB!r} follows engine.yaml: set summarization.enabled "
                "(or summarization.cron) there instead"
            )
        if name == REFLECT_JOB:
            raise JobError(
                f"{REFLECT_JOB!r} follows engine.yaml: set memory.reflect.enabled "
                "(or memory.reflect.cron) there instead"
            )
        return await self.scheduler.pause(name, paused)

    async def history(self, name: str | None, limit: int = 20) -> list[Run]:
        if name is not None:
            check_name(name)
        return await self.scheduler.history(name, limit)

    async def run(self, name: str) -> datetime:
        return await self.scheduler.run_now(name)

    async def answer(self, req: Schedule) -> ScheduleResult:
        """The answer to a `klaw schedule` request (through the engine socket)."""
        if req.action == "list":
            running = set(self.scheduler.running)
            jobs = await self.jobs()
            return ScheduleResult(
                id=req.id,
                jobs=[_job(s.spec, s.next_run, s.spec.name in running) for s in jobs],
            )
        if req.action == "history":
            runs = await self.history(req.name, req.limit)
            return ScheduleResult(id=req.id, runs=[JobRun(**dataclasses.asdict(r)) for r in runs])
        if not req.name:
            raise InvalidInput(f"schedule {req.action} needs the job's name")
        if req.action == "add":
            if not req.cron or not req.message:
                raise InvalidInput("schedule add needs a name, a cron expression and a message")
            spec, times = await self.add(
                req.name,
                req.cron,
                req.message,
                model=req.model,
                inject_into=req.inject_into,
                timezone=req.timezone,
                precheck=req.precheck,
                daily_token_cap=req.daily_token_cap,
            )
            return ScheduleResult(
                id=req.id, jobs=[_job(spec, times[0] if times else None)], next_times=times
            )
        if req.action == "remove":
            return ScheduleResult(id=req.id, jobs=[_job(await self.remove(req.name), None)])
        if req.action in ("pause", "resume"):
            got = await self.pause(req.name, paused=req.action == "pause")
            return ScheduleResult(id=req.id, jobs=[_job(got.spec, got.next_run)])
        return ScheduleResult(id=req.id, due=await self.run(req.name))


def _job(spec: JobSpec, next_run: datetime | None, running: bool = False) -> ScheduledJob:
    return ScheduledJob(
        name=spec.name,
        cron=spec.cron,
        timezone=spec.timezone,
        message=spec.message,
        kind=spec.kind,
        model=spec.model,
        inject_into=spec.inject_into,
        precheck=spec.precheck,
        daily_token_cap=spec.daily_token_cap,
        next_run=next_run,
        running=running,
        title=spec.title,
        paused=not spec.enabled,
    )

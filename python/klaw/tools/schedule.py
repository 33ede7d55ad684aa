"""`schedule_list`, `schedule_add`, `schedule_remove`, `subagent_spawn` (design §6.4).

Jobs are kept by the engine's scheduler (scheduler.db) and survive restarts. Every
refusal (bad cron, unknown model or chat, a taken name) comes back to the model as
the tool's error, naming what to fix. `injectInto` defaults to the chat the model
is answering, so "remind me every Friday" reaches the person who asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from klaw.errors import InvalidInput
from klaw.tools.base import Tool, ToolError

if TYPE_CHECKING:
    from klaw.scheduler.control import ScheduleControl

__all__ = ["ScheduleAdd", "ScheduleList", "ScheduleRemove", "SubagentSpawn", "schedule_tools"]

# Checked by the scheduler (any script's letters): a JSON Schema pattern with \p{L}
# is not understood by every provider's validator.
_NAME = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "description": "letters (any script), digits, '-' or '_', e.g. 'weather' or '早报'",
}
_CHAT = {"type": "string", "minLength": 3, "maxLength": 200}


class _ScheduleTool(Tool):
    def __init__(self, control: ScheduleControl, *, chat_id: str | None = None) -> None:
        self._control = control
        self._chat = chat_id

    def _target(self, args: dict[str, Any]) -> str | None:
        given = args.get("injectInto")
        if given is not None:
            return str(given).strip() or None
        return self._chat


class ScheduleList(_ScheduleTool):
    name = "schedule_list"
    description = "List the scheduled jobs: name, cron, time zone, next run, target chat."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }

    async def run(self, args: dict[str, Any]) -> str:
        jobs = await self._control.jobs()
        if not jobs:
            return "No scheduled jobs."
        lines = []
        for job in jobs:
            spec = job.spec
            nxt = job.next_run.astimezone(spec.zone()).isoformat() if job.next_run else "never"
            when = "paused" if not spec.enabled else f"next {nxt}"
            title = f'"{spec.title}", ' if spec.title else ""
            target = spec.inject_into or "log only"
            lines.append(
                f"- {spec.name}: {title}'{spec.cron}' ({spec.timezone}), {when}, to {target}: "
                f"{spec.message[:120]}"
            )
        return "\n".join(lines)


class ScheduleAdd(_ScheduleTool):
    name = "schedule_add"
    description = (
        "Schedule a job: at each time of `cron` a background agent runs "
        "`message` as its task and sends its result to `injectInto` (default: this "
        "chat). `cron` is Quartz (6-7 fields with seconds: '0 0 8 ? * MON-FRI', "
        "'0 0 18 ? * 6L' = last Friday of the month at 18:00), crontab (5 fields: "
        "'0 8 * * 1-5'), an interval ('every 2h'; a time of day is cron) "
        "or one time ('at 2026-12-01T09:00', a reminder). "
        "Times are in `timezone` (IANA name; default the owner's). "
        "The answer lists the next three run times: check them against the request."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "name": _NAME,
            "cron": {"type": "string", "minLength": 5, "maxLength": 200},
            "message": {"type": "string", "minLength": 1, "maxLength": 20_000},
            "model": {"type": "string", "maxLength": 200},
            "injectInto": _CHAT,
            "timezone": {"type": "string", "maxLength": 64},
        },
        "required": ["name", "cron", "message"],
        "additionalProperties": False,
    }

    async def run(self, args: dict[str, Any]) -> str:
        try:
            spec, times = await self._control.add(
                args["name"],
                args["cron"],
                args["message"],
                model=args.get("model"),
                inject_into=self._target(args),
                timezone=args.get("timezone"),
            )
        except InvalidInput as exc:
            raise ToolError(str(exc)) from None
        when = ", ".join(t.strftime("%a %Y-%m-%d %H:%M:%S %Z") for t in times)
        return (
            f"Scheduled '{spec.name}' ({spec.cron}, {spec.timezone}); results go to "
            f"{spec.inject_into or 'the log only'}. Next runs: {when}."
        )


class ScheduleRemove(_ScheduleTool):
    name = "schedule_remove"
    description = "Remove a scheduled job by name (its run history is kept)."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"name": _NAME},
        "required": ["name"],
        "additionalProperties": False,
    }

    async def run(self, args: dict[str, Any]) -> str:
        try:
            spec = await self._control.remove(args["name"], owner=False)
        except InvalidInput as exc:
            raise ToolError(str(exc)) from None
        return f"Removed '{spec.name}' ({spec.cron})."


class SubagentSpawn(_ScheduleTool):
    name = "subagent_spawn"
    description = (
        "Start background work now: an agent with its own context does `message` and "
        "sends its result to `injectInto` (default: this chat) when done. Use it for "
        "long tasks so you can answer the user at once."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "name": _NAME,
            "message": {"type": "string", "minLength": 1, "maxLength": 20_000},
            "model": {"type": "string", "maxLength": 200},
            "injectInto": _CHAT,
        },
        "required": ["name", "message"],
        "additionalProperties": False,
    }

    async def run(self, args: dict[str, Any]) -> str:
        try:
            await self._control.spawn(
                args["name"],
                args["message"],
                model=args.get("model"),
                inject_into=self._target(args),
            )
        except InvalidInput as exc:
            raise ToolError(str(exc)) from None
        return (
            f"Started '{args['name']}' in the background; its result will be sent to "
            f"{self._target(args) or 'the log only'}."
        )


def schedule_tools(control: ScheduleControl, chat_id: str | None) -> list[Tool]:
    return [
        ScheduleList(control, chat_id=chat_id),
        ScheduleAdd(control, chat_id=chat_id),
        ScheduleRemove(control, chat_id=chat_id),
        SubagentSpawn(control, chat_id=chat_id),
    ]

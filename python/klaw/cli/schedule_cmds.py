"""`klaw schedule list | add | remove | history | run | pause | resume`: jobs, through
the engine.

The engine owns scheduler.db; these commands ask it over the socket and say so
plainly when it is not running.
"""

from __future__ import annotations

import asyncio
import sys

from klaw.paths import KlawPaths
from klaw.wire.protocol import Schedule, ScheduledJob, ScheduleResult

__all__ = ["schedule"]


def _err(message: str) -> int:
    print(f"klaw: {message}", file=sys.stderr)
    return 1


def _ask(req: Schedule) -> ScheduleResult | int:
    from klaw.engine import client
    from klaw.errors import KlawError
    from klaw.wire.protocol import Error

    try:
        reply = asyncio.run(client.request(KlawPaths.from_env(), req))
    except KlawError as exc:
        return _err(str(exc))
    if isinstance(reply, Error):
        return _err(reply.message)
    if not isinstance(reply, ScheduleResult):
        return _err(f"unexpected answer {reply.type} from the engine")
    return reply


def schedule(req: Schedule, *, json_out: bool = False) -> int:
    got = _ask(req)
    if isinstance(got, int):
        return got
    if json_out:
        print(got.model_dump_json(indent=2, by_alias=True))
        return 0
    if req.action == "list":
        if not got.jobs:
            print("no scheduled jobs")
        for job in got.jobs:
            state = " (running)" if job.running else ""
            print(f"{job.name:<20} {job.cron:<22} {job.timezone:<18} {_when(job)}{state}")
            if job.title:
                print(f"{'':<20} {job.title}")
            print(f"{'':<20} to {job.inject_into or 'log only'}: {_one_line(job.message)}")
    elif req.action == "add":
        job = got.jobs[0]
        print(f"added {job.name}: {job.cron} ({job.timezone})")
        for when in got.next_times:
            print(f"  next {when.strftime('%a %Y-%m-%d %H:%M:%S %Z')}")
    elif req.action == "remove":
        print(f"removed {got.jobs[0].name}")
    elif req.action == "history":
        if not got.runs:
            print("no runs yet")
        for run in got.runs:
            tokens = f"{run.tokens_in}+{run.tokens_out} tok" if run.tokens_in else "-"
            print(f"{run.due}  {run.job:<20} {run.status:<11} {tokens:<14} {run.error or ''}")
    elif req.action in ("pause", "resume"):
        job = got.jobs[0]
        print(f"{job.name}: {_when(job)}")
    elif req.action == "run" and got.due is not None:
        print(f"started {req.name} (due {got.due.isoformat(timespec='seconds')})")
    return 0


def _when(job: ScheduledJob) -> str:
    if job.paused:
        return "paused"
    return f"next {job.next_run.isoformat(timespec='seconds')}" if job.next_run else "next never"


def _one_line(text: str, width: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"

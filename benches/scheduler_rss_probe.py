"""RSS the scheduler adds to an engine process. Usage: scheduler_rss_probe.py MODE DIR

Imports what the engine imports before its scheduler (pipeline, memory, router,
tools, server), reads VmRSS, then starts MODE's scheduler with 11 jobs and reads
VmRSS again; prints the difference in kB. MODE "klaw": Klaw's scheduler on
scheduler.db (APScheduler + SQLAlchemy job store, run ledger); "bare": APScheduler
with its in-memory job store, as a user would start it.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from datetime import timedelta
from pathlib import Path

import klaw.engine.daemon
import klaw.engine.pipeline
import klaw.engine.server
import klaw.llm.router
import klaw.memory.api
import klaw.tools  # noqa: F401


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def klaw_scheduler(root: Path) -> None:
    from klaw.scheduler.jobs import JobSpec
    from klaw.scheduler.service import Scheduler

    async def run(spec: JobSpec, due: object) -> None:
        return None

    sched = Scheduler(root / "scheduler.db", run, catch_up=timedelta(hours=12))
    await sched.start()
    for i in range(11):
        spec = JobSpec(name=f"job{i}", cron=f"0 {i} 8 * * ?", message="Look", timezone="UTC")
        await sched.add(spec)
    await sched.jobs()


async def bare_scheduler(root: Path) -> None:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    async def job() -> None:
        return None

    sched = AsyncIOScheduler(timezone="UTC")
    sched.start()
    for i in range(11):
        sched.add_job(job, "cron", hour=8, minute=i, id=f"job{i}")
    sched.get_jobs()


def main() -> None:
    mode, root = sys.argv[1], Path(sys.argv[2])
    gc.collect()
    before = rss_kb()

    async def go() -> int:
        await (klaw_scheduler(root) if mode == "klaw" else bare_scheduler(root))
        gc.collect()
        return rss_kb()

    after = asyncio.run(go())
    print(after - before)


if __name__ == "__main__":
    main()

"""The engine's scheduler: APScheduler 3 with its job store on scheduler.db.

APScheduler keeps the jobs and works out what is due (misfires coalesced: a job that
fell due several times while the engine was off is handed over once, with its
latest due time). What happens then is ours: `_Executor` hands the due time to
`Scheduler._due`, which claims it in the run ledger *before* APScheduler moves the
job on to its next time (both happen in one synchronous step on the loop), and
only then starts the run as a task. So a crash at any point loses no due time and
runs none twice (see `klaw.scheduler.ledger`).

The scheduler never calls a model: a run is `RunJob(spec, due)`, the engine's
`JobRunner`, which hands a message to the pipeline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from apscheduler.executors.base import BaseExecutor

from klaw.scheduler.cron import CronTrigger
from klaw.scheduler.health import set_aside_if_damaged
from klaw.scheduler.jobs import JobError, JobSpec, check_name, job_chat
from klaw.scheduler.jobstate import HANDLER
from klaw.scheduler.ledger import Ledger, Run

if TYPE_CHECKING:
    from apscheduler.job import Job
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

__all__ = ["HANDLER", "RunJob", "Scheduled", "Scheduler", "scheduled_message"]

log = logging.getLogger("klaw.scheduler")

RunJob = Callable[[JobSpec, datetime], Awaitable[None]]

#: A ledger row due further than this after now was written while the clock was
#: ahead (a claim is never later than now; `run_once` may step a few seconds on).
CLOCK_SLACK: Final = timedelta(minutes=5)


def scheduled_message(**data: Any) -> None:
    """What a stored job names as its function. Klaw's executor never calls it: it
    hands the job's data to the engine's runner. Here so the store's text reference
    resolves (APScheduler checks it when it loads a job)."""
    raise RuntimeError("scheduled jobs are run by Klaw's executor, not called directly")


@dataclass(frozen=True, slots=True)
class Scheduled:
    spec: JobSpec
    next_run: datetime | None


class Scheduler:
    """Owns scheduler.db (jobs and ledger) inside the engine; see the module docstring.

    `catch_up` is how late a due time may still run (a night with the Pi off);
    older ones are recorded as missed.
    """

    def __init__(self, db: Path, run: RunJob | None = None, *, catch_up: timedelta) -> None:
        self.db = db
        self.run_job = run  # set before `start` (the engine's JobRunner)
        self.catch_up = catch_up
        set_aside_if_damaged(db)  # chats need no jobs: a damaged file gives way to a new one
        self.ledger = Ledger(db)
        self._aps: AsyncIOScheduler | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}  # job name → its running run
        self._lock = asyncio.Lock()  # add/remove/list against each other
        #: Awaited by `stop` first (background work tied to the scheduler's life).
        self.on_stop: list[Callable[[], Awaitable[None]]] = []

    # --- life cycle ------------------------------------------------------

    async def start(self) -> None:
        """Opens the store, settles the previous engine's leftovers, starts firing."""
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        from klaw.scheduler.store import SqliteJobStore

        store = SqliteJobStore(self.db)
        self._aps = AsyncIOScheduler(
            jobstores={"default": store},
            executors={"default": _Executor(self)},
            job_defaults={
                "coalesce": True,  # downtime covering n due times: one run
                "misfire_grace_time": None,  # we judge lateness (`catch_up`), recorded
                "max_instances": 1_000,  # a still-running job is `_due`'s to judge
            },
            timezone=UTC,  # only for its own clock; every trigger names its zone
        )
        now = datetime.now(UTC)
        ahead = await asyncio.to_thread(self.ledger.unblock_future, now + CLOCK_SLACK)
        if ahead:
            log.warning(
                "%d run(s) in the ledger are dated after now (the latest %s): the clock was "
                "ahead when they were recorded; their due times will run",
                len(ahead),
                max(r.due for r in ahead),
            )
        never, interrupted = await asyncio.to_thread(self.ledger.unfinished)
        for run in interrupted:
            log.warning(
                "job %s due %s was running when the engine stopped: not run again",
                run.job,
                run.due,
            )
            await asyncio.to_thread(
                self.ledger.finish,
                run.job,
                datetime.fromisoformat(run.due),
                "interrupted",
                error="the engine stopped during this run; it is not run twice",
            )
        self._aps.start(paused=True)  # nothing fires before the next times are sound
        self._rewind(now)
        self._aps.resume()
        for run in never:  # claimed, then the engine stopped before it began
            spec = await self.get(run.job)
            due = datetime.fromisoformat(run.due)
            if spec is None:
                await asyncio.to_thread(
                    self.ledger.finish, run.job, due, "missed", error="the job was removed"
                )
            else:
                log.info("job %s due %s was claimed, never started: running it", run.job, run.due)
                self._launch(spec, due)

    def _rewind(self, now: datetime) -> None:
        """Next run times worked out while the clock was ahead are later than the
        schedule allows from `now` (an hourly heartbeat 13 h away, a daily job that
        skips tomorrow): each is set back to its next time from now. A due time that
        passed while the engine was off is earlier, not later: left to catch up."""
        for job in self._require().get_jobs():
            if job.next_run_time is None:  # paused
                continue
            expected = job.trigger.get_next_fire_time(None, now)
            if expected is not None and job.next_run_time > expected:
                log.warning(
                    "job %s: next run %s was worked out while the clock was ahead; now %s",
                    job.id,
                    job.next_run_time.isoformat(),
                    expected.isoformat(),
                )
                job.modify(next_run_time=expected)

    async def stop(self, timeout: float = 10.0) -> None:
        """Stops firing; waits up to `timeout` for running jobs, then cancels them
        (their ledger rows stay `running` and are settled at the next start)."""
        if self._aps is not None and self._aps.running:
            self._aps.shutdown(wait=False)
        for hook in self.on_stop:
            await hook()
        tasks = list(self._tasks.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self.ledger.close()

    # --- jobs ------------------------------------------------------------

    async def add(self, spec: JobSpec, *, replace: bool = False) -> list[datetime]:
        """Stores `spec` (a duplicate name is refused unless `replace`); returns its
        next three fire times, in its time zone."""
        aps = self._require()
        times = spec.next_times(3)
        if not times:
            when = "is in the past" if spec.cron.lower().startswith("at") else "never fires"
            raise JobError(f"job {spec.name!r}: {spec.cron!r} {when}")
        async with self._lock:
            if not replace and aps.get_job(spec.name) is not None:
                raise JobError(
                    f"a job named {spec.name!r} exists; remove it first or pick another name"
                )
            _check_folder(spec, [JobSpec.from_data(j.kwargs) for j in aps.get_jobs()])
            _store(aps, spec, replace=True)
        log.info("job %s added: %s (%s)", spec.name, spec.cron, spec.timezone)
        return times

    async def remove(self, name: str) -> JobSpec:
        from apscheduler.jobstores.base import JobLookupError

        aps = self._require()
        async with self._lock:
            job = self._stored(name)
            try:
                aps.remove_job(name)
            except JobLookupError:
                raise JobError(f"no job named {name!r}") from None
        running = self._tasks.get(name)
        if running is None:
            await asyncio.to_thread(self.ledger.forget, name)
        else:
            # Its run in flight still sees the job's state (a failing job that is removed
            # mid-run must not tell the owner a second time): forget once it is over.
            running.add_done_callback(lambda _t: self.ledger.forget(name))
        log.info("job %s removed", name)
        return JobSpec.from_data(job.kwargs)

    async def pause(self, name: str, paused: bool = True) -> Scheduled:
        """Stops (or with `paused` False, restarts) a job's schedule; it stays stored.
        Resumed, it runs from its next time after now: due times missed while it was
        paused are not caught up."""
        aps = self._require()
        async with self._lock:
            job = self._stored(name)
            spec = JobSpec.from_data(job.kwargs)
            if spec.enabled == (not paused):
                return Scheduled(spec, job.next_run_time)
            if not paused and not spec.next_times(1):
                raise JobError(f"job {name!r}: {spec.cron!r} never fires again; remove it")
            spec = dataclasses.replace(spec, enabled=not paused)
            _store(aps, spec, replace=True)
            job = aps.get_job(name)
        log.info("job %s %s", name, "paused" if paused else "resumed")
        return Scheduled(spec, None if job is None else job.next_run_time)

    async def get(self, name: str) -> JobSpec | None:
        job = self._require().get_job(name)
        return None if job is None else JobSpec.from_data(job.kwargs)

    async def jobs(self) -> list[Scheduled]:
        async with self._lock:
            found = self._require().get_jobs()
        return [Scheduled(JobSpec.from_data(j.kwargs), j.next_run_time) for j in found]

    async def run_now(self, name: str) -> datetime:
        """Runs a job once now (its schedule is unchanged); returns the due time given."""
        spec = await self.get(check_name(name))
        if spec is None:
            raise JobError(f"no job named {name!r}")
        return self.run_once(spec)

    def run_once(self, spec: JobSpec) -> datetime:
        """Runs `spec` now, outside any schedule (`klaw schedule run`, subagent_spawn)."""
        due = datetime.now(UTC).replace(microsecond=0)
        while not self.ledger.claim(spec.name, due):  # twice within one second
            due += timedelta(seconds=1)
        self._launch(spec, due)
        return due

    async def history(self, name: str | None = None, limit: int = 20) -> list[Run]:
        return await asyncio.to_thread(self.ledger.history, name, limit)

    @property
    def running(self) -> list[str]:
        return sorted(self._tasks)

    # --- firing ----------------------------------------------------------

    def _due(self, job: Job, due: datetime) -> None:
        """Called by APScheduler (on the loop) before it moves `job` on: claim, then run."""
        spec = JobSpec.from_data(job.kwargs)
        now = datetime.now(UTC)
        if now - due > self.catch_up:
            late = f"due {now - due} ago, more than the catch-up window of {self.catch_up}"
            log.warning("job %s due %s not run: %s", spec.name, due, late)
            self.ledger.record(spec.name, due, "missed", late)
            return
        if spec.name in self._tasks:
            log.warning("job %s due %s skipped: its previous run is still going", spec.name, due)
            self.ledger.record(spec.name, due, "skipped", "the previous run was still going")
            return
        if not self.ledger.claim(spec.name, due):
            log.info("job %s due %s has run already: not again", spec.name, due)
            return
        self._launch(spec, due)

    def _launch(self, spec: JobSpec, due: datetime) -> None:
        task = asyncio.get_running_loop().create_task(
            self._guarded(spec, due), name=f"klaw-job-{spec.name}"
        )
        self._tasks[spec.name] = task
        name = spec.name
        task.add_done_callback(lambda _t: self._tasks.pop(name, None))

    async def _guarded(self, spec: JobSpec, due: datetime) -> None:
        try:
            if self.run_job is None:
                raise RuntimeError("the scheduler has no job runner")
            await self.run_job(spec, due)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the runner records its own failures; this is a bug
            log.exception("job %s due %s failed", spec.name, due)
            await asyncio.to_thread(
                self.ledger.finish, spec.name, due, "failed", error=f"{type(exc).__name__}: {exc}"
            )

    def _stored(self, name: str) -> Job:
        job = self._require().get_job(check_name(name))
        if job is None:
            raise JobError(f"no job named {name!r}")
        return job

    def _require(self) -> AsyncIOScheduler:
        if self._aps is None:
            raise JobError("the scheduler is not running")
        return self._aps


class _Executor(BaseExecutor):  # type: ignore[misc]
    """Hands due jobs to `Scheduler._due` instead of calling the job's function."""

    def __init__(self, owner: Scheduler) -> None:
        super().__init__()
        self._owner = owner

    def _do_submit_job(self, job: Job, run_times: list[datetime]) -> None:
        try:
            self._owner._due(job, run_times[-1])
        finally:
            # The run is ours to track: APScheduler's instance count is settled now.
            asyncio.get_running_loop().call_soon(self._run_job_success, job.id, [])


def _check_folder(spec: JobSpec, stored: list[JobSpec]) -> None:
    """Two jobs never share a log folder (names differing only in case or width)."""
    for other in stored:
        if other.name != spec.name and other.chat == spec.chat:
            raise JobError(
                f"job name {spec.name!r} would share the log folder {spec.chat!r} of the job "
                f"{other.name!r} (names that differ only in case or width share one); "
                "pick another name"
            )


def _store(aps: Any, spec: JobSpec, *, replace: bool) -> None:
    """`spec` as an APScheduler job: its data as the handler's kwargs (no code stored);
    a disabled job is stored paused (no next run time)."""
    extra: dict[str, Any] = {} if spec.enabled else {"next_run_time": None}
    aps.add_job(
        HANDLER,
        trigger=CronTrigger(spec.cron, spec.timezone),
        id=spec.name,
        name=spec.name,
        kwargs=spec.to_data(),
        replace_existing=replace,
        **extra,
    )


def store_jobs(db: Path, specs: list[JobSpec]) -> list[tuple[JobSpec, str]]:
    """Adds `specs` to scheduler.db without running anything (`klaw import`, with the
    engine stopped). Per spec: "added", "exists" (its `origin` is stored already) or why
    it was not added. A name taken by another job (or its log folder) gets a suffix
    (`-2`, `-3`). The next engine start schedules them like any job."""
    from apscheduler.schedulers.background import BackgroundScheduler

    from klaw.scheduler.store import SqliteJobStore

    db.parent.mkdir(parents=True, exist_ok=True)
    aps = BackgroundScheduler(jobstores={"default": SqliteJobStore(db)}, timezone=UTC)
    aps.start(paused=True)  # paused: nothing due fires here
    try:
        stored = [JobSpec.from_data(j.kwargs) for j in aps.get_jobs()]
        origins = {s.origin for s in stored if s.origin}
        chats = {s.chat for s in stored} | {
            job_chat(n) for n in ("heartbeat", "summaries", "boot-md")
        }
        out: list[tuple[JobSpec, str]] = []
        for spec in specs:
            if spec.origin and spec.origin in origins:
                out.append((spec, "exists"))
                continue
            base, n = spec.name, 2
            while spec.chat in chats:
                spec = dataclasses.replace(spec, name=f"{base[:60]}-{n}")
                n += 1
            try:
                if not spec.next_times(1):
                    raise JobError(f"{spec.cron!r} never fires")
                _store(aps, spec, replace=False)
            except JobError as exc:
                out.append((spec, str(exc)))
                continue
            chats.add(spec.chat)
            if spec.origin:
                origins.add(spec.origin)
            out.append((spec, "added"))
        return out
    finally:
        aps.shutdown(wait=False)

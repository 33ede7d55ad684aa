"""Crafted `job_state` pickles for the hostile tests of scheduler.db (restore, engine
start): each would run `touch MARKER` (or reach code) if it were unpickled plainly."""

from __future__ import annotations

import os
import pickle
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

from klaw.scheduler.cron import CronTrigger
from klaw.scheduler.jobs import JobSpec
from klaw.scheduler.service import HANDLER


class _System:
    """Unpickled, calls `os.system(command)`: the attack of hostile case 1."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


class _Getattr:
    """Unpickled, calls `getattr(timedelta, "__class__")`: the first step of the
    well-known climb from any class to `os.system` through attributes."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (getattr, (timedelta, "__class__"))


def _job_state(name: str, **changes: Any) -> dict[str, Any]:
    spec = JobSpec(name=name, cron="0 0 8 * * ?", message="m", timezone="UTC")
    state = {
        "version": 1,
        "id": name,
        "func": HANDLER,
        "trigger": CronTrigger(spec.cron, spec.timezone),
        "executor": "default",
        "args": (),
        "kwargs": spec.to_data(),
        "name": name,
        "misfire_grace_time": None,
        "coalesce": True,
        "max_instances": 1_000,
        "next_run_time": None,
    }
    return {**state, **changes}


def crafted_states(marker: Path) -> dict[str, bytes]:
    """Job states by the way they attack: the bare payload, the payload hidden in a
    job that is otherwise valid, an attribute climb, and a job naming another module's
    function (APScheduler would import it)."""
    touch = f"touch {marker}"
    inner = _job_state("hidden")
    inner["kwargs"] = {**inner["kwargs"], "message": _System(touch)}
    return {
        "payload": pickle.dumps(_System(touch), pickle.HIGHEST_PROTOCOL),
        "hidden": pickle.dumps(inner, pickle.HIGHEST_PROTOCOL),
        "getattr": pickle.dumps(_job_state("climb", trigger=_Getattr()), 2),
        "func": pickle.dumps(_job_state("other", func="os:system"), pickle.HIGHEST_PROTOCOL),
    }


def insert_job_row(db: Path | sqlite3.Connection, job_id: str, blob: bytes) -> None:
    """A row written straight into APScheduler's table, as a forger would."""
    conn = sqlite3.connect(db) if isinstance(db, Path) else db
    with conn:
        conn.execute(
            "INSERT INTO apscheduler_jobs (id, next_run_time, job_state) VALUES (?, ?, ?)",
            (job_id, 0.0, blob),
        )
    if conn is not db:
        conn.close()

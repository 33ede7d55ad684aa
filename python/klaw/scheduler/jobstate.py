"""A stored job's state read back from scheduler.db without running any code.

APScheduler's table keeps each job as a pickle (`job_state`), and a plain
`pickle.loads` runs whatever a crafted row names (a `__reduce__` calling
`os.system`): a restored backup, an imported file or a stranger's copy could run
commands as the engine's user when it starts. So rows are read by an unpickler that
builds only what a Klaw job holds, text apart: Klaw's `CronTrigger` (its state is
the expression and the zone name), `datetime`/`timedelta`/`timezone` and
`zoneinfo.ZoneInfo` (by key, through `ZoneInfo._unpickle`). Anything else is
refused before it is looked up, so no module is imported and nothing is called.
Then the state must be a job of Klaw's: its function is Klaw's handler by
reference (APScheduler would import any module a row names), no positional
arguments, and keyword arguments that are a valid `JobSpec`.

The format stays APScheduler's (issue 9: SQLAlchemyJobStore reads Klaw's file and
the other way round); only what the file may contain is narrowed.
"""

from __future__ import annotations

import io
import pickle
import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Final
from zoneinfo import ZoneInfo

from klaw.errors import InvalidInput
from klaw.scheduler.cron import CronTrigger
from klaw.scheduler.jobs import JobSpec

__all__ = ["HANDLER", "UnsafeJobState", "check_job_rows", "load_job_state"]

#: The one function every stored job names; its keyword arguments are the JobSpec.
HANDLER: Final = "klaw.scheduler.service:scheduled_message"

_CLASSES: Final[dict[tuple[str, str], object]] = {
    ("klaw.scheduler.cron", "CronTrigger"): CronTrigger,
    ("datetime", "datetime"): datetime,
    ("datetime", "timedelta"): timedelta,
    ("datetime", "timezone"): timezone,
    ("zoneinfo", "ZoneInfo"): ZoneInfo,
}
_STATE_KEYS: Final = frozenset(
    {
        "version",
        "id",
        "func",
        "trigger",
        "executor",
        "args",
        "kwargs",
        "name",
        "misfire_grace_time",
        "coalesce",
        "max_instances",
        "next_run_time",
    }
)


class UnsafeJobState(InvalidInput):
    """A `job_state` that is not a job Klaw stores (damaged, or made to run code)."""


def _zone_unpickle(owner: object, attr: str) -> Callable[..., ZoneInfo]:
    """The only `getattr` a job's pickle may do: protocol 4+ pickles a ZoneInfo as
    `getattr(ZoneInfo, "_unpickle")(key, from_cache)`. A general `getattr` would reach
    any attribute of an admitted class (its module's globals, `os.system` included)."""
    if owner is ZoneInfo and attr == "_unpickle":
        unpickle: Callable[..., ZoneInfo] = ZoneInfo._unpickle  # type: ignore[attr-defined]
        return unpickle
    raise UnsafeJobState(f"getattr({owner!r}, {attr!r}) is not part of a job")


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("builtins", "getattr"):
            return _zone_unpickle
        try:
            return _CLASSES[(module, name)]
        except KeyError:
            raise UnsafeJobState(
                f"it names {module}.{name}, which is not part of a job (a pickle that would "
                "run code or load something Klaw never stores)"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeJobState("it refers to an outside object, which no job does")


def load_job_state(blob: bytes) -> dict[str, Any]:
    """The state of a stored job (for `Job.__setstate__`), checked as the module
    docstring says; `UnsafeJobState` (or an unpickling error) otherwise."""
    if not isinstance(blob, bytes):
        raise UnsafeJobState(f"job_state is {type(blob).__name__}, not a pickle")
    state = _Unpickler(io.BytesIO(blob)).load()
    if not isinstance(state, dict) or not _STATE_KEYS <= state.keys():
        raise UnsafeJobState("it is not an APScheduler job's state")
    if state["func"] != HANDLER:
        raise UnsafeJobState(f"it names the function {state['func']!r}, not Klaw's {HANDLER}")
    if not isinstance(state["trigger"], CronTrigger):
        raise UnsafeJobState("its trigger is not Klaw's CronTrigger")
    if state["args"] not in ((), []):
        raise UnsafeJobState("it has positional arguments, which no Klaw job has")
    if not isinstance(state["kwargs"], dict):
        raise UnsafeJobState("its keyword arguments are not a mapping")
    if state["next_run_time"] is not None and not isinstance(state["next_run_time"], datetime):
        raise UnsafeJobState("its next run time is not a time")
    spec = JobSpec.from_data(state["kwargs"])  # raises JobError naming the field
    if state["id"] != spec.name:
        raise UnsafeJobState(f"its id {state['id']!r} is not its name {spec.name!r}")
    return state


def check_job_rows(db: Path) -> None:
    """Reads every row of a scheduler.db's job table as the engine would, without the
    engine; `UnsafeJobState` naming the first row that is not a Klaw job. `db` is a
    copy being checked (opening it folds in a WAL beside it, as the engine would);
    `sqlite3.DatabaseError` when it is not a readable database."""
    with closing(sqlite3.connect(db)) as conn:
        has_table = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'apscheduler_jobs'"
        ).fetchone()
        rows = conn.execute("SELECT id, job_state FROM apscheduler_jobs") if has_table else []
        for job_id, blob in rows:
            try:
                load_job_state(blob)
            except Exception as exc:  # any damage; nothing of the row has run
                raise UnsafeJobState(
                    f"scheduler.db's job {job_id!r} (table apscheduler_jobs) cannot be "
                    f"loaded safely: {exc}"
                ) from None

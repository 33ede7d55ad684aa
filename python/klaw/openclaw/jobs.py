"""OpenClaw cron jobs (`cron/jobs.json`) as Klaw scheduler jobs.

Schedule kinds map one to one: `cron` (`expr` in `tz`, the host's zone when none),
`every` (`everyMs` from `anchorMs`) and `at` (one ISO time). OpenClaw's legacy shapes
are read as its own loader migrates them (`atMs`, top-level `message`/`text`, payload
delivery hints). A job's task is its `agentTurn` message, or the `systemEvent` text
(which OpenClaw injects into the main session; Klaw runs it as a background job whose
result goes to the owner's chat). Delivery `announce` to a Telegram chat becomes
`injectInto`; `none` keeps the result in the log; webhooks have no Klaw counterpart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from klaw.cronexpr import MIN_EVERY_SECONDS
from klaw.errors import InvalidInput
from klaw.scheduler.jobs import HEARTBEAT, JobSpec, name_from

__all__ = ["MappedJob", "job_name", "map_job"]


@dataclass(frozen=True, slots=True)
class MappedJob:
    source_id: str
    label: str  # OpenClaw's name, for the report
    spec: JobSpec | None
    reason: str = ""  # why spec is None, or a note on what changed
    model_ref: str | None = None  # the OpenClaw model asked for, when it was not mapped


def job_name(name: str, source_id: str, taken: set[str]) -> str:
    """A Klaw job name from OpenClaw's display name, letters of any script kept
    ("Russian words for João (Sundays)" → `russian-words-for-joão-sundays`); the
    display name itself becomes the job's title."""
    slug = name_from(name)
    if slug in (HEARTBEAT, "summaries", "boot-md"):
        slug = f"{slug}-openclaw"
    base, n = slug, 1
    tail = re.sub(r"[^a-z0-9]", "", source_id.lower())[:6]
    while slug in taken:
        slug = f"{base}-{tail}" if n == 1 and tail else f"{base}-{n}"
        n += 1
    taken.add(slug)
    return slug


def _iso_ms(value: Any) -> datetime | None:
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            return datetime.fromtimestamp(value / 1000, UTC)
        if isinstance(value, str) and value.strip().isdigit():
            return datetime.fromtimestamp(int(value.strip()) / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    if isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        return when if when.tzinfo is not None else when.replace(tzinfo=UTC)  # OpenClaw: UTC
    return None


def _schedule(job: dict[str, Any], zone: str) -> tuple[str, str]:
    """(Klaw schedule, time zone); InvalidInput says why it cannot be mapped."""
    sched = job.get("schedule")
    if not isinstance(sched, dict):
        raise InvalidInput("it has no schedule")
    kind = str(sched.get("kind") or ("at" if ("at" in sched or "atMs" in sched) else "")).lower()
    if kind == "cron":
        expr = sched.get("expr")
        if not isinstance(expr, str) or not expr.strip():
            raise InvalidInput("its cron schedule has no expression")
        tz = sched.get("tz") if isinstance(sched.get("tz"), str) and sched.get("tz") else zone
        fields = expr.split()
        if len(fields) == 6:
            # croner's 6-field form puts seconds first with crontab day numbers; Klaw
            # reads 6 fields as Quartz, so drop a zero seconds field.
            if fields[0] not in ("0", "00"):
                raise InvalidInput(f"cron {expr!r} fires on a second other than 0")
            expr = " ".join(fields[1:])
        return expr, str(tz)
    if kind == "every":
        every = sched.get("everyMs")
        if isinstance(every, bool) or not isinstance(every, (int, float)) or not 0 < every < 1e13:
            raise InvalidInput("its interval has no usable everyMs")
        seconds = round(every / 1000)
        if seconds < MIN_EVERY_SECONDS:
            raise InvalidInput(f"it runs every {seconds}s (Klaw: at least {MIN_EVERY_SECONDS}s)")
        anchor = _iso_ms(sched.get("anchorMs")) or _iso_ms(job.get("createdAtMs"))
        anchor = anchor or _iso_ms(job.get("updatedAtMs"))
        text = f"every {seconds}s"
        if anchor is not None:
            text += f" from {anchor.replace(microsecond=0).isoformat()}"
        return text, zone
    if kind == "at":
        when = _iso_ms(sched.get("at") if "at" in sched else sched.get("atMs"))
        if when is None:
            raise InvalidInput("its one-time schedule has no valid time")
        return f"at {when.replace(microsecond=0).isoformat()}", zone
    raise InvalidInput(f"unknown schedule kind {sched.get('kind')!r}")


def _payload(job: dict[str, Any]) -> dict[str, Any]:
    payload = job.get("payload")
    if not isinstance(payload, dict):
        if isinstance(job.get("message"), str):
            payload = {"kind": "agentTurn", "message": job["message"]}
        elif isinstance(job.get("text"), str):
            payload = {"kind": "systemEvent", "text": job["text"]}
        else:
            payload = {}
    payload = dict(payload)
    for key in ("model", "deliver", "channel", "to", "provider"):  # legacy top-level hints
        if key in job and key not in payload:
            payload[key] = job[key]
    return payload


def _delivery(job: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    delivery = job.get("delivery")
    if isinstance(delivery, dict):
        out = dict(delivery)
        if out.get("mode") in (None, "deliver"):
            out["mode"] = "announce"
        return out
    out = {"mode": "none" if payload.get("deliver") is False else "announce"}
    channel = payload.get("channel") or payload.get("provider")
    if isinstance(channel, str):
        out["channel"] = channel.lower()
    if payload.get("to") is not None:
        out["to"] = payload["to"]
    return out


def map_job(
    job: dict[str, Any],
    *,
    zone: str,
    owner_chat: str | None,
    models: dict[str, str | None],
    taken: set[str],
    now: datetime | None = None,
) -> MappedJob:
    """One OpenClaw job as a Klaw `JobSpec`, or None with the reason.

    `models` maps OpenClaw model refs to Klaw model ids (None: not available).
    """
    source_id = str(job.get("id") or job.get("jobId") or "")
    label = str(job.get("name") or source_id or "job")
    try:
        schedule, tz = _schedule(job, zone)
        payload = _payload(job)
        kind = str(payload.get("kind") or "").lower()
        message = payload.get("message") if kind != "systemevent" else payload.get("text")
        if not isinstance(message, str) or not message.strip():
            message = payload.get("text") or payload.get("message")
        if not isinstance(message, str) or not message.strip():
            raise InvalidInput("it has no message")
        notes: list[str] = []
        delivery = _delivery(job, payload)
        mode = delivery.get("mode")
        inject: str | None = None
        if mode == "announce":
            channel, to = delivery.get("channel"), delivery.get("to")
            if to is not None and channel in (None, "telegram", "last"):
                inject = f"telegram_{str(to).removeprefix('telegram:').split(':topic:')[0]}"
            elif to is None:
                inject = owner_chat
            else:
                notes.append(f"delivery to {channel} is not a Klaw channel: result only logged")
        elif mode == "webhook":
            notes.append("webhook delivery has no Klaw counterpart: result only logged")
        if job.get("sessionTarget") == "main" and inject is None and mode != "none":
            inject = owner_chat
        model: str | None = None
        ref = payload.get("model")
        if isinstance(ref, str) and ref:
            model = models.get(ref)
            if model is None:
                notes.append(f"model {ref} is not configured in Klaw: the default is used")
        enabled = job.get("enabled") is not False
        if schedule.startswith("at "):
            when = datetime.fromisoformat(schedule[3:])
            if when <= (now or datetime.now(UTC)):
                state = job.get("state")
                state = state if isinstance(state, dict) else {}
                ran = " (it ran)" if state.get("lastRunAtMs") else ""
                raise InvalidInput(f"its one-time run at {schedule[3:]} is past{ran}")
        name = job_name(label, source_id, taken)
        spec = JobSpec(
            name=name,
            title=label if label != name else None,
            cron=schedule,
            message=message.strip(),
            timezone=tz,
            model=model,
            inject_into=inject,
            enabled=enabled,
            origin=f"openclaw:{source_id}" if source_id else None,
        )
        spec.parsed()  # a cron dialect Klaw refuses says so here
        if not enabled:
            notes.append("disabled in OpenClaw: imported paused")
        return MappedJob(source_id, label, spec, "; ".join(notes))
    except InvalidInput as exc:  # JobError and CronError too
        return MappedJob(source_id, label, None, str(exc))
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:  # odd types
        return MappedJob(source_id, label, None, f"it could not be read ({exc})")

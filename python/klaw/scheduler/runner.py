"""One run of a scheduled job, inside the engine: ledger → cap → pre-check → subagent
turn → silent or delivered → ledger (design §2.4, "Subagent lifecycle").

The turn is the engine pipeline's (through the `BackgroundTurns` port), at
`SUBAGENT` priority, in the job's own chat ``scheduler_{name}`` (its window is the
last `context.subagentWindow` rows of that chat, never the owner's conversation).
A reply that parses as a JSON object with ``"silent": true`` is not delivered;
anything else goes to the job's `inject_into` through the outbox (kept until the
gateway confirms). A failing job tells the owner once, and again only after it has
worked in between.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from klaw.lanes import SUBAGENT
from klaw.scheduler.jobs import JobSpec
from klaw.scheduler.ledger import Ledger
from klaw.scheduler.precheck import run_precheck
from klaw.scheduler.quiet import heartbeat_digest
from klaw.spend import source_for_chat
from klaw.wire.loglines import inbound_line, outbound_line, to_record
from klaw.wire.protocol import Error, Inbound, InboundMeta, Outbound, new_id

if TYPE_CHECKING:
    from pathlib import Path

    from klaw.config import EngineConfig
    from klaw.scheduler.outbox import Outbox
    from klaw.scheduler.ports import BackgroundTurns
    from klaw.scheduler.reflect import Reflector
    from klaw.scheduler.summaries import Summarizer

__all__ = ["JobRunner", "is_silent"]

log = logging.getLogger("klaw.scheduler")

SILENT_TOKENS: Final = frozenset({"NO_REPLY", "HEARTBEAT_OK"})
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def is_silent(text: str) -> bool:
    """Whether a subagent's reply is the silent answer: a JSON object whose `silent`
    is true (alone, or alone in one ```json fence). Anything unparsable is not
    silent: when in doubt the owner hears about it."""
    body = text.strip()
    if body in SILENT_TOKENS:  # OpenClaw's silent replies (BOOT.md and heartbeat prompts)
        return True
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("silent") is True


class JobRunner:
    """The scheduler's `RunJob`: runs one due time of one job (see the module docstring)."""

    def __init__(
        self,
        config: EngineConfig,
        conversations: Path,
        turns: BackgroundTurns,
        ledger: Ledger,
        outbox: Outbox,
        *,
        workspace: Path,
        now: Callable[[], datetime] | None = None,
        summarizer: Summarizer | None = None,
        reflector: Reflector | None = None,
    ) -> None:
        self.config = config
        self.conversations = conversations
        self.turns = turns
        self.ledger = ledger
        self.outbox = outbox
        self.workspace = workspace
        self._now = now or (lambda: datetime.now(UTC))
        self.summarizer = summarizer
        self.reflector = reflector

    async def __call__(self, spec: JobSpec, due: datetime) -> None:
        name = spec.name
        if not await asyncio.to_thread(self.ledger.start, name, due):
            log.info("job %s due %s is not waiting to run: skipped", name, due)
            return
        tokens_in = tokens_out = 0
        if spec.kind == "summaries":
            await self._summaries(spec, due)
            return
        if spec.kind == "reflect":
            await self._reflect(spec, due)
            return
        try:
            if await self._over_cap(spec, due):
                return
            if spec.precheck is not None:
                check = await asyncio.to_thread(run_precheck, spec.precheck, self.workspace)
                if check.error is not None:
                    raise _RunFailed(check.error)
                if not check.wake:
                    log.info("job %s: the pre-check found nothing to do", name)
                    await asyncio.to_thread(self.ledger.finish, name, due, "quiet")
                    await self._recovered(spec)
                    return
            digest = None
            skip = self.config.scheduler.heartbeat.skip_unchanged
            if spec.kind == "heartbeat" and spec.precheck is None and skip:
                digest = await asyncio.to_thread(self._digest, spec)
                if digest is not None and digest == await asyncio.to_thread(
                    self.ledger.quiet_digest, name
                ):
                    log.info("job %s: nothing it reads changed since its silent run", name)
                    await asyncio.to_thread(self.ledger.finish, name, due, "quiet")
                    return
            out = await self._turn(spec, due)
            tokens_in = int(out.meta.get("tokens_in") or 0)
            tokens_out = int(out.meta.get("tokens_out") or 0)
            if out.meta.get("error") == "budget_spent":
                await self._budget_spent(spec, due, out)
                return
            if out.line_type == "notice":  # no model answered (the notice is a chat's)
                raise _RunFailed("no model answered (the engine's log says why)")
            silent = is_silent(out.content)
            if not silent and spec.inject_into and out.content.strip():
                await self.outbox.send(self._push(spec, out.content))
            status = "silent" if silent else "ok"
            if digest is not None:  # spoke: the next run looks again whatever happens
                await asyncio.to_thread(
                    self.ledger.set_quiet_digest, name, digest if silent else None
                )
            await asyncio.to_thread(
                self.ledger.finish,
                name,
                due,
                status,
                tokens_in=tokens_in,
                tokens_out=tokens_out,
            )
            log.info("job %s due %s: %s (%d+%d tokens)", name, due, status, tokens_in, tokens_out)
            await self._recovered(spec)
        except _RunFailed as exc:
            await self._failed(spec, due, str(exc), tokens_in, tokens_out)

    def _digest(self, spec: JobSpec) -> str | None:
        """What the heartbeat reads, digested; None (run it) when that cannot be told."""
        zone = self.config.scheduler.zone()
        try:
            return heartbeat_digest(
                spec.message, self.workspace, self.conversations, zone, self._now()
            )
        except (OSError, ValueError) as exc:
            log.warning("job %s: could not tell whether anything changed (%s)", spec.name, exc)
            return None

    async def _summaries(self, spec: JobSpec, due: datetime) -> None:
        """The built-in nightly job: summarize every chat with messages left over."""
        if self.summarizer is None:
            await asyncio.to_thread(
                self.ledger.finish, spec.name, due, "failed", error="summaries are off"
            )
            return
        written = await self.summarizer.run_all()
        await asyncio.to_thread(
            self.ledger.finish, spec.name, due, "ok", error=None if written else "nothing new"
        )
        log.info("nightly summaries: %d written", written)

    async def _upkeep(self, due: datetime) -> None:
        """After reflect: old daily logs to memory/archive/, a MEMORY.md condense
        proposal when it is over its share (klaw.memory.upkeep); a failure is logged."""
        from klaw.errors import KlawError
        from klaw.memory.upkeep import nightly_upkeep

        today = due.astimezone(self.config.scheduler.zone()).date()
        try:
            await asyncio.to_thread(nightly_upkeep, self.workspace, self.config, today)
        except (OSError, KlawError) as exc:
            log.warning("memory upkeep failed: %s", exc)

    async def _reflect(self, spec: JobSpec, due: datetime) -> None:
        """The built-in nightly reflect job (klaw.scheduler.reflect): nothing new is
        `quiet` (no model call); its tokens count against its daily cap."""
        if self.reflector is None:
            await asyncio.to_thread(
                self.ledger.finish, spec.name, due, "failed", error="reflect is off"
            )
            return
        if await self._over_cap(spec, due):
            return
        left = None
        if spec.daily_token_cap is not None:
            local = due.astimezone(spec.zone())
            start = local.replace(hour=0, minute=0, second=0, microsecond=0)
            used = await asyncio.to_thread(self.ledger.tokens_between, spec.name, start, due)
            left = max(0, spec.daily_token_cap - used)
        got = await self.reflector.run(left)
        await self._upkeep(due)
        status = "failed" if got.error else "ok" if got.calls else "quiet"
        if got.spent:  # the budget: like a job's run, recorded capped (docs/costs.md)
            status = "capped"
        note = got.error or (None if got.calls else "no new facts")
        if got.capped and not got.error:
            note = f"daily token cap reached after {got.facts} facts; the rest next run"
        await asyncio.to_thread(
            self.ledger.finish,
            spec.name,
            due,
            status,
            tokens_in=got.tokens_in,
            tokens_out=got.tokens_out,
            error=note,
        )
        log.info(
            "reflect: %d facts, %d pages%s (%d+%d tokens)",
            got.facts,
            got.pages,
            " and opinions" if got.opinions else "",
            got.tokens_in,
            got.tokens_out,
        )

    # --- the turn --------------------------------------------------------

    async def _turn(self, spec: JobSpec, due: datetime) -> Outbound:
        chat_id = spec.chat  # its log folder: the name in a folder-safe form
        msg = Inbound(
            id=new_id(),
            ts=self._now(),
            channel="scheduler",
            chat_id=chat_id,
            content=spec.message,
            meta=InboundMeta(sender="scheduler"),
        )
        got: list[Outbound | Error] = []

        async def collect(reply: Outbound | Error) -> None:
            got.append(reply)

        await self.turns.handle(
            msg,
            collect,
            priority=SUBAGENT,
            model=spec.model,
            lean=spec.kind == "heartbeat",
            source=source_for_chat(chat_id, spec.kind),
        )
        answers = [r for r in got if isinstance(r, Outbound)]
        errors = [r for r in got if isinstance(r, Error)]
        if not answers:
            why = errors[-1].message if errors else "the turn ended without a reply"
            raise _RunFailed(why)
        out = answers[-1]
        if self.config.logging.subagent_conversations:
            await asyncio.to_thread(self._log, chat_id, msg, answers, spec, due)
        return out

    def _log(
        self, chat_id: str, msg: Inbound, answers: list[Outbound], spec: JobSpec, due: datetime
    ) -> None:
        """The run in ``conversations/scheduler_{name}/`` (what `klaw reindex` reads)."""
        from klaw.wire.logfile import JsonlWriter

        tag: dict[str, Any] = {
            "source": "scheduler",
            "task_name": spec.name,
            "due": due.isoformat(),
        }
        first = inbound_line(msg)
        lines = [first.model_copy(update={"meta": {**first.meta, **tag}})]
        for out in answers:
            lines.extend(out.records)
            last = outbound_line(out)
            lines.append(last.model_copy(update={"meta": {**last.meta, **tag}}))
        JsonlWriter(self.conversations).append_many(chat_id, [to_record(x) for x in lines])

    def _push(self, spec: JobSpec, text: str, **meta: Any) -> Outbound:
        assert spec.inject_into is not None
        return Outbound(
            ts=self._now(),
            channel=spec.inject_into.partition("_")[0],
            chat_id=spec.inject_into,
            content=text,
            meta={"source": "scheduler", "task_name": spec.name, **meta},
        )

    # --- caps and failures -----------------------------------------------

    async def _over_cap(self, spec: JobSpec, due: datetime) -> bool:
        cap = spec.daily_token_cap
        if cap is None:
            return False
        local = due.astimezone(spec.zone())
        start = local.replace(hour=0, minute=0, second=0, microsecond=0)
        end = (start + timedelta(days=1, hours=2)).replace(hour=0)  # DST-proof next midnight
        used = await asyncio.to_thread(self.ledger.tokens_between, spec.name, start, end)
        if used < cap:
            return False
        day = start.date().isoformat()
        log.warning("job %s: %d tokens used on %s, cap %d: resting", spec.name, used, day, cap)
        await asyncio.to_thread(
            self.ledger.finish,
            spec.name,
            due,
            "capped",
            error=f"{used} tokens used on {day}, daily cap {cap}",
        )
        first = await asyncio.to_thread(self.ledger.mark_capped, spec.name, day)
        if spec.inject_into and first:
            text = (
                f"⏸️ Scheduled job '{spec.name}' used {used} tokens today (its daily cap is "
                f"{cap}); it rests until tomorrow."
            )
            await self.outbox.send(self._push(spec, text, notice="capped"))
        return True

    async def _budget_spent(self, spec: JobSpec, due: datetime, out: Outbound) -> None:
        """The budget (the agent's or this source's) is spent: the run is `capped`; the
        job's chat hears it once per period (the spend log keeps who was told)."""
        log.warning("job %s due %s: %s", spec.name, due, out.content)
        await asyncio.to_thread(
            self.ledger.finish,
            spec.name,
            due,
            "capped",
            tokens_in=int(out.meta.get("tokens_in") or 0),
            tokens_out=int(out.meta.get("tokens_out") or 0),
            error=out.content,
        )
        if spec.inject_into and out.meta.get("first_notice"):
            text = f"⏸️ Scheduled job '{spec.name}' rests: {out.content}"
            await self.outbox.send(self._push(spec, text, notice="capped"))

    async def _failed(
        self, spec: JobSpec, due: datetime, error: str, tokens_in: int, tokens_out: int
    ) -> None:
        log.error("job %s due %s failed: %s", spec.name, due, error)
        await asyncio.to_thread(
            self.ledger.finish,
            spec.name,
            due,
            "failed",
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            error=error,
        )
        first = await asyncio.to_thread(self.ledger.set_failing, spec.name, True)
        if first and spec.inject_into:
            text = (
                f"⚠️ Scheduled job '{spec.name}' failed: {error}\n{_after_failure(spec, due)} "
                "I will not tell you again while it keeps failing; `klaw schedule history "
                f"{spec.name}` shows every run."
            )
            await self.outbox.send(self._push(spec, text, notice="failed"))

    async def _recovered(self, spec: JobSpec) -> None:
        await asyncio.to_thread(self.ledger.set_failing, spec.name, False)


def _after_failure(spec: JobSpec, due: datetime) -> str:
    """What happens after a failed run: it is not run again (a due time runs at most
    once), the job's next time comes as usual."""
    following = spec.next_times(1, after=due) if spec.kind != "once" else []
    if not following:
        return "It was to run once, and does not run again."
    return (
        "This run is not repeated; the job runs again at its next time, "
        f"{following[0]:%a %d %b %H:%M} ({spec.timezone})."
    )


class _RunFailed(Exception):
    pass

"""The nightly reflect job (`memory.reflect`): the bank's pages and opinions brought up
to date with the facts retained since the last run (issue 25 item 3). What is asked
and how the answer changes the bank is klaw.memory.reflect's; this is the run.

- **Only what is new.** The facts already reflected are listed by id in
  `$XDG_DATA_HOME/klaw/memory/reflect.json` (the watermark; the daily logs stay the
  truth: losing the file only costs tokens). A run sends the new facts with a page
  (an `@mention`) or of kind opinion, `memory.reflect.maxFacts` to a model call, the
  oldest first, until none is left or the job's daily token cap is reached; a run
  with nothing new calls no model (`quiet`).
- **Whole files.** Each page and bank/opinions.md is replaced atomically, then the
  batch's facts are marked reflected. A run killed midway leaves every file whole,
  old or new; its facts are still new and the engine's next start runs the job once
  more (`redo_interrupted`); applying a batch twice ends where applying it once does.
  A run killed again is left to the next night.
- **Versioned, indexed.** The run's writes are one commit of versioned memory
  (klaw.memory.versioning) and are indexed before the run ends.
- Tokens are the counter's estimate of the prompt and the answer (the background
  call reports no usage), recorded in the ledger like any job's.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final
from zoneinfo import ZoneInfo

from klaw import _core
from klaw.errors import KlawError
from klaw.fsutil import atomic_write
from klaw.memory.bank import (
    ENTITIES_DIR,
    OPINIONS_FILE,
    BankError,
    EntityPage,
    Opinion,
    read_opinions,
    read_pages,
    slug_for,
    write_opinions,
    write_page,
)
from klaw.memory.logfacts import FactFiles
from klaw.memory.reflect import SYSTEM, BadAnswer, apply_answer, parse_answer, prompt
from klaw.memory.retain import Fact, entity_key
from klaw.scheduler.ports import BackgroundRequest
from klaw.spend import BudgetSpent

if TYPE_CHECKING:
    from pathlib import Path

    from klaw.config import EngineConfig
    from klaw.memory.api import Memory
    from klaw.paths import KlawPaths
    from klaw.scheduler.ports import BackgroundTurns
    from klaw.scheduler.service import Scheduler

__all__ = ["REFLECT_JOB", "ReflectResult", "Reflector", "redo_interrupted", "sync_reflect_job"]

log = logging.getLogger("klaw.scheduler")

#: The built-in job that reflects the new retained facts into bank/ on `memory.reflect.cron`.
REFLECT_JOB: Final = "reflect"
#: Runs of one interruption: the run killed, then the one redone at the next start.
MAX_ATTEMPTS: Final = 2


@dataclass
class ReflectResult:
    facts: int = 0  # facts reflected
    pages: int = 0  # pages written
    opinions: bool = False  # bank/opinions.md written
    tokens_in: int = 0
    tokens_out: int = 0
    calls: int = 0
    error: str | None = None
    capped: bool = False
    spent: bool = False  # the budget is spent (docs/costs.md): the run is `capped`
    dropped: list[str] = field(default_factory=list)


class Reflector:
    def __init__(
        self,
        config: EngineConfig,
        paths: KlawPaths,
        memory: Memory | None,
        turns: BackgroundTurns,
    ) -> None:
        self.config = config
        self.paths = paths
        self.memory = memory
        self.turns = turns
        self.workspace = paths.workspace
        self._facts = FactFiles(paths.workspace)
        zone = config.scheduler.timezone
        self._zone = ZoneInfo(zone) if zone else None
        self._lock = asyncio.Lock()

    @property
    def state_path(self) -> Path:
        return self.paths.memory_dir / "reflect.json"

    # --- the watermark ------------------------------------------------------

    def load_state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"reflected": [], "running": None}
        except (OSError, ValueError) as exc:
            # Only tokens are lost: every fact is new again, applying one twice is a no-op.
            log.warning("%s unreadable (%s): every retained fact is new", self.state_path, exc)
            return {"reflected": [], "running": None}
        if not isinstance(data, dict) or not isinstance(data.get("reflected"), list):
            return {"reflected": [], "running": None}
        return data

    def save_state(self, state: dict[str, Any]) -> None:
        atomic_write(self.state_path, json.dumps(state, separators=(",", ":")), mkdir=True)

    # --- a run ---------------------------------------------------------------

    async def run(self, cap: int | None = None) -> ReflectResult:
        """Reflects every new fact (see the module docstring); `cap` tokens at most."""
        async with self._lock:
            return await self._run(cap)

    async def _run(self, cap: int | None) -> ReflectResult:
        result = ReflectResult()
        state = await asyncio.to_thread(self.load_state)
        attempt = self.interrupted_attempt(state) + 1
        state["running"] = {"started": datetime.now(UTC).isoformat(), "attempt": attempt}
        await asyncio.to_thread(self.save_state, state)
        reflected: set[str] = set(state["reflected"])
        by_source = await asyncio.to_thread(self._facts.read)
        known = {f.id: f for facts in by_source.values() for f in facts}
        fresh = sorted(
            (f for f in known.values() if f.id not in reflected),
            key=lambda f: (f.day or "", f.source, f.line),
        )
        # Facts of no entity that are no opinion go to no page: reflected as they are.
        wanted = [f for f in fresh if f.entities or f.kind == "opinion"]
        reflected.update(f.id for f in fresh if not (f.entities or f.kind == "opinion"))
        step = self.config.memory.reflect.max_facts
        for start in range(0, len(wanted), step):
            if cap is not None and result.tokens_in + result.tokens_out >= cap:
                result.capped = True
                break
            batch = wanted[start : start + step]
            try:
                done = await self._batch(batch, known, result)
            except (KlawError, BadAnswer, BankError) as exc:
                result.error = str(exc)
                result.spent = isinstance(exc, BudgetSpent)
                log.warning("reflect: %s (the facts stay new for the next run)", exc)
                break
            reflected.update(done)
            state["reflected"] = sorted(reflected)
            await asyncio.to_thread(self.save_state, state)
        state["reflected"] = sorted(reflected)
        state["running"] = None
        await asyncio.to_thread(self.save_state, state)
        if (result.pages or result.opinions) and self.memory is not None:
            await asyncio.to_thread(self.memory.index_workspace)
        return result

    @staticmethod
    def interrupted_attempt(state: dict[str, Any]) -> int:
        """The attempt number of a run that never finished, 0 when none."""
        running = state.get("running")
        return int(running.get("attempt", 1)) if isinstance(running, dict) else 0

    async def _batch(
        self, batch: list[Fact], known: dict[str, Fact], result: ReflectResult
    ) -> list[str]:
        """One model call for `batch`, its answer applied and written; the ids done."""
        today = datetime.now(self._zone or UTC).date().isoformat()
        pages = await asyncio.to_thread(read_pages, self.workspace)
        opinions, raw_opinions, opinions_ok = await asyncio.to_thread(read_opinions, self.workspace)
        touched = _touched(batch, pages)
        shown = _opinions_for(opinions, batch)
        loose = [f for f in batch if not f.entities]
        text = prompt(today, touched, shown, loose)
        model = self.turns.usable_model(self.config.routing.tasks.summarization)
        request = BackgroundRequest(SYSTEM, text, source="reflect")
        answer = await self.turns.complete_background(request, model)
        t_in, t_out = _core.count_tokens_batch([SYSTEM + text, answer])
        result.tokens_in += t_in
        result.tokens_out += t_out
        result.calls += 1
        applied = apply_answer(
            parse_answer(answer),
            touched=touched,
            opinions=opinions,
            new=batch,
            known=known,
            today=today,
        )
        for why in applied.dropped:
            log.info("reflect: left out of the answer: %s", why)
        result.dropped.extend(applied.dropped)
        changed = [p for p in applied.pages.values() if _changed(p, pages.get(p.slug))]
        write_opinions_too = applied.opinions_changed and opinions_ok
        if applied.opinions_changed and not opinions_ok:
            log.warning("reflect: %s has broken klaw markers: opinions not written", OPINIONS_FILE)
        await asyncio.to_thread(
            self._write,
            changed,
            applied.opinions if write_opinions_too else None,
            raw_opinions,
            len(batch),
        )
        result.pages += len(changed)
        result.opinions = result.opinions or write_opinions_too
        result.facts += len(batch)
        return [f.id for f in batch]

    def _write(
        self, pages: list[EntityPage], opinions: list[Opinion] | None, raw: str, facts: int
    ) -> None:
        from klaw.memory.versioning import versioner

        paths = [self.workspace / ENTITIES_DIR / f"{p.slug}.md" for p in pages]
        if opinions is not None:
            paths.append(self.workspace / OPINIONS_FILE)
        if not paths:
            return
        what = f"reflect: {facts} new facts into {len(pages)} entity pages" + (
            " and opinions" if opinions is not None else ""
        )
        with versioner(self.workspace, self.config).change(paths, what, "the nightly reflect job"):
            for page in pages:
                try:
                    write_page(self.workspace, page)
                except BankError as exc:  # broken markers: the owner's page stays as it is
                    log.warning("reflect: %s", exc)
            if opinions is not None:
                write_opinions(self.workspace, opinions, raw)


def _touched(
    batch: list[Fact], pages: dict[str, EntityPage]
) -> list[tuple[str, EntityPage | None, list[Fact]]]:
    """The entities of the batch's facts: (name, its page or None, its new facts)."""
    by_key: dict[str, str] = {}  # entity key -> page slug
    for slug, page in pages.items():
        for n in page.names():
            by_key.setdefault(entity_key(n), slug)
    out: dict[str, tuple[str, EntityPage | None, list[Fact]]] = {}
    for f in batch:
        for e in f.entities:
            k = entity_key(e)
            if not k:
                continue
            slug = by_key.get(k) or slug_for(e)
            own = pages.get(slug)
            if slug not in out:
                out[slug] = (own.name if own else e, own, [])
            if f not in out[slug][2]:
                out[slug][2].append(f)
    return list(out.values())


def _opinions_for(opinions: list[Opinion], batch: list[Fact]) -> list[Opinion]:
    """The opinions sharing an entity with the batch, or all when there are few."""
    from klaw.memory.reflect import OPINIONS_SHOWN

    if len(opinions) <= OPINIONS_SHOWN:
        return opinions
    keys = {entity_key(e) for f in batch for e in f.entities}
    near = [o for o in opinions if {entity_key(e) for e in o.entities} & keys]
    return near[:OPINIONS_SHOWN]


def _changed(page: EntityPage, before: EntityPage | None) -> bool:
    from klaw.memory.bank import render_page

    if page.broken:
        return False
    return before is None or render_page(page) != before.raw


async def sync_reflect_job(scheduler: Scheduler, config: EngineConfig, zone: str) -> None:
    """The nightly `reflect` job as engine.yaml says (removed when reflect is off)."""
    from klaw.scheduler.jobs import JobSpec

    current = await scheduler.get(REFLECT_JOB)
    settings = config.memory.reflect
    if not settings.enabled:
        if current is not None:
            await scheduler.remove(REFLECT_JOB)
        return
    spec = JobSpec(
        name=REFLECT_JOB,
        cron=settings.cron,
        message="Reflect the new retained facts into the bank.",
        timezone=zone,
        daily_token_cap=settings.daily_token_cap,
        kind="reflect",
    )
    if current is None or current.to_data() != spec.to_data():
        await scheduler.add(spec, replace=True)


async def redo_interrupted(scheduler: Scheduler, reflector: Reflector) -> bool:
    """At start: a reflect run that never finished runs once more now (its facts are
    still new); one that was already the second attempt is left to the next night."""
    state = await asyncio.to_thread(reflector.load_state)
    attempt = Reflector.interrupted_attempt(state)
    if attempt == 0:
        return False
    spec = await scheduler.get(REFLECT_JOB)
    if attempt >= MAX_ATTEMPTS or spec is None:
        log.warning("reflect: a run was interrupted %d times; next at its usual time", attempt)
        state["running"] = None
        await asyncio.to_thread(reflector.save_state, state)
        return False
    log.info("reflect: the last run was interrupted; running it again now")
    scheduler.run_once(spec)
    return True

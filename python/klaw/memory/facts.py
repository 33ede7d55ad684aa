"""Retained facts in klaw.db (issue 25 items 2 and 4): each `## Retain` bullet of a
daily log (klaw.memory.retain) is a row of `facts` with its own chunk, vector and
keyword entry (store/facts.rs), found by `memory_search` with a `kind` or `entity`
filter and cited by its line; a plain search never returns them (the log's own chunks
hold the same text).

Entities match loosely: the name is folded (case, accents, `_ -`; retain.entity_key)
and analysed as the keyword index analyses text, so `Анны` finds `@Анна`, `joao` finds
`@João` and `张` finds `@张伟`; every term of the name asked must be a term of the
fact's entity. Aliases come from the entity's bank page (`bank/entities/<slug>.md`,
klaw.memory.bank) when there is one.

Knowledge updates: facts about the same entity and attribute (the bullet's `a=word`,
else one read from its wording: `lives in`/`moved to` -> home, `works at` -> job,
...) are ordered by the day their log was written (then the day they name, then the
line); each one whose value differs from the next newer one is marked superseded by it
(`facts.superseded_by`, kept with its date, never deleted). A search puts the newer
fact above a hit holding the older one. Computed from the rows alone, so `klaw reindex`
gives the same marks; no model call.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from klaw import _core
from klaw.errors import InvalidInput
from klaw.memory.retain import KINDS, parse_retain
from klaw.memory.supersede import (
    Supersession,
    attribute_of,
    entity_facts,
    entity_terms,
    supersede,
    supersessions,
)

if TYPE_CHECKING:
    from klaw.paths import KlawPaths


class Memory(Protocol):
    """What the facts index uses of `klaw.memory.api.Memory` (its port: the index sits
    below the memory that calls it)."""

    store: _core.Store
    paths: KlawPaths

    def _dated(self, name: str) -> str | None: ...

    def _embed(self, texts: list[str]) -> tuple[bytes, int]: ...


__all__ = [
    "FACT_KINDS",
    "Supersession",
    "attribute_of",
    "entity_names_of",
    "filter_ids",
    "index_facts",
    "is_log",
    "newer_first",
    "supersede",
    "superseded_notes",
    "supersessions",
]

log = logging.getLogger("klaw.memory")

#: What `kind` accepts: the kinds and their letters.
FACT_KINDS: Final = {**{v: v for v in KINDS.values()}, **KINDS}


def is_log(label: str) -> bool:
    """Whether a file label is a daily log whose Retain bullets are facts."""
    return label.startswith("memory/") and label.endswith(".md")


# --- writing ------------------------------------------------------------------------


def entity_names_of(memory: Memory, label: str) -> set[str]:
    """The entities of the facts `label` holds in the index (read before a change,
    so the supersession of what it held is computed again after)."""
    return {e for row in memory.store.facts(path=label) for e in row.entities}


def index_facts(memory: Memory, label: str, text: str, before: Iterable[str] = ()) -> int:
    """Stores the Retain facts of the daily log `label` (already indexed as chunks;
    `text` its content) in place of those it had, then marks supersession again for
    their entities and those of `before`; returns the facts stored."""
    facts = parse_retain(text, label)
    for f in facts:
        if f.problem:
            log.warning("%s: retain bullet %s", f.citation, f.problem)
    new: list[_core.NewFact] = []
    for f in facts:
        created = memory._dated(f"{f.start}.md") if f.start else None
        new.append(
            _core.NewFact(
                fact_id=f.id,
                content=f.content,
                created_at=created or memory._dated(label) or "1970-01-01T00:00:00Z",
                line=f.line,
                end_line=f.end_line,
                kind=f.kind,
                confidence=f.confidence,
                attribute=f.attribute,
                day=f.day,
                start_day=f.start,
                end_day=f.end,
                entities=[(e, entity_terms(e, query=False)) for e in f.entities],
            )
        )
    if new:  # the file's chunks were just replaced, and its old facts with them
        vectors, _ = memory._embed([f.content for f in facts])
        memory.store.replace_facts(label, new, vectors)
    names = set(before) | {e for f in facts for e in f.entities}
    if names:
        supersede(memory.store, names)
    return len(new)


# --- reading --------------------------------------------------------------------------


def _aliases(workspace: Path, name: str) -> list[str]:
    """`name` and the aliases of its bank page (bank/entities/<slug>.md), if any."""
    try:
        from klaw.memory.bank import read_page, slug_for
    except ImportError:  # no bank in this build
        return [name]
    try:
        page = read_page(workspace, slug_for(name))
    except (InvalidInput, OSError) as exc:
        log.warning("entity page of %r not read: %s", name, exc)
        return [name]
    if page is None:
        return [name]
    return list(dict.fromkeys([name, *page.names()]))


def _kinds(kind: str | Sequence[str] | None) -> list[str]:
    if kind is None:
        return []
    asked = [kind] if isinstance(kind, str) else list(kind)
    out = []
    for k in asked:
        k = k.strip()
        if k not in FACT_KINDS and k.lower() not in FACT_KINDS:
            raise InvalidInput(
                f"unknown fact kind {k!r}: use world, experience, opinion or observation "
                "(or W, B, O, S)"
            )
        out.append(FACT_KINDS.get(k) or FACT_KINDS[k.lower()])
    return out


def filter_ids(memory: Memory, kind: str | Sequence[str] | None, entity: str | None) -> list[int]:
    """Chunk ids of the facts of `kind` about `entity` (either may be None)."""
    kinds = _kinds(kind)
    entities: list[list[str]] = []
    if entity is not None:
        name = entity.strip().lstrip("@").strip('"“”')
        if not name:
            raise InvalidInput("entity must name someone or something (e.g. Anna)")
        for alias in _aliases(memory.paths.workspace, name):
            terms = entity_terms(alias, query=True)
            if terms:
                entities.append(terms)
        if not entities:
            return []
    return list(memory.store.fact_ids(kinds, entities))


def _facts_in(store: _core.Store, hits: Sequence[_core.Hit]) -> dict[int, list[_core.FactRow]]:
    """hit index -> the facts lying in its lines (a fact's own chunk: itself)."""
    by_path: dict[str, list[_core.FactRow]] = {}
    out: dict[int, list[_core.FactRow]] = {}
    for i, h in enumerate(hits):
        if h.start_line is None or not is_log(h.source):
            continue
        if h.source not in by_path:
            by_path[h.source] = list(store.facts(path=h.source))
        end = h.end_line if h.end_line is not None else h.start_line
        inside = [f for f in by_path[h.source] if h.start_line <= f.line <= end]
        if inside:
            out[i] = inside
    return out


def _newer(store: _core.Store, row: _core.FactRow) -> _core.FactRow | None:
    """The fact that supersedes `row` (it shares an entity with it)."""
    if row.superseded_by is None:
        return None
    for name in row.entities:
        for r in entity_facts(store, name):
            if r.fact_id == row.superseded_by:
                return r
    return None


def _newest(store: _core.Store, row: _core.FactRow) -> _core.FactRow | None:
    """The current fact at the end of `row`'s chain of supersessions."""
    newer = _newer(store, row)
    seen = {row.fact_id}
    while newer is not None and newer.fact_id not in seen:
        seen.add(newer.fact_id)
        nxt = _newer(store, newer)
        if nxt is None:
            break
        newer = nxt
    return newer


def newer_first(store: _core.Store, hits: list[_core.Hit], top_k: int) -> list[_core.Hit]:
    """`hits` with the newer fact above each hit that holds a superseded one: moved
    up when it is among the hits, else put there (cited by its line)."""
    found = _facts_in(store, hits)
    if not any(f.superseded_by for rows in found.values() for f in rows):
        return hits
    out = list(hits)
    for i in sorted(found):
        hit = hits[i]
        for row in found[i]:
            newer = _newest(store, row)
            if newer is None:
                continue
            at = out.index(hit)
            holder = next(
                (
                    j
                    for j, h in enumerate(out)
                    if h.source == newer.path
                    and h.start_line is not None
                    and h.start_line <= newer.line <= (h.end_line or h.start_line)
                ),
                None,
            )
            if holder is not None and holder < at:
                continue
            if holder is not None:
                out.insert(at, out.pop(holder))
            else:
                fresh = store.get_chunks([newer.chunk_id])
                out[at:at] = fresh
    return out[:top_k]


def superseded_notes(store: _core.Store, hits: Sequence[_core.Hit]) -> dict[int, str]:
    """hit id -> "superseded by <citation> (<day>)" for hits holding a superseded
    fact (what memory_search shows beside them)."""
    notes: dict[int, str] = {}
    for i, rows in _facts_in(store, hits).items():
        for row in rows:
            newer = _newer(store, row)
            if newer is not None:
                notes[hits[i].id] = (
                    f"L{row.line} superseded by {newer.path}#L{newer.line} ({newer.day})"
                )
                break
    return notes

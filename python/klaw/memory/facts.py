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

import itertools
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from klaw import _core
from klaw.errors import InvalidInput
from klaw.memory.retain import KINDS, Fact, entity_key, parse_retain

if TYPE_CHECKING:
    from klaw.memory.api import Memory

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

# Wordings that state a changeable attribute of an entity (en, ru, zh). The first
# that matches names the attribute; its words are not part of the value.
_ATTRIBUTES: Final = [
    (
        "home",
        r"\b(?:lives?|living|moved|moving|relocated|resides?|based|settled)\b|\bhome (?:is|town)\b"
        r"|жив[её]т|живут|переехал\w*|перееха\w*|проживает|搬到|搬去|住在|定居",
    ),
    (
        "job",
        r"\b(?:works?|working|worked|job|employed|employer|joined|hired|quit|resigned)\b"
        r"|работа\w*|устроил\w*|уволил\w*|工作|入职|跳槽|辞职",
    ),
    (
        "partner",
        r"\b(?:married|engaged|dating|girlfriend|boyfriend|wife|husband|partner|divorced)\b"
        r"|broke up|женат|замужем|жена|муж\b|встречается|结婚|女朋友|男朋友|离婚",
    ),
    ("phone", r"\bphone\b|\bnumber\b|телефон|номер|电话|手机号"),
    ("email", r"\be-?mail\b|почт\w*|邮箱"),
    ("address", r"\baddress\b|адрес\w*|地址"),
    ("school", r"\b(?:studies|studying|student|school|university)\b|учится|университет|学校|大学"),
    ("car", r"\b(?:drives|car)\b|машин\w*|автомобил\w*|车"),
    ("age", r"\byears? old\b|\baged?\b|лет\b|岁"),
]
_ATTR_RES: Final = [(name, re.compile(rx, re.I)) for name, rx in _ATTRIBUTES]
_FAVOURITE: Final = re.compile(r"\bfavou?rite\s+(\w+)|любим\w+\s+(\w+)|最喜欢的(\w{1,4})", re.I)


def is_log(label: str) -> bool:
    """Whether a file label is a daily log whose Retain bullets are facts."""
    return label.startswith("memory/") and label.endswith(".md")


def _terms(name: str, *, query: bool) -> list[str]:
    return list(dict.fromkeys(_core.analyze(entity_key(name), query)))


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
                entities=[(e, _terms(e, query=False)) for e in f.entities],
            )
        )
    if new:  # the file's chunks were just replaced, and its old facts with them
        vectors, _ = memory._embed([f.content for f in facts])
        memory.store.replace_facts(label, new, vectors)
    names = set(before) | {e for f in facts for e in f.entities}
    if names:
        supersede(memory.store, names)
    return len(new)


# --- supersession --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Supersession:
    """A fact replaced by a newer one about the same entity and attribute."""

    fact_id: str
    by: str


def attribute_of(content: str, explicit: str | None) -> str | None:
    """The attribute a fact states: its `a=` option, else one its wording names."""
    if explicit:
        return explicit
    fav = _FAVOURITE.search(content)
    if fav:
        return "favourite " + next(g for g in fav.groups() if g).casefold()
    for name, rx in _ATTR_RES:
        if rx.search(content):
            return name
    return None


@dataclass(frozen=True, slots=True)
class _Row:
    """What supersession reads of a fact, from klaw.db's row or a parsed bullet."""

    fact_id: str
    content: str
    attribute: str | None
    entities: tuple[str, ...]
    day: str | None
    start_day: str | None
    path: str
    line: int

    @classmethod
    def of(cls, f: _core.FactRow | Fact) -> _Row:
        if isinstance(f, Fact):
            return cls(f.id, f.content, f.attribute, f.entities, f.day, f.start, f.source, f.line)
        return cls(
            f.fact_id, f.content, f.attribute, tuple(f.entities), f.day, f.start_day, f.path, f.line
        )


def _value(row: _Row, attribute: str) -> frozenset[str]:
    """The terms of what a fact says about its attribute (its entities, the words
    naming the attribute and mentions left out), to tell a change from a repeat:
    two values one of which holds all the other's terms are the same."""
    text = re.sub(r"@\"[^\"]*\"|@[\w'.\-]+", " ", row.content)
    for name, rx in _ATTR_RES:
        if name == attribute:
            text = rx.sub(" ", text)
    names = {t for e in row.entities for t in _terms(e, query=True)}
    return frozenset(t for t in _core.analyze(text, True) if t not in names)


def _order(row: _Row) -> tuple[str, str, str, int]:
    # The day the log was written first: "moved to Lisbon in 2024" written today is
    # newer knowledge than "lives in Berlin" written last year.
    return (row.day or row.start_day or "", row.start_day or "", row.path, row.line)


def _group(store: _core.Store, name: str) -> list[_core.FactRow]:
    """The facts about exactly the entity `name` (same folded and analysed name)."""
    terms = _terms(name, query=False)
    if not terms:
        return []
    want = frozenset(terms)
    rows = store.facts(ids=store.fact_ids(entities=[terms]))
    return [r for r in rows if any(frozenset(_terms(e, query=False)) == want for e in r.entities)]


def supersessions(facts: Iterable[Fact]) -> dict[str, str]:
    """fact id -> the id of the newer fact superseding it, for parsed bullets (what
    the index marks, computed without it: the reflect job's entity pages use it)."""
    groups: dict[frozenset[str], list[_Row]] = {}
    for f in facts:
        for e in f.entities:
            key = frozenset(_terms(e, query=False))
            if key:
                groups.setdefault(key, []).append(_Row.of(f))
    marks: dict[str, str] = {}
    for rows in groups.values():
        for fid, by in _marks(rows).items():
            marks.setdefault(fid, by)
    return marks


def _marks(facts: Sequence[_core.FactRow | _Row]) -> dict[str, str]:
    """fact id -> the id of the newer fact superseding it, within one entity."""
    rows = [f if isinstance(f, _Row) else _Row.of(f) for f in facts]
    by_attr: dict[str, list[_Row]] = {}
    for r in sorted(rows, key=_order):
        attr = attribute_of(r.content, r.attribute)
        if attr is not None:
            by_attr.setdefault(attr, []).append(r)
    marks: dict[str, str] = {}
    for attr, seq in by_attr.items():
        for older, newer in itertools.pairwise(seq):
            old, new = _value(older, attr), _value(newer, attr)
            # One saying all the other says ("still lives in Berlin") repeats it.
            if older.fact_id != newer.fact_id and not (old <= new or new <= old):
                marks[older.fact_id] = newer.fact_id
    return marks


def supersede(store: _core.Store, names: Iterable[str]) -> list[Supersession]:
    """Marks again which facts about these entities are superseded (and clears the
    marks no longer true); returns the marks now set on them. A fact about two
    entities takes the marks of all its entities' groups, read in full, so the
    result is the same whichever file changed last."""
    groups: dict[frozenset[str], list[_core.FactRow]] = {}
    pending = list(dict.fromkeys(names))
    touched: dict[int, _core.FactRow] = {}
    first = True
    while pending:
        more: list[str] = []
        for name in pending:
            key = frozenset(_terms(name, query=False))
            if not key or key in groups:
                continue
            groups[key] = rows = _group(store, name)
            for r in rows:
                if first:
                    touched[r.chunk_id] = r
                    more.extend(r.entities)
        pending, first = more, False
    marks: dict[str, str] = {}
    for rows in groups.values():
        for fid, by in _marks(rows).items():
            marks.setdefault(fid, by)
    changes = [
        (cid, marks.get(r.fact_id))
        for cid, r in touched.items()
        if r.superseded_by != marks.get(r.fact_id)
    ]
    if changes:
        store.set_superseded(changes)
    return [
        Supersession(r.fact_id, marks[r.fact_id]) for r in touched.values() if r.fact_id in marks
    ]


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
            terms = _terms(alias, query=True)
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
        for r in _group(store, name):
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

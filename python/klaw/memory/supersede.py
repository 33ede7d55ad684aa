"""Supersession: which retained fact a newer one replaces, per entity and attribute
("lives in Berlin", then "moved to Lisbon"), for the facts index (`klaw.memory.facts`)
and for parsed daily logs (`klaw.memory.logfacts`, the reflect job's entity pages)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from klaw import _core
from klaw.memory.retain import Fact, entity_key

__all__ = [
    "Supersession",
    "attribute_of",
    "entity_facts",
    "entity_terms",
    "supersede",
    "supersessions",
]

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


def entity_terms(name: str, *, query: bool) -> list[str]:
    """The analysed terms of an entity's name: two names with the same are one entity."""
    return list(dict.fromkeys(_core.analyze(entity_key(name), query)))


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
    names = {t for e in row.entities for t in entity_terms(e, query=True)}
    return frozenset(t for t in _core.analyze(text, True) if t not in names)


def _order(row: _Row) -> tuple[str, str, str, int]:
    # The day the log was written first: "moved to Lisbon in 2024" written today is
    # newer knowledge than "lives in Berlin" written last year.
    return (row.day or row.start_day or "", row.start_day or "", row.path, row.line)


def entity_facts(store: _core.Store, name: str) -> list[_core.FactRow]:
    """The facts about exactly the entity `name` (same folded and analysed name)."""
    terms = entity_terms(name, query=False)
    if not terms:
        return []
    want = frozenset(terms)
    rows = store.facts(ids=store.fact_ids(entities=[terms]))
    return [
        r for r in rows if any(frozenset(entity_terms(e, query=False)) == want for e in r.entities)
    ]


def supersessions(facts: Iterable[Fact]) -> dict[str, str]:
    """fact id -> the id of the newer fact superseding it, for parsed bullets (what
    the index marks, computed without it: the reflect job's entity pages use it)."""
    groups: dict[frozenset[str], list[_Row]] = {}
    for f in facts:
        for e in f.entities:
            key = frozenset(entity_terms(e, query=False))
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
            key = frozenset(entity_terms(name, query=False))
            if not key or key in groups:
                continue
            groups[key] = rows = entity_facts(store, name)
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

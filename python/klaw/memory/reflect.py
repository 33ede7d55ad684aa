"""Reflect, the part without a model: what the model is asked, how its answer is
checked, and how it changes the bank (issue 25 item 3; seed workspace-memory-v2,
"Reflect"). The scheduler's job (klaw.scheduler.reflect) makes the call.

The model is sent only the facts retained since the last run, with the pages and
opinions they concern, and answers one JSON object (`SYSTEM`). It proposes; the code
decides:

- a page gets every new fact about its entity (the model cannot drop one), a summary
  and aliases the model wrote (checked: text, bounded), and supersession pairs whose
  two facts are both the entity's, the newer written no earlier than the older; a
  newer fact about the same attribute supersedes the older by itself (the marks of
  klaw.memory.facts, which the index holds too: `W(a=home)`, or "moved to");
- an opinion's confidence moves by rule (`moved`), never by the model's number: each
  new supporting fact +0.05, each new contradicting one -0.05, at most 0.1 either
  way in a run; more (up to 0.3 down) only when the model calls the contradiction
  clear and at least two facts contradict it, outnumbering those that support it.
  Evidence already listed moves nothing again, so a run redone after a kill ends
  where the first would have.
- a new opinion starts at the confidence its facts state (`O(c=0.9)`), else 0.5;
  an opinion fact the model left out becomes an opinion of its own.

Anything in the answer that does not check out is left out and logged; a fact id the
model made up is never written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from klaw.memory.bank import EntityPage, Opinion, PageFact, new_page, with_fact
from klaw.memory.retain import Fact, entity_key

__all__ = [
    "SYSTEM",
    "Applied",
    "BadAnswer",
    "apply_answer",
    "moved",
    "parse_answer",
    "prompt",
]

log = logging.getLogger("klaw.memory")

SMALL_STEP: Final = 0.05  # per new piece of evidence
MAX_SMALL: Final = 0.10  # the most a run moves a confidence, either way, as a rule
LARGE_STEP: Final = 0.15  # per new contradicting fact, on a clear repeated contradiction
MAX_LARGE: Final = 0.30
MAX_SUMMARY_CHARS: Final = 800
MAX_ALIAS_CHARS: Final = 80
MAX_ALIASES_ADDED: Final = 10
MAX_STATEMENT_CHARS: Final = 300
#: Known facts of a page shown to the model beside the new ones (newest first).
KNOWN_FACTS_SHOWN: Final = 4
#: Characters of a fact id the prompt shows (hex: 16^6 ids, few hundred facts a call).
SHORT_ID: Final = 6
#: Opinions shown when none shares an entity with the new facts (all when fewer).
OPINIONS_SHOWN: Final = 30

_KIND_LETTER: Final = {"world": "W", "experience": "B", "opinion": "O", "observation": "S"}

SYSTEM: Final = """\
You keep the assistant's memory bank: one page per entity (a person, place, project, \
pet, organisation...) and a list of the owner's opinions and preferences. You get the \
pages concerned as they are and the facts retained since your last run. Answer with one \
JSON object and nothing else:
{"entities": [{"name": "...", "summary": "...", "aliases": ["..."], \
"superseded": [{"old": "<fact id>", "new": "<fact id>"}]}],
 "opinions": [{"id": "<opinion id, or null for a new one>", "statement": "...", \
"entities": ["..."], "supports": ["<fact id>"], "contradicts": ["<fact id>"], \
"clear_contradiction": false}]}
Rules: a summary is one to three sentences about the entity as it is now, in the \
language of its facts. Aliases are other names or spellings the facts use for the same \
entity (another script, a nickname), never another entity. "superseded" pairs an older \
fact with a newer one that replaces it (the same thing changed: a new address, a new \
job). For each new opinion fact (kind O), or a new fact that bears on an existing \
opinion, list its id under "supports" or "contradicts" of that opinion; id null makes a \
new opinion. "clear_contradiction" is true only when a fact plainly says the opposite. \
Use only the fact ids shown (in brackets). Leave out entities you have nothing to add to."""


class BadAnswer(ValueError):
    """The model's answer is not the JSON object asked for (nothing is applied)."""


# ------------------------------------------------------------------ the prompt


def page_fact(f: Fact) -> PageFact:
    return PageFact(
        id=f.id,
        day=f.day or f.start or "?",
        kind=_KIND_LETTER.get(f.kind or "", "S"),
        text=f.content,
        source=f.citation,
    )


def short(fid: str) -> str:
    """A fact's id as the prompt shows it: its first SHORT_ID characters (a third of the
    tokens of the whole id; the answer's ids are read back against the facts shown)."""
    return fid[:SHORT_ID]


def _resolve(ref: object, allowed: Iterable[str]) -> str | None:
    """The fact id among `allowed` that `ref` names (whole, or its short form), None
    when none or more than one does."""
    if not isinstance(ref, str):
        return None
    ref = ref.strip().removeprefix("f:").strip("[]")
    if len(ref) < SHORT_ID:
        return None
    found = {a for a in allowed if a.startswith(ref)}
    return found.pop() if len(found) == 1 else None


def _fact_line(f: Fact) -> str:
    letter = _KIND_LETTER.get(f.kind or "", "S")
    c = f"(c={f.confidence:.2f})" if f.confidence is not None else ""
    return f"- [{short(f.id)}] {f.day or f.start or '?'} {letter}{c}: {' '.join(f.content.split())}"


def prompt(
    today: str,
    touched: Sequence[tuple[str, EntityPage | None, Sequence[Fact]]],
    opinions: Sequence[Opinion],
    loose: Sequence[Fact],
) -> str:
    """The text sent with `SYSTEM`: each touched entity (its name, its page as it is,
    the new facts about it), the opinions concerned, the new facts of no entity."""
    parts = [f"Today: {today}", "", "Entities:"]
    for name, page, new in touched:
        parts.append(f"## {name}" + (f" (bank/entities/{page.slug}.md)" if page else " (new)"))
        if page is not None:
            if page.summary:
                parts.append("Summary: " + " ".join(page.summary.split()))
            if len(page.names()) > 1:
                parts.append("Aliases: " + ", ".join(page.names()[1:]))
            if page.facts:
                parts.append("Known facts:")
                for pf in page.facts[-KNOWN_FACTS_SHOWN:]:
                    parts.append(f"- [{short(pf.id)}] {pf.day} {pf.kind}: {pf.text}")
        parts.append("New facts:")
        parts.extend(_fact_line(f) for f in new)
        parts.append("")
    parts.append("Opinions:")
    if not opinions:
        parts.append("(none yet)")
    for o in opinions:
        about = f" entities: {', '.join(o.entities)}" if o.entities else ""
        parts.append(f"- [{o.id}] (c={o.confidence:.2f}) {o.statement}{about}")
    if loose:
        parts += ["", "New facts of no entity:"]
        parts.extend(_fact_line(f) for f in loose)
    return "\n".join(parts) + "\n"


# ------------------------------------------------------------------ the answer

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_answer(text: str) -> dict[str, Any]:
    """The answer's JSON object (alone, or alone in a ```json fence); BadAnswer else."""
    body = text.strip()
    if m := _FENCE.match(body):
        body = m.group(1)
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise BadAnswer(f"the answer is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadAnswer("the answer is not a JSON object")
    for key in ("entities", "opinions"):
        if not isinstance(data.get(key, []), list):
            raise BadAnswer(f"{key!r} is not a list")
    return data


def _text(value: object, limit: int) -> str | None:
    if not isinstance(value, str):
        return None
    one = " ".join(value.split())
    return one[:limit] if one else None


def _ids(value: object, allowed: set[str]) -> list[str]:
    if not isinstance(value, list):
        return []
    out = []
    for x in value:
        fid = _resolve(x, allowed)
        if fid is not None and fid not in out:
            out.append(fid)
    return out


# ------------------------------------------------------------------ confidence


def moved(
    c: float,
    *,
    new_support: int,
    new_contra: int,
    all_support: int,
    all_contra: int,
    clear: bool,
) -> float:
    """The confidence after a run's new evidence (see the module docstring)."""
    up = min(MAX_SMALL, SMALL_STEP * new_support)
    down = min(MAX_SMALL, SMALL_STEP * new_contra)
    if new_contra and clear and all_contra >= 2 and all_contra > all_support:
        down = min(MAX_LARGE, LARGE_STEP * new_contra + SMALL_STEP * (all_contra - new_contra))
        down = max(down, min(MAX_SMALL, SMALL_STEP * new_contra))
    return round(min(1.0, max(0.0, c + up - down)), 2)


def _opinion_id(statement: str) -> str:
    return "o-" + hashlib.blake2b(statement.casefold().encode(), digest_size=4).hexdigest()


# ------------------------------------------------------------------ applying


@dataclass
class Applied:
    """What a run changes: pages by slug, the opinions list, and what was dropped."""

    pages: dict[str, EntityPage] = field(default_factory=dict)
    opinions: list[Opinion] = field(default_factory=list)
    opinions_changed: bool = False
    dropped: list[str] = field(default_factory=list)  # what did not check out, said once


def apply_answer(
    answer: dict[str, Any],
    *,
    touched: Sequence[tuple[str, EntityPage | None, Sequence[Fact]]],
    opinions: Sequence[Opinion],
    new: Sequence[Fact],
    known: dict[str, Fact],
    today: str,
) -> Applied:
    """The bank after the run (see the module docstring): `touched` are the entities
    of the new facts (name, page or None, its new facts), `new` every fact of the
    batch, `known` every retained fact by id (for attributes and days)."""
    out = Applied()
    batch_ids = {f.id for f in new}
    by_key: dict[str, int] = {}
    pages: list[EntityPage] = []
    for i, (name, page, facts) in enumerate(touched):
        p = page if page is not None else new_page(name)
        for f in facts:
            p = with_fact(p, page_fact(f))
        pages.append(p)
        for n in (name, *p.names()):
            by_key.setdefault(entity_key(n), i)

    for item in answer.get("entities", []):
        if not isinstance(item, dict):
            continue
        said = _text(item.get("name"), 200)
        at = by_key.get(entity_key(said)) if said else None
        if at is None:
            out.dropped.append(f"entity {said!r} is none of the new facts'")
            continue
        p = pages[at]
        if summary := _text(item.get("summary"), MAX_SUMMARY_CHARS):
            p.summary = summary
        raw_aliases = item.get("aliases")
        added = 0
        for alias in raw_aliases if isinstance(raw_aliases, list) else []:
            a = _text(alias, MAX_ALIAS_CHARS)
            if a is None or added >= MAX_ALIASES_ADDED:
                continue
            a = a.lstrip("@").strip()
            k = entity_key(a)
            if not k or k in {entity_key(n) for n in p.names()}:
                continue
            if by_key.get(k, at) != at:
                out.dropped.append(f"alias {a!r} of {p.name!r} names another entity")
                continue
            p.aliases.append(a)
            by_key[k] = at
            added += 1
        for pair in item.get("superseded") or []:
            if isinstance(pair, dict):
                _supersede(p, str(pair.get("old", "")), str(pair.get("new", "")), out)
    from klaw.memory.supersede import supersessions

    replaced = supersessions(known.values())  # what the index marks, from the same facts
    for p in pages:
        _by_attribute(p, replaced)
        out.pages[p.slug] = p

    _apply_opinions(answer, opinions, new, batch_ids, known, today, out)
    return out


def _supersede(page: EntityPage, old: str, new: str, out: Applied) -> None:
    current = {f.id: f for f in page.facts}
    old_id, new_id = _resolve(old, current), _resolve(new, current)
    if old_id is None or new_id is None or old_id == new_id:
        out.dropped.append(f"superseded {old!r} by {new!r}: not both facts of {page.name!r}")
        return
    o, n = current[old_id], current[new_id]
    if n.day != "?" and o.day != "?" and n.day < o.day:
        out.dropped.append(f"superseded {old!r} by the older {new!r}")
        return
    page.facts = [f for f in page.facts if f.id != old_id]
    page.history.append(replace(o, until=n.day, by=n.id))


def _by_attribute(page: EntityPage, replaced: Mapping[str, str]) -> None:
    """A fact a newer fact about the same entity and attribute replaces (the marks of
    `klaw.memory.supersede.supersessions`) moves to the page's history, with the day of
    the fact that replaced it, when that fact is on the page too."""
    current = {f.id: f for f in page.facts}
    for pf in list(page.facts):
        by = replaced.get(pf.id)
        if by is None or by not in current:
            continue
        page.facts = [f for f in page.facts if f.id != pf.id]
        page.history.append(replace(pf, until=current[by].day, by=by))


def _apply_opinions(
    answer: dict[str, Any],
    opinions: Sequence[Opinion],
    new: Sequence[Fact],
    batch_ids: set[str],
    known: dict[str, Fact],
    today: str,
    out: Applied,
) -> None:
    current = {o.id: o for o in opinions}
    order = [o.id for o in opinions]
    used: set[str] = set()
    for item in answer.get("opinions", []):
        if not isinstance(item, dict):
            continue
        sup = _ids(item.get("supports"), batch_ids)
        con = [x for x in _ids(item.get("contradicts"), batch_ids) if x not in sup]
        oid = item.get("id")
        if isinstance(oid, str) and oid in current:
            o = current[oid]
            fresh_sup = [x for x in sup if x not in o.supporting and x not in o.contradicting]
            fresh_con = [x for x in con if x not in o.contradicting and x not in o.supporting]
            used.update(sup + con)
            if not fresh_sup and not fresh_con:
                continue
            all_sup = len(o.supporting) + len(fresh_sup)
            all_con = len(o.contradicting) + len(fresh_con)
            c = moved(
                o.confidence,
                new_support=len(fresh_sup),
                new_contra=len(fresh_con),
                all_support=all_sup,
                all_contra=all_con,
                clear=item.get("clear_contradiction") is True,
            )
            current[oid] = replace(
                o,
                confidence=c,
                updated=today,
                supporting=(*o.supporting, *fresh_sup),
                contradicting=(*o.contradicting, *fresh_con),
            )
            out.opinions_changed = True
            continue
        statement = _text(item.get("statement"), MAX_STATEMENT_CHARS)
        if statement is None or not sup:
            out.dropped.append(f"new opinion {statement!r} without a supporting new fact")
            continue
        used.update(sup + con)
        _add_opinion(current, order, statement, item.get("entities"), sup, known, today)
        out.opinions_changed = True
    for f in new:  # an opinion fact the model did not place is an opinion of its own
        if f.kind == "opinion" and f.id not in used and not _listed(current.values(), f.id):
            _add_opinion(current, order, f.content, list(f.entities), [f.id], known, today)
            out.opinions_changed = True
    out.opinions = [current[i] for i in order]


def _listed(opinions: Iterable[Opinion], fid: str) -> bool:
    return any(fid in o.supporting or fid in o.contradicting for o in opinions)


def _add_opinion(
    current: dict[str, Opinion],
    order: list[str],
    statement: str,
    entities: object,
    support: list[str],
    known: dict[str, Fact],
    today: str,
) -> None:
    oid = _opinion_id(statement)
    if oid in current:
        return
    stated = [c for x in support if (c := known[x].confidence) is not None]
    c = round(sum(stated) / len(stated), 2) if stated else 0.5
    names = tuple(
        n for x in (entities if isinstance(entities, list) else []) if (n := _text(x, 80))
    )
    current[oid] = Opinion(oid, statement, c, today, names, tuple(support), ())
    order.append(oid)

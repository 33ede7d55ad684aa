"""Auto-recall: what memory knows about the entities a message names, put into the
context before the turn, with no model call (issue 25 item 5; seed autopoiesis §4,
tiers 1-2).

What it knows (`Known`): every bank page (`bank/entities/*.md`: its name and aliases)
and every entity the retained facts mention (`@Name` in a `## Retain` bullet), so a
fact is recalled even before the reflect job has made a page for its entity.

- Tier 1, exact alias match (free): each name is cut into words and each word analysed
  by the keyword analyser memory search uses (stems, Russian prefixes, CJK bigrams), so
  the alias "Анна" finds "Анной" and "Anna" "Anna's". The message is analysed once; each of
  its terms is one dict lookup. A name matches when every one of its words has a term
  in the message.
- Tier 2, similarity (cheap, local): the message's embedding, by the model already
  loaded, against the vectors the memory index already holds for the bank's pages and
  the daily logs (one int8 scan of klaw.db's vector index); a chunk of a page brings
  its entity, a chunk of a log the retained facts on its lines. Only above
  `memory.autoRecall.minSimilarity` (else the model's, `MIN_SIMILARITY`), and only
  for a message of a few words or more.

What is put in: each entity's page summary and its newest facts (superseded ones left
out: a newer fact about the same entity and attribute replaces them), facts found by
similarity, best first, until `memory.autoRecall.maxTokens`. When memory knows no
entity and holds no fact, a turn costs one attribute read.

What it knows is rebuilt in a background thread after an indexing pass changed memory
files (`Memory.generation`: the watcher's, reflect's) or when it is older than
`max_age_s`; only files whose stat changed are read again. A turn never waits for the
files, except the first after start, for at most FIRST_WAIT_S.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeAlias

from klaw import _core
from klaw.memory.bank import ENTITIES_DIR, EntityPage, Stamp, read_pages
from klaw.memory.logfacts import FactFiles, current_facts, name_key
from klaw.memory.retain import Fact

if TYPE_CHECKING:
    from klaw.config.engine import AutoRecallConfig
    from klaw.memory.api import Memory

__all__ = ["Known", "Recall", "Recalled"]

log = logging.getLogger("klaw.memory")

HEADING: Final = "Recalled From Memory"
NOTE: Final = (
    "Brought in because the conversation names them (no search was run); cite the "
    "source in brackets, and use memory_search for more."
)
#: Facts shown per entity, newest first.
FACTS_PER_ENTITY: Final = 6
#: Characters of a page summary shown.
SUMMARY_CHARS: Final = 600
#: Tier 2 runs for a message of at least this many analysed terms ("ok, thanks" not).
MIN_TERMS_FOR_SIMILARITY: Final = 3
#: Chunks taken from the vector index for tier 2.
SIMILAR_CHUNKS: Final = 8
#: Tier 2's cosine bar per embedding model (`memory.autoRecall.minSimilarity: null`),
#: measured on the personal dev set (benches/eval_recall.py, docs/memory.md): the
#: lowest bar at which one unrelated request in ten or fewer brings anything in. The
#: models' cosines live on different scales (e5's related pairs score ~0.85).
MIN_SIMILARITY: Final = {
    "use-multilingual-v3": 0.30,
    "multilingual-e5-small": 0.85,
    "all-MiniLM-L6-v2": 0.50,
}
#: Text of the new messages looked at (the end of a long paste).
MAX_TEXT_CHARS: Final = 4000


@dataclass(frozen=True, slots=True)
class Known:
    """An entity auto-recall can bring in: its page (if any) and its current facts."""

    key: str  # entity_key of its name
    name: str
    page: EntityPage | None
    facts: tuple[Fact, ...]  # newest first, superseded ones left out


@dataclass(frozen=True, slots=True)
class Recalled:
    """What one turn got: the prompt block ("" for nothing) and what is in it."""

    text: str = ""
    items: tuple[str, ...] = ()  # citations: bank/entities/peter.md, memory/…#L5
    entities: tuple[str, ...] = ()  # names brought in
    tokens: int = 0
    tier: int = 0  # 1: a name matched; 2: similarity only; 0: nothing


NOTHING: Final = Recalled()
#: The first turn waits this long for what auto-recall knows to be read (a year of
#: logs takes seconds to parse the first time); after that it goes without.
FIRST_WAIT_S: Final = 1.0

_PageCache: TypeAlias = dict[str, tuple[Stamp, EntityPage]]


@dataclass(slots=True)
class _Snapshot:
    known: list[Known] = field(default_factory=list)
    # analysed term -> (entity index, the name's words as term sets)
    terms: dict[str, list[tuple[int, tuple[frozenset[str], ...]]]] = field(default_factory=dict)
    by_slug: dict[str, int] = field(default_factory=dict)
    # log label -> its facts (tier 2 maps a chunk's lines to them)
    facts_by_source: dict[str, list[Fact]] = field(default_factory=dict)
    facts: int = 0

    @property
    def empty(self) -> bool:
        return not self.known and not self.facts


@functools.lru_cache(maxsize=1 << 14)
def _words(name: str) -> tuple[frozenset[str], ...]:
    """The analysed terms of each word of a name (query form: CJK as bigrams)."""
    words = []
    for word in name.replace("@", " ").split():
        terms = frozenset(_core.analyze(word, True))
        if terms:
            words.append(terms)
    return tuple(words)


def _build(workspace: Path, fact_files: FactFiles, page_cache: _PageCache) -> _Snapshot:
    """What auto-recall knows: one entity per page, and one per name the facts mention
    that no page has; a name two pages share brings both."""
    snap = _Snapshot()
    pages = read_pages(workspace, page_cache)
    by_source = fact_files.read()
    snap.facts_by_source = by_source
    snap.facts = sum(map(len, by_source.values()))
    index: dict[str, list[int]] = {}  # entity key -> entities it names
    names: list[list[str]] = []
    owners: list[EntityPage | None] = []
    for slug, page in pages.items():
        at = len(names)
        names.append(page.names())
        owners.append(page)
        for n in names[at]:
            k = name_key(n)
            if k and at not in index.setdefault(k, []):
                index[k].append(at)
        snap.by_slug[slug] = at
    facts_of: dict[int, list[Fact]] = {}
    for facts in by_source.values():
        for f in facts:
            for e in f.entities:
                k = name_key(e)
                if not k:
                    continue
                if k not in index:
                    index[k] = [len(names)]
                    names.append([e])
                    owners.append(None)
                for at in index[k]:
                    facts_of.setdefault(at, []).append(f)
    from klaw.memory.supersede import supersessions

    replaced = supersessions(f for facts in by_source.values() for f in facts)
    for at, own in enumerate(owners):
        display = own.name if own else names[at][0]
        history = {h.id for h in own.history} if own else set()
        facts = [f for f in current_facts(facts_of.get(at, ()), replaced) if f.id not in history]
        snap.known.append(Known(name_key(display), display, own, tuple(facts)))
        for n in names[at]:
            words = _words(n)
            if words:  # filed under each term of its first word
                for term in words[0]:
                    snap.terms.setdefault(term, []).append((at, words))
    return snap


class Recall:
    """Auto-recall for one engine (see the module docstring); safe across threads."""

    def __init__(
        self,
        workspace: Path,
        config: AutoRecallConfig,
        memory: Memory | None = None,
        *,
        max_age_s: float = 600.0,
    ) -> None:
        self.workspace = workspace
        self.config = config
        self.memory = memory
        #: Read again after this long even when no indexing pass said anything changed
        #: (the watcher off, a file edited while the engine was stopped).
        self.max_age_s = max_age_s
        self._files = FactFiles(workspace)
        self._pages: _PageCache = {}
        self._snap: _Snapshot | None = None
        self._built = 0.0
        self._generation = -1  # Memory.generation the snapshot was built at
        self._lock = threading.Lock()  # one rebuild at a time
        self._refreshing: threading.Event | None = None

    # --- what it knows ------------------------------------------------------

    def refresh(self) -> None:
        """Reads the bank and the daily logs again (only files whose stat changed) now."""
        with self._lock:
            started = time.monotonic()
            generation = self.memory.generation if self.memory is not None else 0
            try:
                snap = _build(self.workspace, self._files, self._pages)
            except Exception:  # recall is a help: a broken file must not stop turns
                log.exception("auto-recall: reading the bank and the daily logs failed")
                snap = self._snap or _Snapshot()
            self._snap, self._built, self._generation = snap, started, generation

    def _background(self, done: threading.Event) -> None:
        try:
            self.refresh()
        finally:
            self._refreshing = None
            done.set()

    def _current(self) -> _Snapshot | None:
        """What it knows now; rebuilt in a background thread when an indexing pass
        changed memory files (Memory.generation) or it is older than `max_age_s`. The
        first call waits up to FIRST_WAIT_S for the first build."""
        snap = self._snap
        generation = self.memory.generation if self.memory is not None else 0
        stale = (
            snap is None
            or generation != self._generation
            or time.monotonic() - self._built > self.max_age_s
        )
        if stale and self._refreshing is None:
            done = self._refreshing = threading.Event()
            threading.Thread(
                target=self._background, args=(done,), name="klaw-recall", daemon=True
            ).start()
            if snap is None:
                done.wait(FIRST_WAIT_S)
                return self._snap
        return snap

    def known(self) -> list[Known]:
        snap = self._current()
        return list(snap.known) if snap else []

    # --- one turn -----------------------------------------------------------

    def for_messages(self, texts: Sequence[str]) -> Recalled:
        """What to put into the context for the turn's new messages `texts`."""
        if not self.config.enabled:
            return NOTHING
        snap = self._current()
        if snap is None or snap.empty:
            return NOTHING
        text = "\n".join(t for t in texts if t)[-MAX_TEXT_CHARS:]
        if not text.strip():
            return NOTHING
        terms = set(_core.analyze(text))
        named = self._tier1(snap, terms)
        similar: list[tuple[float, int | Fact]] = []
        if (
            self.config.similarity
            and self.memory is not None
            and len(terms) >= (MIN_TERMS_FOR_SIMILARITY)
        ):
            similar = self._tier2(snap, text)
        if not named and not similar:
            return NOTHING
        return self._render(snap, named, similar)

    @staticmethod
    def _tier1(snap: _Snapshot, terms: set[str]) -> list[int]:
        """Entities whose name's every word has a term in the message, the name with
        more words first (it says more)."""
        found: dict[int, int] = {}
        for term in terms:
            for at, words in snap.terms.get(term, ()):
                if all(w & terms for w in words):
                    found[at] = max(found.get(at, 0), len(words))
        return sorted(found, key=lambda at: -found[at])

    def _tier2(self, snap: _Snapshot, text: str) -> list[tuple[float, int | Fact]]:
        assert self.memory is not None
        memory = self.memory
        try:
            qvec = memory.backend.embed_query(text)
            hits = memory.store.vector_search(qvec, SIMILAR_CHUNKS)
        except Exception as exc:  # no model, a closed store: tier 1 still works
            log.debug("auto-recall: no similarity this turn: %s", exc)
            return []
        bar = self.config.min_similarity
        if bar is None:
            bar = MIN_SIMILARITY.get(memory.config.memory.embedding.model, 0.5)
        good = {cid: score for cid, score in hits if score >= bar}
        if not good:
            return []
        out: list[tuple[float, int | Fact]] = []
        for chunk in memory.store.get_chunks(list(good)):
            score = good[chunk.id]
            source = chunk.source
            if source.startswith(ENTITIES_DIR + "/"):
                at = snap.by_slug.get(source[len(ENTITIES_DIR) + 1 : -3])
                if at is not None:
                    out.append((score, at))
            elif source in snap.facts_by_source:
                lo, hi = chunk.start_line or 0, chunk.end_line or 1 << 30
                out.extend((score, f) for f in snap.facts_by_source[source] if lo <= f.line <= hi)
        out.sort(key=lambda x: -x[0])
        return out

    def _render(
        self, snap: _Snapshot, named: list[int], similar: list[tuple[float, int | Fact]]
    ) -> Recalled:
        order: list[int | Fact] = list(named)
        for _score, item in similar:
            if isinstance(item, int):
                if item not in order:
                    order.append(item)
            else:
                order.append(item)
        blocks: list[tuple[str, list[tuple[str, str]]]] = []  # (header, [(line, citation)])
        shown_facts: set[str] = set()
        names: list[str] = []
        loose: list[tuple[str, str]] = []
        for item in order:
            if isinstance(item, Fact):
                if item.id not in shown_facts:
                    shown_facts.add(item.id)
                    loose.append((_fact_line(item), item.citation))
                continue
            known = snap.known[item]
            lines: list[tuple[str, str]] = []
            if known.page is not None:
                cite = f"{ENTITIES_DIR}/{known.page.slug}.md"
                summary = " ".join(known.page.summary.split())[:SUMMARY_CHARS]
                lines.append((f"{summary} [{cite}]" if summary else f"[{cite}]", cite))
            for f in known.facts[:FACTS_PER_ENTITY]:
                if f.id not in shown_facts:
                    shown_facts.add(f.id)
                    lines.append((_fact_line(f), f.citation))
            aliases = [n for n in (known.page.names() if known.page else []) if n != known.name]
            header = f"### {known.name}" + (f" ({', '.join(aliases[:4])})" if aliases else "")
            blocks.append((header, lines))
            names.append(known.name)
        if loose:
            blocks.append(("### Related facts", loose))
        return self._fit(blocks, names, tier=1 if named else 2)

    def _fit(
        self, blocks: list[tuple[str, list[tuple[str, str]]]], names: list[str], tier: int
    ) -> Recalled:
        """The blocks in order, line by line, within maxTokens (a header only with at
        least one of its lines)."""
        budget = self.config.max_tokens
        head = f"## {HEADING}\n{NOTE}\n"
        texts = [head] + [t for h, lines in blocks for t in (h, *(x for x, _ in lines))]
        counts = iter(_core.count_tokens_batch(texts))
        used = next(counts)
        out = [head]
        items: list[str] = []
        kept_names: list[str] = []
        for (header, lines), name in zip(blocks, [*names, ""], strict=False):
            h_tokens = next(counts)
            line_tokens = [next(counts) for _ in lines]
            if used + h_tokens >= budget:
                break
            taken: list[str] = []
            cost = h_tokens
            for (line, cite), n in zip(lines, line_tokens, strict=True):
                if used + cost + n > budget:
                    continue  # a shorter line later may still fit
                taken.append(line)
                cost += n
                if cite not in items:
                    items.append(cite)
            if not taken:
                continue
            out.append(header + "\n" + "\n".join(taken) + "\n")
            used += cost
            if name:
                kept_names.append(name)
        if not items:
            return NOTHING
        return Recalled("\n".join(out).strip(), tuple(items), tuple(kept_names), used, tier)


def _fact_line(f: Fact) -> str:
    day = f.start or f.day or "?"
    span = f"{day}..{f.end}" if f.end and f.end != day else day
    return f"- {span}: {f.content} [{f.citation}]"

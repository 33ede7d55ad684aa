"""Keyword search for archival memory: FTS5 (unicode61, trigram) against tantivy + the
Klaw analyser, on quality (tests/data/multilingual) and speed (100k synthetic chunks).

Run: python benches/eval_keyword.py [--json out.json] [--skip-speed] [--n 100000]

Quality: every note of notes.jsonl goes into one index (all languages together, as in
the agent's memory); each query's top 10 is compared with its `relevant` ids.
recall@10 = share of the relevant ids in the top 10; MRR@10 = 1/rank of the first
relevant hit (0 if none in the top 10). Results are grouped by language and by kind.

Setups:
- fts5-unicode61: raw text; query = OR of the quoted unicode61-style tokens.
- fts5-trigram: raw text; query = OR of the quoted tokens of >= 3 characters (shorter
  ones cannot match a trigram index). A CJK run longer than 4 characters is a sentence,
  not a word, so it is split into overlapping 3-character windows (as a whole it would
  never be a substring of a note).
- fts5-analysed: FTS5 unicode61 (with '~' as a token character) over the text produced by
  `_core.analyze`; query = OR of `_core.analyze(q, query=True)`. Same analysis as ours,
  different engine: separates the analyser's effect from the engine's.
- tantivy (ours): `Store.keyword_search`.
- vector: `Store.vector_search` with the real model's query embedding.
- hybrid (ours): `Store.search` (weighted RRF of vector and tantivy candidates), over a
  grid of fusion settings; also RRF of vector + each FTS5 baseline, computed here with
  the same formula as the Rust core (score = sum w / (rrf_k + rank), ties by id).

Speed: `corpus.texts(n)` chunks (with `corpus.vectors(n)` for the Klaw store), each index
built once; p50/p95 latency of top-20 keyword queries for `corpus.QUERIES`.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import sqlean

from klaw import _core

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "multilingual"
K = 10
DIM = 384
LANGS = ("en", "ru", "zh")
KINDS = ("inflection", "cjk-word", "natural", "exact", "semantic")
FUSION_GRID = [
    (cand, kw, rrf_k) for cand in (20, 50) for kw in (0.5, 1.0, 2.0) for rrf_k in (20.0, 60.0)
]
DEFAULT_FUSION = (20, 1.0, 60.0)

_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


# --- data ------------------------------------------------------------------


@dataclass(frozen=True)
class Note:
    id: str
    lang: str
    text: str


@dataclass(frozen=True)
class Query:
    id: str
    lang: str
    query: str
    relevant: tuple[str, ...]
    kind: str


def load(data: Path = DATA) -> tuple[list[Note], list[Query]]:
    notes = [
        Note(d["id"], d["lang"], d["text"])
        for d in map(json.loads, (data / "notes.jsonl").read_text().splitlines())
    ]
    queries = [
        Query(d["id"], d["lang"], d["query"], tuple(d["relevant"]), d["kind"])
        for d in map(json.loads, (data / "queries.jsonl").read_text().splitlines())
    ]
    return notes, queries


# --- query builders --------------------------------------------------------


def quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def unicode61_terms(text: str) -> list[str]:
    """Tokens as unicode61 splits them: runs of letters and digits."""
    return _WORD.findall(text)


def trigram_terms(text: str) -> list[str]:
    out: list[str] = []
    for tok in _WORD.findall(text):
        if len(tok) > 4 and _CJK.search(tok):
            out.extend(tok[i : i + 3] for i in range(len(tok) - 2))
        elif len(tok) >= 3:
            out.append(tok)
    return out


def analysed_terms(text: str) -> list[str]:
    return _core.analyze(text, query=True)


def or_query(terms: Sequence[str]) -> str:
    return " OR ".join(quote(t) for t in dict.fromkeys(terms))


# --- FTS5 baselines --------------------------------------------------------


class Fts5:
    """An in-memory FTS5 table; rowid = position of the text in the input list."""

    def __init__(
        self,
        tokenize: str,
        terms: Callable[[str], list[str]],
        transform: Callable[[str], str] | None = None,
    ) -> None:
        self.db = sqlean.connect(":memory:")
        self.db.execute(f"CREATE VIRTUAL TABLE f USING fts5(content, tokenize={quote(tokenize)})")
        self.terms = terms
        self.transform = transform

    def build(self, texts: Sequence[str]) -> None:
        tf = self.transform
        rows = ((i, tf(t) if tf else t) for i, t in enumerate(texts))
        with self.db:
            self.db.executemany("INSERT INTO f(rowid, content) VALUES (?, ?)", rows)
            self.db.execute("INSERT INTO f(f) VALUES ('optimize')")

    def search(self, text: str, k: int) -> list[int]:
        terms = self.terms(text)
        if not terms:
            return []
        cur = self.db.execute(
            "SELECT rowid FROM f WHERE f MATCH ? ORDER BY rank LIMIT ?", (or_query(terms), k)
        )
        return [r[0] for r in cur]

    def close(self) -> None:
        self.db.close()


def fts5_setups() -> dict[str, Fts5]:
    return {
        "fts5-unicode61": Fts5("unicode61", unicode61_terms),
        "fts5-trigram": Fts5("trigram", trigram_terms),
        "fts5-analysed": Fts5(
            "unicode61 tokenchars '~'", analysed_terms, lambda t: " ".join(_core.analyze(t))
        ),
    }


# --- metrics ---------------------------------------------------------------


def recall(ranked: Sequence[str], relevant: Sequence[str], k: int = K) -> float:
    top = set(ranked[:k])
    return sum(r in top for r in relevant) / len(relevant)


def rr(ranked: Sequence[str], relevant: Sequence[str], k: int = K) -> float:
    rel = set(relevant)
    for i, nid in enumerate(ranked[:k]):
        if nid in rel:
            return 1.0 / (i + 1)
    return 0.0


def rrf(lists: Sequence[tuple[Sequence[int], float]], rrf_k: float, top_k: int) -> list[int]:
    """The Rust core's fusion: score = sum w / (rrf_k + rank), rank from 1; ties by id."""
    scores: dict[int, float] = defaultdict(float)
    for ids, w in lists:
        for rank, i in enumerate(ids):
            scores[i] += w / (rrf_k + rank + 1)
    return sorted(scores, key=lambda i: (-scores[i], i))[:top_k]


Groups = dict[str, dict[str, float]]


def summarise(queries: Sequence[Query], ranked: Sequence[Sequence[str]]) -> Groups:
    """{group: {"recall": r@10, "mrr": mrr@10, "n": count}} for all / lang / kind / lang:kind."""
    acc: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for q, r in zip(queries, ranked, strict=True):
        m = (recall(r, q.relevant), rr(r, q.relevant))
        keys = ["all", q.lang, q.kind, f"{q.lang}:{q.kind}"]
        if q.kind == "cjk-word" and len(q.query) == 2:
            keys.append("cjk-word-2char")
        for key in keys:
            acc[key].append(m)
    return {
        key: {
            "recall": sum(m[0] for m in ms) / len(ms),
            "mrr": sum(m[1] for m in ms) / len(ms),
            "n": float(len(ms)),
        }
        for key, ms in acc.items()
    }


# --- quality ---------------------------------------------------------------


def embed(texts: list[str]) -> bytes:
    from klaw.config import load_engine_config
    from klaw.memory.api import load_backend
    from klaw.paths import KlawPaths

    be = load_backend(load_engine_config(Path("/nonexistent/engine.yaml")), KlawPaths.from_env())
    return be.embed_batch(texts)


def quality(
    notes: list[Note], queries: list[Query]
) -> tuple[dict[str, Groups], dict[str, dict[str, list[str]]]]:
    """Summaries per setup, and each setup's top-10 note ids per query id."""
    texts = [n.text for n in notes]
    t0 = time.perf_counter()
    vecs = embed(texts + [q.query for q in queries])
    step = DIM * 4
    nvec = len(texts) * step
    note_vecs = vecs[:nvec]
    qvecs = [vecs[nvec + i * step : nvec + (i + 1) * step] for i in range(len(queries))]
    print(
        f"embedded {len(texts)} notes + {len(queries)} queries in {time.perf_counter() - t0:.1f}s"
    )

    ranked: dict[str, list[list[str]]] = {}
    lists: dict[str, list[list[int]]] = {}  # note indices, best first, for fusion

    for name, fts in fts5_setups().items():
        fts.build(texts)
        lists[name] = [fts.search(q.query, 50) for q in queries]
        fts.close()

    with tempfile.TemporaryDirectory() as tmp:
        store = _core.Store(str(Path(tmp) / "klaw.db"), dim=DIM)
        try:
            ids = store.add_chunks(
                "eval",
                None,
                "2025-01-01T00:00:00Z",
                [_core.NewChunk(content=n.text, chunk_hash=n.id) for n in notes],
                note_vecs,
            )
            pos = {cid: i for i, cid in enumerate(ids)}
            lists["tantivy (ours)"] = [
                [pos[c] for c, _ in store.keyword_search(q.query, 50)] for q in queries
            ]
            lists["vector"] = [[pos[c] for c, _ in store.vector_search(v, 50)] for v in qvecs]
            for cand, kw, rk in FUSION_GRID:
                name = f"hybrid ours c={cand} kw={kw:g} k={rk:g}"
                lists[name] = [
                    [
                        pos[h.id]
                        for h in store.search(
                            v,
                            q.query,
                            _core.SearchParams(
                                top_k=K, candidates=cand, rrf_k=rk, keyword_weight=kw
                            ),
                        )
                    ]
                    for q, v in zip(queries, qvecs, strict=True)
                ]
        finally:
            store.close()

    cand, kw, rk = DEFAULT_FUSION
    for base in ("fts5-unicode61", "fts5-trigram"):
        lists[f"hybrid {base}"] = [
            rrf([(v[:cand], 1.0), (b[:cand], kw)], rk, K)
            for v, b in zip(lists["vector"], lists[base], strict=True)
        ]

    for name, ls in lists.items():
        ranked[name] = [[notes[i].id for i in lst[:K]] for lst in ls]
    qids = [q.id for q in queries]
    return (
        {name: summarise(queries, r) for name, r in ranked.items()},
        {name: dict(zip(qids, r, strict=True)) for name, r in ranked.items()},
    )


# --- speed -----------------------------------------------------------------


def percentile(xs: Sequence[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p * (len(s) - 1)))]


REPS = 7


def time_queries(fn: Callable[[str], object], queries: Sequence[str]) -> dict[str, Any]:
    """Per query: one warm-up run, then REPS timed runs (every query weighs the same)."""
    samples: list[float] = []
    per_query: dict[str, float] = {}
    for q in queries:
        fn(q)
        mine: list[float] = []
        for _ in range(REPS):
            t = time.perf_counter()
            fn(q)
            mine.append(1000 * (time.perf_counter() - t))
        samples += mine
        per_query[q] = statistics.median(mine)
    return {
        "p50_ms": statistics.median(samples),
        "p95_ms": percentile(samples, 0.95),
        "mean_ms": statistics.fmean(samples),
        "per_query_ms": per_query,
    }


def speed(n: int) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import corpus

    t = time.perf_counter()
    texts = corpus.texts(n)
    vecs = corpus.vectors(n)
    print(f"generated {n} chunks in {time.perf_counter() - t:.1f}s")
    queries = list(corpus.QUERIES)
    out: dict[str, Any] = {"n": n, "queries": queries}

    for name, fts in fts5_setups().items():
        t = time.perf_counter()
        fts.build(texts)
        build = time.perf_counter() - t
        out[name] = {"build_s": build} | time_queries(partial(fts.search, k=20), queries)
        out[name]["empty_queries"] = sum(not fts.search(q, 20) for q in queries)
        fts.close()
        print(f"{name}: built in {build:.1f}s, p50 {out[name]['p50_ms']:.2f} ms")

    t = time.perf_counter()
    for x in texts:
        _core.analyze(x)
    analyse_s = time.perf_counter() - t

    qvecs = embed(queries)
    step = DIM * 4
    qv = {q: qvecs[i * step : (i + 1) * step] for i, q in enumerate(queries)}
    with tempfile.TemporaryDirectory() as tmp:
        store = _core.Store(str(Path(tmp) / "klaw.db"), dim=DIM)
        try:
            t = time.perf_counter()
            batch = 10_000
            for s in range(0, n, batch):
                store.add_chunks(
                    "bench",
                    None,
                    "2025-01-01T00:00:00Z",
                    [
                        _core.NewChunk(content=x, chunk_hash=str(s + i))
                        for i, x in enumerate(texts[s : s + batch])
                    ],
                    vecs[s : s + batch].tobytes(),
                )
            build = time.perf_counter() - t
            name = "tantivy (ours)"
            out[name] = {"build_s": build, "analyse_only_s": analyse_s} | time_queries(
                lambda q: store.keyword_search(q, 20), queries
            )
            out[name]["empty_queries"] = sum(not store.keyword_search(q, 20) for q in queries)
            out["vector (ours)"] = time_queries(lambda q: store.vector_search(qv[q], 20), queries)
            out["hybrid (ours)"] = time_queries(
                lambda q: store.search(qv[q], q, _core.SearchParams(top_k=20, candidates=20)),
                queries,
            )
            print(f"{name}: built in {build:.1f}s, p50 {out[name]['p50_ms']:.2f} ms")
        finally:
            store.close()
    return out


# --- report ----------------------------------------------------------------

SPEED_ENGINES = [
    "fts5-unicode61",
    "fts5-trigram",
    "fts5-analysed",
    "tantivy (ours)",
    "vector (ours)",
    "hybrid (ours)",
]
MAIN = ["fts5-unicode61", "fts5-trigram", "fts5-analysed", "tantivy (ours)", "vector"]


def fusion_name(cand: int, kw: float, rk: float) -> str:
    return f"hybrid ours c={cand} kw={kw:g} k={rk:g}"


def best_fusion(q: dict[str, Groups], metric: str) -> str:
    """Best grid point by `metric` (3 decimals), then the other metric, then fewer candidates."""
    other = "recall" if metric == "mrr" else "mrr"

    def key(f: tuple[int, float, float]) -> tuple[float, float, int]:
        g = q[fusion_name(*f)]["all"]
        return (round(g[metric], 3), round(g[other], 3), -f[0])

    return fusion_name(*max(FUSION_GRID, key=key))


def table(q: dict[str, Groups], setups: Sequence[str], groups: Sequence[str], metric: str) -> str:
    head = "| setup | " + " | ".join(groups) + " |"
    sep = "| --- |" + " ---: |" * len(groups)
    rows = [
        f"| {s} | "
        + " | ".join(f"{q[s][g][metric]:.3f}" if g in q[s] else "-" for g in groups)
        + " |"
        for s in setups
    ]
    return "\n".join([head, sep, *rows])


def report(q: dict[str, Groups] | None, sp: dict[str, Any] | None) -> str:
    out: list[str] = []
    if q is not None:
        best = best_fusion(q, "mrr")
        best_recall = best_fusion(q, "recall")
        default = fusion_name(*DEFAULT_FUSION)
        fused = list(dict.fromkeys([default, best, best_recall]))
        setups = [*MAIN, *fused, "hybrid fts5-unicode61", "hybrid fts5-trigram"]
        groups = ["all", *LANGS, *KINDS, "cjk-word-2char"]
        counts = " ".join(f"{g}={int(q['vector'][g]['n'])}" for g in groups)
        out += [f"Queries per group: {counts}", ""]
        out += ["### recall@10", "", table(q, setups, groups, "recall"), ""]
        out += ["### MRR@10", "", table(q, setups, groups, "mrr"), ""]
        lk = [
            f"{lang}:{kind}" for lang in LANGS for kind in KINDS if f"{lang}:{kind}" in q["vector"]
        ]
        out += ["### recall@10 by language x kind", "", table(q, MAIN, lk, "recall"), ""]
        out += ["### Fusion grid (ours: vector + tantivy, vector_weight 1)", ""]
        out += [
            "| candidates | keyword_weight | rrf_k | R@10 | MRR@10 | MRR en | MRR ru | MRR zh |"
        ]
        out += ["| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for f in FUSION_GRID:
            g = q[fusion_name(*f)]
            mark = " **best MRR**" if fusion_name(*f) == best else ""
            mark += " **best R@10**" if fusion_name(*f) == best_recall else ""
            mark += " (default)" if f == DEFAULT_FUSION else ""
            out.append(
                f"| {f[0]} | {f[1]:g} | {f[2]:g} | {g['all']['recall']:.3f} | "
                f"{g['all']['mrr']:.3f}{mark} | {g['en']['mrr']:.3f} | {g['ru']['mrr']:.3f} | "
                f"{g['zh']['mrr']:.3f} |"
            )
        out += ["", f"Best fusion by MRR@10: `{best}`; by recall@10: `{best_recall}`", ""]
    if sp is not None:
        engines = [e for e in SPEED_ENGINES if e in sp]
        nq = len(sp["queries"])
        out += [f"### Speed: {sp['n']} synthetic chunks, top-20, {nq} queries x {REPS} runs", ""]
        out += ["| engine | build s | p50 ms | p95 ms | mean ms | queries with 0 hits |"]
        out += ["| --- | ---: | ---: | ---: | ---: | ---: |"]
        for name in engines:
            r = sp[name]
            build = f"{r['build_s']:.1f}" if "build_s" in r else "-"
            empty = f"{r['empty_queries']}" if "empty_queries" in r else "-"
            out.append(
                f"| {name} | {build} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | "
                f"{r['mean_ms']:.2f} | {empty} |"
            )
        out += ["", "Median ms per query:", ""]
        out += ["| query | " + " | ".join(engines) + " |"]
        out += ["| --- |" + " ---: |" * len(engines)]
        for q in sp["queries"]:
            cells = " | ".join(f"{sp[e]['per_query_ms'][q]:.2f}" for e in engines)
            out.append(f"| {q} | {cells} |")
        out += [
            "",
            "FTS5 build = inserts + 'optimize' into an in-memory database (fts5-analysed "
            "includes running `analyze()` from Python). Klaw build = `add_chunks` in batches of "
            "10k into an on-disk store: SQLite rows + vectors (HNSW) + tantivy; `analyze()` "
            f"alone over all chunks took {sp['tantivy (ours)']['analyse_only_s']:.1f}s from "
            "Python. vector/hybrid (ours) use a precomputed query vector (candidates 20).",
            "",
        ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--json", type=Path, help="write all numbers (and rankings) here")
    ap.add_argument("--n", type=int, default=100_000, help="chunks for the speed test")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-quality", action="store_true")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    q: dict[str, Groups] | None = None
    ranked: dict[str, dict[str, list[str]]] | None = None
    if not args.skip_quality:
        notes, queries = load()
        q, ranked = quality(notes, queries)
    sp = None if args.skip_speed else speed(args.n)
    print()
    print(report(q, sp))
    print(f"total {time.perf_counter() - t0:.0f}s")
    if args.json:
        payload = {"quality": q, "speed": sp, "rankings": ranked}
        args.json.write_text(json.dumps(payload, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

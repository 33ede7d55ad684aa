"""Knowledge updates with retained facts, on the personal dev set's update questions.

Run: python benches/eval_facts.py [--top-k 10]

The personal workspace (tests/data/personal) has no `## Retain` sections, so the
facts are an *oracle* layer: for each `update` question, every relevant or stale
passage that lies in a daily log becomes a retain bullet in that log's Retain section,
`W(a=<question id>) @Owner: <the passage's line>` (the attribute the extraction prompt
asks the model to name). This measures what the index and supersession do with
correct facts, not what a model extracts. Metrics over the plain `Memory.search` (what
`memory_search` runs without a filter), the workspace as shipped against the same
workspace with the layer:

- newest first: the first hit holding a current passage ranks above every hit
  holding a stale one (and a current one is in the top k);
- hit@5: a current passage in the top 5;
- stale in top 5: questions with a stale passage in the top 5.

Everything is real: Klaw's home in a temp dir, the default embedding model, klaw.db.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SET = ROOT / "tests" / "data" / "personal"


def _load() -> list[dict[str, Any]]:
    lines = (SET / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    return [q for q in map(json.loads, lines) if q["kind"] == "update"]


def oracle_layer(ws: Path, queries: list[dict[str, Any]]) -> int:
    """Appends the oracle retain bullets; returns how many were written."""
    from klaw.memory.retain import append_retain, log_day

    bullets: dict[str, list[str]] = defaultdict(list)
    for q in queries:
        for item in [*q["relevant"], *q.get("stale", [])]:
            rel = item["file"]
            day = log_day(rel)
            if not rel.startswith("memory/") or day is None:
                continue
            text = (ws / rel).read_text(encoding="utf-8")
            line = next((ln for ln in text.splitlines() if item["contains"] in ln), None)
            if line is None:
                continue
            body = " ".join(line.strip().lstrip("-*+ ").split())
            bullets[day].append(f"W(a={q['id']}) @Owner: {body}")
    return sum(len(append_retain(ws, day, b)) for day, b in sorted(bullets.items()))


def score(
    mem: Any, queries: list[dict[str, Any]], k: int, ranks: dict[str, Any] | None = None
) -> dict[str, float]:
    out: dict[str, list[float]] = defaultdict(list)
    for q in queries:
        hits = mem.search(q["query"], top_k=k)
        new = [it["contains"] for it in q["relevant"]]
        old = [it["contains"] for it in q.get("stale", [])]
        first_new = next((i for i, h in enumerate(hits) if any(c in h.content for c in new)), None)
        first_old = next(
            (
                i
                for i, h in enumerate(hits)
                if any(c in h.content for c in old) and not any(c in h.content for c in new)
            ),
            None,
        )
        if ranks is not None:
            ranks[q["id"]] = (first_new, first_old)
        out["newest first"].append(
            float(first_new is not None and (first_old is None or first_new < first_old))
        )
        out["hit@5"].append(float(first_new is not None and first_new < 5))
        out["stale in top 5"].append(float(first_old is not None and first_old < 5))
    return {name: sum(v) / len(v) for name, v in out.items()}


def run(k: int, verbose: bool = False) -> list[tuple[str, dict[str, float], int]]:
    from klaw.config import load_engine_config
    from klaw.memory import Memory
    from klaw.paths import KlawPaths

    queries = _load()
    rows = []
    per: list[dict[str, Any]] = []
    for layer in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            ws = home / "workspace"
            shutil.copytree(SET / "workspace", ws)
            written = oracle_layer(ws, queries) if layer else 0
            paths = KlawPaths.from_env()
            paths = KlawPaths(
                config_dir=home / "config",
                data_dir=home / "data",
                state_dir=home / "state",
                cache_dir=paths.cache_dir,
                workspace=ws,
            )
            config = load_engine_config(home / "config" / "engine.yaml")
            with Memory.open(paths=paths, config=config) as mem:
                mem.index_workspace()
                facts = mem.store.facts()
                superseded = sum(f.superseded_by is not None for f in facts)
                name = (
                    f"oracle retain layer ({written} bullets, {superseded} superseded)"
                    if layer
                    else "workspace as shipped"
                )
                per.append({})
                rows.append((name, score(mem, queries, k, per[-1]), len(queries)))
    if verbose:  # (rank of the first current hit, of the first stale one) where they differ
        for qid, before in per[0].items():
            if per[1][qid] != before:
                print(f"{qid}: {before} -> {per[1][qid]}", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--verbose", action="store_true", help="the questions whose ranks moved")
    a = ap.parse_args(argv)
    rows = run(a.top_k, a.verbose)
    print("| setup | newest first | hit@5 | stale in top 5 | n |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, m, n in rows:
        print(
            f"| {name} | {m['newest first']:.3f} | {m['hit@5']:.3f} | "
            f"{m['stale in top 5']:.3f} | {n} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

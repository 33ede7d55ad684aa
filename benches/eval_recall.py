"""Auto-recall on the personal dev set: for each question sent as a user message, does
the text auto-recall injects hold the evidence, and how many tokens does it cost,
beside the top 5 of `memory_search` for the same text.

Run: python benches/eval_recall.py [--min-similarity 0.45,0.35] [--json out.json]

The set (tests/data/personal) has no `## Retain` sections and no bank, so it is read
as a workspace whose every daily-log bullet was retained: a `# Retain` heading is put
at the top of each log in a copy (its other headings kept as text), and the copy is
indexed by a real `Memory` with the shipped model. No bullet names an `@entity`, so
this measures tier 2 (similarity) alone; tier 1 is exact by construction and is
covered by the tests. Evidence: a query counts when the injected text (or one of the
five hits) contains one of its relevant passages from a daily log (MEMORY.md is no
log: queries whose evidence is only there are counted apart).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from klaw import _core
from klaw.config import EngineConfig
from klaw.config.engine import AutoRecallConfig
from klaw.memory.api import Memory, load_backend
from klaw.memory.recall import Recall
from klaw.paths import KlawPaths

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "personal"
_HEADING = re.compile(r"^(#{1,6})\s")
#: Messages about nothing in the workspace: an injection for one of them is noise.
UNRELATED = (
    "can you summarise this article for me please",
    "write a python function that sorts a list of tuples by the second item",
    "what's the capital of Australia?",
    "translate 'good morning, how are you' into Spanish",
    "tell me a joke about programmers",
    "how many grams of sugar are in a tablespoon?",
    "explain how a transformer neural network works",
    "draft a polite email declining a meeting invitation",
    "что такое квантовая запутанность простыми словами?",
    "帮我写一首关于春天的短诗",
)


def retained_copy(src: Path, dst: Path) -> None:
    """The workspace with every daily-log bullet under one `# Retain` heading."""
    shutil.copytree(src, dst)
    for log in sorted((dst / "memory").glob("*.md")):
        lines = log.read_text(encoding="utf-8").splitlines()
        lines = [_HEADING.sub(lambda m: "_" * len(m.group(1)) + " ", ln) for ln in lines]
        log.write_text("# Retain\n" + "\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-similarity", default="model,0.35,0.25", help="'model': its default")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--model", default=None, help="memory.embedding.model (default: shipped)")
    args = ap.parse_args(argv)
    queries = [json.loads(x) for x in (DATA / "queries.jsonl").read_text().splitlines() if x]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = KlawPaths(root / "c", root / "d", root / "s", root / "k", root / "ws")
        retained_copy(DATA / "workspace", paths.workspace)
        config = EngineConfig()
        if args.model:
            config.memory.embedding.model = args.model
        real = KlawPaths.from_env()  # the installed model and its embedding cache
        backend = load_backend(config, real)
        mem = Memory.open(paths=paths, config=config, backend=backend)
        try:
            mem.index_workspace()
            rows: list[dict[str, Any]] = []
            search_hits, search_tokens = [], []
            for q in queries:
                hits = mem.search(q["query"], top_k=5)
                text = "\n".join(h.content for h in hits)
                search_hits.append(_holds(q, text))
                search_tokens.append(_core.count_tokens_batch([text])[0])
            for raw in args.min_similarity.split(","):
                bar = None if raw == "model" else float(raw)
                recall = Recall(paths.workspace, AutoRecallConfig(min_similarity=bar), mem)
                recall.refresh()
                held, tokens, injected = [], [], 0
                for q in queries:
                    got = recall.for_messages([q["query"]])
                    held.append(_holds(q, got.text))
                    tokens.append(got.tokens)
                    injected += bool(got.text)
                row = _row(f"auto-recall, minSimilarity {raw}", queries, held, tokens, injected)
                row["unrelated_injected"] = sum(
                    bool(recall.for_messages([m]).text) for m in UNRELATED
                )
                rows.append(row)
            rows.append(
                _row("memory_search top 5", queries, search_hits, search_tokens, len(queries))
            )
        finally:
            mem.close()
    head = ("setup", "evidence (log)", "evidence (all)", "injected", "tokens p50", "mean")
    print(
        f"{head[0]:34} {head[1]:>15} {head[2]:>15} {head[3]:>9} {head[4]:>11} {head[5]:>7}", end=""
    )
    print(f" unrelated injected (of {len(UNRELATED)})")
    for r in rows:
        print(
            f"{r['setup']:34} {r['evidence_log']:>15.3f} {r['evidence_all']:>15.3f} "
            f"{r['injected']:>9} {r['tokens_p50']:>11.0f} {r['tokens_mean']:>7.0f} "
            f"{r.get('unrelated_injected', '-')!s:>5}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


def _holds(q: dict[str, Any], text: str) -> bool | None:
    """True/False for a query with log evidence; None when its evidence is only in
    MEMORY.md (no log, no retained fact)."""
    logs = [r for r in q["relevant"] if r["file"].startswith("memory/") and r.get("contains")]
    if not logs:
        return None
    flat = " ".join(text.split())
    return any(" ".join(r["contains"].split()) in flat for r in logs)


def _row(
    name: str, queries: list[Any], held: list[bool | None], tokens: list[int], injected: int
) -> dict[str, Any]:
    scored = [h for h in held if h is not None]
    return {
        "setup": name,
        "queries": len(queries),
        "with_log_evidence": len(scored),
        "evidence_log": sum(scored) / max(1, len(scored)),
        "evidence_all": sum(bool(h) for h in held) / len(held),
        "injected": injected,
        "tokens_p50": statistics.median(tokens),
        "tokens_mean": statistics.mean(tokens),
    }


if __name__ == "__main__":
    sys.exit(main())

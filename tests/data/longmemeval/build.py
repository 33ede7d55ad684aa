#!/usr/bin/env python3
"""Rebuild the LongMemEval_S dev subset described in README.md from a git snapshot.

Stdlib only. Usage:

    python3 tests/data/longmemeval/build.py GIT_DIR [OUT_DIR]

GIT_DIR is a clone (or bare mirror) of hussainzs/Memoria at the commit README.md names;
OUT_DIR defaults to ~/.cache/klaw-eval/longmemeval. The data stays out of the repo (the
project's tool rules keep fetched data out of the clone); this script only records how
the files were made, so `make eval` can be fed on a fresh machine.
"""

import gzip
import json
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

COMMIT = "959167b875ddc992661da1cf1a3263821e6831ed"
PREFIX = "evaluations/data/lme_jsons/"
# In README.md's order (type strata, then the abstention questions).
IDS = """
01493427 0977f2af 0e4e4c46 10e09553 1cea1afa 50635ada 618f13b2 72e3ee87 a1eacc2a c7dc5443
dfde3500 e66b632c 1192316e 1a8a66a6 1c549ce4 3fdac837 87f22b4a cc06de0d d682f1a2 dd2973ad
gpt4_5501fe77 0bc8ad93 c9f37c46 cc6d1ec1 gpt4_1d80365e gpt4_65aabe59 gpt4_68e94288
gpt4_6dc9b45b gpt4_7ddcf75f gpt4_e414231f 15745da0 3b6f954b 545bd2b5 5d3d2817 8e9d538c
f8c5f88b 1568498a 1d4da289 6222b6eb 89527b6b dc439ea3 07b6f563 195a1a1b 75832dbd 8a2466db
d6233ab6 f685340e_abs e5ba910e_abs gpt4_c27434e8_abs 15745da0_abs
""".split()


def git(gitdir: str, *args: str) -> str:
    out = subprocess.run(["git", "--git-dir", gitdir, *args], capture_output=True, check=True)
    return out.stdout.decode("utf-8")


def iso(value: str) -> str:
    """`2023/11/30 (Thu) 18:35` -> `2023-11-30T18:35:00`."""
    m = re.fullmatch(r"(\d{4})/(\d{2})/(\d{2}) \(\w+\) (\d{2}):(\d{2})", value.strip())
    if not m:
        raise ValueError(f"unexpected date {value!r}")
    y, mo, d, h, mi = (int(g) for g in m.groups())
    return datetime(y, mo, d, h, mi).isoformat()


def listish(value: object) -> list:
    """Some fields are stored as Python-literal strings in this copy."""
    if isinstance(value, str):
        import ast

        return list(ast.literal_eval(value))
    return list(value)  # type: ignore[call-overload]


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    gitdir = sys.argv[1]
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path.home() / ".cache/klaw-eval/longmemeval"
    names = git(gitdir, "ls-tree", "-r", "--name-only", COMMIT, PREFIX).split()
    by_id: dict[str, str] = {}
    for name in names:
        n, _, qid = Path(name).stem.partition("_")
        if 38 <= int(n) <= 58:
            by_id[qid] = name
    sessions: dict[str, dict] = {}
    questions = []
    for qid in IDS:
        path = by_id[qid]
        blob = git(gitdir, "rev-parse", f"{COMMIT}:{path}").strip()
        src = json.loads(git(gitdir, "show", f"{COMMIT}:{path}"))
        hay = [str(s) for s in listish(src["haystack_session_ids"])]
        dates = [iso(d) for d in listish(src["haystack_dates"])]
        bodies = listish(src["haystack_sessions"])
        evidence = []
        relevant = []
        for sid, when, turns in zip(hay, dates, bodies, strict=True):
            clean = [
                {
                    "role": t["role"],
                    "content": t["content"],
                    "has_answer": bool(t.get("has_answer")),
                }
                for t in turns
            ]
            sessions.setdefault(sid, {"id": sid, "date": when, "turns": clean})
            for i, t in enumerate(clean):
                if t["has_answer"]:
                    evidence.append([sid, i])
            user_evidence = any(t["has_answer"] and t["role"] == "user" for t in clean)
            if sid.startswith("answer_") and user_evidence and sid not in relevant:
                relevant.append(sid)
        answers = [str(s) for s in listish(src["answer_session_ids"])]
        abstention = qid.endswith("_abs")
        scored = not abstention and bool(relevant)
        latest = max((i for i, s in enumerate(hay) if s in answers), default=None)
        questions.append(
            {
                "id": qid,
                "type": src["question_type"],
                "abstention": abstention,
                "question": src["question"],
                "question_date": iso(src["question_date"]),
                "answer": str(src["answer"]),
                "answer_session_ids": answers,
                "haystack": hay,
                "haystack_dates": dates,
                "evidence_turns": evidence,
                "paper_scored": scored,
                "paper_relevant_session_ids": relevant if scored else [],
                "latest_answer_session_id": hay[latest] if latest is not None else None,
                "source_path": path,
                "source_blob": blob,
            }
        )
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(out / "sessions.jsonl.gz", "wt", encoding="utf-8") as f:
        for s in sessions.values():
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    with open(out / "questions.jsonl", "w", encoding="utf-8") as f:
        for q in questions:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    print(f"{len(questions)} questions, {len(sessions)} sessions -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

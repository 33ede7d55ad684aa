#!/usr/bin/env python3
"""Validate the LongMemEval_S retrieval dev subset (questions.jsonl + sessions.jsonl.gz).

Stdlib only. Usage:

    python3 tests/data/longmemeval/validate.py [DATA_DIR] [--verbose]

DATA_DIR defaults to the directory of this script. Prints a summary and exits
with status 1 if any problem is found (warnings alone do not fail).

Checks:
  * every line is a JSON object with exactly the expected fields and types;
  * session ids and question ids are unique; roles are "user"/"assistant";
  * every date parses as an ISO date-time (datetime.fromisoformat);
  * every haystack id exists in sessions, haystack and haystack_dates have the
    same length, and no stored session is unused;
  * answer_session_ids, paper_relevant_session_ids and latest_answer_session_id
    lie inside the haystack; paper_relevant_session_ids is what the official
    run_retrieval.py treats as relevant (an "answer" session with at least one
    user turn whose has_answer is true), and is empty when paper_scored is false;
  * evidence_turns point at existing turns with has_answer true, and list every
    such turn of the haystack exactly once;
  * abstention == id ends with "_abs"; abstention questions are not paper_scored;
  * question_date is not before the haystack's last calendar day;
  * each session's "date" equals its date in at least one haystack (a session
    shared by several questions may carry a different date in each; the
    per-question haystack_dates are authoritative);
  * minimum counts: all six question types present, knowledge-update >= 10.

Warnings (do not fail): the same session id twice in one haystack, clock times
that go backwards within a day, sessions timestamped later on the question's
own day than the question, sessions whose date differs between questions.
"""

import gzip
import itertools
import json
import os
import sys
from collections import Counter, defaultdict
from datetime import datetime

TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "knowledge-update",
    "temporal-reasoning",
)
MIN_KNOWLEDGE_UPDATE = 10

SESSION_FIELDS = {"id": str, "date": str, "turns": list}
TURN_FIELDS = {"role": str, "content": str, "has_answer": bool}
QUESTION_FIELDS = {
    "id": str,
    "type": str,
    "abstention": bool,
    "question": str,
    "question_date": str,
    "answer": str,
    "answer_session_ids": list,
    "haystack": list,
    "haystack_dates": list,
    "evidence_turns": list,
    "paper_scored": bool,
    "paper_relevant_session_ids": list,
    "latest_answer_session_id": (str, type(None)),
    "source_path": str,
    "source_blob": str,
}


def load_jsonl(path, errors):
    opener = gzip.open if path.endswith(".gz") else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                errors.append(f"{os.path.basename(path)}:{n}: bad JSON ({e})")
    return rows


def check_fields(obj, spec, where, errors):
    if not isinstance(obj, dict):
        errors.append(f"{where}: not an object")
        return False
    if set(obj) != set(spec):
        errors.append(f"{where}: fields {sorted(obj)} != {sorted(spec)}")
        return False
    ok = True
    for k, t in spec.items():
        if not isinstance(obj[k], t):
            errors.append(f"{where}: field {k!r} has type {type(obj[k]).__name__}")
            ok = False
    return ok


def parse_dt(s, where, errors):
    try:
        return datetime.fromisoformat(s)
    except (TypeError, ValueError):
        errors.append(f"{where}: date {s!r} is not ISO")
        return None


def main(argv):
    verbose = "--verbose" in argv
    args = [a for a in argv[1:] if not a.startswith("--")]
    data_dir = args[0] if args else os.path.dirname(os.path.abspath(__file__))
    errors, warnings = [], []

    spath = os.path.join(data_dir, "sessions.jsonl.gz")
    if not os.path.exists(spath):
        spath = os.path.join(data_dir, "sessions.jsonl")
    qpath = os.path.join(data_dir, "questions.jsonl")
    sessions_rows = load_jsonl(spath, errors)
    questions = load_jsonl(qpath, errors)

    # ---- sessions
    sessions = {}
    turn_count = 0
    for i, s in enumerate(sessions_rows):
        where = f"session #{i + 1}"
        if not check_fields(s, SESSION_FIELDS, where, errors):
            continue
        where = f"session {s['id']}"
        if s["id"] in sessions:
            errors.append(f"{where}: duplicate id")
        sessions[s["id"]] = s
        parse_dt(s["date"], where, errors)
        if not s["turns"]:
            errors.append(f"{where}: no turns")
        for j, t in enumerate(s["turns"]):
            turn_count += 1
            if check_fields(t, TURN_FIELDS, f"{where} turn {j}", errors) and t["role"] not in (
                "user",
                "assistant",
            ):
                errors.append(f"{where} turn {j}: role {t['role']!r}")

    # ---- questions
    seen_q = set()
    used = set()
    dates_seen = defaultdict(set)
    by_type = Counter()
    scored_by_type = Counter()
    hay_len = []
    for i, q in enumerate(questions):
        where = f"question #{i + 1}"
        if not check_fields(q, QUESTION_FIELDS, where, errors):
            continue
        qid = q["id"]
        where = f"question {qid}"
        if qid in seen_q:
            errors.append(f"{where}: duplicate id")
        seen_q.add(qid)
        if q["type"] not in TYPES:
            errors.append(f"{where}: unknown type {q['type']!r}")
        if q["abstention"] != qid.endswith("_abs"):
            errors.append(f"{where}: abstention flag disagrees with the id")
        if q["abstention"] and q["paper_scored"]:
            errors.append(f"{where}: abstention question marked paper_scored")
        by_type[q["type"] + ("_abs" if q["abstention"] else "")] += 1
        if q["paper_scored"]:
            scored_by_type[q["type"]] += 1
        for k in ("answer_session_ids", "haystack", "haystack_dates", "paper_relevant_session_ids"):
            if not all(isinstance(x, str) for x in q[k]):
                errors.append(f"{where}: {k} must be a list of strings")

        hay = q["haystack"]
        hay_len.append(len(hay))
        hayset = set(hay)
        if len(hay) != len(q["haystack_dates"]):
            errors.append(f"{where}: haystack and haystack_dates differ in length")
        dup = [sid for sid, c in Counter(hay).items() if c > 1]
        if dup:
            warnings.append(
                f"{where}: session(s) {dup} appear more than once in the haystack (as in the source)"
            )
        missing = [sid for sid in hay if sid not in sessions]
        if missing:
            errors.append(
                f"{where}: {len(missing)} haystack id(s) not in sessions, e.g. {missing[:3]}"
            )
        used |= hayset

        qdate = parse_dt(q["question_date"], where, errors)
        hdates = [parse_dt(d, f"{where} haystack_dates", errors) for d in q["haystack_dates"]]
        for sid, ds in zip(hay, q["haystack_dates"], strict=False):
            dates_seen[sid].add(ds)
        if qdate and all(hdates) and hdates:
            if qdate.date() < max(hdates).date():
                errors.append(f"{where}: question_date before the last haystack day")
            later = sum(1 for d in hdates if d > qdate)
            if later:
                warnings.append(
                    f"{where}: {later} session(s) timestamped later on the question's day than the question"
                )
            back = sum(1 for a, b in itertools.pairwise(hdates) if a > b)
            if any(a.date() > b.date() for a, b in itertools.pairwise(hdates)):
                errors.append(f"{where}: haystack not in calendar-day order")
            elif back and verbose:
                warnings.append(f"{where}: clock time goes backwards {back}x within a day")

        for k in ("answer_session_ids", "paper_relevant_session_ids"):
            out = [sid for sid in q[k] if sid not in hayset]
            if out:
                errors.append(f"{where}: {k} not in haystack: {out}")
        if not q["abstention"] and not q["answer_session_ids"]:
            errors.append(f"{where}: no answer sessions")
        las = q["latest_answer_session_id"]
        if las is not None and las not in q["answer_session_ids"]:
            errors.append(f"{where}: latest_answer_session_id not an answer session")

        # evidence turns
        ev = q["evidence_turns"]
        ev_keys = set()
        for e in ev:
            if not (
                isinstance(e, list)
                and len(e) == 2
                and isinstance(e[0], str)
                and isinstance(e[1], int)
            ):
                errors.append(f"{where}: bad evidence_turns entry {e!r}")
                continue
            sid, ti = e
            if (sid, ti) in ev_keys:
                errors.append(f"{where}: evidence turn {e} listed twice")
            ev_keys.add((sid, ti))
            if sid not in hayset:
                errors.append(f"{where}: evidence session {sid} not in haystack")
            elif sid in sessions:
                turns = sessions[sid]["turns"]
                if not 0 <= ti < len(turns):
                    errors.append(f"{where}: evidence turn {e} out of range")
                elif not turns[ti]["has_answer"]:
                    errors.append(f"{where}: evidence turn {e} has has_answer false")
        expected = {
            (sid, j)
            for sid in hayset
            if sid in sessions
            for j, t in enumerate(sessions[sid]["turns"])
            if t["has_answer"]
        }
        if expected != ev_keys:
            errors.append(
                f"{where}: evidence_turns differ from the has_answer turns of the haystack"
            )

        # the official relevance labels (src/retrieval/run_retrieval.py)
        user_ev = any(
            sessions[sid]["turns"][j]["role"] == "user" for sid, j in ev_keys if sid in sessions
        )
        if q["paper_scored"] != ((not q["abstention"]) and user_ev):
            errors.append(f"{where}: paper_scored should be {(not q['abstention']) and user_ev}")
        if q["paper_scored"]:
            rel = {
                sid
                for sid in hayset
                if sid in sessions
                and "answer" in sid
                and any(t["has_answer"] for t in sessions[sid]["turns"] if t["role"] == "user")
            }
            if rel != set(q["paper_relevant_session_ids"]):
                errors.append(f"{where}: paper_relevant_session_ids should be {sorted(rel)}")
        elif q["paper_relevant_session_ids"]:
            errors.append(
                f"{where}: paper_relevant_session_ids must be empty when not paper_scored"
            )

    unused = set(sessions) - used
    if unused:
        errors.append(
            f"{len(unused)} stored session(s) used by no question, e.g. {sorted(unused)[:3]}"
        )
    not_matching = [
        sid for sid, s in sessions.items() if sid in dates_seen and s["date"] not in dates_seen[sid]
    ]
    if not_matching:
        errors.append(
            f"{len(not_matching)} session date(s) match none of their haystack dates, e.g. {not_matching[:3]}"
        )
    several = sum(1 for sid in sessions if len(dates_seen.get(sid, ())) > 1)
    if several:
        warnings.append(
            f"{several} session(s) carry different dates in different haystack positions; "
            "use questions[].haystack_dates"
        )

    for t in TYPES:
        if by_type[t] == 0:
            errors.append(f"no question of type {t}")
    if by_type["knowledge-update"] < MIN_KNOWLEDGE_UPDATE:
        errors.append(
            f"only {by_type['knowledge-update']} knowledge-update questions (< {MIN_KNOWLEDGE_UPDATE})"
        )

    # ---- summary
    refs = sum(hay_len)
    print(f"sessions: {len(sessions)} unique ({turn_count} turns), {refs} haystack references")
    if hay_len:
        print(
            f"haystack length: min {min(hay_len)}, max {max(hay_len)}, mean {refs / len(hay_len):.1f}"
        )
    print(
        f"questions: {len(questions)} ({sum(scored_by_type.values())} scored by the paper's recipe)"
    )
    for t in TYPES:
        print(
            f"  {t:27s} {by_type[t]:3d}  abs {by_type[t + '_abs']:2d}  paper_scored {scored_by_type[t]:3d}"
        )
    shown = (
        warnings
        if verbose
        else [w for w in warnings if "appear more than once" in w or "different dates" in w]
    )
    for w in shown:
        print("WARNING:", w)
    if not verbose and len(warnings) > len(shown):
        print(f"({len(warnings) - len(shown)} more warnings; --verbose to show)")
    for e in errors:
        print("ERROR:", e)
    print("OK" if not errors else f"FAILED: {len(errors)} error(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

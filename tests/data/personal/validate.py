#!/usr/bin/env python3
"""Validate the personal-notes dev set (workspace/ + queries.jsonl).

Stdlib only. Usage:

    python3 tests/data/personal/validate.py [DATA_DIR] [--verbose]

DATA_DIR defaults to the directory of this script. Prints a summary and exits
with status 1 if any error is found (warnings alone do not fail).

Checks:
  * workspace: MEMORY.md exists; every memory/*.md is named YYYY-MM-DD.md with
    a real date between FIRST_DAY and LAST_DAY, starts with "# YYYY-MM-DD"
    (same date) and has 5-40 lines;
  * queries.jsonl: every line is a JSON object with exactly the expected
    fields and types; ids are unique and well-formed (p-NNN); lang and kind
    are valid; asked_at parses as ISO 8601 with a UTC offset;
  * every relevant/stale entry names an existing workspace file, and its
    "contains" string is short, single-line and occurs in that file exactly
    as written (a warning if it occurs more than once);
  * no daily log referenced by a query is dated after the query's asked_at;
  * the query text is written in the script of its lang;
  * per kind:
      - update:   has a non-empty "stale" list (no other kind may have one);
                  every relevant daily log is newer than every stale daily log;
                  no relevant passage equals a stale one;
      - temporal: the query contains a known relative time phrase (PHRASES
                  below); every relevant passage is a daily log dated inside
                  the range the phrase gives relative to asked_at;
      - crosslingual: every relevant passage is in a language other than the
                  query's (language of a passage = dominant script of the line
                  that contains it);
      - fact, event: every relevant passage is in the query's language.
"""

import datetime as dt
import json
import os
import re
import sys
from collections import Counter

LANGS = ("en", "ru", "zh")
KINDS = ("fact", "event", "update", "crosslingual", "temporal")
FIRST_DAY = dt.date(2025, 9, 1)
LAST_DAY = dt.date(2026, 11, 20)
QUERY_ID_RE = re.compile(r"^p-\d{3,}$")
LOG_RE = re.compile(r"^memory/(\d{4}-\d{2}-\d{2})\.md$")
MAX_CONTAINS = 100
REQUIRED = {"id": str, "lang": str, "query": str, "relevant": list, "kind": str, "asked_at": str}
OPTIONAL = {"stale": list}

CJK_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
CYR_RE = re.compile(r"[А-Яа-яЁё]")
LAT_RE = re.compile(r"[A-Za-z]")


def script_lang(text):
    """Dominant script of a piece of text: zh, ru or en (None if no letters).

    A CJK character carries about as much as a two-letter word, so CJK counts
    double, which keeps an English app name inside a Chinese line from
    flipping it to English.
    """
    scores = {
        "zh": 2 * len(CJK_RE.findall(text)),
        "ru": len(CYR_RE.findall(text)),
        "en": len(LAT_RE.findall(text)),
    }
    best = max(scores, key=scores.get)
    return best if scores[best] else None


# --- relative time phrases used by temporal queries ------------------------


def _month_range(year, month):
    first = dt.date(year, month, 1)
    nxt = dt.date(year + (month == 12), month % 12 + 1, 1)
    return first, nxt - dt.timedelta(days=1)


def _week_start(day, weeks_back):
    monday = day - dt.timedelta(days=day.weekday())
    start = monday - dt.timedelta(weeks=weeks_back)
    return start, start + dt.timedelta(days=6)


def _prev_month(day):
    y, m = (day.year, day.month - 1) if day.month > 1 else (day.year - 1, 12)
    return _month_range(y, m)


def _season(day, season, which):
    """which='last': the most recent completed season; 'this': of this year."""
    months = {"spring": (3, 5), "summer": (6, 8), "autumn": (9, 11)}
    if season == "winter":
        # Winter before `day`: Dec of previous year .. end of Feb.
        y = day.year if day.month >= 3 else day.year - 1
        return dt.date(y - 1, 12, 1), _month_range(y, 2)[1]
    m1, m2 = months[season]
    y = day.year
    if which == "last" and (day.month <= m2):
        y -= 1
    return dt.date(y, m1, 1), _month_range(y, m2)[1]


PHRASES = [
    # (regex on the query, function(asked_date) -> (first_day, last_day))
    (r"на позапрошлой неделе|позапрошл\w* недел", lambda d: _week_start(d, 2)),
    (r"на прошлой неделе|last week|上周", lambda d: _week_start(d, 1)),
    (r"в прошлом месяце|last month|上个月", _prev_month),
    (r"this month|в этом месяце|这个月", lambda d: (d.replace(day=1), d)),
    (r"last spring|прошлой весной", lambda d: _season(d, "spring", "last")),
    (r"this spring|этой весной|今年春天", lambda d: _season(d, "spring", "this")),
    (r"last summer|прошлым летом", lambda d: _season(d, "summer", "last")),
    (r"this summer|этим летом|今年夏天", lambda d: _season(d, "summer", "this")),
    (r"last winter|прошлой зимой|去年冬天", lambda d: _season(d, "winter", "last")),
    (
        r"去年秋天|прошлой осенью|last autumn|last fall",
        lambda d: _season(d.replace(year=d.year - 1), "autumn", "this"),
    ),
    (r"в начале года|at the start of the year|年初", lambda d: _month_range(d.year, 1)),
    (
        r"两个月前|two months ago|два месяца назад",
        lambda d: (d - dt.timedelta(days=75), d - dt.timedelta(days=45)),
    ),
    (
        r"around this time last year|год назад|去年这个时候",
        lambda d: (
            d.replace(year=d.year - 1) - dt.timedelta(days=30),
            d.replace(year=d.year - 1) + dt.timedelta(days=30),
        ),
    ),
]


def resolve_phrase(query, asked):
    hits = [(pat, fn) for pat, fn in PHRASES if re.search(pat, query, re.I)]
    if not hits:
        return None, None
    pat, fn = hits[0]
    return pat, fn(asked)


class Report:
    def __init__(self):
        self.errors = []
        self.warnings = []

    def err(self, msg):
        self.errors.append(msg)

    def warn(self, msg):
        self.warnings.append(msg)


def load_workspace(ws, rep):
    files = {}
    mem = os.path.join(ws, "MEMORY.md")
    if not os.path.isfile(mem):
        rep.err("workspace/MEMORY.md is missing")
    else:
        with open(mem, encoding="utf-8") as f:
            files["MEMORY.md"] = f.read()
    mdir = os.path.join(ws, "memory")
    for name in sorted(os.listdir(mdir)) if os.path.isdir(mdir) else []:
        rel = f"memory/{name}"
        m = LOG_RE.match(rel)
        if not m:
            rep.err(f"{rel}: not named YYYY-MM-DD.md")
            continue
        try:
            day = dt.date.fromisoformat(m.group(1))
        except ValueError:
            rep.err(f"{rel}: not a real date")
            continue
        if not FIRST_DAY <= day <= LAST_DAY:
            rep.err(f"{rel}: date outside {FIRST_DAY}..{LAST_DAY}")
        with open(os.path.join(mdir, name), encoding="utf-8") as f:
            text = f.read()
        lines = text.splitlines()
        if not lines or lines[0].strip() != f"# {m.group(1)}":
            rep.err(f"{rel}: first line should be '# {m.group(1)}'")
        if not 5 <= len(lines) <= 40:
            rep.err(f"{rel}: {len(lines)} lines, expected 5-40")
        files[rel] = text
    return files


def file_date(rel):
    m = LOG_RE.match(rel)
    return dt.date.fromisoformat(m.group(1)) if m else None


def passage_lang(text, needle):
    """Language of the line(s) holding the first occurrence of needle."""
    i = text.find(needle)
    start = text.rfind("\n", 0, i) + 1
    end = text.find("\n", i + len(needle))
    return script_lang(text[start : end if end != -1 else len(text)])


def check_entries(q, field, files, rep, asked):
    out = []
    entries = q.get(field)
    if not isinstance(entries, list) or not entries:
        rep.err(f"{q['id']}: '{field}' must be a non-empty list")
        return out
    for e in entries:
        if (
            not isinstance(e, dict)
            or set(e) != {"file", "contains"}
            or not all(isinstance(e.get(k), str) and e.get(k) for k in ("file", "contains"))
        ):
            rep.err(f"{q['id']}: {field} entry must be {{file, contains}} strings: {e!r}")
            continue
        rel, needle = e["file"], e["contains"]
        if rel not in files:
            rep.err(f"{q['id']}: {field} file {rel} does not exist")
            continue
        if "\n" in needle or len(needle) > MAX_CONTAINS:
            rep.err(
                f"{q['id']}: {field} contains must be one line of <= {MAX_CONTAINS} chars: {needle!r}"
            )
        n = files[rel].count(needle)
        if n == 0:
            rep.err(f"{q['id']}: {field} substring not found in {rel}: {needle!r}")
            continue
        if n > 1:
            rep.warn(f"{q['id']}: {field} substring occurs {n}x in {rel}: {needle!r}")
        day = file_date(rel)
        if day and asked and day > asked.date():
            rep.err(f"{q['id']}: {rel} is dated after asked_at")
        out.append((rel, needle, day, passage_lang(files[rel], needle)))
    return out


def main(argv):
    verbose = "--verbose" in argv
    args = [a for a in argv if not a.startswith("--")]
    base = args[0] if args else os.path.dirname(os.path.abspath(__file__))
    rep = Report()
    files = load_workspace(os.path.join(base, "workspace"), rep)

    queries = []
    with open(os.path.join(base, "queries.jsonl"), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                q = json.loads(line)
            except json.JSONDecodeError as e:
                rep.err(f"queries.jsonl:{n}: bad JSON ({e})")
                continue
            if not isinstance(q, dict):
                rep.err(f"queries.jsonl:{n}: not an object")
                continue
            queries.append(q)

    seen = set()
    by_kind_lang = Counter()
    cross_any = Counter()
    used_files = set()
    for q in queries:
        qid = q.get("id", "?")
        bad = False
        for k, t in REQUIRED.items():
            if not isinstance(q.get(k), t):
                rep.err(f"{qid}: field {k!r} missing or not {t.__name__}")
                bad = True
        extra = set(q) - set(REQUIRED) - set(OPTIONAL)
        if extra:
            rep.err(f"{qid}: unexpected fields {sorted(extra)}")
        if bad:
            continue
        if not QUERY_ID_RE.match(qid):
            rep.err(f"{qid}: id should look like p-001")
        if qid in seen:
            rep.err(f"{qid}: duplicate id")
        seen.add(qid)
        lang, kind, text = q["lang"], q["kind"], q["query"]
        if lang not in LANGS:
            rep.err(f"{qid}: lang {lang!r} not in {LANGS}")
        if kind not in KINDS:
            rep.err(f"{qid}: kind {kind!r} not in {KINDS}")
        if not text.strip():
            rep.err(f"{qid}: empty query")
        if script_lang(text) != lang:
            rep.err(f"{qid}: query text looks like {script_lang(text)}, lang says {lang}")
        if lang == "zh" and re.search(f"{CJK_RE.pattern}\\s+{CJK_RE.pattern}", text):
            rep.err(f"{qid}: spaces between Chinese characters")
        try:
            asked = dt.datetime.fromisoformat(q["asked_at"])
            if asked.utcoffset() is None:
                rep.err(f"{qid}: asked_at has no UTC offset")
        except ValueError:
            rep.err(f"{qid}: asked_at does not parse: {q['asked_at']!r}")
            asked = None
        by_kind_lang[(kind, lang)] += 1

        rel = check_entries(q, "relevant", files, rep, asked)
        used_files.update(r[0] for r in rel)
        if "stale" in q:
            if kind != "update":
                rep.err(f"{qid}: only update queries may have 'stale'")
            stale = check_entries(q, "stale", files, rep, asked)
            used_files.update(s[0] for s in stale)
        else:
            stale = []
            if kind == "update":
                rep.err(f"{qid}: update query without 'stale'")

        plangs = {r[3] for r in rel}
        if any(p != lang for p in plangs):
            cross_any[kind] += 1

        if kind == "update" and stale:
            rel_days = [r[2] for r in rel if r[2]]
            stale_days = [s[2] for s in stale if s[2]]
            if rel_days and stale_days and min(rel_days) <= max(stale_days):
                rep.err(
                    f"{qid}: a relevant daily log ({min(rel_days)}) is not newer "
                    f"than a stale one ({max(stale_days)})"
                )
            if {(r[0], r[1]) for r in rel} & {(s[0], s[1]) for s in stale}:
                rep.err(f"{qid}: same passage listed as relevant and stale")
        elif kind == "temporal" and asked:
            pat, rng = resolve_phrase(text, asked.date())
            if rng is None:
                rep.err(f"{qid}: temporal query without a known time phrase (see PHRASES)")
            else:
                for r in rel:
                    if r[2] is None:
                        rep.err(
                            f"{qid}: temporal relevant passage must be in a daily log, not {r[0]}"
                        )
                    elif not rng[0] <= r[2] <= rng[1]:
                        rep.err(f"{qid}: {r[0]} outside {rng[0]}..{rng[1]} ('{pat}')")
                if verbose:
                    print(f"  {qid}: '{pat}' -> {rng[0]}..{rng[1]}")
        elif kind == "crosslingual":
            if lang in plangs:
                rep.err(f"{qid}: crosslingual but a relevant passage is in {lang}")
        elif kind in ("fact", "event"):
            if plangs != {lang}:
                rep.err(f"{qid}: {kind} query in {lang} but passages are in {sorted(plangs)}")

    # ---- summary ----
    logs = [k for k in files if k.startswith("memory/")]
    n_lines = {k: len(v.splitlines()) for k, v in files.items()}
    print(
        f"workspace: MEMORY.md {n_lines.get('MEMORY.md', 0)} lines, {len(logs)} daily logs "
        f"({min(logs)[7:17] if logs else '-'} .. {max(logs)[7:17] if logs else '-'}), "
        f"{sum(n_lines[k] for k in logs)} lines"
    )
    print(f"queries: {len(queries)}")
    header = "kind".ljust(13) + "".join(l.rjust(5) for l in LANGS) + "total".rjust(7)
    print(header)
    for kind in KINDS:
        row = [by_kind_lang[(kind, l)] for l in LANGS]
        print(kind.ljust(13) + "".join(str(x).rjust(5) for x in row) + str(sum(row)).rjust(7))
    tot = [sum(by_kind_lang[(k, l)] for k in KINDS) for l in LANGS]
    print("total".ljust(13) + "".join(str(x).rjust(5) for x in tot) + str(sum(tot)).rjust(7))
    print(
        "queries whose relevant passages are (partly) in another language: "
        + ", ".join(f"{k} {cross_any[k]}" for k in KINDS if cross_any[k])
    )
    unused = sorted(set(files) - used_files)
    if verbose and unused:
        print(f"files not referenced by any query: {', '.join(unused)}")
    for w in rep.warnings if verbose else []:
        print("WARNING:", w)
    for e in rep.errors:
        print("ERROR:", e)
    print(f"{len(rep.errors)} error(s), {len(rep.warnings)} warning(s)")
    return 1 if rep.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Validate the multilingual retrieval test set (notes.jsonl + queries.jsonl).

Stdlib only. Usage:

    python3 tests/data/multilingual/validate.py [DATA_DIR] [--verbose]

DATA_DIR defaults to the directory of this script. Prints a summary and exits
with status 1 if any problem is found (warnings alone do not fail).

Checks:
  * every line is a JSON object with exactly the expected fields and types;
  * ids are unique, well-formed, and note ids are prefixed by their language;
  * every "relevant" id exists, is not repeated, and (except for "exact"
    queries) is in the query's language;
  * minimum counts per language and per kind (see MIN_* below);
  * Chinese notes are unsegmented (no whitespace between CJK characters);
  * kind-specific rules:
      - cjk-word:   2-4 CJK characters, occurs verbatim in every relevant note,
                    and the relevant list is exactly the set of zh notes that
                    contain it;
      - exact:      occurs (case-insensitively) in every relevant note, and the
                    relevant list is exactly the set of notes containing it;
      - inflection: ru/en only; at least half of the query's content words
                    are absent verbatim from the relevant notes, and at least
                    one absent word matches a note word by a shared stem
                    (common prefix), i.e. it appears there in another form;
      - natural:    5-12 words (en/ru) or 6-30 characters (zh);
      - semantic:   at most half of the content words / character bigrams
                    occur verbatim in the relevant notes;
  * every non-exact query has at least one distractor: a note in the same
    language that is NOT relevant but shares a query word (or stem, or a CJK
    character bigram / character for cjk-word queries).
"""

import json
import math
import os
import re
import sys
from collections import Counter, defaultdict

LANGS = ("en", "ru", "zh")
KINDS = ("inflection", "cjk-word", "natural", "exact", "semantic")

MIN_NOTES = 300
MIN_NOTES_PER_LANG_FRACTION = 0.25  # "roughly 1/3 per language"
MIN_QUERIES = 120
MIN_QUERIES_PER_LANG = 40
MIN_INFLECTION_RU = 20
MIN_INFLECTION_EN = 10
MIN_CJK_WORD = 20
MIN_CJK_WORD_TWO_CHAR = 8
MIN_NATURAL_PER_LANG = 15
MIN_EXACT = 10
MIN_SEMANTIC = 10

NOTE_ID_RE = re.compile(r"^(en|ru|zh)-\d{3,}$")
QUERY_ID_RE = re.compile(r"^q-\d{3,}$")
CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
CJK_CHAR_RE = re.compile(f"[{CJK}]")
CJK_ONLY_RE = re.compile(f"^[{CJK}]+$")
CJK_GAP_RE = re.compile(f"[{CJK}]\\s+[{CJK}]")
CYRILLIC_RE = re.compile(r"[\u0400-\u04ff]")
WORD_RE = re.compile(r"\w+", re.UNICODE)

STOP = {
    "en": set(
        """a an the of for to in on at by with from into about and or but not no
        is are was were be been am do does did i me my we our us you your he she her his
        it its they them their this that these those what what's which who whom when where
        why how s t can should would will per each next last than then there here""".split()
    ),
    "ru": set(
        """а и в во на с со к ко о об от до за для из у по не ни но же ли бы что
        как где когда кто какой какая какое какие какого каком мой моя моё мое мои моей моего
        меня мне мной я ты он она оно мы вы они его её ее их нас нам нами у это этот эта эти
        там тут все всё весь был была было были есть сколько во""".split()
    ),
}
# Very frequent Chinese characters that should not count as shared evidence.
ZH_STOP_CHARS = set("的了是我在有和就不也都要一个这那你他她们上下吗呢吧把被给到去来说么什")


class Report:
    def __init__(self):
        self.errors = []
        self.warnings = []

    def error(self, msg):
        self.errors.append(msg)

    def warn(self, msg):
        self.warnings.append(msg)


def norm(text):
    return text.lower().replace("ё", "е")


def words(text):
    return WORD_RE.findall(norm(text))


def content_words(text, lang):
    stop = STOP.get(lang, set())
    return [w for w in words(text) if len(w) >= 3 and w not in stop and not w.isdigit()]


def common_prefix(a, b):
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def stem_match(word, vocab):
    """True if some token in vocab looks like another form of `word`."""
    need = max(3, min(5, len(word) - 2))
    return any(t != word and common_prefix(word, t) >= need for t in vocab)


def cjk_bigrams(text):
    out = set()
    for seg in re.findall(f"[{CJK}]+", text):
        for i in range(len(seg) - 1):
            out.add(seg[i : i + 2])
    return out


def load_jsonl(path, rep, fields):
    rows = []
    if not os.path.exists(path):
        rep.error(f"{os.path.basename(path)}: file not found")
        return rows
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            where = f"{os.path.basename(path)}:{lineno}"
            if not line.strip():
                rep.error(f"{where}: empty line")
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                rep.error(f"{where}: invalid JSON ({e})")
                continue
            if not isinstance(obj, dict):
                rep.error(f"{where}: not a JSON object")
                continue
            keys = set(obj)
            if keys != set(fields):
                rep.error(f"{where}: fields {sorted(keys)} != expected {sorted(fields)}")
                continue
            bad = [k for k, t in fields.items() if not isinstance(obj[k], t)]
            if bad:
                rep.error(f"{where}: wrong type for {bad}")
                continue
            obj["_where"] = where
            rows.append(obj)
    return rows


def check_notes(notes, rep):
    seen = set()
    by_id = {}
    for n in notes:
        w, nid, lang, text = n["_where"], n["id"], n["lang"], n["text"]
        if nid in seen:
            rep.error(f"{w}: duplicate note id {nid}")
        seen.add(nid)
        by_id[nid] = n
        if lang not in LANGS:
            rep.error(f"{w}: bad lang {lang!r}")
        if not NOTE_ID_RE.match(nid):
            rep.error(f"{w}: malformed note id {nid!r}")
        elif not nid.startswith(lang + "-"):
            rep.error(f"{w}: id {nid} does not match lang {lang}")
        if not text.strip():
            rep.error(f"{w}: empty text")
        if text != text.strip():
            rep.error(f"{w}: leading/trailing whitespace in text")
        if lang == "zh":
            if not CJK_CHAR_RE.search(text):
                rep.error(f"{w}: zh note without CJK characters")
            if CJK_GAP_RE.search(text):
                rep.error(
                    f"{w}: zh note has whitespace between CJK characters (must be unsegmented)"
                )
            sentences = len(re.findall(r"[。！？]+", text)) or 1
        else:
            if lang == "ru" and not CYRILLIC_RE.search(text):
                rep.error(f"{w}: ru note without Cyrillic")
            if lang == "en" and (
                CYRILLIC_RE.search(text)
                or (CJK_CHAR_RE.search(text) and len(CJK_CHAR_RE.findall(text)) > 2)
            ):
                rep.error(f"{w}: en note contains Cyrillic/CJK text")
            sentences = len(re.findall(r"[.!?…]+(?:\s+[A-ZА-ЯЁ\"'«]|$)", text.rstrip())) or 1
        if sentences > 4:
            rep.warn(f"{w}: {nid} looks like more than 4 sentences ({sentences})")
    return by_id


def check_queries(queries, notes_by_id, rep):
    notes_by_lang = defaultdict(list)
    for n in notes_by_id.values():
        notes_by_lang[n["lang"]].append(n)
    seen = set()
    for q in queries:
        w, qid, lang, text, rel, kind = (
            q["_where"],
            q["id"],
            q["lang"],
            q["query"],
            q["relevant"],
            q["kind"],
        )
        if qid in seen:
            rep.error(f"{w}: duplicate query id {qid}")
        seen.add(qid)
        if not QUERY_ID_RE.match(qid):
            rep.error(f"{w}: malformed query id {qid!r}")
        if lang not in LANGS:
            rep.error(f"{w}: bad lang {lang!r}")
            continue
        if kind not in KINDS:
            rep.error(f"{w}: bad kind {kind!r}")
            continue
        if not text.strip():
            rep.error(f"{w}: empty query")
            continue
        if not rel:
            rep.error(f"{w}: {qid} has no relevant notes")
            continue
        if not all(isinstance(r, str) for r in rel):
            rep.error(f"{w}: relevant must be a list of strings")
            continue
        if len(set(rel)) != len(rel):
            rep.error(f"{w}: {qid} repeats a relevant id")
        missing = [r for r in rel if r not in notes_by_id]
        if missing:
            rep.error(f"{w}: {qid} relevant ids do not exist: {missing}")
            continue
        rel_notes = [notes_by_id[r] for r in rel]
        if kind != "exact":
            other = [r for r in rel if notes_by_id[r]["lang"] != lang]
            if other:
                rep.error(f"{w}: {qid} ({lang}) has relevant notes in another language: {other}")

        rel_set = set(rel)
        rel_vocab = set()
        for n in rel_notes:
            rel_vocab.update(words(n["text"]))
        cw = content_words(text, lang) if lang != "zh" else []

        # ---- kind-specific rules ----
        if kind == "cjk-word":
            if lang != "zh":
                rep.error(f"{w}: {qid} cjk-word query must be lang zh")
            if not CJK_ONLY_RE.match(text) or not 2 <= len(text) <= 4:
                rep.error(f"{w}: {qid} cjk-word query must be 2-4 CJK characters: {text!r}")
            containing = {n["id"] for n in notes_by_lang["zh"] if text in n["text"]}
            if containing != rel_set:
                rep.error(
                    f"{w}: {qid} {text!r}: relevant {sorted(rel_set)} != zh notes containing it "
                    f"{sorted(containing)}"
                )
        elif kind == "exact":
            needle = text.lower()
            containing = {n["id"] for n in notes_by_id.values() if needle in n["text"].lower()}
            if containing != rel_set:
                rep.error(
                    f"{w}: {qid} {text!r}: relevant {sorted(rel_set)} != notes containing it "
                    f"{sorted(containing)}"
                )
        elif kind == "inflection":
            if lang not in ("ru", "en"):
                rep.error(f"{w}: {qid} inflection queries must be ru or en")
            elif not cw:
                rep.error(f"{w}: {qid} inflection query has no content words")
            else:
                absent = [x for x in cw if x not in rel_vocab]
                if len(absent) < math.ceil(len(cw) / 2):
                    rep.error(
                        f"{w}: {qid} {text!r}: too many key words occur verbatim in the relevant "
                        f"notes (absent: {absent} of {cw})"
                    )
                stemmed = [x for x in absent if stem_match(x, rel_vocab)]
                if not stemmed:
                    rep.error(
                        f"{w}: {qid} {text!r}: no key word found in another form in relevant notes"
                    )
                for x in absent:
                    if x not in stemmed:
                        rep.warn(
                            f"{w}: {qid} word {x!r} has no prefix-stem match (irregular form?)"
                        )
                for n in rel_notes:
                    nv = set(words(n["text"]))
                    if not any(x not in nv and stem_match(x, nv) for x in cw):
                        rep.warn(f"{w}: {qid} relevant {n['id']} has no inflected key word")
        elif kind == "natural":
            if lang == "zh":
                n_chars = len(re.findall(r"\w", text))
                if not 6 <= n_chars <= 30:
                    rep.error(
                        f"{w}: {qid} zh natural query should be 6-30 characters, got {n_chars}"
                    )
            else:
                n_words = len(text.split())
                if not 5 <= n_words <= 12:
                    rep.error(f"{w}: {qid} natural query should have 5-12 words, got {n_words}")
        elif kind == "semantic":
            if lang == "zh":
                bg = cjk_bigrams(text)
                rel_bg = set().union(*(cjk_bigrams(n["text"]) for n in rel_notes))
                shared = bg & rel_bg
                if bg and len(shared) > len(bg) / 2:
                    rep.error(
                        f"{w}: {qid} semantic query shares too many bigrams: {sorted(shared)}"
                    )
            else:
                shared = [x for x in cw if x in rel_vocab]
                if cw and len(shared) > len(cw) / 2:
                    rep.error(f"{w}: {qid} semantic query shares too many words: {shared}")

        # ---- distractors ----
        if kind == "exact":
            continue
        has_distractor = False
        for n in notes_by_lang[lang]:
            if n["id"] in rel_set:
                continue
            if lang == "zh":
                if kind == "cjk-word":
                    chars = set(text) - ZH_STOP_CHARS
                    if chars & set(n["text"]):
                        has_distractor = True
                else:
                    if cjk_bigrams(text) & cjk_bigrams(n["text"]):
                        has_distractor = True
            else:
                nv = set(words(n["text"]))
                if any(x in nv or stem_match(x, nv) for x in cw):
                    has_distractor = True
            if has_distractor:
                break
        if not has_distractor:
            rep.error(f"{w}: {qid} {text!r}: no distractor note shares a query word")


def main(argv):
    verbose = "--verbose" in argv or "-v" in argv
    args = [a for a in argv if not a.startswith("-")]
    data_dir = args[0] if args else os.path.dirname(os.path.abspath(__file__))
    rep = Report()
    notes = load_jsonl(
        os.path.join(data_dir, "notes.jsonl"), rep, {"id": str, "lang": str, "text": str}
    )
    queries = load_jsonl(
        os.path.join(data_dir, "queries.jsonl"),
        rep,
        {"id": str, "lang": str, "query": str, "relevant": list, "kind": str},
    )
    notes_by_id = check_notes(notes, rep)
    check_queries(queries, notes_by_id, rep)

    # ---- counts ----
    note_langs = Counter(n["lang"] for n in notes)
    q_langs = Counter(q["lang"] for q in queries)
    q_kinds = Counter(q["kind"] for q in queries)
    q_lang_kind = Counter((q["lang"], q["kind"]) for q in queries)
    rel_sizes = Counter(len(q["relevant"]) for q in queries)
    cjk_two = sum(1 for q in queries if q["kind"] == "cjk-word" and len(q["query"]) == 2)

    def need(cond, msg):
        if not cond:
            rep.error(msg)

    need(len(notes) >= MIN_NOTES, f"need >= {MIN_NOTES} notes, have {len(notes)}")
    for lang in LANGS:
        need(
            note_langs[lang] >= MIN_NOTES_PER_LANG_FRACTION * len(notes),
            f"notes in {lang}: {note_langs[lang]} is far from 1/3 of {len(notes)}",
        )
        need(
            q_langs[lang] >= MIN_QUERIES_PER_LANG,
            f"need >= {MIN_QUERIES_PER_LANG} {lang} queries, have {q_langs[lang]}",
        )
        need(
            q_lang_kind[(lang, "natural")] >= MIN_NATURAL_PER_LANG,
            f"need >= {MIN_NATURAL_PER_LANG} natural {lang} queries, have {q_lang_kind[(lang, 'natural')]}",
        )
    need(len(queries) >= MIN_QUERIES, f"need >= {MIN_QUERIES} queries, have {len(queries)}")
    need(
        q_lang_kind[("ru", "inflection")] >= MIN_INFLECTION_RU,
        f"need >= {MIN_INFLECTION_RU} ru inflection queries, have {q_lang_kind[('ru', 'inflection')]}",
    )
    need(
        q_lang_kind[("en", "inflection")] >= MIN_INFLECTION_EN,
        f"need >= {MIN_INFLECTION_EN} en inflection queries, have {q_lang_kind[('en', 'inflection')]}",
    )
    need(
        q_kinds["cjk-word"] >= MIN_CJK_WORD,
        f"need >= {MIN_CJK_WORD} cjk-word queries, have {q_kinds['cjk-word']}",
    )
    need(
        cjk_two >= MIN_CJK_WORD_TWO_CHAR,
        f"need >= {MIN_CJK_WORD_TWO_CHAR} two-character cjk-word queries, have {cjk_two}",
    )
    need(
        q_kinds["exact"] >= MIN_EXACT, f"need >= {MIN_EXACT} exact queries, have {q_kinds['exact']}"
    )
    need(
        q_kinds["semantic"] >= MIN_SEMANTIC,
        f"need >= {MIN_SEMANTIC} semantic queries, have {q_kinds['semantic']}",
    )

    # ---- summary ----
    print(f"notes:   {len(notes)}  " + "  ".join(f"{l}={note_langs[l]}" for l in LANGS))
    print(f"queries: {len(queries)}  " + "  ".join(f"{l}={q_langs[l]}" for l in LANGS))
    header = f"  {'kind':<11}" + "".join(f"{l:>6}" for l in LANGS) + f"{'total':>7}"
    print(header)
    for k in KINDS:
        print(
            f"  {k:<11}" + "".join(f"{q_lang_kind[(l, k)]:>6}" for l in LANGS) + f"{q_kinds[k]:>7}"
        )
    print(f"  cjk-word with 2 characters: {cjk_two}")
    print("  relevant per query: " + ", ".join(f"{k} -> {v}" for k, v in sorted(rel_sizes.items())))
    if rep.warnings:
        print(f"warnings: {len(rep.warnings)}" + ("" if verbose else " (use --verbose to list)"))
        if verbose:
            for m in rep.warnings:
                print("  WARN " + m)
    if rep.errors:
        print(f"FAILED: {len(rep.errors)} problem(s)")
        for m in rep.errors:
            print("  ERROR " + m)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

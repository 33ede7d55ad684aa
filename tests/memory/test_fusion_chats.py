"""The chats dev set (benches/datasets/chats.py) the fusion is chosen on: the same bytes
on every machine, and evidence where its questions say."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def chats() -> Any:
    spec = importlib.util.spec_from_file_location("chats", ROOT / "benches/datasets/chats.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_the_set_is_rebuilt_byte_for_byte(tmp_path: Path) -> None:
    mod = chats()
    a, b = mod.write(tmp_path / "a"), mod.write(tmp_path / "b")
    for name in ("questions.jsonl",):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    unzip = [gzip.decompress((d / "sessions.jsonl.gz").read_bytes()) for d in (a, b)]
    assert unzip[0] == unzip[1]


def test_evidence_is_where_the_questions_say() -> None:
    sessions, questions = chats().build()
    by_id = {s["id"]: s for s in sessions}
    assert len(questions) == 160 and len({q["haystack_id"] for q in questions}) == 8
    for q in questions:
        ids = q["answer_session_ids"]
        assert set(ids) <= set(q["haystack"])
        for sid in ids:  # the fact is said by the owner, in one round of the session
            said = [t for t in by_id[sid]["turns"] if t["has_answer"]]
            assert len(said) == 1 and said[0]["role"] == "user"
        if q["type"] == "update":  # the old value first, the new one later
            assert len(ids) == 2
            days = [q["haystack_dates"][q["haystack"].index(s)] for s in ids]
            assert days[0] < days[1] and q["latest_answer_session_id"] == ids[1]
    styles = [q["style"] for q in questions]
    assert styles.count("lexical") == styles.count("paraphrase") == 80
    assert json.dumps(questions[0])  # plain JSON types only

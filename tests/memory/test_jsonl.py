"""Conversation JSONL: writer policy, tolerant reader, tail and follow."""

from __future__ import annotations

import json
import os
import threading
import tracemalloc
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klaw.errors import InvalidInput
from klaw.wire.logfile import (
    JsonlTailer,
    JsonlWriter,
    Record,
    SkippedLine,
    chat_files,
    encode_record,
    iter_conversations,
    iter_jsonl,
    list_chats,
    read_jsonl,
    tail_records,
)


def rec(i: int, ts: str = "2026-02-24T14:30:00Z", role: str = "user", **kw: Any) -> Record:
    return Record(id=f"msg_{i:03d}", ts=ts, role=role, content=f"message {i}", **kw)


# ------------------------------------------------------------------------ records


def test_record_validation() -> None:
    with pytest.raises(InvalidInput, match="role"):
        Record(id="a", ts="2026-02-24T14:30:00Z", role="robot", content="x")
    with pytest.raises(InvalidInput, match="ts"):
        Record(id="a", ts="yesterday", role="user", content="x")
    with pytest.raises(InvalidInput, match="ts"):
        Record(id="a", ts="2026-02-24T14:30:00", role="user", content="x")  # no timezone
    with pytest.raises(InvalidInput, match="type"):
        Record(id="a", ts="2026-02-24T14:30:00Z", role="user", content="x", type="weird")
    with pytest.raises(InvalidInput, match="missing"):
        Record.from_dict({"id": "a", "role": "user", "content": "x"})
    r = Record.create("assistant", "hi", meta={"model": "glm-5"})
    assert r.ts.endswith("Z") and r.id.startswith("msg_")
    assert Record.from_dict(r.to_dict()) == r


def test_type_omitted_when_null_and_one_line() -> None:
    line = encode_record(rec(1, meta={"channel": "telegram"}))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert "type" not in json.loads(line)
    tricky = Record(
        id="x", ts="2026-02-24T14:30:00Z", role="user", content="a\nb\r\u2028c\u2029d\x85ё中"
    )
    line = encode_record(tricky)
    assert line.count(b"\n") == 1 and b"\r" not in line
    assert "".join(line.decode().splitlines()) == line.decode().rstrip("\n")  # no hidden breaks
    assert json.loads(line)["content"] == tricky.content
    assert "ё中".encode() in line  # ensure_ascii=False


def test_unserialisable_records_rejected() -> None:
    with pytest.raises(InvalidInput):
        encode_record(rec(1, meta={"x": float("nan")}))
    with pytest.raises(InvalidInput):
        encode_record(rec(1, meta={"x": object()}))
    with pytest.raises(InvalidInput):
        encode_record(Record(id="x", ts="2026-02-24T14:30:00Z", role="user", content="\ud800"))


# ------------------------------------------------------------------------- writer


def test_round_trip(tmp_path: Path) -> None:
    w = JsonlWriter(tmp_path)
    records = [
        rec(1, meta={"channel": "telegram", "chat_id": "123"}),
        rec(2, role="assistant", meta={"model": "glm-5", "tokens_in": 4500, "tokens_out": 120}),
        rec(3, type="session_break", role="system"),
    ]
    for r in records:
        path = w.append("telegram_123", r)
    assert path == tmp_path / "telegram_123" / "2026-02-24.jsonl"
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    got = read_jsonl(path)
    assert got.skipped == []
    assert got.records == [r.to_dict() for r in records]
    # mappings are validated too
    w.append("telegram_123", {"id": "m4", "ts": "2026-02-24T15:00:00Z", "role": "tool",
                              "content": "{}", "meta": {"tool": "calendar"}})  # fmt: skip
    assert len(read_jsonl(path).records) == 4


def test_split_per_utc_day(tmp_path: Path) -> None:
    w = JsonlWriter(tmp_path, fsync="never")
    w.append("c", rec(1, ts="2026-02-24T23:59:59Z"))
    w.append("c", rec(2, ts="2026-02-25T00:30:00+01:00"))  # 23:30 UTC on the 24th
    w.append("c", rec(3, ts="2026-02-25T00:00:00Z"))
    paths = w.append_many("c", [rec(4, ts="2026-02-26T10:00:00Z"), rec(5, ts="2026-02-25T09:00Z")])
    assert [p.name for p in paths] == ["2026-02-26.jsonl", "2026-02-25.jsonl"]
    files = chat_files(tmp_path, "c")
    assert [p.name for p in files] == ["2026-02-24.jsonl", "2026-02-25.jsonl", "2026-02-26.jsonl"]
    ids = [[r["id"] for r in read_jsonl(p).records] for p in files]
    assert ids == [["msg_001", "msg_002"], ["msg_003", "msg_005"], ["msg_004"]]


@pytest.mark.parametrize("bad", ["", "..", "a/b", "a\\b", ".hidden", "x..y", "a\nb", "a\x00"])
def test_chat_id_validated(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidInput):
        JsonlWriter(tmp_path).append(bad, rec(1))
    assert list(tmp_path.iterdir()) == []


def test_append_many_validates_everything_first(tmp_path: Path) -> None:
    w = JsonlWriter(tmp_path)
    with pytest.raises(InvalidInput):
        w.append_many("c", [rec(1), {"id": "x", "ts": "bad", "role": "user", "content": ""}])
    assert not (tmp_path / "c").exists()


def test_append_seals_a_torn_last_line(tmp_path: Path) -> None:
    w = JsonlWriter(tmp_path)
    path = w.append("c", rec(1))
    with open(path, "ab") as fh:
        fh.write(b'{"id":"msg_002","ts":"2026-02-24T14:3')  # power cut mid-line
    torn = read_jsonl(path)
    assert [r["id"] for r in torn.records] == ["msg_001"]
    assert torn.skipped == [SkippedLine(path, 2, torn.skipped[0].reason)]
    assert "torn" in torn.skipped[0].reason
    w.append("c", rec(3))
    after = read_jsonl(path)
    assert [r["id"] for r in after.records] == ["msg_001", "msg_003"]
    assert [s.line_no for s in after.skipped] == [2]


def test_o_append_lines_stay_whole_under_concurrency(tmp_path: Path) -> None:
    """Threads with separate writers plus a reader polling all the while: every line
    the reader ever sees is complete, and every record lands exactly once."""
    big = "x" * 20_000  # several pages per line, so a torn write would show
    n_threads, per_thread = 4, 50
    path = tmp_path / "c" / "2026-02-24.jsonl"
    stop = threading.Event()
    bad: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            if path.exists():
                data = path.read_bytes()
                for raw in data.split(b"\n")[:-1]:
                    try:
                        json.loads(raw)
                    except ValueError:
                        bad.append(raw[:80].decode(errors="replace"))

    def writer(t: int) -> None:
        w = JsonlWriter(tmp_path, fsync="never")
        for i in range(per_thread):
            w.append("c", Record(id=f"{t}-{i}", ts="2026-02-24T10:00:00Z", role="user",
                                 content=big))  # fmt: skip

    r = threading.Thread(target=reader)
    r.start()
    threads = [threading.Thread(target=writer, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    r.join()
    got = read_jsonl(path)
    assert bad == [] and got.skipped == []
    assert sorted(r["id"] for r in got.records) == sorted(
        f"{t}-{i}" for t in range(n_threads) for i in range(per_thread)
    )


# ------------------------------------------------------------------------- reader


def test_reader_reports_each_kind_of_bad_line(tmp_path: Path) -> None:
    good = encode_record(rec(1))
    path = tmp_path / "f.jsonl"
    path.write_bytes(
        good
        + b"garbage\n"
        + b"[1, 2]\n"
        + b'{"id":"x","ts":"2026-02-24T14:30:00Z","role":"user"}\n'
        + b'{"id":"x","ts":"2026-02-24T14:30:00Z","role":"user","content":"\xff\xfe"}\n'
        + b"\n"
        + b'{"id":"y","ts":"not a time","role":"user","content":""}\n'
        + encode_record(rec(2))
        + b'{"id":"msg_003","ts":"2026-02'
    )
    got = read_jsonl(path)
    assert [r["id"] for r in got.records] == ["msg_001", "msg_002"]
    reasons = {s.line_no: s.reason for s in got.skipped}
    assert reasons[2].startswith("invalid JSON")
    assert reasons[3].startswith("not a JSON object")
    assert reasons[4] == "missing required field 'content'"
    assert reasons[5] == "invalid UTF-8"
    assert reasons[6] == "blank line"
    assert reasons[7] == "unparseable 'ts': \"not a time\""
    assert "torn last line" in reasons[9]
    assert sorted(reasons) == [2, 3, 4, 5, 6, 7, 9]


def test_complete_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(encode_record(rec(1)) + encode_record(rec(2)).rstrip(b"\n"))
    assert [r["id"] for r in read_jsonl(path).records] == ["msg_001", "msg_002"]


_texts = st.text(st.characters(codec="utf-8"), max_size=30)  # utf-8: no surrogates
_records = st.builds(
    Record,
    id=st.text(st.characters(codec="utf-8"), min_size=1, max_size=10),
    ts=st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat().replace("+00:00", "Z")),
    role=st.sampled_from(["user", "assistant", "system", "tool"]),
    content=_texts,
    type=st.sampled_from([None, "session_break", "subagent_result", "internal"]),
    meta=st.dictionaries(
        st.sampled_from(["channel", "model", "tokens_in"]), st.one_of(_texts, st.integers())
    ),
)
_garbage = st.one_of(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"", b"{", b"null", b"42", b'"str"', b"[]", b'{"id":"x"}', b"\xc3\x28"]),
    _texts.map(lambda s: json.dumps({"role": "user", "content": s}).encode()),
)


def _is_record(raw: bytes) -> bool:
    try:
        obj = json.loads(raw.decode("utf-8"))
        Record.from_dict(obj)
    except (ValueError, InvalidInput, TypeError):
        return False
    return True


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(
        st.one_of(_records.map(lambda r: ("ok", r)), _garbage.map(lambda g: ("bad", g)))
    ),
    torn=st.one_of(st.none(), _records, _garbage),
    cut=st.integers(min_value=1),
)
def test_reader_property(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[tuple[str, Any]],
    torn: Any,
    cut: int,
) -> None:
    """Valid records come back exactly, in order; each bad line is reported once with
    its own line number; a torn last line is reported, never fatal."""
    data = b""
    expected: list[dict[str, Any]] = []
    expected_bad: list[int] = []
    for line_no, (kind, item) in enumerate(lines, start=1):
        if kind == "ok":
            data += encode_record(item)
            expected.append(json.loads(encode_record(item)))
        elif _is_record(item):  # random garbage that happens to be a record
            data += item + b"\n"
            expected.append(json.loads(item))
        else:
            data += item + b"\n"
            expected_bad.append(line_no)
    if torn is not None:
        tail = encode_record(torn)[:-1] if isinstance(torn, Record) else torn
        tail = tail[: 1 + cut % max(len(tail), 1)]  # a prefix, without the newline
        if tail:
            data += tail
            if _is_record(tail):
                expected.append(json.loads(tail))
            else:
                expected_bad.append(len(lines) + 1)
    path = tmp_path_factory.mktemp("prop") / "f.jsonl"
    path.write_bytes(data)
    got = read_jsonl(path)
    assert got.records == expected
    assert [s.line_no for s in got.skipped] == expected_bad
    assert all(s.path == path and s.reason for s in got.skipped)
    streamed: list[SkippedLine] = []
    assert list(iter_jsonl(path, streamed.append)) == expected
    assert streamed == got.skipped


def test_iterator_streams_in_constant_memory(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    line = encode_record(Record(id="m", ts="2026-02-24T14:30:00Z", role="user", content="y" * 200))
    with open(path, "wb") as fh:
        for _ in range(50_000):
            fh.write(line)
    size = path.stat().st_size
    assert size > 10_000_000
    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_jsonl(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 50_000
    assert peak < 1_000_000, f"peak {peak} bytes for a {size}-byte file: not streaming"


# ------------------------------------------------------- conversations, tail, follow


def test_iter_conversations_order(tmp_path: Path) -> None:
    w = JsonlWriter(tmp_path, fsync="never")
    w.append("b", rec(1, ts="2026-02-25T08:00:00Z"))
    w.append("a", rec(2, ts="2026-02-25T09:00:00Z"))
    w.append("b", rec(3, ts="2026-02-24T08:00:00Z"))
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "a" / "notes.txt").write_text("ignored")
    got = [(p.parent.name, p.stem, r["id"]) for p, r in iter_conversations(tmp_path)]
    assert got == [
        ("b", "2026-02-24", "msg_003"),
        ("a", "2026-02-25", "msg_002"),
        ("b", "2026-02-25", "msg_001"),
    ]
    assert [r["id"] for _, r in iter_conversations(tmp_path, "b")] == ["msg_003", "msg_001"]
    assert list(iter_conversations(tmp_path / "missing")) == []
    assert list_chats(tmp_path) == ["a", "b"]


def test_tail_records(tmp_path: Path) -> None:
    w = JsonlWriter(tmp_path, fsync="never")
    for i in range(5):
        w.append("a", rec(i, ts=f"2026-02-2{i}T10:00:00Z"))
        w.append("b", rec(10 + i, ts=f"2026-02-2{i}T11:00:00Z"))
    assert [e.record["id"] for e in tail_records(tmp_path, "a", 2)] == ["msg_003", "msg_004"]
    both = tail_records(tmp_path, None, 3)
    assert [(e.chat_id, e.record["id"]) for e in both] == [
        ("b", "msg_013"),
        ("a", "msg_004"),
        ("b", "msg_014"),
    ]
    assert len(tail_records(tmp_path, None, 100)) == 10
    assert tail_records(tmp_path, "a", 0) == []


def test_tailer_follows_growth_and_day_rollover(tmp_path: Path) -> None:
    w = JsonlWriter(tmp_path, fsync="never")
    first = w.append("a", rec(1, ts="2026-02-24T23:59:00Z"))
    with open(first, "ab") as fh:
        fh.write(encode_record(rec(2, ts="2026-02-24T23:59:30Z"))[:10])  # in flight
    tailer = JsonlTailer(tmp_path)
    assert [e.record["id"] for e in tail_records(tmp_path, None, 10, upto=tailer.offsets)] == [
        "msg_001"
    ]
    assert tailer.poll() == []
    with open(first, "ab") as fh:  # the in-flight line completes
        fh.write(encode_record(rec(2, ts="2026-02-24T23:59:30Z"))[10:])
    w.append("a", rec(3, ts="2026-02-25T00:00:10Z"))  # midnight: a new file
    w.append("new_chat", rec(4, ts="2026-02-25T00:00:20Z"))  # a new chat dir
    skipped: list[SkippedLine] = []
    with open(first, "ab") as fh:
        fh.write(b"garbage\n")
    got = tailer.poll(skipped.append)
    assert [(e.chat_id, e.record["id"]) for e in got] == [
        ("a", "msg_002"),
        ("a", "msg_003"),
        ("new_chat", "msg_004"),
    ]
    assert [(s.path.name, s.line_no) for s in skipped] == [("2026-02-24.jsonl", 3)]
    assert tailer.poll() == []
    # the on-disk state matches what a fresh reader sees
    assert os.path.getsize(first) == tailer.offsets[first]

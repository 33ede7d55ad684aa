"""One validator for conversation logs: the same hostile lines, fed to every reader
(`read_jsonl`/`klaw usage`, `tail_records`/`klaw logs`, the follower of `klaw logs -f`,
the gateway's logbook and `klaw reindex`), are read the same way by all of them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from klaw import _core
from klaw.config import load_engine_config
from klaw.gateway.logbook import LogBook
from klaw.memory.api import rebuild
from klaw.paths import KlawPaths
from klaw.wire.logfile import JsonlTailer, read_jsonl, tail_records
from klaw.wire.protocol import LogLine

CHAT = "telegram_1"
DAY = "2026-02-24"


def line(**fields: object) -> bytes:
    base: dict[str, object] = {
        "ts": f"{DAY}T10:00:00Z",
        "role": "user",
        "content": "hello",
        "meta": {"channel": "telegram"},
    }
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not ...}).encode() + b"\n"


# (raw line, the id a reader keeps, or None when every reader must skip it)
CASES: list[tuple[bytes, str | None]] = [
    (line(id="ok_1"), "ok_1"),
    (line(id=42), "42"),  # an integer id is read as its text
    (line(id="obj", role="tool", content={"result": [1, 2]}), "obj"),
    (line(id="null_content", content=None), "null_content"),
    (line(id="offset", ts=f"{DAY}T12:00:00+02:00"), "offset"),
    (line(id="no_meta", meta=...), "no_meta"),
    (line(id="extra", extra_field=1), "extra"),
    (line(id=""), None),
    (line(id=1.5), None),
    (line(id=True), None),
    (line(id=["a"]), None),
    (line(id="no_tz", ts=f"{DAY}T10:00:00"), None),
    (line(id="bad_day", ts="2026-02-30T10:00:00Z"), None),
    (line(id="num_ts", ts=1700000000), None),
    (line(id="robot", role="robot"), None),
    (line(id="num_content", content=...), None),
    (line(id="list_meta", meta=[1]), None),
    (line(id="str_meta", meta="x"), None),
    (line(id="num_type", type=3), None),
    (b'{"id":"dup","id":"dup2","ts":"2026-02-24T10:00:00Z","role":"user","content":""}\n', None),
    (b'{"id":"nan","ts":"2026-02-24T10:00:00Z","role":"user","content":NaN}\n', None),
    (b'{"id":"utf8","ts":"2026-02-24T10:00:00Z","role":"user","content":"\xff"}\n', None),
    (b"[1, 2]\n", None),
    (b'"just a string"\n', None),
    (b"\n", None),
    (b"   \n", None),
    (b"{" * 50_000 + b"\n", None),
    (b'{"id": "torn", "ts": "2026-02-24T10:00:00Z", "role": "user", "con', None),
]


def _write(root: Path) -> Path:
    path = root / CHAT / f"{DAY}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(raw for raw, _ in CASES))
    return path


def test_every_reader_keeps_the_same_lines(klaw_home: KlawPaths, backend: object) -> None:
    root = klaw_home.conversations
    root.mkdir(parents=True, exist_ok=True)
    (root / CHAT).mkdir()
    follower = JsonlTailer(root)
    path = _write(root)
    expected = [kept for _, kept in CASES if kept is not None]
    skipped_lines = [n for n, (_, kept) in enumerate(CASES, 1) if kept is None]

    # The Rust validator itself.
    verdicts = [_core.check_log_line(raw) for raw, _ in CASES]
    assert [v.id for v in verdicts if not isinstance(v, str)] == expected

    # read_jsonl / iter_jsonl (klaw usage), with every skip reported with its line.
    got = read_jsonl(path)
    assert [r["id"] for r in got.records] == expected
    assert got.records[2]["content"] == '{"result": [1, 2]}'
    assert [s.line_no for s in got.skipped] == skipped_lines
    reasons = {s.line_no: s.reason for s in got.skipped}
    assert all(reasons[n] for n in skipped_lines)
    assert reasons[len(CASES)].startswith("torn last line")

    # tail_records (klaw logs), ordered by time across the +02:00 offset.
    tail = tail_records(root, CHAT, 100)
    assert sorted(e.record["id"] for e in tail) == sorted(expected)
    assert [e.record["id"] for e in tail][-1] == "extra"  # 12:00+02:00 is 10:00Z

    # The follower of klaw logs -f sees complete lines only: the torn one waits.
    followed: list[int] = []
    polled = follower.poll(lambda s: followed.append(s.line_no))
    assert sorted(e.record["id"] for e in polled) == sorted(expected)
    assert followed == skipped_lines[:-1]

    # The gateway's logbook knows exactly the kept ids (so it re-logs nothing kept).
    book = LogBook(root)
    at = datetime(2026, 2, 24, 10, tzinfo=UTC)
    for kept in expected:
        assert book.has(CHAT, LogLine(id=kept, ts=at, role="user")), kept
    for skipped in ("robot", "no_tz", "dup", "torn"):
        assert not book.has(CHAT, LogLine(id=skipped, ts=at, role="user")), skipped

    # klaw reindex: the same messages in klaw.db, the same lines skipped.
    config = load_engine_config(klaw_home.engine_config)
    report = rebuild(klaw_home, config, backend=backend, progress=False)  # type: ignore[arg-type]
    assert report.messages == len(expected)
    assert report.skipped_count == len(skipped_lines)
    assert [line_no for _, line_no, _ in report.skipped] == skipped_lines
    store = _core.Store(str(klaw_home.db))
    try:
        rows = store.recent_messages(CHAT, limit=100)
        assert sorted(r.id for r in rows) == sorted(expected)
        contents = {r.id: r.content for r in rows}
        assert contents["obj"] == '{"result": [1, 2]}'  # its JSON text, as in the file
        assert contents["null_content"] == ""
    finally:
        store.close()
    for _, line_no, reason in report.skipped:
        assert reason == reasons[line_no]

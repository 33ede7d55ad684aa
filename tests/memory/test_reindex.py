"""`klaw reindex`: klaw.db rebuilt from files gives the same answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from klaw import _core
from klaw.config import load_engine_config
from klaw.errors import StoreCorrupt, StoreLocked
from klaw.memory import Memory
from klaw.memory.api import rebuild
from klaw.memory.health import check_store
from klaw.paths import KlawPaths


def msg(i: int, chat: str = "telegram_1", **extra: object) -> str:
    rec: dict[str, object] = {
        "id": f"{chat}-{i:04d}",
        "ts": f"2026-02-24T10:{i // 60:02d}:{i % 60:02d}Z",
        "role": "user" if i % 2 == 0 else "assistant",
        "content": f"message {i} about topic{i % 7}",
        "meta": {"channel": chat.split("_")[0], "chat_id": chat.split("_")[1]},
    }
    rec.update(extra)
    return json.dumps(rec, ensure_ascii=False)


def write_chat(paths: KlawPaths, chat: str, day: str, lines: list[str], tail: bytes = b"") -> Path:
    d = paths.conversations / chat
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{day}.jsonl"
    p.write_bytes(("\n".join(lines) + "\n").encode() + tail)
    return p


def reindex(paths: KlawPaths, backend: object) -> object:
    return rebuild(paths, load_engine_config(paths.engine_config), backend=backend, progress=False)  # type: ignore[arg-type]


def test_single_file_restores_messages_in_order(klaw_home: KlawPaths, backend: object) -> None:
    write_chat(klaw_home, "telegram_1", "2026-02-24", [msg(i) for i in range(10)])
    r = reindex(klaw_home, backend)
    assert r.messages == 10 and r.skipped_count == 0  # type: ignore[attr-defined]
    s = _core.Store(str(klaw_home.db))
    try:
        rows = s.recent_messages("telegram_1", limit=100)
        assert [m.id for m in rows] == [f"telegram_1-{i:04d}" for i in range(10)]
        assert rows[0].channel == "telegram" and rows[1].role == "assistant"
        assert [m.id for m in s.search_messages("topic3")] == ["telegram_1-0003"]
    finally:
        s.close()


def test_multiple_chats_and_days(klaw_home: KlawPaths, backend: object) -> None:
    write_chat(klaw_home, "telegram_1", "2026-02-24", [msg(i) for i in range(5)])
    write_chat(klaw_home, "telegram_1", "2026-02-25", [msg(i + 100) for i in range(5)])
    write_chat(klaw_home, "discord_9", "2026-02-24", [msg(i, "discord_9") for i in range(3)])
    r = reindex(klaw_home, backend)
    assert r.messages == 13 and r.sessions == 2  # type: ignore[attr-defined]
    s = _core.Store(str(klaw_home.db))
    try:
        assert s.count_messages() == 13
        assert len(s.recent_messages("discord_9")) == 3
    finally:
        s.close()


def test_session_break_sets_the_segment(klaw_home: KlawPaths, backend: object) -> None:
    lines = [msg(i) for i in range(4)]
    lines.append(
        msg(
            4,
            type="session_break",
            role="system",
            content="",
            meta={"channel": "telegram", "model": "deepseek/deepseek-chat"},
        )
    )
    lines += [msg(i) for i in range(5, 8)]
    write_chat(klaw_home, "telegram_1", "2026-02-24", lines)
    reindex(klaw_home, backend)
    s = _core.Store(str(klaw_home.db))
    try:
        session = s.get_session("telegram_1")
        assert session is not None
        model, segment_start = session.model, session.segment_start
        assert model == "deepseek/deepseek-chat"
        assert segment_start == "2026-02-24T10:00:04Z"
        window = s.recent_messages("telegram_1", since=segment_start, limit=20)
        assert window[0].kind == "session_break" and len(window) == 4
    finally:
        s.close()


def test_torn_garbage_and_invalid_utf8_lines_are_skipped_and_reported(
    klaw_home: KlawPaths, backend: object
) -> None:
    lines = [msg(0), "not json at all", msg(1), '{"id": "x"}', msg(2)]
    p = write_chat(klaw_home, "telegram_1", "2026-02-24", lines, tail=b'{"id":"torn","ts":"2026-02')
    raw = p.read_bytes().replace(b"not json at all", b"\xff\xfe\xfd bad bytes")
    p.write_bytes(raw)
    r = reindex(klaw_home, backend)
    assert r.messages == 3  # type: ignore[attr-defined]
    assert r.skipped_count == 3  # type: ignore[attr-defined]
    reasons = {line: reason for _, line, reason in r.skipped}  # type: ignore[attr-defined]
    assert reasons[2] == "invalid UTF-8"
    assert "torn last line" in reasons[6]


def test_duplicate_ids_across_files_are_kept_once(klaw_home: KlawPaths, backend: object) -> None:
    write_chat(klaw_home, "telegram_1", "2026-02-24", [msg(1), msg(1)])
    r = reindex(klaw_home, backend)
    assert r.messages == 1  # type: ignore[attr-defined]


def test_after_reindex_every_search_answers_as_before(
    klaw_home: KlawPaths, backend: object
) -> None:
    cfg = load_engine_config(klaw_home.engine_config)
    ws = klaw_home.workspace
    (ws / "memory").mkdir()
    (ws / "MEMORY.md").write_text("# Facts\n\nThe spare key is under the blue flowerpot.\n")
    (ws / "memory" / "2026-02-24.md").write_text("Called the plumber about the leaking sink.\n")
    summaries = klaw_home.summaries / "telegram_1"
    summaries.mkdir(parents=True)
    (summaries / "2026-02-24_msg_001_050.md").write_text("Summary: discussed the trip to Lisbon.\n")
    queries = ["spare key", "plumber sink", "Lisbon trip", "kayak rental", "passport renewal"]
    with Memory.open(paths=klaw_home, config=cfg, backend=backend) as mem:  # type: ignore[arg-type]
        mem.index_workspace()
        mem.save("Kayak rental costs 20 euros per hour")
        mem.save("Passport renewal is due in May", source="manual")
        before = {q: [(h.source, h.start_line, h.content) for h in mem.search(q)] for q in queries}
        cached = mem.cache.count(backend.model_id)  # type: ignore[attr-defined]
    klaw_home.db.unlink()  # lose the index entirely
    r = reindex(klaw_home, backend)
    assert r.saved_facts == 2 and r.summaries == 1  # type: ignore[attr-defined]
    with Memory.open(paths=klaw_home, config=cfg, backend=backend) as mem:  # type: ignore[arg-type]
        after = {q: [(h.source, h.start_line, h.content) for h in mem.search(q)] for q in queries}
        assert mem.cache.count(backend.model_id) == cached  # nothing re-embedded  # type: ignore[attr-defined]
    assert after == before


def test_corrupted_db_reported_by_doctor_and_restored_by_reindex(
    klaw_home: KlawPaths, backend: object
) -> None:
    write_chat(klaw_home, "telegram_1", "2026-02-24", [msg(i) for i in range(3)])
    reindex(klaw_home, backend)
    klaw_home.db.write_bytes(b"\x00garbage" * 4096)
    problems = check_store(klaw_home.db)
    assert problems and "klaw reindex" in problems[0]
    with pytest.raises(StoreCorrupt):
        _core.Store(str(klaw_home.db))
    reindex(klaw_home, backend)
    assert check_store(klaw_home.db) == []
    s = _core.Store(str(klaw_home.db))
    assert s.count_messages() == 3
    s.close()


def test_refuses_while_the_engine_holds_the_lock(klaw_home: KlawPaths, backend: object) -> None:
    klaw_home.engine_lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from klaw.lock import EngineLock; "
            "l = EngineLock(Path(sys.argv[1])).acquire(); print('held', flush=True); "
            "sys.stdin.read()",
            str(klaw_home.engine_lock),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreLocked, match="stop the engine"):
            reindex(klaw_home, backend)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
        if holder.stdout is not None:
            holder.stdout.close()
    reindex(klaw_home, backend)  # the lock died with its process


def test_reindex_cli(klaw_home: KlawPaths) -> None:
    write_chat(klaw_home, "telegram_1", "2026-02-24", [msg(i) for i in range(3)])
    out = subprocess.run(
        [sys.executable, "-m", "klaw.cli.app", "reindex"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "3 messages" in out.stdout

"""replies.jsonl, the answered watermark's file (klaw.engine.answered): one line appended
per reply, rewritten with the kept replies now and then, a torn end skipped, and the
files of earlier versions read and then replaced."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from klaw.engine.answered import COMPACT_AT, KEPT_REPLIES, LOG_NAME, AnsweredMarks
from klaw.paths import KlawPaths
from klaw.wire.protocol import Outbound

CHAT = "telegram_3"


def reply(n: int) -> Outbound:
    return Outbound(
        ts=datetime.now(UTC), channel="telegram", chat_id=CHAT, content=f"r{n}", answers=[f"m{n}"]
    )


def ts(n: int) -> str:
    return f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}Z"


def test_each_reply_appends_a_line_and_a_restart_finds_every_mark(klaw_home: KlawPaths) -> None:
    marks = AnsweredMarks(klaw_home.answered)
    for n in range(3):
        marks.record(reply(n), ts(n))
    lines = (klaw_home.answered / CHAT / LOG_NAME).read_text().splitlines()
    assert [json.loads(line)["n"] for line in lines] == [1, 2, 3]
    again = AnsweredMarks(klaw_home.answered)
    assert again.mark(CHAT) == {"ts": ts(2), "n": 3}
    for n in range(3):
        found = again.reply_for(CHAT, f"m{n}")
        assert found is not None and found.content == f"r{n}"
        assert not again.needs_turn(CHAT, f"m{n}", ts(n))
    assert again.needs_turn(CHAT, "m9", ts(9))


def test_the_file_is_rewritten_with_the_kept_replies(klaw_home: KlawPaths) -> None:
    marks = AnsweredMarks(klaw_home.answered)
    total = COMPACT_AT + 5
    for n in range(total):
        marks.record(reply(n), ts(n))
    lines = (klaw_home.answered / CHAT / LOG_NAME).read_text().splitlines()
    assert len(lines) <= COMPACT_AT
    again = AnsweredMarks(klaw_home.answered)
    assert again.mark(CHAT) == {"ts": ts(total - 1), "n": total}
    assert all(again.reply_for(CHAT, f"m{n}") for n in range(total - KEPT_REPLIES, total))
    assert again.reply_for(CHAT, f"m{total - KEPT_REPLIES - 1}") is None
    assert not again.needs_turn(CHAT, "m0", ts(0))  # the watermark still covers it


def test_a_torn_last_line_is_skipped_and_never_appended_to(klaw_home: KlawPaths) -> None:
    marks = AnsweredMarks(klaw_home.answered)
    for n in range(2):
        marks.record(reply(n), ts(n))
    path = klaw_home.answered / CHAT / LOG_NAME
    path.write_bytes(path.read_bytes()[:-40])  # a power cut tore the second line
    torn = AnsweredMarks(klaw_home.answered)
    assert torn.reply_for(CHAT, "m0") is not None
    assert torn.reply_for(CHAT, "m1") is None
    torn.record(reply(2), ts(2))
    assert all(json.loads(line) for line in path.read_text().splitlines())
    again = AnsweredMarks(klaw_home.answered)
    assert again.reply_for(CHAT, "m0") is not None and again.reply_for(CHAT, "m2") is not None
    assert again.mark(CHAT)["ts"] == ts(2)


def test_an_earlier_versions_mark_is_read_then_replaced(klaw_home: KlawPaths) -> None:
    folder = klaw_home.answered / CHAT
    folder.mkdir(parents=True)
    (folder / "mark.json").write_text(
        json.dumps({"ts": ts(1), "n": 2, "slots": {"0": ["m0"], "1": ["m1"]}})
    )
    (folder / "0.json").write_text(reply(0).model_dump_json())
    (folder / "1.json").write_text(reply(1).model_dump_json())
    marks = AnsweredMarks(klaw_home.answered)
    assert marks.covers(CHAT, ts(1)) and marks.reply_for(CHAT, "m0") is not None
    marks.record(reply(2), ts(2))
    marks.sync()
    assert sorted(p.name for p in folder.iterdir()) == [LOG_NAME]
    again = AnsweredMarks(klaw_home.answered)
    assert again.mark(CHAT) == {"ts": ts(2), "n": 3}
    assert all(again.reply_for(CHAT, f"m{n}") is not None for n in range(3))

"""The summaries folder (klaw.memory.summaries) on a real klaw.db: what waits to be
summarized comes oldest first, however many wait and wherever the last summary
stopped; the writer continues the numbering and names the owner's day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from klaw.memory.rows import StoredMessage
from klaw.memory.summaries import WINDOW, Backlog, backlog, newest_summary, write_summary

CHAT = "telegram_7"
T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


def iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def fill(memory: Any, talk: int) -> list[StoredMessage]:
    """`talk` user/assistant messages, three to a second (ids tell them apart), with a
    tool row after every ninth; returns the user/assistant ones in log order."""
    rows, said = [], []
    for i in range(talk):
        ts = iso(T0 + timedelta(seconds=i // 3))
        row = StoredMessage(
            id=f"m{i:04d}",
            channel="telegram",
            chat_id=CHAT,
            role="user" if i % 2 == 0 else "assistant",
            content=f"message {i}",
            created_at=ts,
        )
        rows.append(row)
        said.append(row)
        if i % 9 == 0:
            rows.append(
                StoredMessage(
                    id=f"t{i:04d}",
                    channel="telegram",
                    chat_id=CHAT,
                    role="tool",
                    content="{}",
                    created_at=ts,
                )
            )
    memory.store.insert_messages(rows)
    memory.store.upsert_session(CHAT, "fake/m", said[0].created_at, said[0].created_at)
    return said


def drain(waiting: Backlog, n: int = 200) -> list[list[str]]:
    batches = []
    while batch := waiting.take(n):
        batches.append([r.id for r in batch])
    return batches


def ids(batches: list[list[str]]) -> list[str]:
    return [i for batch in batches for i in batch]


@pytest.mark.parametrize("talk", [WINDOW // 2 + 50, WINDOW * 2 + 50])  # one read; a walk
def test_a_backlog_comes_oldest_first_and_whole(memory: Any, talk: int) -> None:
    said = fill(memory, talk)
    batches = drain(backlog(memory, memory.paths.summaries, CHAT))
    assert [len(b) for b in batches[:-1]] == [200] * (len(batches) - 1)
    assert ids(batches) == [r.id for r in said]  # none lost, none twice, in order


@pytest.mark.parametrize("talk", [WINDOW // 2 + 50, WINDOW * 2 + 50])
def test_a_backlog_starts_after_the_last_message_summarized(memory: Any, talk: int) -> None:
    said = fill(memory, talk)
    root = memory.paths.summaries
    # Message 151 shares its second with 150 and 152: the id, not the time, says where.
    first = write_summary(memory, root, None, said[:151], "- the first 151", None)
    assert newest_summary(root / CHAT) == first
    waiting = backlog(memory, root, CHAT)
    assert waiting.previous == first and waiting.fold == first
    batch = waiting.take(200)
    assert [r.id for r in batch] == [r.id for r in said[151:351]]
    second = write_summary(memory, root, waiting.previous, batch, "- the next 200", None)
    waiting.covered(second)
    end = 151 + len(batch)  # 351, or all there is
    assert second.path.name.endswith(f"_msg_152_{end}.md") and second.to_ordinal == end
    assert ids(drain(waiting)) == [r.id for r in said[end:]]
    names = sorted(p.name[11:] for p in (root / CHAT).iterdir())
    assert names == ["msg_001_151.md", f"msg_152_{end}.md"]


@pytest.mark.parametrize("talk", [WINDOW // 2 + 50, WINDOW * 2 + 50])
def test_without_its_last_id_a_backlog_goes_on_by_time(memory: Any, talk: int) -> None:
    said = fill(memory, talk)
    root = memory.paths.summaries
    first = write_summary(memory, root, None, said[:150], "- the first 150", None)
    # klaw.db lost that message (rebuilt from a log without it): later seconds only.
    gone = first.path.read_text().replace(f"to {said[149].id}._", "to m-lost._")
    first.path.write_text(gone)
    later = [r.id for r in said if r.created_at > said[149].created_at]
    assert ids(drain(backlog(memory, root, CHAT))) == later


def test_a_summary_is_named_by_the_owners_day_of_its_last_message(memory: Any) -> None:
    said = fill(memory, 4)
    late = [
        StoredMessage(
            id=r.id,
            channel=r.channel,
            chat_id=r.chat_id,
            role=r.role,
            content=r.content,
            created_at="2026-12-31T12:00:00Z",  # 02:00 on 1 January at UTC+14
        )
        for r in said
    ]
    root = memory.paths.summaries
    far = write_summary(memory, root, None, late, "- new year", ZoneInfo("Pacific/Kiritimati"))
    assert far.path.name == "2027-01-01_msg_001_004.md"
    near = write_summary(memory, root, far, late, "- again", ZoneInfo("Pacific/Pago_Pago"))
    assert near.path.name == "2026-12-31_msg_005_008.md"

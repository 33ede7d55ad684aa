"""Finding 13: strangers cannot make the bot send or write without bound. One pairing
reply per stranger per 10 minutes; at most 100 codes pending; pairing.json stays small."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fake_telegram import FakeTelegram

from engine_harness import T, gateway_running
from klaw.gateway.access import MAX_PENDING, REPLY_EVERY, Pairings
from klaw.paths import KlawPaths

TS = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


async def test_a_crowd_of_strangers_gets_bounded_replies_and_file(
    klaw_home: KlawPaths, fake_telegram: FakeTelegram
) -> None:
    fake = fake_telegram
    strangers = list(range(1000, 1000 + MAX_PENDING + 50))
    async with gateway_running(klaw_home, fake):
        for who in strangers:
            fake.add_chat(who)
            fake.text(who, "hi " + "x" * 200)
            fake.text(who, "hello?")
        fake.text(strangers[0], "anyone?")
        await fake.wait_for(lambda: fake.pending == [], T)
        # The updates are fetched; wait until the last one was handled too.
        await fake.wait_for(lambda: len(fake.calls_of("sendMessage")) >= MAX_PENDING, T)
    sends = fake.calls_of("sendMessage")
    assert len(sends) == MAX_PENDING  # one per stranger, none past the cap
    assert {int(s.params["chat_id"]) for s in sends} == set(strangers[:MAX_PENDING])
    pending = json.loads(klaw_home.pairing.read_text())
    assert len(pending) == MAX_PENDING
    assert klaw_home.pairing.stat().st_size < 250 * MAX_PENDING


def test_a_stranger_is_answered_again_after_the_interval(tmp_path: Path) -> None:
    now = [TS]
    p = Pairings(tmp_path / "pairing.json", now=lambda: now[0])
    code = p.reply_code("telegram_5", "5", "Eve" * 100)
    assert code is not None
    assert p.reply_code("telegram_5", "5", "Eve") is None
    now[0] = TS + REPLY_EVERY - timedelta(seconds=1)
    assert p.reply_code("telegram_5", "5", "Eve") is None
    now[0] = TS + REPLY_EVERY
    assert p.reply_code("telegram_5", "5", "Eve") == code  # the same code, again
    (entry,) = p.list()
    assert len(entry.sender_name or "") == 64


def test_the_cap_never_evicts_a_waiting_code(tmp_path: Path) -> None:
    p = Pairings(tmp_path / "pairing.json", now=lambda: TS)
    first = p.reply_code("telegram_1", "1", "Owner")
    for i in range(2, MAX_PENDING + 10):
        p.reply_code(f"telegram_{i}", str(i), None)
    assert len(p.list()) == MAX_PENDING
    assert first in {c.code for c in p.list()}
    taken = p.take(first or "")
    assert taken is not None and taken.chat_id == "telegram_1"
    assert p.reply_code("telegram_new", "9", None) is not None  # room again

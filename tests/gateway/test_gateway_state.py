"""The gateway's files: the buffer of unanswered messages, the logs, access and pairing."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from klaw.cli.app import app
from klaw.cli.testing import CliRunner
from klaw.config import GatewayConfig
from klaw.errors import InvalidInput
from klaw.gateway.access import Access, Approvals, Pairings
from klaw.gateway.buffer import Buffer
from klaw.gateway.logbook import LogBook
from klaw.paths import KlawPaths
from klaw.wire.logfile import read_jsonl
from klaw.wire.loglines import inbound_line, outbound_line
from klaw.wire.protocol import Command, Inbound, LogLine, Outbound, encode

TS = datetime(2026, 2, 24, 14, 30, tzinfo=UTC)


def inbound(n: int, chat: str = "telegram_1", text: str = "hi") -> Inbound:
    return Inbound(
        id=f"m{n}", channel="telegram", chat_id=chat, ts=TS + timedelta(seconds=n), content=text
    )


# ---------------------------------------------------------------- buffer


def test_buffer_survives_a_restart_in_order_and_clears(tmp_path: Path) -> None:
    path = tmp_path / "gateway-buffer.jsonl"
    buf = Buffer(path)
    assert buf.add(inbound(1)) and buf.add(inbound(2, chat="telegram_2"))
    assert buf.add(Command(id="c3", channel="telegram", chat_id="telegram_1", ts=TS, name="new"))
    assert not buf.add(inbound(1))  # a redelivery is not a second entry
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600

    again = Buffer(path)  # the gateway restarted
    assert [m.id for m in again.pending()] == ["m1", "m2", "c3"]
    assert [m.id for m in again.settle(["m2", "nope"])] == ["m2"]
    assert [m.id for m in Buffer(path).pending()] == ["m1", "c3"]
    again.settle(["m1", "c3"])
    assert path.read_bytes() == b"" and len(Buffer(path)) == 0


def test_a_torn_buffer_line_is_skipped_and_the_rest_kept(tmp_path: Path) -> None:
    path = tmp_path / "gateway-buffer.jsonl"
    buf = Buffer(path)
    buf.add(inbound(1))
    buf.add(inbound(2))
    with open(path, "ab") as f:
        f.write(b'{"type":"inbound","id":"m3","chan')  # power cut mid-write
    with open(path, "rb") as f:
        data = f.read()
    path.write_bytes(data[:5] + b"\xff\xfe" + data[5:])  # and a corrupted first line
    assert [m.id for m in Buffer(path).pending()] == ["m2"]
    # Nothing is lost: both bad lines are set aside for the owner, and left the buffer.
    aside = path.with_name(path.name + ".bad").read_bytes().splitlines()
    assert len(aside) == 2 and aside[1].endswith(b'"chan')
    assert b'"m3"' not in path.read_bytes()


def test_buffer_lines_carry_a_format_version(tmp_path: Path) -> None:
    path = tmp_path / "gateway-buffer.jsonl"
    Buffer(path).add(inbound(1))
    (line,) = path.read_bytes().splitlines()
    assert json.loads(line)["v"] == 1 and line.startswith(b'{"v":1,')


def test_lines_from_before_versions_are_read(tmp_path: Path) -> None:
    path = tmp_path / "gateway-buffer.jsonl"
    path.write_bytes(encode(inbound(1)))  # the unversioned format of earlier releases
    assert [m.id for m in Buffer(path).pending()] == ["m1"]


def test_a_line_of_a_newer_format_is_kept_and_not_sent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "gateway-buffer.jsonl"
    future = b'{"v":2,"type":"inbound","id":"m9","shape":"unknown to this release"}'
    buf = Buffer(path)
    buf.add(inbound(1))
    path.write_bytes(future + b"\n" + path.read_bytes())
    again = Buffer(path)
    assert [m.id for m in again.pending()] == ["m1"]
    assert "newer than this Klaw" in caplog.text
    again.settle(["m1"])  # a rewrite keeps it
    assert path.read_bytes() == future + b"\n"


# ---------------------------------------------------------------- logbook


def test_logbook_never_writes_an_id_twice_even_after_restart(tmp_path: Path) -> None:
    book = LogBook(tmp_path)
    line = inbound_line(inbound(1))
    assert book.write("telegram_1", [line, line]) == 1
    out = Outbound(ts=TS, channel="telegram", chat_id="telegram_1", content="hello")
    reply = outbound_line(out)
    assert book.write("telegram_1", [line, reply]) == 1
    assert LogBook(tmp_path).write("telegram_1", [line, reply]) == 0
    (path,) = (tmp_path / "telegram_1").iterdir()
    assert path.name == "2026-02-24.jsonl"
    records = read_jsonl(path).records
    assert [(r["id"], r["role"]) for r in records] == [("m1", "user"), (out.id, "assistant")]
    assert records[0]["meta"] == {"channel": "telegram", "chat_id": "telegram_1"}
    assert records[0]["ts"] == "2026-02-24T14:30:01Z"


def test_logbook_refuses_a_hostile_chat_id(tmp_path: Path) -> None:
    line = LogLine(id="x", ts=TS, role="user", content="hi")
    with pytest.raises(InvalidInput):
        LogBook(tmp_path).write("../../etc", [line])
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- access


def config(**telegram: object) -> GatewayConfig:
    return GatewayConfig.model_validate({"channels": {"telegram": telegram}})


def access(tmp_path: Path, cfg: GatewayConfig) -> Access:
    return Access(
        cfg, Approvals(tmp_path / "allowed-chats.json"), Pairings(tmp_path / "pairing.json")
    )


def test_access_is_fail_closed_with_implicit_replies(tmp_path: Path) -> None:
    a = access(tmp_path, config(allowedChatIds=["111", "telegram_222"]))
    assert a.inbound_allowed("telegram", "telegram_111")
    assert a.inbound_allowed("telegram", "telegram_222")
    assert not a.inbound_allowed("telegram", "telegram_333")
    assert a.inbound_allowed("console", "console_me")
    # Outbound: listed chats, and chats that wrote to us in this run.
    assert a.outbound_allowed("telegram", "telegram_111")
    assert not a.outbound_allowed("telegram", "telegram_333")
    a.note_inbound("telegram_333")
    assert a.outbound_allowed("telegram", "telegram_333")
    # A chat id is bound to its channel.
    assert not a.outbound_allowed("console", "telegram_111")
    assert not a.outbound_allowed("telegram", "discord_111")


def test_allow_all_is_an_explicit_opt_in(tmp_path: Path) -> None:
    assert not access(tmp_path, config()).inbound_allowed("telegram", "telegram_9")
    assert access(tmp_path, config(allowAll=True)).inbound_allowed("telegram", "telegram_9")
    # allowAll serves everyone, but the agent still may not start chats with strangers.
    assert not access(tmp_path, config(allowAll=True)).outbound_allowed("telegram", "telegram_9")


def test_pairing_codes_are_stable_per_chat_and_expire(tmp_path: Path) -> None:
    now = [TS]
    p = Pairings(tmp_path / "pairing.json", now=lambda: now[0])
    code = p.code_for("telegram_5", "5", "Eve")
    assert len(code) == 8 and p.code_for("telegram_5", "5", "Eve") == code
    assert p.code_for("telegram_6", "6", None) != code
    now[0] = TS + timedelta(hours=25)
    assert p.list() == []
    assert p.take(code) is None


def test_pair_approve_and_revoke_through_the_cli(klaw_home: KlawPaths) -> None:
    a = Access(config(), Approvals(klaw_home.approved_chats), Pairings(klaw_home.pairing))
    code = a.pairings.code_for("telegram_77", "77", "Alice")
    runner = CliRunner()
    listed = runner.invoke(app, ["pair", "list"])
    assert listed.exit_code == 0 and code in listed.stdout and "Alice" in listed.stdout
    assert not a.inbound_allowed("telegram", "telegram_77")

    bad = runner.invoke(app, ["pair", "approve", "NOPE1234"])
    assert bad.exit_code == 1 and "no pending pairing code" in bad.stderr
    ok = runner.invoke(app, ["pair", "approve", code.lower()])
    assert ok.exit_code == 0, ok.stderr
    assert a.inbound_allowed("telegram", "telegram_77")  # live, no restart
    assert stat.S_IMODE(os.stat(klaw_home.approved_chats).st_mode) == 0o600
    assert runner.invoke(app, ["pair", "approve", code]).exit_code == 1  # a code works once

    assert runner.invoke(app, ["pair", "revoke", "77"]).exit_code == 0  # a bare id works too
    assert not a.inbound_allowed("telegram", "telegram_77")
    gone = runner.invoke(app, ["pair", "revoke", "telegram_77"])
    assert gone.exit_code == 1 and "allowedChatIds" in gone.stderr


def test_a_corrupt_approvals_file_is_a_clear_error(klaw_home: KlawPaths) -> None:
    klaw_home.approved_chats.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.approved_chats.write_text("{not json")
    result = CliRunner().invoke(app, ["pair", "list"])
    assert result.exit_code == 1 and "allowed-chats.json is not valid JSON" in result.stderr
    assert klaw_home.approved_chats.read_text() == "{not json"


def test_a_message_kept_while_a_reply_settles_stays_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import klaw.gateway.buffer as buffer_module

    path = tmp_path / "gateway-buffer.jsonl"
    buf = Buffer(path)
    buf.add(inbound(1))
    buf.add(inbound(2))
    real_fsync = os.fsync
    in_rewrite = threading.local()
    snapshot_taken, added = threading.Event(), threading.Event()

    def fsync(fd: int) -> None:
        real_fsync(fd)
        if getattr(in_rewrite, "on", False) and not snapshot_taken.is_set():
            # The rewrite has its snapshot: let the other thread try to add now. With the
            # buffer's lock it cannot finish before the rewrite does (the wait times out);
            # without it, the add lands and the rewrite below would overwrite it.
            snapshot_taken.set()
            added.wait(2.0)

    monkeypatch.setattr(buffer_module.os, "fsync", fsync)

    def settle() -> None:  # a reply logged in a worker thread
        in_rewrite.on = True
        buf.settle(["m1"])

    def add() -> None:  # a new inbound kept in another thread
        snapshot_taken.wait(30)
        buf.add(inbound(3, chat="telegram_2"))
        added.set()

    threads = [threading.Thread(target=settle), threading.Thread(target=add)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert snapshot_taken.is_set() and added.is_set()
    assert [m.id for m in Buffer(path).pending()] == ["m2", "m3"]


def test_two_threads_first_touching_a_day_file_lose_no_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import klaw.gateway.logbook as logbook_module

    chat = "telegram_1"
    LogBook(tmp_path).write(chat, [inbound_line(inbound(0, chat))])
    book = LogBook(tmp_path)  # a fresh gateway: nothing cached
    real = logbook_module.iter_jsonl
    reading, second_done = threading.Event(), threading.Event()

    def slow(path: Path, *args: object) -> object:  # a large day file, read by t1 first
        out = list(real(path))
        if not reading.is_set():
            # t1 is learning the day file's ids: t2 writes now. With the logbook's lock t2
            # waits for t1 (the wait times out); without it t2's id would be lost.
            reading.set()
            second_done.wait(2.0)
        return iter(out)

    monkeypatch.setattr(logbook_module, "iter_jsonl", slow)
    new = inbound_line(inbound(1, chat))
    reply = outbound_line(Outbound(ts=TS, channel="telegram", chat_id=chat, content="hi"))

    def second() -> None:
        reading.wait(30)
        book.write(chat, [reply])
        second_done.set()

    t1 = threading.Thread(target=book.write, args=(chat, [new]))
    t2 = threading.Thread(target=second)
    t1.start()
    t2.start()
    t1.join(60)
    t2.join(60)
    assert reading.is_set() and second_done.is_set()
    monkeypatch.setattr(logbook_module, "iter_jsonl", real)
    assert book.has(chat, new) and book.has(chat, reply)
    book.write(chat, [new, reply])  # a redelivery and a re-sent reply
    (path,) = (tmp_path / chat).iterdir()
    ids = [r["id"] for r in read_jsonl(path).records]
    assert len(ids) == len(set(ids)) == 3

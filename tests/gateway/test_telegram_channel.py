"""TelegramChannel against the fake Bot API server, over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fake_telegram import BOT_USERNAME, TOKEN, USER_ID, FakeTelegram

from klaw.config import TelegramConfig
from klaw.gateway.channels.base import ChannelSendError, Incoming, rejected_notice
from klaw.gateway.channels.telegram.channel import (
    FILE_TOO_LARGE,
    TelegramChannel,
    TelegramError,
    safe_filename,
)
from klaw.gateway.channels.telegram.format import split_message, to_html
from klaw.wire.protocol import LineTooLong, Quote

CHAT = 1001  # a private chat
GROUP = -100777  # a supergroup


def make_channel(
    fake: FakeTelegram, inbox: Path, *, token: str = TOKEN, **kw: Any
) -> TelegramChannel:
    """A channel on the fake server with fast backoff (tests wait on events, not time)."""
    options: dict[str, Any] = {"backoff": 0.01, "max_backoff": 0.05, "poll_timeout": 5, **kw}
    return TelegramChannel(TelegramConfig(token=token, api_server=fake.url), inbox, **options)


@dataclass
class Listening:
    """`channel.listen` running in a task; what it passes on lands in `received`."""

    received: asyncio.Queue[Incoming]
    task: asyncio.Task[None]

    async def next(self, timeout: float = 10) -> Incoming:
        return await asyncio.wait_for(self.received.get(), timeout)


@contextlib.asynccontextmanager
async def listening_to(channel: TelegramChannel) -> AsyncIterator[Listening]:
    received: asyncio.Queue[Incoming] = asyncio.Queue()
    task = asyncio.create_task(channel.listen(received.put))
    try:
        yield Listening(received, task)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    return tmp_path / "workspace" / "inbox"


@pytest.fixture
async def channel(fake_telegram: FakeTelegram, inbox: Path) -> AsyncIterator[TelegramChannel]:
    ch = make_channel(fake_telegram, inbox)
    yield ch
    await ch.close()


@pytest.fixture
async def listening(channel: TelegramChannel) -> AsyncIterator[Listening]:
    async with listening_to(channel) as listener:
        yield listener


# ---------------------------------------------------------------------------- receiving


async def test_text_message(fake_telegram: FakeTelegram, listening: Listening) -> None:
    msg = fake_telegram.text(CHAT, "Hi there", date=1_771_943_400)
    got = await listening.next()
    assert got == Incoming(
        id=f"telegram_{CHAT}_{msg['message_id']}",
        channel="telegram",
        chat_id=f"telegram_{CHAT}",
        ts=datetime(2026, 2, 24, 14, 30, tzinfo=UTC),
        content="Hi there",
        sender=str(USER_ID),
        sender_name="Ann Lee",
    )
    assert got.ts.tzinfo is not None


async def test_group_message_is_flagged(fake_telegram: FakeTelegram, listening: Listening) -> None:
    fake_telegram.text(
        GROUP, "hello group", chat_type="supergroup", first_name="Bo", last_name=None
    )
    got = await listening.next()
    assert got.chat_id == f"telegram_{GROUP}"
    assert got.id == f"telegram_{GROUP}_1"
    assert got.is_group
    assert got.sender_name == "Bo"


async def test_messages_arrive_in_order(fake_telegram: FakeTelegram, listening: Listening) -> None:
    for i in range(5):
        fake_telegram.text(CHAT, f"m{i}")
    assert [(await listening.next()).content for _ in range(5)] == [f"m{i}" for i in range(5)]


@pytest.mark.parametrize(
    ("command", "args", "mention", "expected"),
    [
        ("model", "deepseek/deepseek-chat", None, ("model", "deepseek/deepseek-chat")),
        ("new", "", None, ("new", "")),
        ("Status", "", BOT_USERNAME, ("status", "")),
        ("help", "me  ", BOT_USERNAME.upper(), ("help", "me")),
    ],
)
async def test_commands(
    fake_telegram: FakeTelegram,
    listening: Listening,
    command: str,
    args: str,
    mention: str | None,
    expected: tuple[str, str],
) -> None:
    fake_telegram.command(CHAT, command, args, mention=mention)
    got = await listening.next()
    assert got.kind == "command"
    assert (got.command, got.args) == expected


async def test_not_commands(fake_telegram: FakeTelegram, listening: Listening) -> None:
    fake_telegram.command(GROUP, "help", chat_type="supergroup", mention="other_bot")
    fake_telegram.text(CHAT, "see /help")  # no bot_command entity at offset 0
    fake_telegram.text(CHAT, "/help")  # no entity at all: Telegram did not see a command
    for _ in range(3):
        got = await listening.next()
        assert got.kind == "inbound"
        assert got.command == ""


async def test_reply_carries_the_quoted_message(
    fake_telegram: FakeTelegram, listening: Listening
) -> None:
    original = fake_telegram.text(CHAT, "The original question")
    await listening.next()
    fake_telegram.text(CHAT, "and this?", reply_to=original)
    fake_telegram.text(CHAT, "just this part", reply_to=original, quote="original")
    whole, part = await listening.next(), await listening.next()
    quote_id = f"telegram_{CHAT}_{original['message_id']}"
    assert whole.reply_to == Quote(
        id=quote_id, sender=str(USER_ID), content="The original question"
    )
    assert part.reply_to == Quote(id=quote_id, sender=str(USER_ID), content="original")


async def test_photo_is_saved_largest_size(
    fake_telegram: FakeTelegram, listening: Listening, inbox: Path
) -> None:
    data = b"\xff\xd8 a jpeg, in spirit " * 100
    fake_telegram.photo(CHAT, data, caption="look at this")
    got = await listening.next()
    assert got.content == "look at this"
    assert got.unsupported is None
    (attachment,) = got.attachments
    path = Path(attachment.path)
    assert path.parent == inbox
    assert path.read_bytes() == data
    assert attachment.mime == "image/jpeg"
    assert attachment.size == len(data)
    assert not list(inbox.glob("*.part"))


async def test_photo_size_within_what_models_take(
    fake_telegram: FakeTelegram, listening: Listening
) -> None:
    """Of Telegram's five sizes the 1280 px one is saved, not the 2560 px original: a
    vision model would only get it shrunk (PHOTO_MAX_SIDE)."""
    sizes = []
    for width in (90, 320, 800, 1280, 2560):
        blob = f"jpeg {width}".encode()
        file_id = fake_telegram.add_file(blob, suffix=".jpg")
        sizes.append(
            {
                "file_id": file_id,
                "file_unique_id": f"U{file_id}",
                "width": width,
                "height": width * 3 // 4,
                "file_size": len(blob),
            }
        )
    fake_telegram.push(fake_telegram.message(CHAT, photo=sizes))
    # A panorama whose every size is wider than that: the smallest is still saved.
    wide = fake_telegram.add_file(b"jpeg 4000", suffix=".jpg")
    pano = [{"file_id": wide, "file_unique_id": "Uw", "width": 4000, "height": 900}]
    fake_telegram.push(fake_telegram.message(CHAT, photo=pano))
    first, second = await listening.next(), await listening.next()
    assert Path(first.attachments[0].path).read_bytes() == b"jpeg 1280"
    assert Path(second.attachments[0].path).read_bytes() == b"jpeg 4000"


@pytest.mark.parametrize(
    ("file_name", "expected_suffix"),
    [
        ("report.pdf", "report.pdf"),
        ("../../etc/passwd", "passwd"),
        ("a/b", "b"),
        ("..\\..\\windows\\win.ini", "win.ini"),
        ("", "file"),
        (None, "file"),
        ("..", "file"),
        (".bashrc", "bashrc"),
        ("evil\u202etxt.exe", "evil_txt.exe"),
        ("new\nline.txt", "new_line.txt"),
        ("отчёт 2026.docx", "отчёт 2026.docx"),
    ],
)
async def test_document_names_are_made_safe(
    fake_telegram: FakeTelegram,
    listening: Listening,
    inbox: Path,
    file_name: str | None,
    expected_suffix: str,
) -> None:
    data = b"%PDF-1.7 payload"
    msg = fake_telegram.document(CHAT, data, file_name, mime_type="application/pdf")
    got = await listening.next()
    (attachment,) = got.attachments
    path = Path(attachment.path)
    assert path.parent == inbox  # nothing escapes the inbox
    assert path.resolve().parent == inbox.resolve()
    assert path.name == f"telegram_{CHAT}_{msg['message_id']}_{expected_suffix}"
    assert path.read_bytes() == data
    assert attachment.mime == "application/pdf"
    assert attachment.name == (
        "".join(ch for ch in file_name if ch.isprintable()) if file_name else None
    )


async def test_very_long_names_are_truncated_keeping_the_extension(
    fake_telegram: FakeTelegram, listening: Listening
) -> None:
    fake_telegram.document(CHAT, b"x", "ж" * 300 + ".txt")
    path = Path((await listening.next()).attachments[0].path)
    assert path.suffix == ".txt"
    assert len(path.name.encode()) <= 255
    assert path.read_bytes() == b"x"


async def test_two_uploads_with_one_name_do_not_collide(
    fake_telegram: FakeTelegram, listening: Listening
) -> None:
    fake_telegram.document(CHAT, b"first", "same.txt")
    fake_telegram.document(GROUP, b"second", "same.txt", chat_type="supergroup")
    fake_telegram.document(CHAT, b"third", "same.txt")
    paths = [Path((await listening.next()).attachments[0].path) for _ in range(3)]
    assert len(set(paths)) == 3
    assert [p.read_bytes() for p in paths] == [b"first", b"second", b"third"]


def test_safe_filename_directly() -> None:
    assert safe_filename("x" * 500 + ".tar.gz").endswith(".gz")
    assert len(safe_filename("x" * 500).encode()) <= 120
    assert safe_filename("a" * 10 + "." + "e" * 40) == "a" * 10 + "." + "e" * 40
    assert safe_filename(" . ") == "file"
    assert safe_filename(None, default="photo.jpg") == "photo.jpg"
    assert "/" not in safe_filename("/") and safe_filename("/") == "file"


async def test_too_large_files_are_unsupported(fake_telegram: FakeTelegram, inbox: Path) -> None:
    channel = make_channel(fake_telegram, inbox, max_file_size=1000)
    try:
        async with listening_to(channel) as listening:
            fake_telegram.document(CHAT, b"x" * 2000, "big.bin", caption="declared too big")
            # declared small, but the download itself runs over the cap
            fake_telegram.document(CHAT, b"y" * 5000, "liar.bin", declared_size=10)
            for expected in ["declared too big", ""]:
                got = await listening.next()
                assert got.unsupported == FILE_TOO_LARGE
                assert got.attachments == ()
                assert got.content == expected
            assert not inbox.exists() or not any(inbox.iterdir())
            # a photo too big in full size comes in the largest size that fits
            fake_telegram.photo(CHAT, b"z" * 3000)
            got = await listening.next()
            assert Path(got.attachments[0].path).read_bytes() == b"medium-size"
    finally:
        await channel.close()


async def test_files_telegram_refuses_to_serve_are_unsupported(
    fake_telegram: FakeTelegram, listening: Listening
) -> None:
    fake_telegram.get_file_limit = 10  # getFile: "Bad Request: file is too big"
    fake_telegram.document(CHAT, b"x" * 100, "a.bin")
    got = await listening.next()
    assert got.unsupported == FILE_TOO_LARGE


@pytest.mark.parametrize("kind", ["video", "video_note", "sticker", "location", "contact", "dice"])
async def test_unsupported_kinds(
    fake_telegram: FakeTelegram, listening: Listening, kind: str
) -> None:
    fake_telegram.media(CHAT, kind)
    got = await listening.next()
    assert got.unsupported == kind
    assert got.kind == "inbound"
    assert got.attachments == ()


@pytest.mark.parametrize("kind", ["voice", "audio"])
async def test_voice_and_audio_are_saved_with_their_duration(
    fake_telegram: FakeTelegram, listening: Listening, tmp_path: Path, kind: str
) -> None:
    fake_telegram.media(CHAT, kind)
    got = await listening.next()
    assert got.unsupported is None and got.kind == "inbound"
    (att,) = got.attachments
    assert att.duration == 3.0 and Path(att.path).read_bytes() == b"media"
    if kind == "voice":
        assert att.mime == "audio/ogg" and att.path.endswith("voice.ogg")


async def test_service_messages_are_skipped(
    fake_telegram: FakeTelegram, listening: Listening
) -> None:
    fake_telegram.media(GROUP, "new_chat_members", chat_type="supergroup")
    fake_telegram.text(GROUP, "after the join", chat_type="supergroup")
    assert (await listening.next()).content == "after the join"
    assert listening.received.empty()


# ---------------------------------------------------------------------------- acknowledgement


async def test_update_acknowledged_only_after_on_message_returned(
    fake_telegram: FakeTelegram, channel: TelegramChannel
) -> None:
    release, entered = asyncio.Event(), asyncio.Event()
    seen: list[list[int]] = []

    async def on_message(msg: Incoming) -> None:
        seen.append(fake_telegram.pending)  # still queued on the server while we work
        entered.set()
        await release.wait()

    task = asyncio.create_task(channel.listen(on_message))
    try:
        update_id = fake_telegram.push(fake_telegram.message(CHAT, text="slow"))
        await asyncio.wait_for(entered.wait(), 10)
        assert seen == [[update_id]]
        assert all(c.params.get("offset") is None for c in fake_telegram.calls_of("getUpdates"))
        release.set()
        await fake_telegram.wait_calls(
            "getUpdates", where=lambda c: c.params.get("offset") == update_id + 1
        )
        assert fake_telegram.pending == []
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_failed_on_message_means_redelivery(
    fake_telegram: FakeTelegram, channel: TelegramChannel
) -> None:
    deliveries: list[Incoming] = []
    done = asyncio.Event()

    async def on_message(msg: Incoming) -> None:
        deliveries.append(msg)
        if len(deliveries) == 1:
            raise OSError("disk full")  # the gateway could not store it
        done.set()

    task = asyncio.create_task(channel.listen(on_message))
    try:
        update_id = fake_telegram.push(fake_telegram.message(CHAT, text="keep me"))
        await asyncio.wait_for(done.wait(), 10)
        assert [d.id for d in deliveries] == [deliveries[0].id] * 2
        offsets = [c.params.get("offset") for c in fake_telegram.calls_of("getUpdates")]
        assert update_id + 1 not in offsets[:2]  # not acknowledged after the failure
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_poison_update_is_dropped_after_max_deliveries(
    fake_telegram: FakeTelegram, inbox: Path
) -> None:
    channel = make_channel(fake_telegram, inbox, max_deliveries=3)
    attempts: list[str] = []
    passed: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(msg: Incoming) -> None:
        if msg.content == "poison":
            attempts.append(msg.id)
            raise ValueError("cannot handle this one")
        await passed.put(msg.content)

    task = asyncio.create_task(channel.listen(on_message))
    try:
        fake_telegram.text(CHAT, "poison")
        fake_telegram.text(CHAT, "next")
        # "next" does not wait for the poison's retries (finding 3); the poison is
        # tried max_deliveries times, then rejected and acknowledged.
        assert await asyncio.wait_for(passed.get(), 10) == "next"
        await fake_telegram.wait_for(lambda: len(attempts) == 3 and not fake_telegram.pending, 10)
        assert len(attempts) == 3
        # The sender hears that it was not passed on (it was not silently lost).
        sent = await fake_telegram.wait_sent(CHAT)
        assert [m.text for m in sent] == [rejected_notice(ValueError())]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await channel.close()


async def test_a_message_at_fault_is_rejected_at_once_and_the_sender_told(
    fake_telegram: FakeTelegram, inbox: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Hostile 13's second half: a message that cannot be stored as it is (here too big
    for a protocol line) fails the same way every time. It is not tried again (a voice
    note would be transcribed, and paid, each time): rejected, logged, the sender told."""
    channel = make_channel(fake_telegram, inbox, max_deliveries=5)
    attempts: list[str] = []
    passed: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(msg: Incoming) -> None:
        if msg.content == "huge":
            attempts.append(msg.id)
            raise LineTooLong("Inbound encodes to 1200000 bytes, over the 1048576-byte limit")
        await passed.put(msg.content)

    task = asyncio.create_task(channel.listen(on_message))
    try:
        with caplog.at_level(logging.ERROR, logger="klaw.gateway"):
            update_id = fake_telegram.push(fake_telegram.message(CHAT, text="huge"))
            fake_telegram.text(CHAT, "next")
            assert await asyncio.wait_for(passed.get(), 10) == "next"
            [notice] = await fake_telegram.wait_sent(CHAT)
        assert notice.text.startswith("⚠️ I couldn't take in your last message (it is too big")
        assert len(attempts) == 1
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
            f"telegram: update {update_id} cannot be taken in (Inbound encodes to 1200000 "
            "bytes, over the 1048576-byte limit); rejected without retrying"
        ]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await channel.close()


async def test_close_acknowledges_handled_updates(
    fake_telegram: FakeTelegram, channel: TelegramChannel
) -> None:
    handled = asyncio.Event()

    async def on_message(msg: Incoming) -> None:
        # From here on polls fail, so only close() can tell Telegram the update is done.
        fake_telegram.fail("getUpdates", status=502, description="Bad Gateway", times=10**6)
        handled.set()

    task = asyncio.create_task(channel.listen(on_message))
    update_id = fake_telegram.push(fake_telegram.message(CHAT, text="one"))
    await asyncio.wait_for(handled.wait(), 10)
    await fake_telegram.wait_calls("getUpdates", where=lambda c: c.status == 502)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert fake_telegram.pending == [update_id]  # handled, but Telegram was not told yet
    fake_telegram.clear_failures()
    await channel.close()
    assert fake_telegram.pending == []
    await channel.close()  # twice is fine


async def test_polling_survives_server_errors(
    fake_telegram: FakeTelegram, listening: Listening
) -> None:
    fake_telegram.fail("getUpdates", status=502, description="Bad Gateway", times=2)
    fake_telegram.text(CHAT, "still here")
    assert (await listening.next()).content == "still here"


async def test_rejected_token_stops_listening(fake_telegram: FakeTelegram, inbox: Path) -> None:
    channel = make_channel(fake_telegram, inbox, token="999:WRONG-token")
    try:
        with pytest.raises(TelegramError, match="token") as info:
            await channel.listen(lambda _: asyncio.sleep(0))
        assert "WRONG" not in str(info.value)
    finally:
        await channel.close()


@pytest.mark.parametrize("token", ["", "not a token", "abc:def"])
def test_malformed_token(tmp_path: Path, token: str) -> None:
    with pytest.raises(TelegramError, match="token"):
        TelegramChannel(TelegramConfig(token=token), tmp_path)


# ---------------------------------------------------------------------------- sending


async def test_send_renders_html(fake_telegram: FakeTelegram, channel: TelegramChannel) -> None:
    fake_telegram.add_chat(CHAT)
    await channel.send(f"telegram_{CHAT}", "**Done**: see `x < y` and [docs](https://a.io)")
    (sent,) = await fake_telegram.wait_sent(CHAT)
    assert sent.parse_mode == "HTML"
    assert sent.visible == "Done: see x < y and docs"
    assert [(e.type, e.text) for e in sent.entities] == [
        ("bold", "Done"),
        ("code", "x < y"),
        ("text_link", "docs"),
    ]


async def test_long_reply_with_code_is_split_and_accepted(
    fake_telegram: FakeTelegram, channel: TelegramChannel
) -> None:
    sections = []
    for i in range(10):
        sections.append(f"## Part {i}\n\n" + "Some **prose** here. " * 25)
        code = "\n".join(f"    value_{i}_{j} = compute({j})  # step" for j in range(30))
        sections.append(f"```python\ndef part_{i}():\n{code}\n```")
    text = "\n\n".join(sections)
    assert len(text) >= 10_000
    fake_telegram.add_chat(CHAT)
    await channel.send(f"telegram_{CHAT}", text)
    expected = split_message(text)
    sent = fake_telegram.sent_to(CHAT)
    assert len(sent) == len(expected) >= 3
    assert [s.text for s in sent] == [to_html(p) for p in expected]
    assert all(s.parse_mode == "HTML" for s in sent)
    # every line of code arrived inside a pre entity, none cut open
    code_seen = "\n".join(e.text for s in sent for e in s.entities if e.type == "pre")
    for i in range(10):
        for j in range(30):
            assert f"value_{i}_{j} = compute({j})" in code_seen
    assert all(e.language == "python" for s in sent for e in s.entities if e.type == "pre")


async def test_reply_to_our_id_of_the_same_chat(
    fake_telegram: FakeTelegram, channel: TelegramChannel
) -> None:
    original = fake_telegram.message(CHAT, text="question")
    await channel.send(
        f"telegram_{CHAT}", "answer", reply_to=f"telegram_{CHAT}_{original['message_id']}"
    )
    await channel.send(f"telegram_{CHAT}", "elsewhere", reply_to=f"telegram_{GROUP}_1")
    await channel.send(f"telegram_{CHAT}", "gone", reply_to=f"telegram_{CHAT}_999")
    first, second, third = fake_telegram.sent_to(CHAT)
    assert first.reply_to == original["message_id"]
    assert second.reply_to is None
    assert third.reply_to == 999  # sent anyway: allow_sending_without_reply


async def test_unparsable_html_falls_back_to_plain_text(
    fake_telegram: FakeTelegram, channel: TelegramChannel
) -> None:
    fake_telegram.add_chat(CHAT)
    fake_telegram.fail(
        "sendMessage",
        status=400,
        description="Bad Request: can't parse entities: Unsupported start tag at byte offset 3",
    )
    await channel.send(f"telegram_{CHAT}", "**bold** <x> text")
    (sent,) = fake_telegram.sent_to(CHAT)
    assert sent.parse_mode is None
    assert sent.text == "**bold** <x> text"  # the Markdown part, as is
    assert [c.status for c in fake_telegram.calls_of("sendMessage")] == [400, 200]


async def test_markup_only_text_goes_plain(
    fake_telegram: FakeTelegram, channel: TelegramChannel
) -> None:
    fake_telegram.add_chat(CHAT)
    await channel.send(f"telegram_{CHAT}", "```\n```")  # renders to nothing visible
    (sent,) = fake_telegram.sent_to(CHAT)
    assert sent.parse_mode is None
    await channel.send(f"telegram_{CHAT}", "  \n ")  # nothing to send at all
    assert len(fake_telegram.sent_to(CHAT)) == 1


async def test_rate_limit_is_waited_out(
    fake_telegram: FakeTelegram, channel: TelegramChannel
) -> None:
    fake_telegram.add_chat(CHAT)
    fake_telegram.fail("sendMessage", retry_after=1)
    await channel.send(f"telegram_{CHAT}", "patience")
    limited, delivered = fake_telegram.calls_of("sendMessage")
    assert (limited.status, delivered.status) == (429, 200)
    assert delivered.at - limited.at >= 1.0  # as measured by the server
    assert fake_telegram.sent_to(CHAT)[0].visible == "patience"


async def test_a_reply_waits_out_a_rate_limit_of_any_length(
    fake_telegram: FakeTelegram, inbox: Path
) -> None:
    """Finding 4: a reply is not dropped for a 429, even one longer than max_retry_after
    (which still bounds other calls): Telegram says when to try again, and it is waited."""
    channel = make_channel(fake_telegram, inbox, max_retry_after=0.01)
    try:
        fake_telegram.add_chat(CHAT)
        fake_telegram.fail("sendMessage", retry_after=1)
        await channel.send(f"telegram_{CHAT}", "later")
        assert [m.text for m in fake_telegram.sent_to(CHAT)] == ["later"]
        assert len(fake_telegram.calls_of("sendMessage")) == 2
    finally:
        await channel.close()


async def test_transient_errors_are_retried_until_the_reply_is_sent(
    fake_telegram: FakeTelegram, inbox: Path
) -> None:
    """Finding 4: 502 seven times then success: one reply, eight calls, nothing dropped."""
    channel = make_channel(fake_telegram, inbox, attempts=3)
    try:
        fake_telegram.add_chat(CHAT)
        fake_telegram.fail("sendMessage", status=502, description="Bad Gateway", times=7)
        await channel.send(f"telegram_{CHAT}", "eighth time lucky")
        assert [m.text for m in fake_telegram.sent_to(CHAT)] == ["eighth time lucky"]
        assert len(fake_telegram.calls_of("sendMessage")) == 8
    finally:
        await channel.close()


async def test_permanent_errors(fake_telegram: FakeTelegram, channel: TelegramChannel) -> None:
    with pytest.raises(ChannelSendError, match="chat not found") as info:
        await channel.send("telegram_555", "who?")  # never wrote to the bot
    assert info.value.permanent

    fake_telegram.add_chat(CHAT)
    fake_telegram.block(CHAT)
    with pytest.raises(ChannelSendError, match="blocked") as info:
        await channel.send(f"telegram_{CHAT}", "hello?")
    assert info.value.permanent

    for bad in ["discord_1", "telegram_", "telegram_abc"]:
        with pytest.raises(ChannelSendError) as info:
            await channel.send(bad, "x")
        assert info.value.permanent
    assert len(fake_telegram.calls_of("sendMessage")) == 2  # the bad ids never left


async def test_failure_midway_says_how_much_was_delivered(
    fake_telegram: FakeTelegram, channel: TelegramChannel
) -> None:
    fake_telegram.add_chat(CHAT)
    text = "\n\n".join(["paragraph " * 300] * 3)  # three parts
    calls = len(fake_telegram.calls)

    def block_after_first() -> bool:
        if len(fake_telegram.sent_to(CHAT)) == 1:
            fake_telegram.block(CHAT)
            return True
        return False

    task = asyncio.create_task(channel.send(f"telegram_{CHAT}", text))
    await fake_telegram.wait_for(block_after_first)
    with pytest.raises(ChannelSendError, match="1 of 3 parts delivered") as info:
        await task
    assert info.value.permanent
    assert len(fake_telegram.calls) == calls + 2


async def test_typing(fake_telegram: FakeTelegram, channel: TelegramChannel) -> None:
    fake_telegram.add_chat(CHAT)
    await channel.typing(f"telegram_{CHAT}")
    (call,) = fake_telegram.calls_of("sendChatAction")
    assert call.params == {"chat_id": CHAT, "action": "typing"}
    with pytest.raises(ChannelSendError) as info:
        await channel.typing("telegram_555")
    assert info.value.permanent


async def test_set_commands(fake_telegram: FakeTelegram, channel: TelegramChannel) -> None:
    await channel.set_commands([("new", "New session (context reset)"), ("status", "  ")])
    assert fake_telegram.commands == [
        {"command": "new", "description": "New session (context reset)"},
        {"command": "status", "description": "status"},
    ]
    with pytest.raises(TelegramError, match="command menu"):
        await channel.set_commands([("Bad-Name", "x")])


async def test_logs_hold_no_token_and_no_text_at_info(
    fake_telegram: FakeTelegram,
    channel: TelegramChannel,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="klaw.gateway.telegram")
    fake_telegram.add_chat(CHAT)
    fake_telegram.fail("sendMessage", retry_after=1)
    fake_telegram.fail("getUpdates", status=500, description="oops")
    async with listening_to(channel) as listening:
        fake_telegram.text(CHAT, "secret words from the user")
        await listening.next()
        await channel.send(f"telegram_{CHAT}", "secret words from the bot")
    records = [r for r in caplog.records if r.name == "klaw.gateway.telegram"]
    assert any(r.levelno == logging.WARNING for r in records)
    for record in records:
        text = record.getMessage()
        assert TOKEN not in text and TOKEN.split(":")[1] not in text
        if record.levelno >= logging.INFO:
            assert "secret" not in text


# ---------------------------------------------------------------------------- hostile updates


async def test_a_text_that_is_not_a_string_is_skipped_not_answered(
    fake_telegram: FakeTelegram, listening: Listening
) -> None:
    fake_telegram.push(fake_telegram.message(CHAT, text=12345))
    fake_telegram.text(CHAT, "after it")
    got = await listening.next()
    assert got.content == "after it"  # the odd one was not passed on as ""
    await fake_telegram.wait_for(lambda: fake_telegram.pending == [])


async def test_a_lone_surrogate_is_stored_replaced_and_holds_nobody_up(
    fake_telegram: FakeTelegram, listening: Listening
) -> None:
    fake_telegram.text(CHAT, "broken \ud800 text")
    fake_telegram.text(CHAT + 1, "innocent")
    first, second = await listening.next(), await listening.next()
    assert first.content == "broken \ufffd text"
    first.content.encode("utf-8")  # storable
    assert second.content == "innocent"


async def test_a_failing_update_holds_up_only_its_own_chat(
    fake_telegram: FakeTelegram, inbox: Path
) -> None:
    """Order within a chat is kept: A's first message fails once, so A's second one
    waits behind it (other chats go on); after the retry A's come in order."""
    channel = make_channel(fake_telegram, inbox, backoff=0.2, max_backoff=0.2)
    received: asyncio.Queue[Incoming] = asyncio.Queue()
    failed: list[str] = []

    async def on_message(inc: Incoming) -> None:
        if inc.content == "a1" and not failed:
            failed.append(inc.content)
            raise RuntimeError("a passing failure")
        await received.put(inc)

    fake_telegram.text(CHAT, "a1")
    fake_telegram.text(CHAT, "a2")
    fake_telegram.text(CHAT + 1, "b1")
    task = asyncio.create_task(channel.listen(on_message))
    try:
        got = [(await asyncio.wait_for(received.get(), 10)).content for _ in range(3)]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await channel.close()
    assert failed == ["a1"]
    assert got == ["b1", "a1", "a2"]


async def test_a_failing_update_does_not_hold_up_other_chats(
    fake_telegram: FakeTelegram, inbox: Path
) -> None:
    """Finding 3: chat A's update fails (its handler raises) and waits an hour for its
    retry; chat B's message behind it is handled now, and A stays unacknowledged."""
    channel = make_channel(fake_telegram, inbox, backoff=3600, max_backoff=3600)
    received: asyncio.Queue[Incoming] = asyncio.Queue()

    async def on_message(inc: Incoming) -> None:
        if inc.content == "poison":
            raise RuntimeError("a bug in handling this one")
        await received.put(inc)

    fake_telegram.text(CHAT, "poison")
    (poison,) = fake_telegram.pending
    task = asyncio.create_task(channel.listen(on_message))
    try:
        fake_telegram.text(CHAT + 1, "innocent")
        got = await asyncio.wait_for(received.get(), 10)
        assert got.content == "innocent"
        fake_telegram.text(CHAT + 2, "later")  # arrives while A still waits
        got = await asyncio.wait_for(received.get(), 10)
        assert got.content == "later"
        # A is never acknowledged while it waits: Telegram keeps it.
        assert fake_telegram.pending[0] == poison
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await channel.close()

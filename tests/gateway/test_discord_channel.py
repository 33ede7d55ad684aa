"""DiscordChannel (the real discord.py) against the fake Discord, over real HTTP and a
real websocket."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fake_discord import BOT_ID, OTHER_ID, TOKEN, USER_ID, VOICE_FLAG, FakeDiscord, snowflake_time

from klaw.config import DiscordConfig
from klaw.gateway.channels.base import (
    FILE_TOO_LARGE,
    STORAGE_NOTICE,
    ChannelSendError,
    Incoming,
    OutFile,
    rejected_notice,
)
from klaw.gateway.channels.discord.channel import (
    MESSAGE_LIMIT,
    NOT_SERVED_GUILD,
    DiscordChannel,
    DiscordError,
    looks_like_token,
)
from klaw.gateway.channels.telegram.format import split_message, utf16_len
from klaw.wire.protocol import InvalidMessage, Quote

T = 15.0
MESSAGES = "POST /channels/{channel}/messages"


@dataclass
class World:
    dm: int  # the owner's DM with the bot
    guild: int
    room: int  # a text channel of the server


@pytest.fixture
def world(fake_discord: FakeDiscord) -> World:
    guild = fake_discord.guild()
    return World(fake_discord.dm(), guild, fake_discord.channel(guild))


def make_channel(
    fake: FakeDiscord, tmp_path: Path, *, token: str = TOKEN, **kw: Any
) -> DiscordChannel:
    """A channel on the fake with fast backoff (tests wait on events, not time)."""
    options: dict[str, Any] = {"backoff": 0.01, "max_backoff": 0.05, "save_every": 0.01, **kw}
    config = DiscordConfig(enabled=True, token=token, api_server=fake.url)
    return DiscordChannel(config, tmp_path / "inbox", tmp_path / "cursor.json", **options)


@dataclass
class Listening:
    received: asyncio.Queue[Incoming]
    task: asyncio.Task[None]

    async def next(self, timeout: float = T) -> Incoming:
        return await asyncio.wait_for(self.received.get(), timeout)

    async def contents(self, count: int) -> list[str]:
        return [(await self.next()).content for _ in range(count)]


@contextlib.asynccontextmanager
async def listening_to(
    channel: DiscordChannel,
    fake: FakeDiscord,
    on_message: Callable[[Incoming], Awaitable[None]] | None = None,
) -> AsyncIterator[Listening]:
    received: asyncio.Queue[Incoming] = asyncio.Queue()
    task = asyncio.create_task(channel.listen(on_message or received.put))
    try:
        await fake.wait_for(lambda: fake.connected or task.done(), T)
        if task.done():
            task.result()
        yield Listening(received, task)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await channel.close()


@pytest.fixture
async def channel(fake_discord: FakeDiscord, tmp_path: Path) -> AsyncIterator[DiscordChannel]:
    ch = make_channel(fake_discord, tmp_path)
    yield ch
    await ch.close()


@pytest.fixture
async def listening(
    channel: DiscordChannel, fake_discord: FakeDiscord, world: World
) -> AsyncIterator[Listening]:
    async with listening_to(channel, fake_discord) as listener:
        yield listener


# ---------------------------------------------------------------------------- receiving


async def test_a_dm_is_a_private_chat(
    fake_discord: FakeDiscord, world: World, listening: Listening
) -> None:
    msg = fake_discord.message(world.dm, "Hi there")
    got = await listening.next()
    mid = int(msg["id"])
    assert got == Incoming(
        id=f"discord_{world.dm}_{mid}",
        channel="discord",
        chat_id=f"discord_{world.dm}",
        ts=snowflake_time(mid),
        content="Hi there",
        sender=str(USER_ID),
        sender_name="Ann Lee",
    )
    assert got.ts.tzinfo is not None and not got.is_group


async def test_in_a_server_only_mentions_and_replies_to_the_bot_are_passed_on(
    fake_discord: FakeDiscord, world: World, channel: DiscordChannel, listening: Listening
) -> None:
    fake = fake_discord
    other = fake.message(world.room, "talking among ourselves", author=OTHER_ID)
    fake.message(world.room, "a reply to Bo, not the bot", reply_to=other)
    fake.message(world.room, "what time is it?", mention=True)
    got = await listening.next()
    assert got.content == "what time is it?" and got.is_group
    assert got.chat_id == f"discord_{world.room}"
    await channel.send(got.chat_id, "Noon.")
    (ours,) = await fake.wait_sent(world.room)
    bot_msg = next(m for m in fake.channels[world.room].messages if int(m["id"]) == ours.message_id)
    fake.message(world.room, "and tomorrow?", reply_to=bot_msg)
    got = await listening.next()
    assert got.content == "and tomorrow?"
    assert got.reply_to == Quote(
        id=f"discord_{world.room}_{ours.message_id}", sender=str(BOT_ID), content="Noon."
    )
    assert listening.received.empty()


async def test_other_mentions_are_readable_names(
    fake_discord: FakeDiscord, world: World, listening: Listening
) -> None:
    msg = fake_discord.message(world.room, f"ask <@{OTHER_ID}> about <@{BOT_ID}>", mention=True)
    msg["mentions"].append(fake_discord.users[OTHER_ID])  # as Discord lists them
    got = await listening.next()
    assert got.content == "ask @Bo about @Klaw"


async def test_messages_of_a_chat_arrive_in_order(
    fake_discord: FakeDiscord, world: World, listening: Listening
) -> None:
    for i in range(30):
        fake_discord.message(world.dm, f"d{i}")
        fake_discord.message(world.room, f"r{i}", mention=True)
    got = [await listening.next() for _ in range(60)]
    dm = [g.content for g in got if g.chat_id == f"discord_{world.dm}"]
    room = [g.content for g in got if g.chat_id == f"discord_{world.room}"]
    assert dm == [f"d{i}" for i in range(30)]
    assert room == [f"r{i}" for i in range(30)]


async def test_own_messages_other_bots_and_service_messages_are_skipped(
    fake_discord: FakeDiscord, world: World, channel: DiscordChannel, listening: Listening
) -> None:
    fake = fake_discord
    bot = fake.user(300, "helper", bot=True)
    await channel.send(f"discord_{world.dm}", "from the bot itself")  # echoed by Discord
    fake.message(world.dm, "from another bot", author=int(bot["id"]))
    fake.message(world.room, "", kind=7)  # "Ann joined the server"
    fake.message(world.dm, "a person")
    assert (await listening.next()).content == "a person"
    assert listening.received.empty()


async def test_typed_commands_count_only_for_registered_names(
    fake_discord: FakeDiscord, world: World, channel: DiscordChannel, listening: Listening
) -> None:
    await channel.set_commands([("model", "Show/change the LLM model"), ("new", "")])
    fake_discord.message(world.dm, "/model deepseek/deepseek-chat")
    fake_discord.message(world.dm, "/shrug")
    fake_discord.message(world.room, "/NEW", mention=True)
    got = [await listening.next() for _ in range(3)]
    first, second = (g for g in got if not g.is_group)  # in order within a chat
    (third,) = (g for g in got if g.is_group)
    assert (first.kind, first.command, first.args) == ("command", "model", "deepseek/deepseek-chat")
    assert (second.kind, second.content) == ("inbound", "/shrug")
    assert (third.kind, third.command, third.is_group) == ("command", "new", True)


async def test_attachments_are_saved_in_the_inbox(
    fake_discord: FakeDiscord, world: World, tmp_path: Path, listening: Listening
) -> None:
    fake_discord.message(
        world.dm,
        "my notes",
        attachments=[
            ("../../etc/notes.txt", b"buy milk", "text/plain"),
            ("cat.png", b"\x89PNG", "image/png"),
        ],
    )
    got = await listening.next()
    assert got.content == "my notes"
    notes, cat = got.attachments
    assert Path(notes.path).parent == tmp_path / "inbox"
    assert Path(notes.path).read_bytes() == b"buy milk" and notes.mime == "text/plain"
    assert Path(notes.path).name.endswith("_1_notes.txt") and notes.size == 8
    assert Path(cat.path).name.endswith("_2_cat.png") and cat.mime == "image/png"
    assert not list((tmp_path / "inbox").glob("*.part"))


@pytest.mark.parametrize(
    ("options", "kind"),
    [
        (
            {
                "attachments": [("big.bin", b"x", "application/octet-stream")],
                "declared_size": 30 << 20,
            },
            FILE_TOO_LARGE,
        ),
        ({"stickers": True}, "sticker"),
        ({"poll": True}, "poll"),
    ],
)
async def test_what_cannot_be_passed_on_is_named(
    fake_discord: FakeDiscord,
    world: World,
    tmp_path: Path,
    listening: Listening,
    options: dict[str, Any],
    kind: str,
) -> None:
    fake_discord.message(world.dm, **options)
    got = await listening.next()
    assert got.unsupported == kind and not got.attachments
    assert not (tmp_path / "inbox").exists()


async def test_a_voice_message_is_saved_with_its_length(
    fake_discord: FakeDiscord, world: World, listening: Listening
) -> None:
    fake_discord.message(
        world.dm, attachments=[("voice-message.ogg", b"OggS", "audio/ogg")], flags=VOICE_FLAG
    )
    got = await listening.next()
    (att,) = got.attachments
    assert got.unsupported is None and att.mime == "audio/ogg" and att.duration == 3.5
    assert Path(att.path).read_bytes() == b"OggS"


async def test_a_strangers_attachments_are_not_downloaded(
    fake_discord: FakeDiscord, world: World, tmp_path: Path
) -> None:
    channel = make_channel(fake_discord, tmp_path, admit=lambda chat: chat != f"discord_{world.dm}")
    async with listening_to(channel, fake_discord) as listening:
        fake_discord.message(world.dm, "spam", attachments=[("spam.bin", b"x" * 100, "text/plain")])
        got = await listening.next()
    assert got.content == "spam" and not got.attachments
    assert not (tmp_path / "inbox").exists()
    assert not any(c.route.startswith("GET /cdn") for c in fake_discord.calls)


# ---------------------------------------------------------------------------- the connection


async def test_a_dropped_connection_is_resumed_and_nothing_is_lost_or_doubled(
    fake_discord: FakeDiscord, world: World, listening: Listening
) -> None:
    fake = fake_discord
    fake.drop_after(7)  # the network dies mid-stream, after 7 of 25 messages
    for i in range(25):
        fake.message(world.dm, f"m{i}")
    assert await listening.contents(25) == [f"m{i}" for i in range(25)]
    assert (fake.identifies, fake.resumes) == (1, 1)
    assert [op["op"] for op in fake.gateway_ops if op["op"] in (2, 6)] == [2, 6]
    assert [op["op"] for op in fake.gateway_ops].count(1) >= 2  # a heartbeat per connection
    fake.message(world.dm, "after")
    assert (await listening.next()).content == "after"
    assert listening.received.empty()


async def test_a_server_that_replays_too_much_doubles_nothing(
    fake_discord: FakeDiscord, world: World, listening: Listening
) -> None:
    fake = fake_discord
    fake.replay_overlap = 6  # at-least-once: the RESUME replays events already delivered
    for i in range(10):
        fake.message(world.dm, f"m{i}")
    assert await listening.contents(10) == [f"m{i}" for i in range(10)]
    fake.drop()
    await fake.wait_for(lambda: fake.resumes == 1 and fake.connected)
    fake.message(world.dm, "new")
    assert (await listening.next()).content == "new"
    assert listening.received.empty()


async def test_a_reconnect_request_is_resumed(
    fake_discord: FakeDiscord, world: World, listening: Listening
) -> None:
    await fake_discord.reconnect()  # op 7
    fake_discord.message(world.dm, "still here")
    assert (await listening.next()).content == "still here"
    assert fake_discord.resumes == 1 and fake_discord.identifies == 1


async def test_a_refused_resume_starts_a_new_session_and_catches_up(
    fake_discord: FakeDiscord, world: World, listening: Listening
) -> None:
    """Discord forgot the session (INVALID_SESSION): what was said meanwhile belongs to
    no session and is not replayed; the new session reads it back from the history.
    (discord.py waits 5 s before identifying again, as Discord asks.)"""
    fake = fake_discord
    fake.message(world.dm, "before")
    assert (await listening.next()).content == "before"
    fake.invalidate()
    fake.drop()
    for i in range(3):
        fake.message(world.dm, f"gap{i}")  # no session: history only
    assert await listening.contents(3) == ["gap0", "gap1", "gap2"]
    assert fake.identifies == 2
    fake.message(world.dm, "live")
    assert (await listening.next()).content == "live"
    assert listening.received.empty()


async def test_a_restart_catches_up_with_what_was_said_meanwhile(
    fake_discord: FakeDiscord, world: World, tmp_path: Path
) -> None:
    fake = fake_discord
    async with listening_to(make_channel(fake, tmp_path), fake) as listening:
        fake.message(world.dm, "one")
        fake.message(world.room, "room one", mention=True)
        await listening.contents(2)
    fake.message(world.dm, "two")  # the gateway is down
    fake.message(world.room, "not for the bot")
    fake.message(world.room, "room two", mention=True)
    fake.message(world.dm, "three")
    async with listening_to(make_channel(fake, tmp_path), fake) as listening:
        fake.message(world.dm, "four")
        got = [await listening.next() for _ in range(4)]
        by_chat = {
            chat: [g.content for g in got if g.chat_id == f"discord_{chat}"]
            for chat in (world.dm, world.room)
        }
        assert by_chat == {world.dm: ["two", "three", "four"], world.room: ["room two"]}
        assert listening.received.empty()


async def test_a_message_whose_handling_did_not_finish_comes_back_after_a_restart(
    fake_discord: FakeDiscord, world: World, tmp_path: Path
) -> None:
    fake = fake_discord
    entered = asyncio.Event()

    async def stuck(inc: Incoming) -> None:
        if inc.content == "stuck":
            entered.set()
            await asyncio.Event().wait()  # the process dies in here

    async with listening_to(make_channel(fake, tmp_path), fake, stuck):
        fake.message(world.dm, "fine")
        fake.message(world.dm, "stuck")
        await asyncio.wait_for(entered.wait(), T)
    async with listening_to(make_channel(fake, tmp_path), fake) as listening:
        assert (await listening.next()).content == "stuck"  # "fine" was done: not again
        assert listening.received.empty()


async def test_a_failing_message_is_retried_then_dropped_holding_up_only_its_chat(
    fake_discord: FakeDiscord, world: World, tmp_path: Path
) -> None:
    attempts: list[str] = []
    received: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(inc: Incoming) -> None:
        if inc.content == "poison":
            attempts.append(inc.id)
            raise ValueError("cannot handle this one")
        if inc.content == "flaky" and "flaky" not in attempts:
            attempts.append("flaky")
            raise RuntimeError("a passing failure")
        await received.put(inc.content)

    channel = make_channel(fake_discord, tmp_path, max_deliveries=3, backoff=0.05)
    async with listening_to(channel, fake_discord, on_message):
        fake_discord.message(world.dm, "poison")
        fake_discord.message(world.dm, "flaky")
        fake_discord.message(world.dm, "after")
        fake_discord.message(world.room, "elsewhere", mention=True)
        assert await asyncio.wait_for(received.get(), T) == "elsewhere"  # not held up
        got = [await asyncio.wait_for(received.get(), T) for _ in range(2)]
    assert got == ["flaky", "after"]
    assert len([a for a in attempts if a != "flaky"]) == 3
    await fake_discord.wait_for(lambda: bool(fake_discord.sent_to(world.dm)), T)
    assert [m.content for m in fake_discord.sent_to(world.dm)] == [rejected_notice(ValueError())]


async def test_a_message_at_fault_is_rejected_at_once_and_the_sender_told(
    fake_discord: FakeDiscord, world: World, tmp_path: Path
) -> None:
    """A message that cannot be stored as it is fails the same way every time: one try,
    then the sender is told (hostile 13: five tries meant five paid transcriptions)."""
    attempts: list[str] = []
    received: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(inc: Incoming) -> None:
        if inc.content == "malformed":
            attempts.append(inc.id)
            raise InvalidMessage("inbound: content is not a string")
        await received.put(inc.content)

    channel = make_channel(fake_discord, tmp_path, max_deliveries=5, backoff=0.05)
    async with listening_to(channel, fake_discord, on_message):
        fake_discord.message(world.dm, "malformed")
        fake_discord.message(world.dm, "after")
        assert await asyncio.wait_for(received.get(), T) == "after"
        await fake_discord.wait_for(lambda: bool(fake_discord.sent_to(world.dm)), T)
    assert len(attempts) == 1
    [notice] = fake_discord.sent_to(world.dm)
    assert notice.content == rejected_notice(InvalidMessage(""))
    assert "(it could not be read)" in notice.content


async def test_a_storage_outage_keeps_the_message_until_the_disk_is_back(
    fake_discord: FakeDiscord, world: World, tmp_path: Path
) -> None:
    full = {"on": True}
    stored: asyncio.Queue[str] = asyncio.Queue()
    tries: list[str] = []

    async def on_message(inc: Incoming) -> None:
        tries.append(inc.content)
        if full["on"]:
            if len(tries) >= 8:
                full["on"] = False  # the owner freed some space
            raise OSError(errno.ENOSPC, "No space left on device")
        await stored.put(inc.content)

    channel = make_channel(fake_discord, tmp_path, max_deliveries=2)
    async with listening_to(channel, fake_discord, on_message):
        fake_discord.message(world.dm, "precious")
        fake_discord.message(world.dm, "second")
        assert await asyncio.wait_for(stored.get(), T) == "precious"  # never dropped
        assert await asyncio.wait_for(stored.get(), T) == "second"
    notices = [s.content for s in fake_discord.sent_to(world.dm)]
    assert notices == [STORAGE_NOTICE]  # once per chat and outage


async def test_a_rejected_token_stops_the_channel(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    channel = make_channel(fake_discord, tmp_path, token="MTk5.WRONG.token-for-this-fake-server")
    try:
        with pytest.raises(DiscordError, match="refused the bot token") as info:
            await channel.listen(lambda _: asyncio.sleep(0))
        assert "WRONG" not in str(info.value)
        with pytest.raises(ChannelSendError, match="Discord is off"):
            await channel.send("discord_1", "anyone?")
    finally:
        await channel.close()


async def test_a_missing_message_content_intent_is_explained(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    fake_discord.content_intent_allowed = False
    channel = make_channel(fake_discord, tmp_path)
    try:
        with pytest.raises(DiscordError, match="Message Content intent"):
            await asyncio.wait_for(channel.listen(lambda _: asyncio.sleep(0)), T)
    finally:
        await channel.close()


@pytest.mark.parametrize("token", ["", "  ", "not a token", "123456:ABC-telegram-style"])
def test_malformed_tokens(tmp_path: Path, token: str) -> None:
    assert not looks_like_token(token)
    with pytest.raises(DiscordError, match="token"):
        DiscordChannel(DiscordConfig(enabled=True, token=token), tmp_path, tmp_path / "c.json")


# ---------------------------------------------------------------------------- sending


async def test_replies_are_markdown_with_every_mention_disabled(
    fake_discord: FakeDiscord, world: World, channel: DiscordChannel, listening: Listening
) -> None:
    msg = fake_discord.message(world.dm, "hi")
    inc = await listening.next()
    text = "**Done**, @everyone: see `x < y`"
    await channel.send(inc.chat_id, text, reply_to=inc.id)
    (sent,) = fake_discord.sent_to(world.dm)
    assert sent.content == text  # Discord renders the Markdown itself
    assert sent.allowed_mentions == {"parse": [], "replied_user": False}
    assert sent.reference == int(msg["id"])


async def test_a_long_reply_is_split_keeping_code_blocks(
    fake_discord: FakeDiscord, world: World, channel: DiscordChannel, listening: Listening
) -> None:
    block = "```python\n" + "\n".join(f"x_{i} = {i}  # ünïcödé 🐍" for i in range(80)) + "\n```"
    text = "\n\n".join(f"Part {i}: some prose here.\n\n{block}" for i in range(5))
    assert len(text) > 4 * MESSAGE_LIMIT
    await channel.send(f"discord_{world.dm}", text)
    parts = fake_discord.sent_to(world.dm)
    assert len(parts) >= 5
    for p in parts:
        assert utf16_len(p.content) <= MESSAGE_LIMIT
        assert p.content.count("```") % 2 == 0  # every block that opens closes in its part
    code = [ln for p in parts for ln in p.content.splitlines() if ln.startswith("x_")]
    assert code == [f"x_{i} = {i}  # ünïcödé 🐍" for _ in range(5) for i in range(80)]
    assert parts[0].reference is None


async def test_a_429_is_waited_out(
    fake_discord: FakeDiscord, world: World, channel: DiscordChannel, listening: Listening
) -> None:
    fake_discord.fail(MESSAGES, retry_after=0.6)
    await channel.send(f"discord_{world.dm}", "patience")
    limited, delivered = fake_discord.calls_of(MESSAGES)
    assert (limited.status, delivered.status) == (429, 200)
    assert delivered.at - limited.at >= 0.6  # as measured by the server
    assert [s.content for s in fake_discord.sent_to(world.dm)] == ["patience"]


async def test_the_rate_limit_bucket_is_respected_without_429s(
    fake_discord: FakeDiscord, world: World, channel: DiscordChannel, listening: Listening
) -> None:
    fake_discord.bucket = (2, 0.5)  # two messages per half second in this channel
    text = "\n\n".join(f"paragraph {i} " + "word " * 390 for i in range(6))
    await channel.send(f"discord_{world.dm}", text)
    sent = fake_discord.sent_to(world.dm)
    assert len(sent) == 6 and fake_discord.violations == 0
    assert sent[-1].at - sent[0].at >= 1.0  # three windows for six messages


async def test_server_errors_are_retried_until_the_reply_is_sent(
    fake_discord: FakeDiscord, world: World, channel: DiscordChannel, listening: Listening
) -> None:
    fake_discord.fail(MESSAGES, status=503, times=6, message="upstream connect error")
    await channel.send(f"discord_{world.dm}", "seventh time lucky")
    assert [s.content for s in fake_discord.sent_to(world.dm)] == ["seventh time lucky"]
    assert len(fake_discord.calls_of(MESSAGES)) == 7


async def test_permanent_errors(
    fake_discord: FakeDiscord, world: World, channel: DiscordChannel, listening: Listening
) -> None:
    with pytest.raises(ChannelSendError, match="does not know this channel") as info:
        await channel.send("discord_12345", "who?")
    assert info.value.permanent
    fake_discord.block(world.dm)
    with pytest.raises(ChannelSendError, match="may not write there") as info:
        await channel.send(f"discord_{world.dm}", "hello?")
    assert info.value.permanent
    for bad in ["telegram_1", "discord_", "discord_abc", "discord_-5"]:
        with pytest.raises(ChannelSendError) as info:
            await channel.send(bad, "x")
        assert info.value.permanent
    assert len(fake_discord.calls_of(MESSAGES)) == 2  # the bad ids never left


async def test_a_failure_midway_says_how_much_was_delivered(
    fake_discord: FakeDiscord, world: World, channel: DiscordChannel, listening: Listening
) -> None:
    text = "\n\n".join(["paragraph " * 150] * 3)  # three parts

    def block_after_first() -> bool:
        if len(fake_discord.sent_to(world.dm)) == 1:
            fake_discord.block(world.dm)
            return True
        return False

    task = asyncio.create_task(channel.send(f"discord_{world.dm}", text))
    await fake_discord.wait_for(block_after_first)
    with pytest.raises(ChannelSendError, match="1 of 3 parts delivered"):
        await task


async def test_files_go_out_with_the_last_part(
    fake_discord: FakeDiscord,
    world: World,
    tmp_path: Path,
    channel: DiscordChannel,
    listening: Listening,
) -> None:
    path = tmp_path / "report.csv"
    path.write_bytes(b"a,b\n1,2\n")
    fd = os.open(path, os.O_RDONLY)
    report = OutFile("report.csv", "text/csv", 8, fd, str(path))
    await channel.send(f"discord_{world.dm}", "Here it is.", files=[report])
    (sent,) = fake_discord.sent_to(world.dm)
    assert sent.content == "Here it is." and sent.files == [("report.csv", b"a,b\n1,2\n")]
    await channel.send(f"discord_{world.dm}", "", files=[report])  # a file alone
    assert fake_discord.sent_to(world.dm)[1].files == [("report.csv", b"a,b\n1,2\n")]
    os.close(fd)


async def test_typing(
    fake_discord: FakeDiscord, world: World, channel: DiscordChannel, listening: Listening
) -> None:
    await channel.typing(f"discord_{world.dm}")
    assert len(fake_discord.calls_of("POST /channels/{channel}/typing")) == 1
    with pytest.raises(ChannelSendError) as info:
        await channel.typing("discord_12345")
    assert info.value.permanent


# ---------------------------------------------------------------------------- slash commands


async def test_slash_commands_are_registered_once(
    fake_discord: FakeDiscord, channel: DiscordChannel, listening: Listening
) -> None:
    commands = [("new", "New session (context reset)"), ("status", "  "), ("help", "x" * 300)]
    await channel.set_commands(commands)
    assert [(c["name"], c["description"]) for c in fake_discord.commands] == [
        ("new", "New session (context reset)"),
        ("status", "status"),
        ("help", "x" * 100),
    ]
    assert all(c["options"][0]["name"] == "args" for c in fake_discord.commands)
    await channel.set_commands(commands)  # the same again (a gateway restart): no PUT
    assert fake_discord.command_puts == 1
    await channel.set_commands([*commands, ("models", "List available models")])
    assert fake_discord.command_puts == 2
    with pytest.raises(DiscordError, match="slash commands"):
        await channel.set_commands([("Bad Name", "x")])


async def test_a_slash_command_is_acknowledged_and_its_answer_replaces_thinking(
    fake_discord: FakeDiscord, world: World, channel: DiscordChannel, listening: Listening
) -> None:
    interaction = fake_discord.slash(world.room, "model", "deepseek/deepseek-chat")
    got = await listening.next()
    assert (got.kind, got.command, got.args, got.is_group) == (
        "command",
        "model",
        "deepseek/deepseek-chat",
        True,
    )
    await fake_discord.wait_for(lambda: interaction.callback is not None)
    assert interaction.callback is not None and interaction.callback["type"] == 5  # thinking…
    assert interaction.callback_at is not None and interaction.callback_at - interaction.at < 3
    long = "Model set.\n\n" + "detail " * 400
    await channel.send(got.chat_id, long, reply_to=got.id)
    first, *rest = split_message(long, MESSAGE_LIMIT)
    assert interaction.edits == [first] == ["Model set."]  # it replaces "thinking…"
    assert [s.content for s in fake_discord.sent_to(world.room)] == rest  # then messages


async def test_a_slash_command_in_a_chat_not_served_is_refused_privately(
    fake_discord: FakeDiscord, world: World, tmp_path: Path
) -> None:
    channel = make_channel(fake_discord, tmp_path, admit=lambda chat: False)
    async with listening_to(channel, fake_discord) as listening:
        interaction = fake_discord.slash(world.room, "status")
        got = await listening.next()  # the gateway core decides what else to do
        assert got.command == "status"
        await fake_discord.wait_for(lambda: interaction.callback is not None)
    callback = interaction.callback
    assert callback is not None and callback["type"] == 4  # a message, no "thinking…"
    assert callback["data"]["content"] == NOT_SERVED_GUILD
    assert callback["data"]["flags"] & 64  # ephemeral: only its sender sees it


async def test_an_expired_slash_command_is_answered_with_a_message(
    fake_discord: FakeDiscord, world: World, channel: DiscordChannel, listening: Listening
) -> None:
    interaction = fake_discord.slash(world.dm, "help")
    got = await listening.next()
    await fake_discord.wait_for(lambda: interaction.callback is not None)
    fake_discord.expire(interaction)  # the engine took longer than 15 minutes
    await channel.send(got.chat_id, "Commands: …", reply_to=got.id)
    assert interaction.edits == []
    assert [s.content for s in fake_discord.sent_to(world.dm)] == ["Commands: …"]


# ---------------------------------------------------------------------------- logs


async def test_logs_hold_no_token_and_no_text_at_info(
    fake_discord: FakeDiscord,
    world: World,
    channel: DiscordChannel,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    fake_discord.fail(MESSAGES, status=503, message="oops")
    async with listening_to(channel, fake_discord) as listening:
        fake_discord.message(world.dm, "secret words from the user")
        await listening.next()
        await channel.send(f"discord_{world.dm}", "secret words from the bot")
        fake_discord.drop()
        await fake_discord.wait_for(lambda: fake_discord.resumes == 1 and fake_discord.connected)
    records = [r for r in caplog.records if r.name.startswith("klaw.gateway.discord")]
    assert any(r.levelno == logging.WARNING for r in records)
    for record in caplog.records:
        text = record.getMessage()
        assert TOKEN not in text and TOKEN.split(".")[2] not in text
        if record.levelno >= logging.INFO and record.name.startswith("klaw"):
            assert "secret" not in text

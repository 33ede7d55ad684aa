"""Discord end to end: the fake Discord (REST and gateway websocket over real sockets),
the real discord.py inside the real gateway, the real engine with klaw.db and the real
embedding model, and a scripted OpenAI-compatible model server. The gateway also runs as
its own process, killed with SIGKILL mid-stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fake_discord import OTHER_ID, TOKEN, FakeDiscord

from engine_harness import T, engine_running, gateway_with, log_lines, until
from klaw.cli.app import app
from klaw.cli.testing import CliRunner
from klaw.config import EngineConfig, GatewayConfig, load_gateway_config
from klaw.errors import ConfigError
from klaw.gateway.access import MAX_PENDING
from klaw.gateway.buffer import Buffer
from klaw.gateway.channels.discord.channel import MESSAGE_LIMIT, DiscordChannel
from klaw.gateway.channels.telegram.format import utf16_len
from klaw.gateway.core import Gateway
from klaw.gateway.daemon import DISCORD_CURSOR, build_channels
from klaw.paths import KlawPaths
from scripted_llm import FakeLLM, call, offered


def discord_config(fake: FakeDiscord, allowed: list[int], **discord: Any) -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "channels": {
                "telegram": {"enabled": False},
                "discord": {
                    "enabled": True,
                    "token": TOKEN,
                    "apiServer": fake.url,
                    "allowedChatIds": [str(a) for a in allowed],
                    **discord,
                },
                "console": {"enabled": False},
            }
        }
    )


@contextlib.asynccontextmanager
async def gateway_running(
    paths: KlawPaths, fake: FakeDiscord, cfg: GatewayConfig
) -> AsyncIterator[Gateway]:
    channel = DiscordChannel(
        cfg.channels.discord,
        paths.inbox,
        paths.state_dir / DISCORD_CURSOR,
        backoff=0.01,
        max_backoff=0.05,
        save_every=0.01,
        previews_file=paths.state_dir / "discord-previews.json",
    )
    async with gateway_with(paths, cfg, [channel], ready=lambda: fake.connected) as gateway:
        yield gateway


async def test_a_dm_is_answered_and_logged(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_discord: FakeDiscord,
) -> None:
    fake = fake_discord
    dm = fake.dm()
    llm.answer(None, [call("c1", "current_time", "{}")])
    llm.answer("It is **tea time**.")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake, discord_config(fake, [dm])) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        # engine.yaml `commands` became slash commands
        await fake.wait_for(lambda: bool(fake.commands))
        assert {"new", "model", "models", "memory", "status", "help"} <= {
            c["name"] for c in fake.commands
        }
        question = fake.message(dm, "What time is it?")
        (sent,) = await fake.wait_sent(dm, 1, T)
        assert sent.content == "It is **tea time**."  # Discord renders Markdown itself
        assert sent.reference == int(question["id"]) and sent.allowed_mentions
        assert fake.calls_of("POST /channels/{channel}/typing")  # while the engine worked
        await until(lambda: len(gw.buffer) == 0, T)
    chat = f"discord_{dm}"
    lines = log_lines(klaw_home, chat)
    assert [r["role"] for r in lines] == ["user", "assistant", "tool", "assistant"]
    assert lines[0]["content"] == "What time is it?"
    assert lines[0]["meta"]["channel"] == "discord" and "group" not in lines[0]["meta"]
    assert lines[3]["content"] == "It is **tea time**."


async def test_a_slash_command_is_answered_in_place(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_discord: FakeDiscord,
) -> None:
    fake = fake_discord
    dm = fake.dm()
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake, discord_config(fake, [dm])) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        interaction = fake.slash(dm, "new")
        await fake.wait_for(lambda: bool(interaction.edits), T)
        assert interaction.callback is not None and interaction.callback["type"] == 5
        assert "New session" in interaction.edits[0]
        assert fake.sent_to(dm) == []  # no separate message: the answer replaced "thinking…"
    types = [(r["role"], r.get("type")) for r in log_lines(klaw_home, f"discord_{dm}")]
    assert types == [
        ("user", "command"),
        ("system", "session_break"),
        ("assistant", "command_reply"),
    ]
    assert not llm.requests


async def test_strangers_get_a_pairing_code_until_approved(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_discord: FakeDiscord,
) -> None:
    fake = fake_discord
    owner, stranger = fake.dm(), fake.dm(OTHER_ID)
    llm.answer("Welcome!")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake, discord_config(fake, [owner])) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.message(stranger, "hello?", author=OTHER_ID)
        (notice,) = await fake.wait_sent(stranger, 1, T)
        code = notice.content.rsplit(" ", 1)[-1]
        assert "klaw pair approve" in notice.content and len(code) == 8
        assert not llm.requests and not log_lines(klaw_home, f"discord_{stranger}")
        (pending,) = json.loads(klaw_home.pairing.read_text()).values()
        assert pending["chat_id"] == f"discord_{stranger}" and pending["sender_name"] == "Bo"
        result = CliRunner().invoke(app, ["pair", "approve", code])
        assert result.exit_code == 0, result.stderr
        fake.message(stranger, "now?", author=OTHER_ID)
        second = (await fake.wait_sent(stranger, 2, T))[1]
        assert second.content == "Welcome!"
    assert [r["content"] for r in log_lines(klaw_home, f"discord_{stranger}")] == [
        "now?",
        "Welcome!",
    ]


async def test_server_channels_need_listing_and_addressing_and_never_see_private_memory(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_discord: FakeDiscord,
) -> None:
    fake = fake_discord
    guild = fake.guild()
    listed, unlisted = fake.channel(guild, "klaw"), fake.channel(guild, "random")
    dm = fake.dm()
    (klaw_home.workspace / "USER.md").write_text("The owner is allergic to peanuts.\n")
    llm.answer("Hello, server.")
    llm.answer("Hello, owner.")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake, discord_config(fake, [dm, listed])) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.message(unlisted, "anyone?", mention=True)
        fake.message(listed, "people chatting, not to the bot")
        fake.message(listed, "hi bot", mention=True)
        (reply,) = await fake.wait_sent(listed, 1, T)
        assert reply.content == "Hello, server."
        fake.message(dm, "hi")
        await fake.wait_sent(dm, 1, T)
    assert fake.sent_to(unlisted) == []  # no pairing code in a server either
    assert [r["content"] for r in log_lines(klaw_home, f"discord_{listed}")] == [
        "hi bot",
        "Hello, server.",
    ]
    assert not log_lines(klaw_home, f"discord_{unlisted}")
    group_req, private_req = llm.requests
    group_prompt, private_prompt = (r["messages"][0]["content"] for r in llm.requests)
    assert "peanuts" not in group_prompt and "(group chat)" in group_prompt
    assert "peanuts" in private_prompt
    group_tools, private_tools = offered(group_req), offered(private_req)
    assert {"memory_search", "memory_core_get", "file_read"} <= private_tools
    assert not {"memory_search", "memory_core_get", "file_read"} & group_tools


async def test_a_long_reply_with_code_is_split_between_blocks(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_discord: FakeDiscord,
) -> None:
    fake = fake_discord
    dm = fake.dm()
    block = "```python\n" + "\n".join(f"x_{i} = {i}" for i in range(120)) + "\n```"
    text = "\n\n".join(f"Part {i}: some prose here.\n\n{block}" for i in range(6))
    assert len(text) > 3 * MESSAGE_LIMIT
    llm.answer(text)
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake, discord_config(fake, [dm])) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.message(dm, "show me code")
        await until(lambda: len(gw.buffer) == 0 and bool(fake.sent), T)
    parts = fake.sent_to(dm)
    assert len(parts) >= 4
    for p in parts:
        assert utf16_len(p.content) <= MESSAGE_LIMIT
        assert p.content.count("```") % 2 == 0
    code = [ln for p in parts for ln in p.content.splitlines() if ln.startswith("x_")]
    assert code == [f"x_{i} = {i}" for _ in range(6) for i in range(120)]
    assert parts[0].reference is not None and all(p.reference is None for p in parts[1:])


async def test_an_attachment_reaches_the_model_as_a_workspace_file(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_discord: FakeDiscord,
) -> None:
    fake = fake_discord
    dm = fake.dm()
    llm.answer("Got your notes.")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake, discord_config(fake, [dm])) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.message(dm, "my notes", attachments=[("notes.txt", b"buy milk", "text/plain")])
        await fake.wait_sent(dm, 1, T)
    (saved,) = klaw_home.inbox.iterdir()
    assert saved.read_bytes() == b"buy milk" and saved.name.endswith("_notes.txt")
    user = [m for m in llm.requests[0]["messages"] if m["role"] == "user"][-1]["content"]
    assert f"[attached file: inbox/{saved.name}" in user and "my notes" in user


async def test_the_allowlist_refuses_a_push_to_another_chat(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_discord: FakeDiscord,
) -> None:
    fake = fake_discord
    dm, other = fake.dm(), fake.dm(OTHER_ID)
    push = json.dumps({"chat_id": f"discord_{other}", "text": "hi"})
    llm.answer(None, [call("c1", "send_message", push)])
    llm.answer("I may not write there.")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake, discord_config(fake, [dm])) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.message(dm, "Say hi to Bo")
        (reply,) = await fake.wait_sent(dm, 1, T)
        assert reply.content == "I may not write there."
    assert fake.sent_to(other) == []
    result = llm.requests[1]["messages"][-1]
    assert result["role"] == "tool" and "not in allowedChatIds" in result["content"]


async def test_a_crowd_of_strangers_gets_bounded_pairing_replies(
    klaw_home: KlawPaths, fake_discord: FakeDiscord, caplog: pytest.LogCaptureFixture
) -> None:
    """As with Telegram (test_pairing_limits), but Discord's chats are handled
    concurrently: one pairing reply per stranger, at most MAX_PENDING codes."""
    caplog.set_level(logging.DEBUG, logger="klaw.gateway")
    fake = fake_discord
    owner = fake.dm()
    strangers = []
    for n in range(MAX_PENDING + 30):
        user = 300_000_000_000_000_000 + n
        fake.user(user, f"user{n}")
        strangers.append((user, fake.dm(user)))
    silent = MAX_PENDING + 2 * 30  # second messages of the first 100, both of the rest

    def unanswered() -> int:
        return sum("no pairing reply now" in r.getMessage() for r in caplog.records)

    async with gateway_running(klaw_home, fake, discord_config(fake, [owner])):
        for user, chat in strangers:
            fake.message(chat, "hi " + "x" * 200, author=user)
            fake.message(chat, "hello?", author=user)
        await until(lambda: unanswered() >= silent, T)
    assert unanswered() == silent
    assert len(fake.sent) == MAX_PENDING  # one per stranger, none past the cap
    # which ones: the first to be handled (chats are handled in parallel)
    assert len({s.channel_id for s in fake.sent} & {chat for _, chat in strangers}) == MAX_PENDING
    assert len(json.loads(klaw_home.pairing.read_text())) == MAX_PENDING


# ---------------------------------------------------------------- crashes


async def test_the_gateway_killed_mid_stream_loses_and_doubles_nothing(
    klaw_home: KlawPaths, fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    """`klaw gateway` as a process of its own, no engine (everything stays buffered):
    the websocket drops mid-stream (resumed), then the process is SIGKILLed mid-stream
    and more is said while it is dead; after a restart every message is in the log and
    the buffer exactly once, in order."""
    fake = fake_discord
    dm = fake.dm()
    cfg = discord_config(fake, [dm]).model_dump(by_alias=True, mode="json")
    klaw_home.config_dir.mkdir(parents=True, exist_ok=True)
    klaw_home.gateway_config.write_text(json.dumps(cfg))
    chat = f"discord_{dm}"
    stderr = (tmp_path / "gateway.log").open("wb")

    async def spawn() -> asyncio.subprocess.Process:
        identified = fake.identifies
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "klaw.cli.app", "gateway", stderr=stderr, env=dict(os.environ)
        )
        await fake.wait_for(lambda: fake.identifies > identified and fake.connected, 60)
        return proc

    def logged() -> list[str]:
        return [r["content"] for r in log_lines(klaw_home, chat)]

    sent = [f"m{i}" for i in range(60)]
    proc = await spawn()
    try:
        fake.drop_after(8)  # the network drops after 8 messages: resumed
        for text in sent[:40]:
            fake.message(dm, text)
        await until(lambda: len(logged()) >= 20, T)
        proc.send_signal(signal.SIGKILL)  # mid-stream: some of the 40 are not handled
        await proc.wait()
        for text in sent[40:]:
            fake.message(dm, text)  # said while the gateway is dead
        proc = await spawn()
        await until(lambda: len(logged()) >= len(sent), T)
        fake.message(dm, "last")
        await until(lambda: len(logged()) > len(sent), T)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), T)
        stderr.close()
    assert fake.resumes >= 1 and fake.identifies == 2
    assert logged() == [*sent, "last"]
    assert [m.content for m in Buffer(klaw_home.gateway_buffer).pending()] == [*sent, "last"]


# ---------------------------------------------------------------- configuration


def test_a_missing_token_leaves_discord_off_with_a_doctor_line(
    klaw_home: KlawPaths, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("DISCORD_BOT_TOKEN", raising=False)
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    runner = CliRunner()
    assert runner.invoke(app, ["init", "--no-model"]).exit_code == 0
    path = klaw_home.gateway_config
    head, section, tail = path.read_text().partition("\n  discord:")
    path.write_text(head + section + tail.replace("enabled: false", "enabled: true", 1))
    cfg = load_gateway_config(path)
    assert cfg.channels.discord.enabled and not cfg.channels.discord.active
    channels = build_channels(klaw_home, cfg)
    assert [c.name for c in channels] == ["console"]  # not a crash
    assert "Discord is off: no bot token (set DISCORD_BOT_TOKEN)" in caplog.text
    out = runner.invoke(app, ["doctor"]).output
    assert "warn  discord: enabled but no bot token, the Discord channel stays off" in out
    assert "DISCORD_BOT_TOKEN" in out


def test_a_malformed_token_leaves_discord_off(
    klaw_home: KlawPaths, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = GatewayConfig.model_validate(
        {"channels": {"discord": {"enabled": True, "token": "not-a-token"}}}
    )
    assert [c.name for c in build_channels(klaw_home, cfg)] == ["console"]
    assert "Discord is off: channels.discord.token in gateway.yaml is not a bot token" in (
        caplog.text
    )


def test_a_bad_key_is_named(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("channels:\n  discord:\n    enabled: true\n    allowedChatId: [1]\n")
    with pytest.raises(ConfigError) as info:
        load_gateway_config(path, env={})
    (problem,) = info.value.problems
    assert problem.startswith(f"{path}:4: channels.discord.allowedChatId:")
    assert "allowedChatIds" in problem  # the close match is suggested


async def test_a_streamed_reply_is_one_message_edited_and_survives_a_gateway_restart(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_discord: FakeDiscord,
) -> None:
    """`streaming: true`: the reply appears as one message quoting the question, edited
    as it grows; a gateway stopped mid-stream edits that same message after its restart
    instead of sending the reply again."""
    fake = fake_discord
    dm = fake.dm()
    chunks = ["Tomatoes want ", "water every ", "evening, cucumbers ", "every other day."]
    whole = "".join(chunks)
    half = asyncio.Event()
    llm.answer_stream(chunks, gate=half, gate_after=2)
    cfg = discord_config(fake, [dm], streaming=True)
    async with engine_running(klaw_home, memory_factory=open_memory, config=config):
        async with gateway_running(klaw_home, fake, cfg) as gw:
            await asyncio.wait_for(gw.connected.wait(), T)
            question = fake.message(dm, "How often do I water the garden?")
            (preview,) = await fake.wait_sent(dm, 1, T)
            await fake.wait_for(
                lambda: fake.sent_to(dm)[0].content.strip() == "Tomatoes want water every"
            )
        assert preview.reference == int(question["id"])
        half.set()
        async with gateway_running(klaw_home, fake, cfg) as gw2:
            await until(lambda: len(gw2.buffer) == 0, T)
    (final,) = fake.sent_to(dm)
    assert final.message_id == preview.message_id and final.content == whole
    assert fake.edits and llm.requests[0]["stream"] is True
    lines = log_lines(klaw_home, f"discord_{dm}")
    assert [r["content"] for r in lines] == ["How often do I water the garden?", whole]

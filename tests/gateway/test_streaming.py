"""Streamed replies end to end: the real engine streams from a scripted SSE model, the
real gateway shows the reply growing on the fake Bot API (drafts in private chats,
edits of one message in groups), and the final message, the JSONL and the buffer are
exactly those of a reply sent without streaming. A gateway stopped mid-stream loses
nothing and doubles nothing."""

from __future__ import annotations

import asyncio
from typing import Any

from fake_telegram import TOKEN, FakeTelegram

from engine_harness import (
    CHAT,
    OWNER,
    T,
    engine_running,
    gateway_running,
    log_lines,
    until,
)
from klaw.config import EngineConfig, GatewayConfig
from klaw.paths import KlawPaths
from scripted_llm import FakeLLM

GROUP = -1001
GROUP_CHAT = f"telegram_{GROUP}"
REPLY = ["Tomatoes want ", "water every ", "evening, cucumbers ", "every other day."]
WHOLE = "".join(REPLY)


def streaming_config(fake: FakeTelegram, streaming: bool = True) -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "channels": {
                "telegram": {
                    "token": TOKEN,
                    "apiServer": fake.url,
                    "allowedChatIds": [str(OWNER), str(GROUP)],
                    "streaming": streaming,
                },
                "console": {"enabled": False},
            }
        }
    )


def gateway(paths: KlawPaths, fake: FakeTelegram, streaming: bool = True) -> Any:
    """The e2e tests' gateway with `streaming` set and its previews file where the daemon
    keeps it (so a restarted gateway finds the message it was editing)."""
    return gateway_running(
        paths,
        fake,
        streaming_config(fake, streaming),
        streams_file=paths.state_dir / "telegram-previews.json",
    )


def group_message(fake: FakeTelegram, text: str) -> None:
    fake.text(GROUP, text, chat_type="supergroup")


async def test_a_private_reply_grows_as_drafts_then_arrives_once(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    half = asyncio.Event()
    llm.answer_stream(REPLY, gate=half, gate_after=2)
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway(klaw_home, fake) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.text(OWNER, "How often do I water the garden?")
        # Half the reply is written: the chat shows it as a draft, not as a message.
        half_text = "Tomatoes want water every"
        await until(lambda: any(d.text == half_text for d in fake.drafts), T)
        assert fake.drafts[-1].chat_id == OWNER and not fake.sent_to(OWNER)
        half.set()
        (sent,) = await fake.wait_sent(OWNER, 1, T)
        assert sent.visible == WHOLE
        await until(lambda: len(gw.buffer) == 0, T)
    assert llm.requests[0]["stream"] is True
    assert len({d.draft_id for d in fake.drafts}) == 1  # one preview, animated
    assert all(WHOLE.startswith(d.text) for d in fake.drafts)
    assert len(fake.sent_to(OWNER)) == 1 and not fake.edits
    # The log is what a reply without streaming leaves: the user line and the reply.
    assert [(r["role"], r["content"]) for r in log_lines(klaw_home)] == [
        ("user", "How often do I water the garden?"),
        ("assistant", WHOLE),
    ]


async def test_a_group_reply_is_one_message_edited_as_it_grows(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    half = asyncio.Event()
    llm.answer_stream(REPLY, gate=half, gate_after=2)
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway(klaw_home, fake) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        group_message(fake, "how often do we water?")
        (preview,) = await fake.wait_sent(GROUP, 1, T)
        half_text = "Tomatoes want water every"
        await until(lambda: fake.sent_to(GROUP)[0].visible == half_text, T)
        half.set()
        await until(lambda: len(gw.buffer) == 0, T)
    (final,) = fake.sent_to(GROUP)  # the preview, edited into the reply
    assert final.message_id == preview.message_id and final.visible == WHOLE
    assert fake.edits and not fake.drafts
    assert not (klaw_home.state_dir / "telegram-previews.json").exists() or (
        (klaw_home.state_dir / "telegram-previews.json").read_text() == "{}"
    )
    assert [r["content"] for r in log_lines(klaw_home, GROUP_CHAT)][-1] == WHOLE


async def test_a_gateway_stopped_mid_stream_edits_the_same_message_after_restart(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    half = asyncio.Event()
    llm.answer_stream(REPLY, gate=half, gate_after=2)
    async with engine_running(klaw_home, memory_factory=open_memory, config=config):
        async with gateway(klaw_home, fake) as gw:
            await asyncio.wait_for(gw.connected.wait(), T)
            group_message(fake, "how often do we water?")
            (preview,) = await fake.wait_sent(GROUP, 1, T)
        # The gateway is gone with the reply half written; the engine finishes it.
        assert [m.model_dump()["content"] for m in gw.buffer.pending()] == [
            "how often do we water?"
        ]
        half.set()
        async with gateway(klaw_home, fake) as gw2:
            await until(lambda: len(gw2.buffer) == 0, T)
    (final,) = fake.sent_to(GROUP)
    assert final.message_id == preview.message_id and final.visible == WHOLE
    contents = [r["content"] for r in log_lines(klaw_home, GROUP_CHAT)]
    assert contents.count(WHOLE) == 1


async def test_a_private_chat_without_drafts_falls_back_to_edits(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    fake.drafts_supported = False  # a Bot API server older than sendMessageDraft
    half = asyncio.Event()
    llm.answer_stream(REPLY, gate=half, gate_after=2)
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway(klaw_home, fake) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.text(OWNER, "How often do I water the garden?")
        (preview,) = await fake.wait_sent(OWNER, 1, T)
        half.set()
        await until(lambda: len(gw.buffer) == 0, T)
    (final,) = fake.sent_to(OWNER)
    assert final.message_id == preview.message_id and final.visible == WHOLE
    assert fake.calls_of("sendMessageDraft") and not fake.drafts


async def test_without_streaming_the_model_is_not_asked_to_stream(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    llm.answer_stream(REPLY)
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway(klaw_home, fake, streaming=False) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.text(OWNER, "How often do I water the garden?")
        (sent,) = await fake.wait_sent(OWNER, 1, T)
    assert sent.visible == WHOLE
    assert not llm.requests[0].get("stream") and not fake.drafts and not fake.edits
    assert CHAT == f"telegram_{OWNER}"


async def test_failing_previews_never_hold_back_the_reply(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    """Previews rate limited, then failing on Telegram's side (a 500 is no reason to
    switch to edits): the reply still arrives once, as a message."""
    fake = fake_telegram
    fake.fail("sendMessageDraft", status=429, retry_after=1)
    fake.fail("sendMessageDraft", times=50, status=500, description="Internal Server Error")
    half = asyncio.Event()
    llm.answer_stream(REPLY, gate=half, gate_after=2)
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway(klaw_home, fake) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.text(OWNER, "How often do I water the garden?")
        await fake.wait_calls("sendMessageDraft", 2, T)  # the 429, then the 500
        half.set()
        (sent,) = await fake.wait_sent(OWNER, 1, T)
        await until(lambda: len(gw.buffer) == 0, T)
    assert sent.visible == WHOLE and not fake.drafts
    assert [r["content"] for r in log_lines(klaw_home)][-1] == WHOLE

"""Gateway end to end: the fake Telegram Bot API (over real HTTP), the real gateway,
the real engine (in this loop, or as a process killed with SIGKILL), klaw.db with the
real embedding model, and a scripted OpenAI-compatible model server."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest
from fake_telegram import FakeTelegram

from engine_harness import (
    CHAT,
    FAST,
    OWNER,
    T,
    engine_running,
    gateway_config,
    gateway_running,
    log_lines,
    spawn_engine,
    until,
    wait_socket,
)
from klaw.cli.app import app
from klaw.cli.testing import CliRunner
from klaw.config import EngineConfig
from klaw.gateway.channels.telegram.channel import TelegramChannel
from klaw.gateway.daemon import run as run_gateway
from klaw.paths import KlawPaths
from klaw.wire.protocol import MAX_LINE_BYTES
from scripted_llm import FakeLLM, call, offered, write_engine_yaml


async def test_a_telegram_message_is_answered_and_logged_exactly(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
    backend: Any,
) -> None:
    fake = fake_telegram
    llm.answer(None, [call("c1", "current_time", "{}")])
    llm.answer("It is **tea time**.")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        commands = await fake.wait_calls("setMyCommands")
        assert "new" in json.dumps(commands[0].params)
        fake.text(OWNER, "What time is it?")
        (sent,) = await fake.wait_sent(OWNER, 1, T)
        assert sent.visible == "It is tea time." and sent.parse_mode == "HTML"
        assert "<b>tea time</b>" in sent.text
        assert fake.calls_of("sendChatAction")  # typing while the engine worked
        await until(lambda: len(gw.buffer) == 0, T)
    lines = log_lines(klaw_home)
    assert [(r["role"], r.get("type")) for r in lines] == [
        ("user", None),
        ("assistant", None),  # the tool call
        ("tool", None),
        ("assistant", None),  # the reply
    ]
    assert lines[0]["content"] == "What time is it?"
    assert lines[3]["content"] == "It is **tea time**."
    assert lines[3]["meta"]["model"] == "fake/m" and lines[3]["meta"]["tokens_in"] == 20
    # The store holds the same rows as the log, id for id, in the same order.
    mem = open_memory()
    try:
        rows = mem.store.recent_messages(CHAT, None, 50)
        assert [(r.id, r.role, r.created_at) for r in rows] == [
            (r["id"], r["role"], r["ts"]) for r in lines
        ]
    finally:
        mem.close()
    # `klaw reindex` rebuilds the same rows from the files alone.
    from klaw.memory.api import rebuild

    klaw_home.db.unlink()
    rebuild(klaw_home, config, backend=backend, progress=False)
    mem = open_memory()
    try:
        rebuilt = mem.store.recent_messages(CHAT, None, 50)

        def fields(m: Any) -> tuple[Any, ...]:
            meta = json.loads(m.metadata) if m.metadata else None
            return (m.id, m.channel, m.chat_id, m.role, m.kind, m.content, meta, m.created_at)

        assert [fields(r) for r in rebuilt] == [fields(r) for r in rows]
    finally:
        mem.close()


async def test_new_is_logged_with_its_break_and_survives_reindex(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
    backend: Any,
) -> None:
    fake = fake_telegram
    llm.answer("One.")
    llm.answer("Two.")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.text(OWNER, "first")
        await fake.wait_sent(OWNER, 1, T)
        fake.command(OWNER, "new")
        await fake.wait_sent(OWNER, 2, T)
        fake.text(OWNER, "second")
        sent = await fake.wait_sent(OWNER, 3, T)
        assert "New session" in sent[1].visible and sent[2].visible == "Two."
    assert [m["content"] for m in llm.requests[-1]["messages"][1:]] == ["second"]
    types = [(r["role"], r.get("type"), r["content"][:5]) for r in log_lines(klaw_home)]
    assert types == [
        ("user", None, "first"),
        ("assistant", None, "One."),
        ("user", "command", "/new"),
        ("system", "session_break", ""),
        ("assistant", "command_reply", "New s"),
        ("user", None, "secon"),
        ("assistant", None, "Two."),
    ]
    from klaw.memory.api import rebuild

    klaw_home.db.unlink()
    rebuild(klaw_home, config, backend=backend, progress=False)
    mem = open_memory()
    try:
        session = mem.store.get_session(CHAT)
        assert session is not None and session.model == "fake/m"
        brk = next(r for r in log_lines(klaw_home) if r.get("type") == "session_break")
        assert session.segment_start == brk["ts"]
    finally:
        mem.close()


async def test_strangers_get_a_pairing_code_until_approved(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    stranger = 555
    llm.answer("Welcome!")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.text(stranger, "hello?")
        (notice,) = await fake.wait_sent(stranger, 1, T)
        code = notice.visible.rsplit(" ", 1)[-1]
        assert "klaw pair approve" in notice.visible and len(code) == 8
        assert not llm.requests and not log_lines(klaw_home, f"telegram_{stranger}")
        fake.text(stranger, "please?")  # no second code within 10 minutes, nothing else
        await fake.wait_for(lambda: fake.pending == [], T)

        result = CliRunner().invoke(app, ["pair", "approve", code])
        assert result.exit_code == 0, result.stderr
        fake.text(stranger, "now?")
        second = (await fake.wait_sent(stranger, 2, T))[1]
        assert second.visible == "Welcome!"
    assert [r["content"] for r in log_lines(klaw_home, f"telegram_{stranger}")] == [
        "now?",
        "Welcome!",
    ]


async def test_the_allowlist_refuses_a_push_to_another_chat(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    llm.answer(None, [call("c1", "send_message", '{"chat_id": "telegram_777", "text": "hi"}')])
    llm.answer("I may not write there.")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.text(OWNER, "Say hi to 777")
        (reply,) = await fake.wait_sent(OWNER, 1, T)
        assert reply.visible == "I may not write there."
    assert fake.sent_to(777) == []
    result = llm.requests[1]["messages"][-1]
    assert result["role"] == "tool" and "not in allowedChatIds" in result["content"]


async def test_a_long_reply_with_code_is_split_between_blocks(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    block = "```python\n" + "\n".join(f"x_{i} = {i}" for i in range(120)) + "\n```"
    text = "\n\n".join(f"Part {i}: some prose here.\n\n{block}" for i in range(8))
    assert len(text) > 10_000
    llm.answer(text)
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.text(OWNER, "show me code")
        # The buffer clears once every part was sent and the reply logged.
        await until(lambda: len(gw.buffer) == 0 and bool(fake.sent), T)
    parts = fake.sent_to(OWNER)
    assert len(parts) >= 3 and all(p.parse_mode == "HTML" for p in parts)
    for p in parts:
        assert len(p.visible) <= 4096
        assert p.text.count("<pre>") == p.text.count("</pre>")
    # Every line of code arrived once, in order.
    code = [ln for p in parts for ln in p.visible.splitlines() if ln.startswith("x_")]
    assert code == [f"x_{i} = {i}" for _ in range(8) for i in range(120)]


# ---------------------------------------------------------------- crashes


async def test_engine_killed_mid_reply_then_restarted_answers_once(
    klaw_home: KlawPaths, llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    fake = fake_telegram
    klaw_home.config_dir.mkdir(parents=True, exist_ok=True)
    write_engine_yaml(klaw_home.engine_config, llm.url, debounceMs=0)
    llm.hold = asyncio.Event()  # the model "thinks" until we let it answer
    engine = await spawn_engine()
    try:
        await wait_socket(klaw_home, engine)
        async with gateway_running(klaw_home, fake) as gw:
            await asyncio.wait_for(gw.connected.wait(), T)
            fake.text(OWNER, "Tell me something")
            await asyncio.wait_for(llm.arrived.wait(), T)  # mid-reply
            engine.send_signal(signal.SIGKILL)
            await engine.wait()
            await until(lambda: not gw.connected.is_set(), T)
            assert [m.content for m in gw.buffer.pending()] == ["Tell me something"]

            # The killed engine's request finishes into the void first, taking its reply.
            llm.answer("lost with the killed engine")
            llm.answer("Here is something.")
            llm.hold.set()
            await until(lambda: len(llm.replies) == 1, T)
            engine = await spawn_engine()
            await wait_socket(klaw_home, engine)
            (reply,) = await fake.wait_sent(OWNER, 1, T)
            assert reply.visible == "Here is something."
            await until(lambda: len(gw.buffer) == 0, T)
            # Another reconnect replays nothing and sends nothing twice.
            assert klaw_home.gateway_buffer.read_bytes() == b""
        assert len(fake.sent_to(OWNER)) == 1
        contents = [r["content"] for r in log_lines(klaw_home)]
        assert contents == ["Tell me something", "Here is something."]
    finally:
        if engine.returncode is None:
            engine.send_signal(signal.SIGTERM)
            await asyncio.wait_for(engine.wait(), T)


async def test_both_down_then_gateway_restarts_with_a_full_buffer(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    # The engine is down: the gateway logs and buffers, then is stopped too.
    async with gateway_running(klaw_home, fake) as gw:
        fake.text(OWNER, "one")
        fake.text(OWNER, "two")
        await until(lambda: len(gw.buffer) == 2, T)
        assert not gw.connected.is_set()
    assert len(klaw_home.gateway_buffer.read_bytes().splitlines()) == 2
    assert [r["content"] for r in log_lines(klaw_home)] == ["one", "two"]

    llm.answer("Got it.")
    llm.answer("Got it.")
    async with (
        gateway_running(klaw_home, fake) as gw,
        engine_running(klaw_home, memory_factory=open_memory, config=config),
    ):
        await until(lambda: len(gw.buffer) == 0, T)
        turns = len(llm.requests)  # one batch for both, or one turn each (debounce 0)
        replies = await fake.wait_sent(OWNER, turns, T)
        assert [r.visible for r in replies] == ["Got it."] * turns
    # Replayed in order: each turn ends with the next of them.
    last_user = [
        [m["content"] for m in req["messages"] if m["role"] == "user"][-1] for req in llm.requests
    ]
    assert "\n".join(last_user) == "one\ntwo"
    assert [r["content"] for r in log_lines(klaw_home)] == ["one", "two"] + ["Got it."] * turns
    assert klaw_home.gateway_buffer.read_bytes() == b""


async def test_groups_are_served_only_when_listed_and_never_see_private_memory(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    listed, unlisted = -100777, -100888
    (klaw_home.workspace / "USER.md").write_text("The owner is allergic to peanuts.\n")
    llm.answer("Hello, group.")
    llm.answer("Hello, owner.")
    cfg = gateway_config(fake, allowedChatIds=[str(OWNER), str(listed)])
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake, cfg) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.text(unlisted, "anyone?", chat_type="supergroup")
        fake.text(listed, "hi bot", chat_type="supergroup")
        (reply,) = await fake.wait_sent(listed, 1, T)
        assert reply.visible == "Hello, group."
        fake.text(OWNER, "hi")
        await fake.wait_sent(OWNER, 1, T)
    assert fake.sent_to(unlisted) == []  # no pairing code in groups either
    group_req, private_req = llm.requests
    group_prompt, private_prompt = (r["messages"][0]["content"] for r in llm.requests)
    assert "peanuts" not in group_prompt and "(group chat)" in group_prompt
    assert "peanuts" in private_prompt
    # Nor is the private memory one tool call away in the group.
    group_tools, private_tools = offered(group_req), offered(private_req)
    assert {"memory_search", "memory_core_get", "file_read"} <= private_tools
    assert not {"memory_search", "memory_core_get", "file_read"} & group_tools
    assert "current_time" in group_tools


async def test_a_failing_channel_leaves_the_others_running(
    klaw_home: KlawPaths, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    import tempfile

    from klaw.gateway.channels.console import ConsoleChannel

    fake = fake_telegram
    # Telegram refuses the token (401): that channel stops, the console goes on.
    cfg = gateway_config(fake, token="999999:WRONG-token-for-this-server")
    bad_tg = TelegramChannel(cfg.channels.telegram, klaw_home.inbox, backoff=0.01)
    sock = Path(tempfile.mkdtemp(prefix="klaw-")) / "console.sock"
    console = ConsoleChannel(sock)
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_gateway(klaw_home, cfg, channels=[bad_tg, console], stop=stop, timings=FAST)
    )
    await until(lambda: sock.exists(), T)
    await until(lambda: "channel telegram stopped" in caplog.text, T)
    # The console still answers a client after Telegram gave up.
    reader, writer = await asyncio.open_unix_connection(str(sock))
    hello = json.loads(await asyncio.wait_for(reader.readline(), T))
    assert hello["type"] == "hello"
    writer.close()
    assert not task.done()
    stop.set()
    assert await asyncio.wait_for(task, T) == 0

    # With no channel left, the gateway exits with an error (systemd restarts it).
    only = TelegramChannel(cfg.channels.telegram, klaw_home.inbox, backoff=0.01)
    code = await asyncio.wait_for(
        run_gateway(klaw_home, cfg, channels=[only], stop=asyncio.Event(), timings=FAST), T
    )
    assert code == 1


async def test_strangers_files_are_not_downloaded_and_owner_files_reach_the_model(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    llm.answer("Got your notes.")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.document(555, b"spam" * 1000, "spam.bin")
        (notice,) = await fake.wait_sent(555, 1, T)
        assert "klaw pair approve" in notice.visible
        fake.document(OWNER, b"buy milk", "notes.txt", caption="my notes")
        await fake.wait_sent(OWNER, 1, T)
    assert not fake.calls_of("getFile") or all(
        c.params.get("file_id") != "FILE0001" for c in fake.calls_of("getFile")
    )
    files = sorted(p.name for p in klaw_home.inbox.iterdir())
    assert len(files) == 1 and files[0].endswith("notes.txt")
    user = [m for m in llm.requests[0]["messages"] if m["role"] == "user"][-1]["content"]
    # A workspace-relative path: what file_read accepts.
    assert f"[attached file: inbox/{files[0]}" in user and "my notes" in user


# Finding 1: a turn whose tool round is over the 1 MiB line limit (a 900 KB
# `file_write`, allowed by maxFileSizeBytes) is delivered: the user gets the reply, the
# tool round reaches the JSONL, and the message leaves the gateway buffer.
async def test_a_reply_with_a_huge_tool_round_reaches_the_user_and_the_log(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    body = '"a\\b"\n' * 150_000  # 900 KB that JSON escapes to 1.5 MB
    assert len(body.encode()) < config.files.max_file_size_bytes
    args = json.dumps({"path": "report.txt", "content": body})
    assert len(args.encode()) > MAX_LINE_BYTES
    llm.answer(None, [call("c1", "file_write", args)])
    llm.answer("Saved the report.")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.text(OWNER, "write the report")
        (sent,) = await fake.wait_sent(OWNER, 1, T)
        assert sent.visible == "Saved the report."
        await until(lambda: len(gw.buffer) == 0, T)
    assert (klaw_home.workspace / "report.txt").read_text() == body
    lines = log_lines(klaw_home)
    assert [r["role"] for r in lines] == ["user", "assistant", "tool", "assistant"]
    (tool_call,) = lines[1]["meta"]["tool_calls"]
    assert tool_call["arguments"]["content"] == body

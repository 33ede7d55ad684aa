"""Files out: the `send_file` tool, through the real engine and gateway, to the fake
Telegram Bot API (multipart uploads over real HTTP), the fake Discord and the console;
the gateway's own checks on the files an engine names; the channels' upload details."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_discord import FakeDiscord
from fake_telegram import FakeTelegram
from test_discord_e2e import discord_config
from test_discord_e2e import gateway_running as discord_gateway
from test_gateway_replay import RecordingEngine

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
from klaw.engine.pipeline import PRIVATE_TOOLS
from klaw.gateway.channels.base import ChannelSendError, OutFile
from klaw.gateway.channels.console import ConsoleChannel
from klaw.gateway.channels.discord.channel import UPLOAD_LIMIT
from klaw.gateway.channels.telegram.channel import TelegramChannel
from klaw.gateway.core import Gateway
from klaw.paths import KlawPaths
from klaw.tools.base import ToolError
from klaw.tools.messaging import SendFile
from klaw.wire.console import Reply, decode_console
from klaw.wire.protocol import Attachment, Delivered, Error, ErrorCode, Outbound, encode
from pictures import png
from scripted_llm import FakeLLM, call, offered


def args(**kw: Any) -> str:
    return json.dumps(kw, ensure_ascii=False)


def tool_results(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


# ---------------------------------------------------------------- through the engine


async def test_a_chart_goes_to_telegram_as_a_photo_with_its_caption(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    chart = png(64, 48)
    (klaw_home.workspace / "charts").mkdir()
    (klaw_home.workspace / "charts" / "plot.png").write_bytes(chart)
    llm.answer(
        None, [call("c1", "send_file", args(paths=["charts/plot.png"], caption="Your **chart**"))]
    )
    llm.answer("Done.")
    llm.answer("You are welcome.")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.text(OWNER, "Draw me the chart")
        (done,) = await fake.wait_sent(OWNER, 1, T)
        fake.text(OWNER, "Thanks!")
        await fake.wait_sent(OWNER, 2, T)
    (photo,) = fake.uploads_to(OWNER)
    assert (photo.method, photo.filename, photo.content_type) == (
        "sendPhoto",
        "plot.png",
        "image/png",
    )
    assert photo.data == chart
    assert (photo.caption, photo.parse_mode) == ("Your <b>chart</b>", "HTML")
    assert done.visible == "Done." and photo.message_id < done.message_id
    result = tool_results(llm.requests[1])["c1"]
    assert result.startswith("Sent charts/plot.png (") and CHAT in result
    # The log keeps the file beside its caption, between the request and the reply.
    lines = log_lines(klaw_home)
    sent = next(r for r in lines if r["meta"].get("source") == "send_file")
    assert sent["role"] == "assistant" and sent["content"] == "Your **chart**"
    assert sent["meta"]["attachments"] == [
        {"path": "charts/plot.png", "name": "plot.png", "mime": "image/png", "size": len(chart)}
    ]
    assert [r["content"] for r in lines if r["role"] == "user"] == ["Draw me the chart", "Thanks!"]
    # The next turn sees the tool call and its result, not the caption as a second
    # assistant message in a row.
    roles = [m["role"] for m in llm.requests[2]["messages"] if m["role"] != "system"]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]


async def test_several_documents_follow_a_long_text_and_keep_their_names(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    report = "отчёт за ноябрь.pdf"
    (klaw_home.workspace / report).write_bytes(b"%PDF-1.4\n" + bytes(range(256)) * 40)
    (klaw_home.workspace / "data.csv").write_bytes(b"a,b\n1,2\n")
    text = "Here are both files. " * 60  # over a caption's 1,024 characters: a message
    (klaw_home.workspace / "line\nbreak.txt").write_bytes(b"x")  # a model can name a file so
    send = args(paths=[report, "./data.csv", report, "line\nbreak.txt"], caption=text)
    llm.answer(None, [call("c1", "send_file", send)])
    llm.answer("Sent.")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.text(OWNER, "files please")
        await fake.wait_sent(OWNER, 2, T)
    first, last = fake.sent_to(OWNER)
    assert first.visible == text.strip() and last.visible == "Sent."
    docs = fake.uploads_to(OWNER)  # the repeated path went once
    assert [(u.method, u.filename, u.caption) for u in docs] == [
        ("sendDocument", report, ""),
        ("sendDocument", "data.csv", ""),
        ("sendDocument", "linebreak.txt", ""),  # no line break in a multipart header
    ]
    assert docs[0].data == (klaw_home.workspace / report).read_bytes()
    assert first.message_id < docs[0].message_id < docs[1].message_id < last.message_id


async def test_paths_outside_the_workspace_and_bad_files_are_refused_to_the_model(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
    tmp_path: Path,
) -> None:
    fake = fake_telegram
    secret = tmp_path / "secret.txt"
    secret.write_text("the owner's keys")
    ws = klaw_home.workspace
    (ws / "link.txt").symlink_to(secret)
    (ws / "empty.txt").write_bytes(b"")
    (ws / "notes").mkdir()
    with (ws / "big.bin").open("wb") as f:
        f.truncate(50 * 1024 * 1024 + 1)  # sparse: over every channel's limit
    bad = {
        "c1": ("../secret.txt", "outside the workspace"),
        "c2": (str(secret), "absolute paths are not allowed"),
        "c3": ("link.txt", "outside the workspace through a symlink"),
        "c4": ("missing.png", "not found"),
        "c5": ("notes", "is a directory"),
        "c6": ("empty.txt", "is empty"),
        "c7": ("big.bin", "cannot be sent"),
    }
    llm.answer(None, [call(i, "send_file", args(paths=[p])) for i, (p, _) in bad.items()])
    llm.answer(None, [call("c8", "send_file", args(paths=["notes"], chat_id="telegram"))])
    llm.answer("Nothing to send.")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.text(OWNER, "send everything")
        await fake.wait_sent(OWNER, 1, T)
    results = tool_results(llm.requests[1])
    for ident, (_, reason) in bad.items():
        assert reason in results[ident], (ident, results[ident])
    assert "must look like '{channel}_{id}'" in tool_results(llm.requests[2])["c8"]
    assert fake.uploads == [] and "keys" not in json.dumps(llm.requests[-1])


async def test_files_to_a_chat_not_allowed_are_refused_and_a_group_gets_no_send_file(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    fake = fake_telegram
    (klaw_home.workspace / "a.txt").write_text("a")
    llm.answer(None, [call("c1", "send_file", args(paths=["a.txt"], chat_id="telegram_777"))])
    llm.answer("Refused.")
    llm.answer("Hello group.")
    group = -100500
    fake.add_chat(group, chat_type="supergroup")
    cfg = GatewayConfig.model_validate(
        {
            "channels": {
                "telegram": {
                    "token": fake.token,
                    "apiServer": fake.url,
                    "allowedChatIds": [str(OWNER), str(group)],
                },
                "console": {"enabled": False},
            }
        }
    )
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        gateway_running(klaw_home, fake, cfg) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.text(OWNER, "send it to 777")
        await fake.wait_sent(OWNER, 1, T)
        fake.text(group, "@klaw_test_bot hi", chat_type="supergroup")
        await fake.wait_sent(group, 1, T)
    assert "not in allowedChatIds" in tool_results(llm.requests[1])["c1"]
    assert fake.uploads == []
    assert "send_file" in PRIVATE_TOOLS and "send_file" not in offered(llm.requests[2])
    assert "send_file" in offered(llm.requests[0])


async def test_a_file_too_big_for_discord_is_refused_and_a_small_one_arrives(
    klaw_home: KlawPaths,
    config: EngineConfig,
    open_memory: Any,
    llm: FakeLLM,
    fake_discord: FakeDiscord,
) -> None:
    fake = fake_discord
    dm = fake.dm()
    chart = png(32, 32)
    (klaw_home.workspace / "chart.png").write_bytes(chart)
    with (klaw_home.workspace / "video.mp4").open("wb") as f:
        f.truncate(UPLOAD_LIMIT + 1)
    llm.answer(
        None,
        [
            call("c1", "send_file", args(paths=["video.mp4"])),
            call("c2", "send_file", args(paths=["chart.png"], caption="The chart")),
            call("c3", "send_file", args(paths=["line\nbreak.txt"])),
        ],
    )
    (klaw_home.workspace / "line\nbreak.txt").write_bytes(b"x")
    llm.answer("Only the chart could go.")
    async with (
        engine_running(klaw_home, memory_factory=open_memory, config=config),
        discord_gateway(klaw_home, fake, discord_config(fake, [dm])) as gw,
    ):
        await asyncio.wait_for(gw.connected.wait(), T)
        fake.message(dm, "send both")
        await fake.wait_sent(dm, 3, T)
    results = tool_results(llm.requests[1])
    assert "'video.mp4' is 10.0 MB; Discord takes files up to 10.0 MB" in results["c1"]
    assert results["c2"].startswith("Sent chart.png")
    with_file, odd_name, reply = fake.sent_to(dm)
    assert (with_file.content, with_file.files) == ("The chart", [("chart.png", chart)])
    assert odd_name.files == [("linebreak.txt", b"x")]  # no line break in a multipart header
    assert reply.content == "Only the chart could go."


# ---------------------------------------------------------------- the gateway's checks


@pytest.fixture
def recording_engine(klaw_home: KlawPaths) -> Iterator[RecordingEngine]:
    klaw_home.state_dir.mkdir(parents=True, exist_ok=True)
    yield RecordingEngine(klaw_home.socket)


async def _deliver_via_engine_socket(
    klaw_home: KlawPaths, engine: RecordingEngine, gw: Gateway, out: Outbound
) -> Delivered | Error:
    """Sends `out` the way the engine does and returns the gateway's answer to it."""
    await asyncio.wait_for(gw.connected.wait(), T)
    engine.writers[-1].write(encode(out))
    await engine.writers[-1].drain()
    await until(lambda: any(getattr(m, "ref", None) == out.id for m in engine.got), T)
    answer = next(m for m in engine.got if getattr(m, "ref", None) == out.id)
    assert isinstance(answer, Delivered | Error)
    return answer


async def test_the_gateway_opens_files_itself_and_refuses_a_swapped_symlink(
    klaw_home: KlawPaths,
    fake_telegram: FakeTelegram,
    recording_engine: RecordingEngine,
    tmp_path: Path,
) -> None:
    """The engine names `notes.txt` (as if the tool had checked it earlier); by the time
    the gateway opens it, it is a symlink to a file outside the workspace: the gateway's
    own check refuses it, whatever the engine says."""
    fake = fake_telegram
    fake.add_chat(OWNER)
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE KEY")
    (klaw_home.workspace / "notes.txt").symlink_to(secret)
    (klaw_home.workspace / "ok.txt").write_text("fine")
    await recording_engine.start()
    att = Attachment(path="notes.txt", name="notes.txt", mime="text/plain", size=4)
    try:
        async with gateway_running(klaw_home, fake) as gw:
            swapped = Outbound(channel="telegram", chat_id=CHAT, content="x", attachments=[att])
            answer = await _deliver_via_engine_socket(klaw_home, recording_engine, gw, swapped)
            escaping = Outbound(
                channel="telegram",
                chat_id=CHAT,
                attachments=[Attachment(path="ok.txt"), Attachment(path="../../etc/passwd")],
            )
            answer2 = await _deliver_via_engine_socket(klaw_home, recording_engine, gw, escaping)
            fine = Outbound(
                channel="telegram", chat_id=CHAT, attachments=[Attachment(path="ok.txt")]
            )
            answer3 = await _deliver_via_engine_socket(klaw_home, recording_engine, gw, fine)
    finally:
        await recording_engine.close()
    assert isinstance(answer, Error) and answer.code == ErrorCode.REFUSED
    assert "outside the workspace" in answer.message
    assert isinstance(answer2, Error) and "outside the workspace" in answer2.message
    assert isinstance(answer3, Delivered)
    # Nothing of a refused message went out (not its text, not its good file) or was logged.
    assert fake.sent == [] and [u.data for u in fake.uploads] == [b"fine"]
    assert fake.uploads[0].content_type == "text/plain"
    assert [r["meta"]["attachments"][0]["path"] for r in log_lines(klaw_home)] == ["ok.txt"]
    assert str(klaw_home.workspace / "ok.txt") not in _open_files()  # closed once sent


def _open_files() -> set[str]:
    found = set()
    for n in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found.add(os.readlink(f"/proc/self/fd/{n}"))
    return found


# ---------------------------------------------------------------- channels


@pytest.fixture
def out_file(tmp_path: Path) -> Iterator[Any]:
    opened: list[OutFile] = []

    def make(name: str, data: bytes, mime: str) -> OutFile:
        path = tmp_path / name
        path.write_bytes(data)
        f = OutFile(name, mime, len(data), os.open(path, os.O_RDONLY), str(path))
        opened.append(f)
        return f

    yield make
    for f in opened:
        os.close(f.fd)


def _telegram(fake: FakeTelegram, tmp_path: Path) -> TelegramChannel:
    cfg = GatewayConfig.model_validate(
        {"channels": {"telegram": {"token": fake.token, "apiServer": fake.url}}}
    )
    return TelegramChannel(
        cfg.channels.telegram, tmp_path / "inbox", backoff=0.01, max_backoff=0.05
    )


async def test_telegram_sends_a_photo_it_cannot_show_as_a_document_and_retries_uploads(
    fake_telegram: FakeTelegram, tmp_path: Path, out_file: Any
) -> None:
    fake = fake_telegram
    fake.add_chat(OWNER)
    channel = _telegram(fake, tmp_path)
    not_png = out_file("scan.png", b"not really a PNG" * 20_000, "image/png")
    data = bytes(range(256)) * 1000
    archive = out_file("backup.tar.gz", data, "application/gzip")
    fake.fail("sendDocument", status=500, description="Internal Server Error", times=2)
    try:
        await channel.send(CHAT, "<b>both</b> & more", files=[not_png, archive])
        with pytest.raises(ChannelSendError) as info:
            await channel.send("telegram_999", "", files=[archive])  # no such chat
    finally:
        await channel.close()
    assert info.value.permanent and "'backup.tar.gz'" in str(info.value)
    (text,) = fake.sent_to(OWNER)
    assert text.visible == "<b>both</b> & more"
    scan, tar = fake.uploads_to(OWNER)
    assert (scan.method, scan.data) == ("sendDocument", b"not really a PNG" * 20_000)
    # The photo Telegram could not read went as a document; its first two tries met a
    # 500, the third sent the whole file again.
    methods = [c.method for c in fake.calls if str(c.params.get("chat_id")) == str(OWNER)]
    assert methods == ["sendMessage", "sendPhoto", *["sendDocument"] * 4]
    assert (tar.filename, tar.data) == ("backup.tar.gz", data)


async def test_telegram_counts_a_caption_in_utf16_and_tries_an_upload_three_times(
    fake_telegram: FakeTelegram, tmp_path: Path, out_file: Any
) -> None:
    fake = fake_telegram
    fake.add_chat(OWNER)
    channel = _telegram(fake, tmp_path)
    photo = out_file("a.png", png(8, 8), "image/png")
    doc = out_file("b.txt", b"b", "text/plain")
    smiles = "🙂" * 600  # 600 characters but 1,200 UTF-16 units: too long for a caption
    fake.fail("sendDocument", status=500, description="Internal Server Error", times=3)
    try:
        await channel.send(CHAT, smiles, files=[photo])
        with pytest.raises(ChannelSendError) as info:
            await channel.send(CHAT, "", files=[doc])
    finally:
        await channel.close()
    (text,) = fake.sent_to(OWNER)
    (up,) = fake.uploads_to(OWNER)
    assert text.visible == smiles and (up.method, up.caption) == ("sendPhoto", "")
    assert not info.value.permanent and len(fake.calls_of("sendDocument")) == 3


class _BrokenChannel:
    """A transport whose send fails in a way no channel expects (a bug)."""

    name = "console"
    admit = None
    max_upload_bytes = 1 << 20

    async def listen(self, on_message: Any) -> None:
        await asyncio.Event().wait()

    async def send(self, chat_id: str, text: str, **_: Any) -> None:
        raise RuntimeError("boom")

    async def typing(self, chat_id: str) -> None:
        pass

    async def set_commands(self, commands: Any) -> None:
        pass

    async def close(self) -> None:
        pass


async def test_a_channel_that_crashes_still_answers_the_engine(
    klaw_home: KlawPaths, recording_engine: RecordingEngine
) -> None:
    await recording_engine.start()
    cfg = GatewayConfig.model_validate({"channels": {"console": {"enabled": True}}})
    gw = Gateway(klaw_home, cfg, [_BrokenChannel()])  # type: ignore[list-item]
    stop = asyncio.Event()
    run = asyncio.create_task(gw.run(stop))
    try:
        out = Outbound(channel="console", chat_id="console_me", content="hi")
        answer = await _deliver_via_engine_socket(klaw_home, recording_engine, gw, out)
    finally:
        stop.set()
        await asyncio.wait_for(run, T)
        await recording_engine.close()
    assert isinstance(answer, Error) and answer.code == ErrorCode.SEND_FAILED
    assert "RuntimeError" in answer.message


async def test_telegram_caption_with_bad_html_goes_plain(
    fake_telegram: FakeTelegram, tmp_path: Path, out_file: Any
) -> None:
    fake = fake_telegram
    fake.add_chat(OWNER)
    channel = _telegram(fake, tmp_path)
    photo = out_file("a.png", png(8, 8), "image/png")
    fake.fail("sendPhoto", status=400, description="Bad Request: can't parse entities: x")
    try:
        await channel.send(CHAT, "a *caption*", files=[photo])
    finally:
        await channel.close()
    (up,) = fake.uploads_to(OWNER)
    assert (up.method, up.caption, up.parse_mode) == ("sendPhoto", "a *caption*", None)
    assert fake.sent == []


async def test_discord_retries_an_upload_with_the_whole_file(
    fake_discord: FakeDiscord, tmp_path: Path, out_file: Any
) -> None:
    from klaw.gateway.channels.discord.channel import DiscordChannel
    from klaw.gateway.daemon import DISCORD_CURSOR

    fake = fake_discord
    dm = fake.dm()
    cfg = discord_config(fake, [dm])
    channel = DiscordChannel(
        cfg.channels.discord, tmp_path / "inbox", tmp_path / DISCORD_CURSOR, backoff=0.01
    )
    listen = asyncio.create_task(channel.listen(_ignore))
    data = os.urandom(300_000)
    f = out_file("sound.ogg", data, "audio/ogg")
    route = "POST /channels/{channel}/messages"
    # A 503 reaches Klaw's own retry at once (discord.py retries 500s itself, slowly):
    # the second try reads both files from their first byte again.
    fake.fail(route, status=503, code=0, message="unavailable")
    try:
        await asyncio.wait_for(channel.send(f"discord_{dm}", "", files=[f, f]), T)
        # Files are tried a bounded number of times: later replies wait behind them.
        fake.fail(route, status=503, code=0, message="unavailable", times=3)
        with pytest.raises(ChannelSendError) as info:
            await asyncio.wait_for(channel.send(f"discord_{dm}", "again", files=[f]), T)
    finally:
        listen.cancel()
        await asyncio.gather(listen, return_exceptions=True)
        await channel.close()
    (sent,) = fake.sent_to(dm)
    assert sent.files == [("sound.ogg", data), ("sound.ogg", data)]
    assert not info.value.permanent and len(fake.calls_of(route)) == 2 + 3


async def _ignore(_: Any) -> None:
    return None


async def test_the_console_names_the_file_on_this_machine(
    klaw_home: KlawPaths, tmp_path: Path, out_file: Any
) -> None:
    sock = tmp_path / "console.sock"
    channel = ConsoleChannel(sock, user="me")
    listen = asyncio.create_task(channel.listen(_ignore))
    await until(lambda: channel.serving, T)
    reader, writer = await asyncio.open_unix_connection(str(sock))
    await reader.readline()  # hello
    f = out_file("plot.png", png(4, 4), "image/png")
    await channel.send(channel.chat_id, "Here:", files=[f])
    reply = decode_console(await asyncio.wait_for(reader.readline(), T))
    writer.close()
    listen.cancel()
    await asyncio.gather(listen, return_exceptions=True)
    await channel.close()
    assert isinstance(reply, Reply)
    assert reply.text == f"Here:\n[file: {f.path} ({f.size} B)]"


# ---------------------------------------------------------------- the tool alone


async def test_a_scheduled_job_must_name_the_chat(klaw_home: KlawPaths) -> None:
    sent: list[Outbound] = []

    async def deliver(msg: Outbound, timeout: float = 30.0) -> None:
        sent.append(msg)

    (klaw_home.workspace / "r.txt").write_text("r")
    tool = SendFile(deliver, klaw_home.workspace, source_chat="scheduler_daily")
    with pytest.raises(ToolError, match="give chat_id"):
        await tool.run({"paths": ["r.txt"]})
    assert await tool.run({"paths": ["r.txt"], "chat_id": CHAT}) == f"Sent r.txt (1 B) to {CHAT}."
    (out,) = sent
    assert out.meta == {"source": "send_file", "from_chat": "scheduler_daily"}
    assert out.attachments == [Attachment(path="r.txt", name="r.txt", mime="text/plain", size=1)]

"""The gateway's core: channels ⇄ engine, the logs, access and the buffer (§2.1–2.4).

Inbound, for every channel alike:

    channel update → unsupported? polite answer → allowed? (else pairing code)
      → JSONL line (before anything else) → buffer (fsync) → engine, if connected

Outbound (from the engine): allowlist check (refusal → `error` to the engine) →
already in the log? (a re-sent reply: confirm, do not send twice) → its files opened
inside the workspace (`klaw.gateway.outfiles`; refusal → `error`) → channel send →
JSONL lines (the turn's records, then the reply) → settle the answered messages in
the buffer → `delivered` to the engine.

The engine connection reconnects with backoff; after each `registered` the whole
buffer is re-sent in order before new messages go out, under one write lock, so a
chat's messages reach the engine in the order they arrived. Replies of one chat are
handled one after another, in the order the engine sent them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from klaw.gateway.access import Access, Approvals, Pairings
from klaw.gateway.buffer import Buffer
from klaw.gateway.channels.base import Channel, ChannelSendError, Incoming, OutFile, Streaming
from klaw.gateway.liveness import Watch, Watched
from klaw.gateway.logbook import LogBook
from klaw.gateway.outfiles import FileRefused, close_files, open_files
from klaw.gateway.voice import Transcriber
from klaw.retry import Backoff
from klaw.wire.loglines import inbound_line, outbound_line
from klaw.wire.protocol import (
    MAX_ENGINE_LINE_BYTES,
    Attachment,
    Command,
    Delivered,
    Draft,
    Error,
    ErrorCode,
    Health,
    Inbound,
    InboundMeta,
    LineReader,
    LogLine,
    Message,
    Outbound,
    ProtocolError,
    Register,
    Registered,
    Shutdown,
    encode,
    new_id,
)

if TYPE_CHECKING:
    from klaw.config import GatewayConfig
    from klaw.paths import KlawPaths

__all__ = ["MAX_INBOUND_CHARS", "Gateway", "GatewayTimings"]

NOTICE_TIMEOUT_S = 60.0
log = logging.getLogger("klaw.gateway")

#: Longer texts are saved to the inbox and passed on as a file (nothing is lost).
MAX_INBOUND_CHARS = 32_000
PAIRING_TEXT = (
    "Hi! This assistant is private. To get access, ask its owner to run:\nklaw pair approve {code}"
)
UNSUPPORTED_TEXT = "Sorry, I can't handle {kind} yet. Please send text, a photo or a document."
UNSUPPORTED_KINDS = {"file_too_large": "files this large (the limit is 20 MB)"}
FAILED_TEXT = "Sorry, that message could not be processed: {reason}"


@dataclass
class GatewayTimings:
    reconnect_initial_s: float = 0.2
    reconnect_max_s: float = 10.0
    register_timeout_s: float = 10.0
    typing_every_s: float = 4.0
    drain_s: float = 30.0  # at shutdown, how long replies being sent may take
    liveness_every_s: float = 5.0  # how often channels are checked for staleness


class Gateway:
    def __init__(
        self,
        paths: KlawPaths,
        config: GatewayConfig,
        channels: Sequence[Channel],
        *,
        timings: GatewayTimings | None = None,
    ) -> None:
        self.paths = paths
        self.config = config
        self.channels = {c.name: c for c in channels}
        # Channels that show replies while written (checked once, not at every draft).
        self._streamers: dict[str, Streaming] = {
            name: ch
            for name, ch in self.channels.items()
            if isinstance(ch, Streaming) and ch.streaming
        }
        self.timings = timings or GatewayTimings()
        self.buffer = Buffer(paths.gateway_buffer)
        self.logbook = LogBook(paths.conversations)
        self.access = Access(config, Approvals(paths.approved_chats), Pairings(paths.pairing))
        self.transcriber = Transcriber(config.transcription, paths.workspace, self._notice)
        self.liveness = Watch(
            self.channels,
            self.access,
            self._notice,
            self._report_health,
            self.timings.liveness_every_s,
        )
        self.connected = asyncio.Event()
        self.engine_pid: int | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._write_lock = asyncio.Lock()
        self._chat_locks: dict[str, asyncio.Lock] = {}
        self._typing: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._commands: list[tuple[str, str]] | None = None
        self._prompt_commands: frozenset[str] = frozenset()  # skills' commands: messages
        self._sent_on_link: set[str] = set()  # ids sent on the current engine connection
        for msg in self.buffer.pending():  # their replies are still due after a restart
            self.access.note_inbound(msg.chat_id)
        for ch in channels:
            ch.admit = functools.partial(self._admits, ch.name)

    def _admits(self, channel: str, chat_id: str) -> bool:
        return self.access.inbound_allowed(channel, chat_id)

    # ------------------------------------------------------------------ running

    async def run(self, stop: asyncio.Event) -> bool:
        """Listens on every channel and keeps the engine link until `stop` is set.

        A channel that fails is logged and the others go on; False when every
        channel failed (the daemon then exits with an error, so systemd restarts it).
        """
        listeners = [
            asyncio.create_task(self._listen(ch), name=f"klaw-channel-{ch.name}")
            for ch in self.channels.values()
        ]
        link = asyncio.create_task(self._engine_loop(), name="klaw-engine-link")
        stopper = asyncio.create_task(stop.wait())
        watch = [asyncio.create_task(self.liveness.run())] if self.liveness.active else []
        ok = True
        try:
            waiting = {stopper, link, *listeners}
            while True:
                done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if stopper in done or link in done:
                    break
                if not any(t in waiting for t in listeners):
                    log.error("every channel stopped: the gateway exits")
                    ok = False
                    break
        finally:
            # Stop taking updates first, then let replies being sent finish and be
            # logged (a reply sent but not logged would be sent again after restart).
            tasks = [stopper, link, *watch, *listeners, *self._typing.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._tasks:
                _, late = await asyncio.wait(list(self._tasks), timeout=self.timings.drain_s)
                for task in late:
                    task.cancel()
                await asyncio.gather(*late, return_exceptions=True)
            await self._disconnect()
            for ch in self.channels.values():
                with contextlib.suppress(Exception):
                    await ch.close()
            await self.transcriber.close()
        return ok

    async def _listen(self, channel: Channel) -> None:
        try:
            await channel.listen(self.on_message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # One broken channel must not take the others down.
            log.exception("channel %s stopped", channel.name)
            if isinstance(channel, Watched):  # the owner hears of it at the next check
                channel.liveness.stopped(f"it stopped: {exc}")

    def _spawn(self, coro: object, name: str) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro, name=name)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ inbound

    async def on_message(self, inc: Incoming) -> None:
        """The `OnMessage` callback of every channel; returns once the message is safe."""
        channel = self.channels[inc.channel]
        if not self.access.inbound_allowed(inc.channel, inc.chat_id):
            await self._refuse(channel, inc)
            return
        if inc.unsupported:
            log.info("unsupported %s message %s from %s", inc.unsupported, inc.id, inc.chat_id)
            kind = UNSUPPORTED_KINDS.get(inc.unsupported, f"{inc.unsupported} messages")
            await self._say(channel, inc.chat_id, UNSUPPORTED_TEXT.format(kind=kind))
            return
        self.access.note_inbound(inc.chat_id)
        msg = await asyncio.to_thread(self._normalize, inc)
        kept = self.buffer.get(msg.id)
        if kept is None and self.logbook.has(msg.chat_id, inbound_line(msg)):
            log.info(
                "message %s of %s was handled before: not forwarded again", msg.id, msg.chat_id
            )
            return
        if kept is not None:
            msg = kept  # delivered again before it was answered: as it was stored
        elif isinstance(msg, Inbound):
            # Voice notes: the words become the text, the recording stays attached.
            msg = await self.transcriber.transcribed(msg)
            if len(msg.content) > MAX_INBOUND_CHARS:
                msg = await asyncio.to_thread(self._spill, msg)
        await asyncio.to_thread(self._keep, msg, inbound_line(msg))
        self.transcriber.forget(msg.id)
        self._start_typing(msg.channel, msg.chat_id)
        async with self._write_lock:
            # The reconnect replay may have sent it already (it was buffered while
            # we waited for the lock); a command sent twice would run twice.
            if self.connected.is_set() and msg.id not in self._sent_on_link:
                await self._send_engine_locked(msg)
                self._sent_on_link.add(msg.id)

    def _keep(self, msg: Inbound | Command, line: LogLine) -> None:
        # Buffer first: a power cut between the two leaves a buffered message whose
        # log line is written on Telegram's redelivery, never a logged message that
        # the redelivery check would take for one already handled.
        self.buffer.add(msg)
        self.logbook.write(msg.chat_id, [line])

    def _normalize(self, inc: Incoming) -> Inbound | Command:
        meta = InboundMeta(
            sender=inc.sender,
            sender_name=inc.sender_name,
            group=inc.is_group,
            reply_to=inc.reply_to,
            attachments=[self._relative(a) for a in inc.attachments],
        )
        if inc.kind == "command" and inc.command not in self._prompt_commands:
            return Command(
                id=inc.id,
                channel=inc.channel,
                chat_id=inc.chat_id,
                ts=inc.ts,
                name=inc.command,
                args=inc.args,
                meta=meta,
            )
        return Inbound(
            id=inc.id,
            channel=inc.channel,
            chat_id=inc.chat_id,
            ts=inc.ts,
            content=inc.content,
            meta=meta,
        )

    def _relative(self, att: Attachment) -> Attachment:
        """Workspace-relative paths: what `file_read` accepts and the model can use."""
        try:
            rel = Path(att.path).resolve().relative_to(self.paths.workspace.resolve())
        except ValueError:
            return att
        return att.model_copy(update={"path": rel.as_posix()})

    def _spill(self, msg: Inbound) -> Inbound:
        """A text too long for one turn (typed, or a voice note's transcript) goes to the
        inbox as a file the model can read; the message keeps its beginning."""
        inbox = self.paths.inbox
        inbox.mkdir(parents=True, exist_ok=True)
        name = f"message-{msg.ts.strftime('%Y%m%d-%H%M%S')}-{new_id()[:8]}.txt"
        path = inbox / name
        data = msg.content.encode("utf-8", "replace")
        path.write_bytes(data)
        rel = str(Path("inbox") / name)
        note = (
            f"[This message was {len(msg.content)} characters long; the full text is in the "
            f"file {rel}. Its beginning:]\n"
        )
        att = Attachment(path=rel, mime="text/plain", name=name, size=len(data))
        meta = msg.meta.model_copy(update={"attachments": [*msg.meta.attachments, att]})
        return msg.model_copy(update={"content": note + msg.content[:2000], "meta": meta})

    async def _refuse(self, channel: Channel, inc: Incoming) -> None:
        if inc.is_group:
            log.info("message from group %s ignored: not in allowedChatIds", inc.chat_id)
            return
        code = await asyncio.to_thread(
            self.access.pairings.reply_code, inc.chat_id, inc.sender, inc.sender_name
        )
        if code is None:  # answered lately, or too many strangers are waiting
            log.debug("unknown chat %s: no pairing reply now (rate limit)", inc.chat_id)
            return
        log.warning(
            "unknown chat %s (%s): pairing code issued; approve with `klaw pair approve`",
            inc.chat_id,
            inc.sender_name or inc.sender or "?",
        )
        await self._say(channel, inc.chat_id, PAIRING_TEXT.format(code=code))

    async def _notice(self, chat_id: str, text: str) -> None:
        channel = self.channels.get(chat_id.partition("_")[0])
        if channel is not None:
            await self._say(channel, chat_id, text)

    async def _say(self, channel: Channel, chat_id: str, text: str) -> None:
        """A gateway notice (pairing, unsupported kind): sent, not logged, never fatal.

        Replies are retried until sent; a notice is given up after NOTICE_TIMEOUT_S so a
        long 429 cannot hold up the updates behind it."""
        try:
            await asyncio.wait_for(channel.send(chat_id, text), NOTICE_TIMEOUT_S)
        except (ChannelSendError, TimeoutError) as exc:
            log.warning("notice to %s not sent: %s", chat_id, exc or "timed out")

    # ------------------------------------------------------------------ typing

    def _start_typing(self, channel: str, chat_id: str) -> None:
        task = self._typing.get(chat_id)
        if task is None or task.done():
            self._typing[chat_id] = asyncio.create_task(self._keep_typing(channel, chat_id))

    async def _keep_typing(self, name: str, chat_id: str) -> None:
        channel = self.channels.get(name)
        if channel is None:
            return
        while any(m.chat_id == chat_id for m in self.buffer.pending()):
            if self.connected.is_set():
                try:
                    await channel.typing(chat_id)
                except Exception as exc:  # typing is cosmetic: never fail for it
                    log.debug("typing for %s failed: %s", chat_id, exc)
            await asyncio.sleep(self.timings.typing_every_s)

    # ------------------------------------------------------------------ engine link

    async def _engine_loop(self) -> None:
        backoff = Backoff(self.timings.reconnect_initial_s, 2.0, self.timings.reconnect_max_s)
        failures = 0  # consecutive connections that did not reach a registration
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(str(self.paths.socket))
            except OSError:
                failures += 1
                await asyncio.sleep(backoff.delay(failures))
                continue
            try:
                lines = LineReader(reader, MAX_ENGINE_LINE_BYTES)
                if await self._register(lines, writer):
                    failures = 0
                    await self._read(lines)
            except (ConnectionError, OSError) as exc:
                log.warning("engine connection lost: %s", exc)
            finally:
                await self._disconnect(writer)
            log.info("engine disconnected; %d message(s) buffered", len(self.buffer))
            failures += 1
            await asyncio.sleep(backoff.delay(failures))

    async def _register(self, lines: LineReader, writer: asyncio.StreamWriter) -> bool:
        streaming = list(self._streamers)
        writer.write(encode(Register(channels=list(self.channels), streaming=streaming)))
        await writer.drain()
        try:
            reply = await asyncio.wait_for(lines.message(), self.timings.register_timeout_s)
        except ProtocolError as exc:
            log.error("engine sent a bad registration reply: %s", exc)
            return False
        if reply is None:
            return False
        if isinstance(reply, Shutdown):
            log.info("the engine is shutting down; retrying later")
            return False
        if not isinstance(reply, Registered):
            log.error("engine answered register with %s", reply.type)
            return False
        self.engine_pid = reply.pid
        commands = [(c.name, c.description) for c in reply.commands]
        self._prompt_commands = frozenset(c.name for c in reply.commands if c.prompt)
        if commands != self._commands:
            self._commands = commands
            self._spawn(self._set_commands(commands), "klaw-set-commands")
        async with self._write_lock:
            self._writer = writer
            # Replay everything unanswered, including what arrives meanwhile, before
            # new messages may go out directly (they wait for this lock).
            sent = self._sent_on_link = set()
            while todo := [m for m in self.buffer.pending() if m.id not in sent]:
                for msg in todo:
                    await self._send_engine_locked(msg)
                    sent.add(msg.id)
                    self._start_typing(msg.channel, msg.chat_id)
            self.connected.set()
            if self.liveness.active:
                await self._send_engine_locked(self.liveness.health())
        log.info("connected to the engine (pid %d); re-sent %d message(s)", reply.pid, len(sent))
        return True

    async def _set_commands(self, commands: list[tuple[str, str]]) -> None:
        for ch in self.channels.values():
            try:
                await ch.set_commands(commands)
            except Exception as exc:
                log.warning("could not register commands on %s: %s", ch.name, exc)

    async def _disconnect(self, writer: asyncio.StreamWriter | None = None) -> None:
        self.connected.clear()
        writer = writer or self._writer
        if self._writer is writer:
            self._writer = None
        if writer is not None:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _send_engine_locked(self, msg: Message) -> None:
        writer = self._writer
        if writer is None or writer.is_closing():
            return
        try:
            writer.write(encode(msg))
            await writer.drain()
        except (ConnectionError, OSError) as exc:
            log.warning("engine write failed: %s", exc)

    async def _send_engine(self, msg: Message) -> None:
        async with self._write_lock:
            await self._send_engine_locked(msg)

    async def _report_health(self, health: Health) -> None:
        if self.connected.is_set():  # else sent after the next registration
            await self._send_engine(health)

    async def _read(self, lines: LineReader) -> None:
        while True:
            try:
                msg = await lines.message()
            except ProtocolError as exc:
                log.warning("bad line from the engine: %s", exc)
                continue
            if msg is None:
                return
            if isinstance(msg, Outbound):
                self._spawn(self._outbound(msg), f"klaw-outbound-{msg.id}")
            elif isinstance(msg, Draft):
                await self._draft(msg)
            elif isinstance(msg, Error):
                await self._engine_error(msg)
            elif isinstance(msg, Shutdown):
                log.info("the engine is stopping: buffering until it is back")
                return
            else:
                log.debug("ignoring %s from the engine", msg.type)

    async def _engine_error(self, err: Error) -> None:
        msg = self.buffer.get(err.ref) if err.ref else None
        if msg is None:
            log.warning("engine error %s (ref %s): %s", err.code, err.ref, err.message)
            return
        if err.code in (ErrorCode.SHUTTING_DOWN, ErrorCode.NOT_REGISTERED):
            return  # stays buffered: re-sent after the next registration
        await asyncio.to_thread(self.buffer.settle, [msg.id])
        self._sent_on_link.discard(msg.id)
        if err.code == ErrorCode.DUPLICATE:
            return
        log.error("the engine could not process %s: %s %s", msg.id, err.code, err.message)
        channel = self.channels.get(msg.channel)
        if channel is not None:
            await self._say(channel, msg.chat_id, FAILED_TEXT.format(reason=err.message))

    # ------------------------------------------------------------------ outbound

    async def _draft(self, msg: Draft) -> None:
        """A preview of a reply being written: shown, never logged nor buffered. Only for
        chats that may be answered (the outbound that follows is checked the same way)."""
        channel = self._streamers.get(msg.channel)
        if channel is None:
            return
        if not self.access.outbound_allowed(msg.channel, msg.chat_id):
            return
        try:
            await channel.draft(msg.chat_id, msg.reply_to, msg.content)
        except ChannelSendError as exc:
            log.debug("draft for %s not shown: %s", msg.chat_id, exc)

    async def _outbound(self, out: Outbound) -> None:
        lock = self._chat_locks.setdefault(out.chat_id, asyncio.Lock())
        async with lock:
            try:
                reply = await self._deliver(out)
            except Exception as exc:  # a bug must not leave the engine waiting for an answer
                log.exception("outbound %s to %s failed", out.id, out.chat_id)
                reply = Error(
                    code=ErrorCode.SEND_FAILED,
                    message=f"the gateway failed to send it ({type(exc).__name__})",
                    ref=out.id,
                )
        await self._send_engine(reply)

    async def _deliver(self, out: Outbound) -> Delivered | Error:
        channel = self.channels.get(out.channel)
        if channel is None:
            return Error(
                code=ErrorCode.REFUSED,
                message=f"no channel {out.channel!r} on this gateway",
                ref=out.id,
            )
        if not self.access.outbound_allowed(out.channel, out.chat_id):
            log.warning("outbound to %s refused: not in allowedChatIds", out.chat_id)
            return Error(
                code=ErrorCode.REFUSED,
                message=f"{out.chat_id} is not in allowedChatIds of channel {out.channel}",
                ref=out.id,
            )
        line = outbound_line(out)
        if self.logbook.has(out.chat_id, line):
            # Sent before (the engine re-sent a stored reply): confirm, do not repeat.
            await asyncio.to_thread(self.buffer.settle, out.answers)
            self._sent_on_link.difference_update(out.answers)
            return Delivered(ref=out.id)
        files: list[OutFile] = []
        if out.attachments:
            try:
                files = await asyncio.to_thread(
                    open_files,
                    self.paths.workspace,
                    out.attachments,
                    limit=channel.max_upload_bytes,
                    channel=channel.name.capitalize(),
                )
            except FileRefused as exc:
                log.warning("outbound %s to %s refused: %s", out.id, out.chat_id, exc)
                return Error(code=ErrorCode.REFUSED, message=str(exc), ref=out.id)
        failure: str | None = None
        try:
            if out.content.strip() or files:
                # The channel retries rate limits and network errors itself; retrying a
                # whole multi-part reply here would send its first parts twice.
                try:
                    await channel.send(out.chat_id, out.content, reply_to=out.reply_to, files=files)
                except ChannelSendError as exc:
                    log.error("reply %s to %s not delivered: %s", out.id, out.chat_id, exc)
                    failure = str(exc)
        finally:
            close_files(files)
        if failure is not None:
            line = line.model_copy(update={"meta": {**line.meta, "undelivered": failure}})
        await asyncio.to_thread(self._log_outbound, out, line)
        self._sent_on_link.difference_update(out.answers)
        # A reply or a notice ends "typing…" (a retry may take minutes); the next
        # inbound starts it again. A message a tool sends mid-turn (a file, a note to
        # another chat) does not: the turn goes on, and so does "typing…".
        task = self._typing.pop(out.chat_id, None) if out.answers or out.line_type else None
        if task is not None:
            task.cancel()
        if failure is not None:
            return Error(code=ErrorCode.SEND_FAILED, message=failure, ref=out.id)
        return Delivered(ref=out.id)

    def _log_outbound(self, out: Outbound, line: LogLine) -> None:
        self.logbook.write(out.chat_id, [*out.records, line])
        self.buffer.settle(out.answers)

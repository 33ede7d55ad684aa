"""The engine's Unix socket server (design §2.3, §2.4).

One listening socket, mode 600. A connection that sends `register` becomes *the*
gateway connection (a newer registration replaces it and the old one is closed);
any connection may send CLI requests (`status`, `sessions`, `memory_search`) and
gets one response per request, with the request's id. `inbound` and `command` from
the gateway go to an `InboundHandler` as tasks; the handler answers through `reply`,
which writes to whichever gateway connection is current. Bad lines get an `error`
reply; neither the connection nor the engine goes down for them.

`EngineServer.close` is the socket half of the graceful shutdown: stop accepting,
send `shutdown` to the gateway, await in-flight handler tasks up to the timeout
(cancelling and logging the rest), close every connection, remove the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from klaw import __version__
from klaw.errors import InvalidInput, KlawError
from klaw.paths import KlawPaths
from klaw.wire.accept import AcceptLoop, PrivateSocket, bind_private_socket
from klaw.wire.protocol import (
    MAX_ENGINE_LINE_BYTES,
    Command,
    CommandInfo,
    Delivered,
    Draft,
    Error,
    ErrorCode,
    GatewayInfo,
    Health,
    Inbound,
    LineReader,
    LineTooLong,
    MemorySearch,
    MemorySearchResult,
    Message,
    Outbound,
    ProtocolError,
    Register,
    Registered,
    Request,
    Schedule,
    SearchHit,
    SessionInfo,
    Sessions,
    SessionsResult,
    Shutdown,
    Status,
    StatusResult,
    ToolRun,
    encode,
    error_for,
)

if TYPE_CHECKING:
    from klaw.memory.api import Memory
    from klaw.sandbox.service import Sandbox
    from klaw.scheduler.control import ScheduleControl

log = logging.getLogger("klaw.engine")

#: What a handler calls to answer: an `outbound` for the user, or an `error`.
Reply = Callable[[Outbound | Error], Awaitable[None]]


class InboundHandler(Protocol):
    """The message pipeline's entry point (debounce, LLM, tools come later)."""

    async def handle(self, msg: Inbound | Command, reply: Reply) -> None: ...


class NotImplementedHandler:
    """The default until the pipeline exists: stores nothing, and says so to the gateway."""

    async def handle(self, msg: Inbound | Command, reply: Reply) -> None:
        log.warning(
            "no message pipeline yet: %s %s from %s not processed", msg.type, msg.id, msg.chat_id
        )
        await reply(
            Error(
                code=ErrorCode.NOT_IMPLEMENTED,
                message="the engine has no message pipeline yet: "
                "the message was neither processed nor stored",
                ref=msg.id,
            )
        )


class EngineSocketError(KlawError):
    """The engine socket could not be set up (path taken by a non-socket, bind failed)."""


class GatewayNotConnected(KlawError):
    """`reply` was called while no gateway is connected: the message was not delivered."""


class DeliveryRefused(KlawError):
    """The gateway refused or failed to deliver an outbound (allowlist, channel error)."""

    def __init__(self, message: str, code: str = ErrorCode.BAD_REQUEST) -> None:
        super().__init__(message)
        self.code = code


def _smaller(msg: Message, exc: LineTooLong) -> bytes:
    """A line for a message over even the engine's limit: a reply still reaches the
    user without its tool rounds (they stay in klaw.db; the log misses them), anything
    else becomes an error naming the problem."""
    if isinstance(msg, Outbound) and msg.records:
        log.error(
            "reply %s to %s: its tool rounds are too big to log (%s); sending it without",
            msg.id,
            msg.chat_id,
            exc,
        )
        meta = {**msg.meta, "error": "records_too_large"}
        try:
            return encode(
                msg.model_copy(update={"records": [], "meta": meta}), MAX_ENGINE_LINE_BYTES
            )
        except LineTooLong as again:
            exc = again
    log.error("not sending %s: %s", msg.type, exc)
    return encode(error_for(exc))


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.lines = LineReader(reader)
        self.gateway: GatewayInfo | None = None
        self.task: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()

    async def send(self, msg: Message) -> bool:
        """Writes one message; False when the peer is gone."""
        try:
            line = encode(msg, MAX_ENGINE_LINE_BYTES)
        except LineTooLong as exc:
            line = _smaller(msg, exc)
        async with self._write_lock:
            if self.writer.is_closing():
                return False
            try:
                self.writer.write(line)
                await self.writer.drain()
            except (ConnectionError, OSError):
                return False
        return True

    def close(self) -> None:
        self.writer.close()


MAX_CLIENTS = 64  # connections at once, the gateway's included
IDLE_TIMEOUT_S = 60.0  # a client (not the gateway) silent this long is closed


class EngineServer:
    def __init__(
        self,
        paths: KlawPaths,
        *,
        memory: Memory | None = None,
        handler: InboundHandler | None = None,
        shutdown_timeout: float = 60.0,
        commands: list[CommandInfo] | None = None,
    ) -> None:
        self.paths = paths
        self.memory = memory
        self.commands = list(commands or [])
        self.handler: InboundHandler = handler or NotImplementedHandler()
        self.shutdown_timeout = shutdown_timeout
        # Clients besides the gateway (CLI requests) connect, ask and go: a cap and an
        # idle timeout keep stuck or hostile ones from holding every fd.
        self.max_clients = MAX_CLIENTS
        self.idle_timeout_s = IDLE_TIMEOUT_S
        self.pid = os.getpid()
        self.started_at = datetime.now(UTC)
        self.t0 = time.monotonic()
        self._server: AcceptLoop | None = None
        self._bound: PrivateSocket | None = None
        self._conns: set[_Connection] = set()
        self._gateway: _Connection | None = None
        self._inflight: dict[asyncio.Task[None], Inbound | Command] = {}
        self._deliveries: dict[str, asyncio.Future[None]] = {}
        self._closing = False
        #: Jobs (`schedule` requests); None when the engine runs without a scheduler.
        self.scheduler: ScheduleControl | None = None
        #: `code_execute`'s sandbox (status only); None when no backend runs here.
        self.sandbox: Sandbox | None = None
        #: Called each time a gateway registers (the outbox flushes then).
        self.on_gateway: list[Callable[[], None]] = []
        #: Answers `tool_run` (`klaw mcp serve`); None: refused.
        self.tool_runner: Callable[[ToolRun], Awaitable[Message]] | None = None
        #: MCP servers' states for `status`.
        self.mcp_status: Callable[[], dict[str, str]] | None = None

    # --- state -----------------------------------------------------------

    @property
    def gateway(self) -> GatewayInfo | None:
        return self._gateway.gateway if self._gateway else None

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    # --- starting --------------------------------------------------------

    async def start(self) -> None:
        """Binds the socket (mode 600), replacing a stale one. The caller holds the lock."""
        path = self.paths.socket
        self._bound = bind_private_socket(path, "engine", EngineSocketError, log)
        self._server = AcceptLoop(self._bound.sock, self._on_connect, log)
        self._server.start()
        log.info("listening on %s", path)

    # --- connections -----------------------------------------------------

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(reader, writer)
        if self._closing:
            await self._finish(conn)
            return
        if len(self._conns) >= self.max_clients:
            log.warning("refusing a connection: %d are open already", len(self._conns))
            await conn.send(
                Error(code=ErrorCode.BUSY, message="too many connections; try again later")
            )
            await self._finish(conn)
            return
        conn.task = asyncio.current_task()
        self._conns.add(conn)
        try:
            await self._serve(conn)
        except Exception:
            log.exception("connection failed")
        finally:
            self._conns.discard(conn)
            if self._gateway is conn:
                self._gateway = None
                log.info("gateway disconnected")
                self._fail_deliveries("the gateway disconnected before confirming delivery")
            await self._finish(conn)

    @staticmethod
    async def _finish(conn: _Connection) -> None:
        conn.close()
        with contextlib.suppress(ConnectionError, OSError):
            await conn.writer.wait_closed()

    async def _serve(self, conn: _Connection) -> None:
        while True:
            idle = None if conn is self._gateway else self.idle_timeout_s
            try:
                msg = await asyncio.wait_for(conn.lines.message(), idle)
            except TimeoutError:
                await conn.send(
                    Error(code=ErrorCode.IDLE, message=f"nothing sent for {idle:.0f} s; closing")
                )
                return
            except ProtocolError as exc:
                log.warning("bad line: %s", exc)
                await conn.send(error_for(exc))
                continue
            except (ConnectionError, OSError):
                return
            if msg is None:
                return
            await self._dispatch(conn, msg)

    async def _dispatch(self, conn: _Connection, msg: Message) -> None:
        if isinstance(msg, Register):
            await self._register(conn, msg)
        elif isinstance(msg, Inbound | Command):
            if conn is not self._gateway:
                await conn.send(
                    Error(
                        code=ErrorCode.NOT_REGISTERED,
                        message=f"send register before {msg.type} messages",
                        ref=msg.id,
                    )
                )
            elif self._closing:
                await conn.send(
                    Error(
                        code=ErrorCode.SHUTTING_DOWN,
                        message="the engine is shutting down: buffer and resend after restart",
                        ref=msg.id,
                    )
                )
            else:
                self._spawn(msg)
        elif isinstance(msg, Status | Sessions | MemorySearch | Schedule | ToolRun):
            await conn.send(await self._answer(msg))
        elif isinstance(msg, Health):
            if conn is self._gateway and conn.gateway is not None:  # shown by `klaw status`
                conn.gateway = conn.gateway.model_copy(update={"health": msg.channels})
                log.info(
                    "gateway channels: %s", ", ".join(f"{h.name} {h.state}" for h in msg.channels)
                )
        elif isinstance(msg, Delivered):
            fut = self._deliveries.pop(msg.ref, None)
            if fut is not None and not fut.done():
                fut.set_result(None)
        elif isinstance(msg, Error):
            fut = self._deliveries.pop(msg.ref, None) if msg.ref else None
            if fut is not None and not fut.done():
                fut.set_exception(DeliveryRefused(msg.message, msg.code))
            else:
                log.warning("peer reported %s (ref %s): %s", msg.code, msg.ref, msg.message)
        else:
            await conn.send(
                Error(
                    code=ErrorCode.UNEXPECTED,
                    message=f"the engine does not accept {msg.type} messages",
                    ref=getattr(msg, "id", None),
                )
            )

    async def _register(self, conn: _Connection, msg: Register) -> None:
        if msg.client != "gateway":
            await conn.send(
                Error(
                    code=ErrorCode.BAD_REQUEST,
                    message=f"unknown client {msg.client!r}: only the gateway registers",
                )
            )
            return
        if self._closing:
            await conn.send(Shutdown())
            return
        old = self._gateway
        if old is not None and old is not conn:
            log.info("a new gateway registered: closing the previous connection")
            await old.send(
                Error(code=ErrorCode.REPLACED, message="another gateway connection registered")
            )
            old.close()
        conn.gateway = GatewayInfo(
            client=msg.client,
            channels=list(msg.channels),
            connected_at=datetime.now(UTC),
            streaming=[c for c in msg.streaming if c in msg.channels],
        )
        self._gateway = conn
        log.info("gateway registered (channels: %s)", ", ".join(msg.channels) or "none")
        await conn.send(Registered(version=__version__, pid=self.pid, commands=self.commands))
        for hook in self.on_gateway:
            hook()

    # --- inbound ---------------------------------------------------------

    def _spawn(self, msg: Inbound | Command) -> None:
        log.info("%s %s from %s (%d chars)", msg.type, msg.id, msg.chat_id, _length(msg))
        task = asyncio.create_task(self._handle(msg), name=f"klaw-{msg.type}-{msg.id}")
        self._inflight[task] = msg
        task.add_done_callback(self._inflight.pop)

    async def _handle(self, msg: Inbound | Command) -> None:
        try:
            await self.handler.handle(msg, self.reply)
        except GatewayNotConnected as exc:
            log.error("reply to %s lost: %s", msg.id, exc)
        except Exception as exc:
            log.exception("handler failed on %s %s", msg.type, msg.id)
            with contextlib.suppress(GatewayNotConnected):
                await self.reply(
                    Error(
                        code=ErrorCode.INTERNAL,
                        message=f"the engine failed on this message: {type(exc).__name__}",
                        ref=msg.id,
                    )
                )

    async def reply(self, msg: Outbound | Error) -> None:
        """Sends to the current gateway; `GatewayNotConnected` when there is none."""
        gw = self._gateway
        if gw is None or not await gw.send(msg):
            about = f"for {msg.chat_id}" if isinstance(msg, Outbound) else f"about {msg.ref}"
            raise GatewayNotConnected(f"no gateway connected: {msg.type} {about} was not delivered")

    def streams(self, channel: str) -> bool:
        """Whether the connected gateway shows `channel`'s replies while written."""
        gw = self._gateway
        return gw is not None and gw.gateway is not None and channel in gw.gateway.streaming

    async def draft(self, msg: Draft) -> None:
        """Best effort: a draft that finds no gateway is dropped (the outbound is what
        counts, and it is kept until delivered)."""
        gw = self._gateway
        if gw is not None:
            await gw.send(msg)

    async def deliver(self, msg: Outbound, timeout: float = 30.0) -> None:
        """Sends `msg` and waits for the gateway's `delivered`.

        Raises `DeliveryRefused` when the gateway answers with an error (allowlist,
        channel failure), `GatewayNotConnected` when there is no gateway or it goes
        away, `TimeoutError` after `timeout` seconds without an answer.
        """
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._deliveries[msg.id] = fut
        try:
            await self.reply(msg)
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        finally:
            self._deliveries.pop(msg.id, None)

    def _fail_deliveries(self, reason: str) -> None:
        for fut in self._deliveries.values():
            if not fut.done():
                fut.set_exception(GatewayNotConnected(reason))
        self._deliveries.clear()

    # --- CLI requests ----------------------------------------------------

    async def _answer(self, req: Request) -> Message:
        try:
            if isinstance(req, Status):
                return await self._status(req)
            if isinstance(req, Sessions):
                return await asyncio.to_thread(self._sessions, req)
            if isinstance(req, Schedule):
                return await self._schedule(req)
            if isinstance(req, ToolRun):
                if self.tool_runner is None:
                    return Error(
                        code=ErrorCode.UNAVAILABLE, message="no tools offered here", ref=req.id
                    )
                return await self.tool_runner(req)
            return await self._memory_search(req)
        except InvalidInput as exc:
            return Error(code=ErrorCode.BAD_REQUEST, message=str(exc), ref=req.id)
        except KlawError as exc:
            log.error("%s request failed: %s", req.type, exc)
            return Error(code=ErrorCode.INTERNAL, message=str(exc), ref=req.id)
        except Exception as exc:
            log.exception("%s request failed", req.type)
            return Error(
                code=ErrorCode.INTERNAL, message=f"{type(exc).__name__}: {exc}", ref=req.id
            )

    async def _schedule(self, req: Schedule) -> Message:
        if self.scheduler is None:
            return Error(
                code=ErrorCode.UNAVAILABLE,
                message="the scheduler is not running in this engine "
                "(scheduler.enabled is false in engine.yaml, or it runs without memory)",
                ref=req.id,
            )
        return await self.scheduler.answer(req)

    async def _status(self, req: Status) -> StatusResult:
        counts = await asyncio.to_thread(self.memory.stats) if self.memory else {}
        counts = {**counts, **getattr(self.handler, "load", dict)()}
        return StatusResult(
            id=req.id,
            pid=self.pid,
            version=__version__,
            started_at=self.started_at,
            uptime_s=round(time.monotonic() - self.t0, 3),
            gateway=self.gateway,
            in_flight=self.in_flight,
            memory=self.memory is not None,
            counts=counts,
            sandbox=self.sandbox.status() if self.sandbox is not None else None,
            mcp=self.mcp_status() if self.mcp_status is not None else {},
        )

    def _sessions(self, req: Sessions) -> SessionsResult:
        """Chats found as `conversations/{chat_id}/`, with the store's session row if any.

        The store can only look a session up by chat id (`Store.get_session`); it has
        no call that lists them. So chats are discovered from the conversation logs (the
        files are the truth), and `total` (the store's session count) against the rows
        found shows how many sessions were not listed.
        """
        root = self.paths.conversations
        chats = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        store = self.memory.store if self.memory else None
        sessions: list[SessionInfo] = []
        found = 0
        for chat in chats:
            row = store.get_session(chat) if store else None
            if row is None:
                sessions.append(SessionInfo(chat_id=chat))
                continue
            found += 1
            sessions.append(
                SessionInfo(
                    chat_id=chat,
                    model=row.model,
                    segment_start=row.segment_start,
                    created_at=row.created_at,
                )
            )
        total = dict(store.stats()).get("sessions", 0) if store else 0
        return SessionsResult(
            id=req.id, sessions=sessions, total=total, unlisted=max(0, total - found)
        )

    async def _memory_search(self, req: MemorySearch) -> Message:
        if self.memory is None:
            return Error(
                code=ErrorCode.UNAVAILABLE,
                message="this engine runs without memory",
                ref=req.id,
            )
        hits = await self.memory.asearch(req.query, req.top_k, kind=req.kind, entity=req.entity)
        return MemorySearchResult(
            id=req.id,
            hits=[
                SearchHit(
                    citation=h.citation,
                    content=h.content,
                    score=h.score,
                    source=h.source,
                    created_at=h.created_at,
                    heading=h.heading,
                )
                for h in hits
            ],
        )

    # --- shutdown --------------------------------------------------------

    async def close(self) -> None:
        """Graceful shutdown of the socket side; safe to call more than once."""
        if self._closing and self._server is None:
            return
        self._closing = True
        server, self._server = self._server, None
        if server is not None:
            server.close()  # stop accepting
        if self._gateway is not None:
            await self._gateway.send(Shutdown())
        await self._drain_handlers()
        while self._conns:
            conns = list(self._conns)
            for conn in conns:
                conn.close()
            tasks = [c.task for c in conns if c.task is not None]
            if tasks:
                _, pending = await asyncio.wait(tasks, timeout=self.shutdown_timeout)
                for t in pending:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            self._conns.difference_update(conns)
        if server is not None:
            await server.wait_closed()
        self._unlink_socket()
        log.info("socket closed")

    async def _drain_handlers(self) -> None:
        if not self._inflight:
            return
        log.info("waiting up to %.0f s for %d message(s)", self.shutdown_timeout, self.in_flight)
        tasks = list(self._inflight)
        _, pending = await asyncio.wait(tasks, timeout=self.shutdown_timeout)
        for task in pending:
            msg = self._inflight.get(task)
            if msg is not None:
                log.warning(
                    "cancelling %s %s from %s: not done after %.0f s",
                    msg.type,
                    msg.id,
                    msg.chat_id,
                    self.shutdown_timeout,
                )
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _unlink_socket(self) -> None:
        bound, self._bound = self._bound, None
        if bound is not None:
            bound.unlink()


def _length(msg: Inbound | Command) -> int:
    return len(msg.content) if isinstance(msg, Inbound) else len(msg.args)

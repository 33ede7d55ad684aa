"""The console channel: `klaw chat` in a terminal, over a Unix socket (mode 600).

The gateway serves `KlawPaths.console_socket`; any number of `klaw chat` clients of
the same OS user connect to it (two terminals see the same conversation). The chat
is ``console_{user}``, `user` being the OS login name reduced to ``[a-z0-9_]``.

Wire format: `klaw.wire.console` (typed; shared with the `klaw chat` client). A
line that is too long or not a ``say`` gets an ``error`` back and the connection
stays open.

A ``say`` whose text starts with ``/name`` (``[A-Za-z0-9_]``) is a command:
``/model glm/glm-5`` is command "model", args "glm/glm-5". Blank text is ignored.
Replies sent while no client is connected are kept (the last `BACKLOG`) and
delivered to the next client that connects.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import os
import re
import socket
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from klaw.errors import KlawError
from klaw.fsutil import human_size
from klaw.gateway.channels.base import ChannelSendError, Incoming, OnMessage, OutFile, platform_id
from klaw.wire.accept import PrivateSocket, bind_private_socket
from klaw.wire.console import (
    ConsoleError,
    Hello,
    Reply,
    Say,
    Typing,
    decode_console,
    encode_console,
)
from klaw.wire.protocol import MAX_LINE_BYTES, LineReader, ProtocolError, UnknownType

__all__ = [
    "BACKLOG",
    "ConsoleChannel",
    "ConsoleSocketError",
    "console_user",
]

log = logging.getLogger("klaw.gateway.console")

#: Replies kept for the next client while none is connected.
BACKLOG: Final = 100
#: How long one client may take to accept a line before it is disconnected.
SEND_TIMEOUT: Final = 10.0

_COMMAND = re.compile(r"/([A-Za-z0-9_]{1,64})(?:\s+(.*))?", re.DOTALL)


class ConsoleSocketError(KlawError):
    """The console socket cannot be served (path taken, no permission...)."""


def console_user(name: str | None = None) -> str:
    """`name` (default: the OS login name) reduced to ``[a-z0-9_]``, e.g. ``"j_doe"``."""
    if name is None:
        try:
            name = getpass.getuser()
        except (KeyError, OSError):  # no passwd entry and no $USER/$LOGNAME
            name = f"uid{os.getuid()}"
    user = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")[:64]
    return user or "user"


class _Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.lines = LineReader(reader, MAX_LINE_BYTES)
        self.writer = writer

    def write(self, line: bytes) -> bool:
        if self.writer.is_closing():
            return False
        try:
            self.writer.write(line)
        except (ConnectionError, OSError):
            return False
        return True

    async def send(self, line: bytes) -> bool:
        """Writes `line` and waits until the socket took it; False (and closed) on failure."""
        if not self.write(line):
            return False
        return await self.drain()

    async def drain(self) -> bool:
        try:
            await asyncio.wait_for(self.writer.drain(), SEND_TIMEOUT)
        except (ConnectionError, OSError):
            self.writer.close()
            return False
        except TimeoutError:
            log.warning("a console client did not read for %.0f s: disconnecting it", SEND_TIMEOUT)
            self.writer.close()
            return False
        return True

    async def error(self, message: str) -> None:
        await self.send(encode_console(ConsoleError(message=message)))

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


class ConsoleChannel:
    """The `Channel` behind `klaw chat`: a Unix socket server of JSON lines.

    `listen` binds `socket_path` (replacing a stale socket, refusing any other
    file) and serves until cancelled; `close` disconnects the clients and removes
    the socket. Messages are passed to `on_message` one at a time, in arrival order.
    """

    name = "console"
    max_upload_bytes = 1 << 40  # nothing is uploaded: the reply names the file
    admit: Callable[[str], bool] | None = None  # the local user is always admitted

    def __init__(self, socket_path: Path, *, user: str | None = None) -> None:
        self.socket_path = Path(socket_path)
        self.user = console_user(user)
        self.chat_id = f"{self.name}_{self.user}"
        self._commands: list[tuple[str, str]] = []
        self._pending: deque[str] = deque(maxlen=BACKLOG)
        self._clients: set[_Client] = set()
        self._listener: socket.socket | None = None
        self._conns: dict[asyncio.Task[None], socket.socket] = {}
        self._bound: PrivateSocket | None = None
        self._on_message: OnMessage | None = None
        self._turn = asyncio.Lock()
        self._closed = False

    @property
    def serving(self) -> bool:
        """True once `listen` bound the socket, until `close`."""
        return self._listener is not None

    @property
    def connected(self) -> int:
        """How many `klaw chat` clients are connected now."""
        return len(self._clients)

    @property
    def pending(self) -> int:
        """How many replies wait for a client to connect."""
        return len(self._pending)

    # --- Channel ----------------------------------------------------------

    async def listen(self, on_message: OnMessage) -> None:
        if self._closed:
            raise ConsoleSocketError("the console channel is closed")
        if self._listener is None:
            self._start()
        self._on_message = on_message
        try:
            await asyncio.Event().wait()  # serving happens in the connection tasks
        finally:
            if self._on_message is on_message:
                self._on_message = None

    async def send(
        self,
        chat_id: str,
        text: str,
        *,
        reply_to: str | None = None,
        files: Sequence[OutFile] = (),
    ) -> None:
        self._check_chat(chat_id)
        if files:  # the terminal is on this machine: the path is the file
            shown = [f"[file: {f.path} ({human_size(f.size)})]" for f in files]
            text = "\n".join([text, *shown]) if text.strip() else "\n".join(shown)
        sent = await self._broadcast(encode_console(Reply(text=text)))
        if sent:
            log.debug("reply of %d chars to %d console client(s)", len(text), sent)
            return
        if len(self._pending) == self._pending.maxlen:
            log.warning("console backlog full: dropping the oldest waiting reply")
        self._pending.append(text)
        log.info(
            "no console client connected: reply kept for the next one (%d waiting)",
            len(self._pending),
        )

    async def typing(self, chat_id: str) -> None:
        self._check_chat(chat_id)
        await self._broadcast(encode_console(Typing()))

    async def set_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        new = [(str(name), str(description)) for name, description in commands]
        if new == self._commands:
            return
        self._commands = new
        await self._broadcast(self._hello())

    async def close(self) -> None:
        self._closed = True
        listener, self._listener = self._listener, None
        if listener is not None:
            asyncio.get_running_loop().remove_reader(listener)
            listener.close()
        clients = list(self._clients)
        self._clients.clear()
        for client in clients:
            await client.close()  # its reader sees the end: the connection task returns
        current = asyncio.current_task()
        conns = {t: c for t, c in self._conns.items() if t is not current}
        if conns:
            _, stuck = await asyncio.wait(conns, timeout=SEND_TIMEOUT)
            for task in stuck:  # still in on_message
                task.cancel()
            if stuck:
                await asyncio.wait(stuck)
            for conn in conns.values():  # a task cancelled before it ran never closed its own
                conn.close()
        if listener is not None:
            self._unlink_socket()
            log.info("console socket closed")

    # --- the socket ---------------------------------------------------------

    def _start(self) -> None:
        self._bound = bind_private_socket(self.socket_path, "gateway", ConsoleSocketError, log)
        self._listener = sock = self._bound.sock
        asyncio.get_running_loop().add_reader(sock, self._accept, sock)
        log.info("console listening on %s for %s", self.socket_path, self.chat_id)

    def _unlink_socket(self) -> None:
        bound, self._bound = self._bound, None
        if bound is not None:
            bound.unlink()

    # --- clients --------------------------------------------------------------

    def _hello(self) -> bytes:
        return encode_console(Hello(commands=list(self._commands)))

    def _accept(self, sock: socket.socket) -> None:
        """Accepts waiting clients (a reader callback, not a task: every accepted socket
        is in `_conns` at once, so `close` can end each one)."""
        loop = asyncio.get_running_loop()
        for _ in range(16):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors...: pause, then try again
                log.warning("console: cannot accept a client (%s); retrying in 1 s", exc)
                loop.remove_reader(sock)
                loop.call_later(1.0, self._resume_accepting, sock)
                return
            conn.setblocking(False)
            task = loop.create_task(self._connection(conn), name="klaw-console-client")
            self._conns[task] = conn
            task.add_done_callback(self._forget)

    def _resume_accepting(self, sock: socket.socket) -> None:
        if self._listener is sock:
            asyncio.get_running_loop().add_reader(sock, self._accept, sock)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._conns.pop(task, None)

    async def _connection(self, conn: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_unix_connection(sock=conn)
        except OSError as exc:
            conn.close()
            log.warning("console: cannot set up a client connection: %s", exc)
            return
        client = _Client(reader, writer)
        if self._closed:
            await client.close()
            return
        # No await until the client is registered: the hello and the backlog go out
        # before any newer reply, and no reply can slip between them.
        client.write(self._hello())
        backlog = list(self._pending)
        self._pending.clear()
        for text in backlog:
            client.write(encode_console(Reply(text=text, queued=True)))
        self._clients.add(client)
        log.info(
            "console client connected (%d connected, %d waiting replies delivered)",
            len(self._clients),
            len(backlog),
        )
        try:
            if not await client.drain():
                # It went before taking them: keep them, older than what queued since.
                self._pending = deque([*backlog, *self._pending], maxlen=BACKLOG)
                return
            await self._serve(client)
        except Exception:
            log.exception("console connection failed")
        finally:
            self._clients.discard(client)
            await client.close()
            log.info("console client disconnected (%d connected)", len(self._clients))

    async def _serve(self, client: _Client) -> None:
        while True:
            try:
                line = await client.lines.readline()
                if line is None:
                    return
                if not line.strip():
                    continue
                msg = decode_console(line)
                if not isinstance(msg, Say):
                    raise UnknownType(f'{msg.type!r} comes from the gateway: send "say"')
            except ProtocolError as exc:  # too long, not JSON, not a "say"...
                log.warning("console: bad line: %s", exc)
                await client.error(exc.message)
                continue
            except (ConnectionError, OSError):
                return
            incoming = self._normalise(msg.text)
            if incoming is not None:
                await self._deliver(client, incoming)

    def _normalise(self, text: str) -> Incoming | None:
        text = text.strip()
        if not text:
            return None
        common: dict[str, Any] = {
            "id": f"{self.chat_id}_{uuid.uuid4().hex}",
            "channel": self.name,
            "chat_id": self.chat_id,
            "ts": datetime.now(UTC),
            "content": text,
            "sender": self.user,
            "sender_name": self.user,
        }
        m = _COMMAND.fullmatch(text)
        if m is None:
            return Incoming(**common)
        return Incoming(
            **common, kind="command", command=m.group(1).lower(), args=(m.group(2) or "").strip()
        )

    async def _deliver(self, client: _Client, incoming: Incoming) -> None:
        async with self._turn:  # one message at a time, in arrival order across clients
            on_message = self._on_message
            if on_message is None:
                await client.error(
                    "the gateway is not taking messages right now (it is stopping); try again"
                )
                return
            log.debug("console %s %s (%d chars)", incoming.kind, incoming.id, len(incoming.content))
            try:
                await on_message(incoming)
            except Exception:
                log.exception("the gateway failed to take console message %s", incoming.id)
                await client.error("the gateway could not take this message; see its log")

    async def _broadcast(self, line: bytes) -> int:
        """Sends `line` to every connected client; how many took it."""
        clients = [c for c in self._clients if c.write(line)]
        if not clients:
            return 0
        results = await asyncio.gather(*(c.drain() for c in clients))
        return sum(results)

    def _check_chat(self, chat_id: str) -> None:
        try:
            user = platform_id(self.name, chat_id)
        except ValueError as exc:
            raise ChannelSendError(str(exc), permanent=True) from None
        if user != self.user:
            raise ChannelSendError(
                f"chat {chat_id!r} is not this console's chat {self.chat_id!r}", permanent=True
            )

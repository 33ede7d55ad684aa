"""The `Channel` interface every chat transport implements (design §2.4).

A channel turns platform updates into `Incoming` messages and sends text back. It
knows nothing about the engine, JSONL, pairing or the allowlist: the gateway core
(`klaw.gateway.core`) does all of that, the same way for every channel.

Chat ids are ``"{channel}_{platform_id}"`` (``telegram_123456``) everywhere outside
the channel; a channel converts at its edge (`platform_id`).
"""

from __future__ import annotations

import errno
import io
import logging
import os
import re
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, Protocol, runtime_checkable

from pydantic import ValidationError

from klaw.errors import KlawError
from klaw.retry import Backoff
from klaw.wire.protocol import Attachment, LineTooLong, ProtocolError, Quote

__all__ = [
    "FILE_TOO_LARGE",
    "STORAGE_NOTICE",
    "Channel",
    "ChannelSendError",
    "Incoming",
    "OnMessage",
    "OutFile",
    "Redelivery",
    "StorageOutage",
    "display_name",
    "platform_id",
    "rejected_notice",
    "safe_filename",
    "storable",
]


class ChannelSendError(KlawError):
    """A channel could not deliver a message (after its own retries).

    `permanent` is True when retrying cannot help (chat not found, bot blocked):
    the gateway then reports the failure to the engine instead of retrying.
    """

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


@dataclass(frozen=True)
class Incoming:
    """One normalised message from a channel.

    `kind` is "command" for a slash command (`/model deepseek/deepseek-chat`:
    `command` "model", `args` "deepseek/deepseek-chat"), "inbound" for everything
    else. `unsupported` names a kind the channel cannot pass on (voice, sticker...):
    the gateway answers it politely and logs it; `content` may then be empty.
    """

    id: str  # unique within the channel, stable across redelivery: "{channel}_{chat}_{msg}"
    channel: str
    chat_id: str  # "{channel}_{platform_id}"
    ts: datetime  # timezone-aware, when the platform says it was sent
    content: str = ""
    kind: Literal["inbound", "command"] = "inbound"
    command: str = ""
    args: str = ""
    sender: str | None = None
    sender_name: str | None = None
    is_group: bool = False
    reply_to: Quote | None = None
    attachments: Sequence[Attachment] = field(default_factory=tuple)
    unsupported: str | None = None


OnMessage = Callable[[Incoming], Awaitable[None]]


@dataclass(frozen=True)
class OutFile:
    """A workspace file going out with a message. The gateway opened it (race-free,
    inside the workspace) and owns `fd`; a channel reads it through `reader`, once per
    attempt, and never by `path` (the file at that path may since have changed)."""

    name: str  # as the user sees it
    mime: str
    size: int
    fd: int
    path: str  # the real path, for showing (the console) and logs

    def reader(self) -> io.BufferedReader:
        """A fresh reader from the first byte (a retry sends the whole file again), with
        a position of its own (two readers of one file do not disturb each other); the
        caller closes it, which leaves `fd` open."""
        return io.BufferedReader(_PositionalReader(self.fd, self.size))

    @property
    def image(self) -> bool:
        return self.mime in ("image/jpeg", "image/png", "image/webp", "image/gif")


class _PositionalReader(io.RawIOBase):
    """Reads the first `size` bytes of a descriptor with pread, from a position of its
    own; never closes it. A file that grows while it is sent still sends only the
    `size` bytes checked against the upload limit."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd = fd
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def fileno(self) -> int:
        # HTTP clients size a file body by fstat: a file that changed since it was
        # opened then declares a length the capped reads do not send, and the upload
        # fails instead of sending bytes nobody checked.
        return self._fd

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos}.get(whence, self._size)
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        want = max(0, min(len(buffer), self._size - self._pos))
        data = os.pread(self._fd, want, self._pos) if want else b""
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


class Channel(Protocol):
    """A chat transport. `listen` runs until cancelled; the others may run concurrently."""

    name: str
    #: The largest file `send` can deliver (the platform's upload limit).
    max_upload_bytes: int
    #: Set by the gateway: whether a chat ("telegram_123") may be served, so a channel
    #: can skip work (downloads) for chats that will be refused. None: everyone.
    admit: Callable[[str], bool] | None

    async def listen(self, on_message: OnMessage) -> None:
        """Receives updates and awaits `on_message` for each, in arrival order per chat.

        Returns only when cancelled (or raises a `KlawError` if the channel cannot run).
        An update is acknowledged to the platform only after `on_message` returned, so a
        crash in between means redelivery, never loss (the gateway dedupes by `id`).
        """
        ...

    async def send(
        self,
        chat_id: str,
        text: str,
        *,
        reply_to: str | None = None,
        files: Sequence[OutFile] = (),
    ) -> None:
        """Delivers `text` (Markdown-ish, any length) and `files` to `chat_id`.

        The channel splits and formats as its platform requires and retries rate
        limits itself; it raises `ChannelSendError` when it finally fails. Files no
        bigger than `max_upload_bytes` (the gateway checks before calling).
        """
        ...

    async def typing(self, chat_id: str) -> None:
        """Shows a "typing…" indicator once (the gateway repeats it while waiting)."""
        ...

    async def set_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        """Registers (name, description) pairs as the platform's command menu."""
        ...

    async def close(self) -> None:
        """Releases sessions and connections; safe to call twice."""
        ...


@runtime_checkable
class Streaming(Protocol):
    """A channel that can show a reply while it is being written (`streaming: true`)."""

    streaming: bool

    async def draft(self, chat_id: str, reply_to: str, text: str) -> None:
        """The reply to inbound `reply_to` reads `text` so far. Returns at once (the
        channel shows it when its platform's rate limit allows); never raises for a
        preview that fails. The `send` of that reply ends the preview."""
        ...


def platform_id(channel: str, chat_id: str) -> str:
    """``telegram_123`` → ``123`` for channel ``telegram``; ValueError on a foreign id."""
    prefix = f"{channel}_"
    if not chat_id.startswith(prefix) or len(chat_id) == len(prefix):
        raise ValueError(f"chat id {chat_id!r} does not belong to channel {channel!r}")
    return chat_id[len(prefix) :]


def message_in(chat_id: str, inbound_id: str | None) -> int | None:
    """``telegram_123_45`` → 45 when `inbound_id` names a message of `chat_id` (the
    message a reply quotes), else None."""
    prefix = f"{chat_id}_"
    if inbound_id and inbound_id.startswith(prefix):
        tail = inbound_id[len(prefix) :]
        if tail.isascii() and tail.isdigit():
            return int(tail)
    return None


_SURROGATE: Final = re.compile("[\ud800-\udfff]")  # a lone one: pairs are joined by json.loads


def storable(text: str) -> str:
    """`text` with U+FFFD for each lone surrogate (JSON allows "\\ud800"): one cannot be
    written as UTF-8, and a message must stay storable, not fail forever."""
    return _SURROGATE.sub("\ufffd", text)


def display_name(name: str | None) -> str | None:
    """A name (a sender's, a file's) without control characters, at most 255 of them; None
    when nothing is left. A line break in a name would break a log line or a header."""
    if not name:
        return None
    cleaned = "".join(ch for ch in name if unicodedata.category(ch)[0] != "C")
    return cleaned[:255] or None


# Errors of the gateway's own storage (logs, buffer, inbox): waiting is the only cure.
_STORAGE_ERRNOS: Final = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG, errno.EACCES, errno.EPERM}
)
STORAGE_NOTICE: Final = (
    "⚠️ I can't store messages right now (my disk is full or read-only), so I can't "
    "answer yet. Your message is not lost: I'll pick it up once the disk is fixed."
)
#: `Incoming.unsupported` for a file over the download cap.
FILE_TOO_LARGE: Final = "file_too_large"


class StorageOutage:
    """A channel's side of an outage of the gateway's storage (disk full, read-only): a
    message that cannot be stored stays with the platform and is tried again, waiting
    longer each time; each chat is told once per outage; the log says it once, then
    every 20th try, and when it is over."""

    def __init__(self, log: logging.Logger, channel: str, backoff: Backoff) -> None:
        self._log = log
        self._channel = channel
        self._backoff = backoff
        self.tries = 0  # consecutive messages that could not be stored
        self._told: set[object] = set()  # chats told about this outage

    @staticmethod
    def caused(exc: BaseException) -> bool:
        """Whether `exc` is the storage failing (waiting is the cure), not the message."""
        return isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS

    def failed(self, chat: object, what: str, exc: Exception, tell: Callable[[], None]) -> float:
        """One more message not stored; returns how long to wait. `tell()` sends the
        chat the notice the first time this outage reaches it; `what` names the message
        and where it waits, for the log."""
        self.tries += 1
        wait = self._backoff.delay(self.tries)
        if self.tries == 1 or self.tries % 20 == 0:
            self._log.error(
                "%s: cannot store %s (%s); tried again every %.0f s until the disk is fixed",
                self._channel,
                what,
                getattr(exc, "strerror", None) or exc,
                wait,
            )
        if chat is not None and chat not in self._told:
            self._told.add(chat)
            tell()
        return wait

    def stored(self) -> None:
        """A message was stored: an outage in progress is over."""
        if self.tries:
            self._log.warning(
                "%s: storage works again after %d failed tries", self._channel, self.tries
            )
            self.tries = 0
            self._told.clear()


#: Errors of the message itself: handling it again would fail the same way.
_PERMANENT: Final = (ProtocolError, ValidationError, UnicodeError)


class Redelivery:
    """A channel's answer to a message whose handling raised, other than a storage
    outage: tried again after `backoff.delay(n)` (others go on meanwhile), at most
    `max_deliveries` tries in all, then rejected. An error of the message itself (it
    cannot be encoded or stored as it is) is rejected at once: a retry would fail the
    same way, and may cost (a voice note is transcribed again). Every try is logged;
    a rejection as an error, and the chat is then told (`rejected_notice`)."""

    def __init__(
        self, log: logging.Logger, channel: str, max_deliveries: int, backoff: Backoff
    ) -> None:
        self._log = log
        self._channel = channel
        self.max_deliveries = max(1, max_deliveries)
        self._backoff = backoff

    def retry_in(self, what: str, failures: int, exc: BaseException) -> float | None:
        """Seconds before the next try of `what` (the message, for the log) that has
        now failed `failures` times with `exc`; None: it is rejected."""
        if isinstance(exc, _PERMANENT):
            self._log.error(
                "%s: %s cannot be taken in (%s); rejected without retrying",
                self._channel,
                what,
                exc,
                exc_info=exc,
            )
            return None
        if failures >= self.max_deliveries:
            self._log.error(
                "%s: handling %s failed %d times; rejecting it",
                self._channel,
                what,
                failures,
                exc_info=exc,
            )
            return None
        wait = self._backoff.delay(failures)
        self._log.error(
            "%s: handling %s failed (try %d of %d); retrying in %.1fs",
            self._channel,
            what,
            failures,
            self.max_deliveries,
            wait,
            exc_info=exc,
        )
        return wait


def rejected_notice(exc: BaseException) -> str:
    """What the sender of a rejected message is told: it was not passed on, and why."""
    if isinstance(exc, LineTooLong):
        why = "it is too big to store as one message"
    elif isinstance(exc, _PERMANENT):
        why = "it could not be read"
    else:
        why = "handling it failed several times; the log says why"
    return (
        f"⚠️ I couldn't take in your last message ({why}), so it was not passed on. "
        "Please send it again, shorter or as a file."
    )


_NAME_BYTES: Final = 120  # a saved file's name; a "telegram_{chat}_{msg}_" prefix fits in 255


def safe_filename(name: str | None, default: str = "file") -> str:
    """A file name that stays inside its folder: no separators, no leading dots, no
    control characters, at most 120 UTF-8 bytes with the extension kept."""
    name = unicodedata.normalize("NFC", name or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch if ch.isalnum() or ch in "-_.+=@,() " else "_" for ch in name)
    name = re.sub(r"_{2,}", "_", name).strip(" ._")
    if not name:
        name = default
    stem, dot, ext = name.rpartition(".")
    if not stem or len(ext) > 16:
        stem, dot, ext = name, "", ""
    suffix = dot + ext
    budget = _NAME_BYTES - len(suffix.encode())
    stem = stem.encode()[:budget].decode(errors="ignore").rstrip(" ._")
    return (stem or default) + suffix

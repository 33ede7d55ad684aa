"""`gateway-buffer.jsonl`: every message the engine has not answered yet (design §2.3).

A message is appended (and fsynced) before the gateway tries to forward it, and
stays until the engine settles it: an outbound whose `answers` lists it, or an
error saying it was already answered. So the buffer holds what is waiting while the
engine is down, and also what the engine had when it died mid-reply. On every
(re)connection the gateway re-sends the whole buffer in order; the engine stores
each message once and answers it once (see `klaw.engine.pipeline`). When nothing
is pending the file is truncated; otherwise settling rewrites it atomically.

Lines are protocol messages (`inbound`, `command`), the socket's own format, each
with a format version first: ``{"v":1,"type":"inbound",...}``. Lines without ``v``
(written before versions) are read as version 1. A line of a newer version is kept
as it is, through every rewrite, and not sent (an older Klaw cannot know what it
means; the newer one will). A torn or invalid line (power cut mid-write) is moved to
``gateway-buffer.jsonl.bad`` with a warning, never silently dropped; the rest is kept.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from klaw.fsutil import atomic_write
from klaw.wire.protocol import Command, Inbound, ProtocolError, decode, encode

__all__ = ["FORMAT_VERSION", "Buffer"]

FORMAT_VERSION: Final = 1
_PREFIX: Final = b'{"v":%d,' % FORMAT_VERSION

log = logging.getLogger("klaw.gateway")

Pending = Inbound | Command


class Buffer:
    """The ordered, durable set of unanswered messages. One owner: the gateway."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pending: dict[str, Pending] = {}
        self._newer: list[bytes] = []  # lines of a newer format: kept, not sent
        # add/settle run in worker threads: an append between a rewrite's snapshot
        # and its rename would vanish from disk.
        self._lock = threading.Lock()
        self._load()

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        bad: list[bytes] = []
        for n, line in enumerate(data.split(b"\n"), 1):
            if not line.strip():
                continue
            version = _version(line)
            if isinstance(version, int) and version > FORMAT_VERSION:
                log.error(
                    "%s:%d: a message of buffer format %d, newer than this Klaw's (%d): "
                    "kept, not sent; upgrade Klaw to have it answered",
                    self.path,
                    n,
                    version,
                    FORMAT_VERSION,
                )
                self._newer.append(line)
                continue
            try:
                msg = decode(line)
            except ProtocolError as exc:
                log.warning("%s:%d: unreadable buffered line (%s)", self.path, n, exc)
                bad.append(line)
                continue
            if isinstance(msg, Inbound | Command):
                self._pending.setdefault(msg.id, msg)
        if bad:
            aside = self.path.with_name(self.path.name + ".bad")
            with aside.open("ab") as f:
                f.write(b"".join(line + b"\n" for line in bad))
            log.warning("%d unreadable line(s) of %s moved to %s", len(bad), self.path, aside)
            self._rewrite()
        if self._pending:
            log.info("%d unanswered message(s) in %s", len(self._pending), self.path)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def __contains__(self, msg_id: object) -> bool:
        with self._lock:
            return msg_id in self._pending

    def pending(self) -> list[Pending]:
        """Unanswered messages in the order they arrived."""
        with self._lock:
            return list(self._pending.values())

    def get(self, msg_id: str) -> Pending | None:
        with self._lock:
            return self._pending.get(msg_id)

    def add(self, msg: Pending) -> bool:
        """Appends `msg` durably; False when it is already pending (a redelivery)."""
        with self._lock:
            if msg.id in self._pending:
                return False
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, _line(msg))
                os.fsync(fd)
            finally:
                os.close(fd)
            self._pending[msg.id] = msg
            return True

    def settle(self, ids: Iterable[str]) -> list[Pending]:
        """Removes answered messages; returns those that were pending."""
        with self._lock:
            done = [self._pending.pop(i) for i in ids if i in self._pending]
            if done:
                self._rewrite()
            return done

    def _rewrite(self) -> None:
        kept = self._newer + [_line(m).rstrip(b"\n") for m in self._pending.values()]
        if not kept:
            # Cleared: truncate in place (no rename needed for an empty file).
            with open(self.path, "wb") as f:
                f.flush()
                os.fsync(f.fileno())
            return
        atomic_write(self.path, b"".join(line + b"\n" for line in kept))


def _line(msg: Pending) -> bytes:
    """The buffered form of `msg`: its protocol line with the format version first."""
    return _PREFIX + encode(msg)[1:]


def _version(line: bytes) -> object:
    """The line's ``v`` (1 when absent: lines from before versions), or None."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return obj.get("v", 1) if isinstance(obj, dict) else None

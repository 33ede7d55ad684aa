"""`gateway-buffer.jsonl`: every message the engine has not answered yet (design §2.3).

A message is appended (and fsynced) before the gateway tries to forward it, and
stays until the engine settles it: an outbound whose `answers` lists it, or an
error saying it was already answered. So the buffer holds what is waiting while the
engine is down, and also what the engine had when it died mid-reply. On every
(re)connection the gateway re-sends the whole buffer in order; the engine stores
each message once and answers it once (see `klaw.engine.pipeline`). When nothing
is pending the file is truncated; otherwise settling rewrites it atomically.

Lines are protocol messages (`inbound`, `command`), the socket's own format. A torn
or invalid line (power cut mid-write) is skipped with a warning; the rest is kept.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

from klaw.wire.protocol import Command, Inbound, ProtocolError, decode, encode

__all__ = ["Buffer"]

log = logging.getLogger("klaw.gateway")

Pending = Inbound | Command


class Buffer:
    """The ordered, durable set of unanswered messages. One owner: the gateway."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pending: dict[str, Pending] = {}
        # add/settle run in worker threads: an append between a rewrite's snapshot
        # and its rename would vanish from disk.
        self._lock = threading.Lock()
        self._load()

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        for n, line in enumerate(data.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                msg = decode(line)
            except ProtocolError as exc:
                log.warning("%s:%d: skipping an unreadable buffered line: %s", self.path, n, exc)
                continue
            if isinstance(msg, Inbound | Command):
                self._pending.setdefault(msg.id, msg)
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
                os.write(fd, encode(msg))
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
        if not self._pending:
            # Cleared: truncate in place (no rename needed for an empty file).
            with open(self.path, "wb") as f:
                f.flush()
                os.fsync(f.fileno())
            return
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".gateway-buffer.")
        try:
            with os.fdopen(fd, "wb") as f:
                for msg in self._pending.values():
                    f.write(encode(msg))
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
            _fsync_dir(self.path.parent)  # the rename itself survives a power cut
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""What makes redelivery exactly-once: each chat's answered watermark, kept in files.

    {data}/answered/{chat_id}/mark.json     {"ts": latest answered input, "n": replies,
                                             "slots": {"0": [ids answered], ...}}
    {data}/answered/{chat_id}/{slot}.json   the reply (an `outbound`) of that ring slot

It lives in files of its own, not in klaw.db, because `klaw reindex` rebuilds klaw.db
from the conversation logs and the watermark is not in them (a reply's row says what it
answered only in the gateway's view of delivery). Files are the truth; a rebuild must
not make the engine answer a redelivered message twice.

The engine is the only writer (one `AnsweredMarks` per pipeline; calls are blocking, the
pipeline makes them in a worker thread). The reply goes into its slot before the mark
points at it, and a lookup checks that the slot's reply really answers the message, so a
crash between the two writes never re-sends the wrong reply. klaw.db's `meta` keys of
earlier versions are read once when a chat has no file yet.

`record` replaces both files (temp file, rename) before the reply goes out, so an engine
killed at any point finds them; `sync` makes them durable (fsync of the files and the
folder) and runs after the reply was sent (the pipeline's fsync worker, within 0.1 s):
the four fsyncs were most of a reply's wall time on a busy disk. A power cut between
the two loses at most the newest mark (the one before is found, or on some file systems
an empty file, read as no mark): a redelivered message may then be answered again, the
same lesser harm as a damaged mark (below); klaw.db itself commits without fsync (WAL,
synchronous=NORMAL).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from klaw.fsutil import fsync_dir, temp_path
from klaw.wire.protocol import Outbound
from klaw.wire.record import validate_chat_id

__all__ = ["KEPT_REPLIES", "AnsweredMarks"]

log = logging.getLogger(__name__)

KEPT_REPLIES: Final = 20  # per chat, re-sent to a gateway that missed them
LEGACY_KEY: Final = "answered:{chat_id}"  # klaw.db meta, before the files


class AnsweredMarks:
    """Per-chat answered watermarks and the last `KEPT_REPLIES` replies, in files."""

    def __init__(self, root: Path, legacy: Callable[[str], str | None] | None = None) -> None:
        self.root = root
        self._legacy = legacy  # meta_get of klaw.db, for marks written by older versions
        self._marks: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        # Chat -> files written by `record` and not fsynced yet ("" stands for the folder
        # itself, new in the root).
        self._unsynced: dict[str, set[str]] = {}

    def _dir(self, chat_id: str) -> Path:
        return self.root / validate_chat_id(chat_id)

    def mark(self, chat_id: str) -> dict[str, Any]:
        """The chat's watermark ({} when nothing was answered yet); cached after a read."""
        with self._lock:
            mark = self._marks.get(chat_id)
            if mark is None:
                mark = self._load(chat_id)
                self._marks[chat_id] = mark
            return mark

    def covers(self, chat_id: str, ts: str) -> bool:
        """True when a reply at or after `ts` was sent: the chat was answered up to it."""
        return str(self.mark(chat_id).get("ts", "")) >= ts

    def needs_turn(self, chat_id: str, msg_id: str, ts: str) -> bool:
        """True when a stored message was never answered (the engine died in its turn).

        A message a kept reply lists was answered. Otherwise the watermark decides; `>=`:
        a message of the watermark's own second that no kept reply lists was sent beside
        an answered one, not answered itself.
        """
        slots = self.mark(chat_id).get("slots")
        if isinstance(slots, dict) and any(
            isinstance(ids, list) and msg_id in ids for ids in slots.values()
        ):
            return False
        return ts >= str(self.mark(chat_id).get("ts", ""))

    def reply_for(self, chat_id: str, msg_id: str) -> Outbound | None:
        """The kept reply that answered `msg_id`, if it is still kept."""
        slots = self.mark(chat_id).get("slots")
        if not isinstance(slots, dict):
            return None
        slot = next(
            (k for k, ids in slots.items() if isinstance(ids, list) and msg_id in ids), None
        )
        if slot is None:
            return None
        raw = self._read(self._dir(chat_id) / f"{slot}.json")
        if raw is None and self._legacy is not None:
            raw = self._legacy(f"{LEGACY_KEY.format(chat_id=chat_id)}:{slot}")
        try:
            out = Outbound.model_validate_json(raw) if raw else None
        except ValueError:
            log.warning("answered: reply slot %s of %s is unreadable; not re-sent", slot, chat_id)
            return None
        # The slot may hold a newer reply when a crash fell between its write and the
        # mark's: never re-send a reply to a message it did not answer.
        return out if out is not None and msg_id in out.answers else None

    def record(self, out: Outbound, latest: str) -> None:
        """Keeps `out` in the next ring slot and moves the watermark to `latest`."""
        previous = self.mark(out.chat_id)
        n = int(previous.get("n", 0))
        slot = str(n % KEPT_REPLIES)
        folder = self._dir(out.chat_id)
        written = {f"{slot}.json", "mark.json"}
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            written.add("")
        _replace(folder / f"{slot}.json", out.model_dump_json())
        slots = dict(previous.get("slots") or {})
        slots[slot] = out.answers
        mark = {"ts": max(latest, str(previous.get("ts", ""))), "n": n + 1, "slots": slots}
        _replace(folder / "mark.json", json.dumps(mark))
        with self._lock:
            self._marks[out.chat_id] = mark
            self._unsynced.setdefault(out.chat_id, set()).update(written)

    def unsynced(self) -> bool:
        """Whether `record` wrote something `sync` has not made durable yet."""
        with self._lock:
            return bool(self._unsynced)

    def sync(self, chat_id: str | None = None) -> None:
        """fsyncs what `record` wrote for `chat_id` (every chat: None) and its folder."""
        with self._lock:
            chats = list(self._unsynced) if chat_id is None else [chat_id]
            pending = [(c, self._unsynced.pop(c, set())) for c in chats]
        for chat, names in pending:
            folder = self._dir(chat)
            try:
                for name in sorted(names - {""}):
                    fd = os.open(folder / name, os.O_RDONLY | os.O_CLOEXEC)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                if names:
                    fsync_dir(folder)
                if "" in names:
                    fsync_dir(self.root)
            except OSError as exc:
                log.warning("answered: could not make the mark of %s durable: %s", chat, exc)

    def _load(self, chat_id: str) -> dict[str, Any]:
        path = self._dir(chat_id) / "mark.json"
        raw = self._read(path)
        if raw is None and self._legacy is not None:
            raw = self._legacy(LEGACY_KEY.format(chat_id=chat_id))
        if not raw:
            return {}
        try:
            loaded = json.loads(raw)
        except ValueError:
            loaded = None
        if not isinstance(loaded, dict) or not isinstance(loaded.get("ts", ""), str):
            # Without it a redelivered message may be answered again: the lesser harm
            # than never answering. The next reply writes a fresh mark.
            log.error(
                "answered: %s is damaged; redelivered messages of %s may be answered again",
                path,
                chat_id,
            )
            return {}
        return loaded

    @staticmethod
    def _read(path: Path) -> str | None:
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            log.error("answered: cannot read %s: %s", path, exc)
            return None


def _replace(target: Path, text: str) -> None:
    """Replace `target` with `text` atomically (a temp file beside it, renamed over it);
    not durable until `AnsweredMarks.sync`."""
    tmp = temp_path(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(text.encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

"""What makes redelivery exactly-once: each chat's answered watermark, kept in files.

    {data}/answered/{chat_id}/replies.jsonl   one line per reply:
        {"n": replies so far, "ts": latest answered input, "answers": [ids], "reply": outbound}

The newest line is the watermark; the last `KEPT_REPLIES` lines are the replies re-sent to
a gateway that missed them. A reply appends one line (one write to a file opened for
appending, no new file and no rename: a new file per reply was most of the reply's disk
work). Every `COMPACT_AT` lines the file is rewritten with the kept ones (temp file,
rename). A line that does not parse (a power cut tore the file's end) is skipped, and
the next reply rewrites the file rather than append after it.

It lives in files of its own, not in klaw.db, because `klaw reindex` rebuilds klaw.db
from the conversation logs and the watermark is not in them (a reply's row says what it
answered only in the gateway's view of delivery). Files are the truth; a rebuild must
not make the engine answer a redelivered message twice.

The engine is the only writer (one `AnsweredMarks` per pipeline; calls are blocking, the
pipeline makes them in a worker thread). A line holds the reply with the ids it answered,
and a lookup checks that the reply really answers the message. Marks of earlier versions
are read when a chat has no `replies.jsonl` yet (`mark.json` with one `{slot}.json` per
kept reply, and before those klaw.db's `meta` keys); its next reply writes the new file,
and the old ones are removed once that is durable.

`record` writes before the reply goes out, so an engine killed at any point finds the
mark; `sync` makes it durable (fsync of the file, and of the folder when the file is
new) and runs after the reply was sent (the pipeline's fsync worker, within 0.1 s). A
power cut between the two loses at most the newest marks (a torn last line is skipped):
a redelivered message may then be answered again, the same lesser harm as a damaged
mark (below); klaw.db itself commits without fsync (WAL, synchronous=NORMAL).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from klaw.fsutil import fsync_dir, temp_path
from klaw.wire.protocol import Outbound
from klaw.wire.record import validate_chat_id

__all__ = ["COMPACT_AT", "KEPT_REPLIES", "LOG_NAME", "AnsweredMarks"]

log = logging.getLogger(__name__)

KEPT_REPLIES: Final = 20  # per chat, re-sent to a gateway that missed them
COMPACT_AT: Final = 4 * KEPT_REPLIES  # lines in replies.jsonl before it is rewritten
LOG_NAME: Final = "replies.jsonl"
LEGACY_KEY: Final = "answered:{chat_id}"  # klaw.db meta, before the files
_LEGACY_MARK: Final = "mark.json"  # and {slot}.json, before replies.jsonl


@dataclass
class _Chat:
    folder: Path  # answered/{chat_id}, its name validated once
    mark: dict[str, Any]  # {"ts", "n"}; {} when nothing was answered
    kept: list[tuple[list[str], str]] = field(default_factory=list)  # (ids, reply), oldest first
    lines: int = 0  # lines in replies.jsonl
    rewrite: bool = True  # the next reply rewrites the file (none yet, old format, torn end)
    legacy: list[str] = field(default_factory=list)  # old files to remove once synced


class AnsweredMarks:
    """Per-chat answered watermarks and the last `KEPT_REPLIES` replies, in files."""

    def __init__(self, root: Path, legacy: Callable[[str], str | None] | None = None) -> None:
        self.root = root
        self._legacy = legacy  # meta_get of klaw.db, for marks written by older versions
        self._chats: dict[str, _Chat] = {}
        self._lock = threading.Lock()
        # Chat -> what `record` wrote and `sync` has not made durable: "file" (appended),
        # "folder" (the file is new or renamed), "root" (the chat's folder is new).
        self._unsynced: dict[str, set[str]] = {}
        self._retire: dict[str, list[str]] = {}  # chat -> old-format files, once synced

    def _dir(self, chat_id: str) -> Path:
        return self.root / validate_chat_id(chat_id)

    def _chat(self, chat_id: str) -> _Chat:
        with self._lock:
            chat = self._chats.get(chat_id)
            if chat is None:
                chat = self._load(chat_id)
                self._chats[chat_id] = chat
            return chat

    def mark(self, chat_id: str) -> dict[str, Any]:
        """The chat's watermark ({} when nothing was answered yet); cached after a read."""
        return self._chat(chat_id).mark

    def covers(self, chat_id: str, ts: str) -> bool:
        """True when a reply at or after `ts` was sent: the chat was answered up to it."""
        return str(self.mark(chat_id).get("ts", "")) >= ts

    def needs_turn(self, chat_id: str, msg_id: str, ts: str) -> bool:
        """True when a stored message was never answered (the engine died in its turn).

        A message a kept reply lists was answered. Otherwise the watermark decides; `>=`:
        a message of the watermark's own second that no kept reply lists was sent beside
        an answered one, not answered itself.
        """
        chat = self._chat(chat_id)
        if any(msg_id in ids for ids, _ in chat.kept):
            return False
        return ts >= str(chat.mark.get("ts", ""))

    def reply_for(self, chat_id: str, msg_id: str) -> Outbound | None:
        """The kept reply that answered `msg_id`, if it is still kept."""
        raw = next((r for ids, r in reversed(self._chat(chat_id).kept) if msg_id in ids), None)
        try:
            out = Outbound.model_validate_json(raw) if raw else None
        except ValueError:
            log.warning("answered: a kept reply of %s is unreadable; not re-sent", chat_id)
            return None
        # An old-format slot may hold a newer reply when a crash fell between its write
        # and the mark's: never re-send a reply to a message it did not answer.
        return out if out is not None and msg_id in out.answers else None

    def record(self, out: Outbound, latest: str) -> None:
        """Keeps `out` and moves the watermark to `latest`: one line appended (or the
        file rewritten with the kept replies, see the module docstring)."""
        chat = self._chat(out.chat_id)
        n = int(chat.mark.get("n", 0)) + 1
        ts = max(latest, str(chat.mark.get("ts", "")))
        reply = out.model_dump_json()
        line = _line(n, ts, out.answers, reply)
        kept = [*chat.kept[-(KEPT_REPLIES - 1) :], (list(out.answers), reply)]
        folder = chat.folder
        written = {"file"}
        if chat.rewrite or chat.lines >= COMPACT_AT:
            if not folder.is_dir():
                folder.mkdir(parents=True, exist_ok=True)
                written.add("root")
            # The kept replies before this one, numbered up to it; the watermark is the
            # newest line's (an older line's ts is never read back).
            start = n - len(kept) + 1
            older = [_line(start + i, "", ids, r) for i, (ids, r) in enumerate(kept[:-1])]
            _replace(folder / LOG_NAME, "".join([*older, line]))
            written.add("folder")
            lines_now = len(kept)
        else:
            _append(folder / LOG_NAME, line)
            lines_now = chat.lines + 1
        with self._lock:
            if chat.rewrite and chat.legacy:
                self._retire.setdefault(out.chat_id, []).extend(chat.legacy)
                chat.legacy = []
            chat.mark = {"ts": ts, "n": n}
            chat.kept = kept
            chat.lines = lines_now
            chat.rewrite = False
            self._unsynced.setdefault(out.chat_id, set()).update(written)

    def unsynced(self) -> bool:
        """Whether `record` wrote something `sync` has not made durable yet."""
        with self._lock:
            return bool(self._unsynced)

    def sync(self, chat_id: str | None = None) -> None:
        """fsyncs what `record` wrote for `chat_id` (every chat: None) and its folder."""
        with self._lock:
            chats = list(self._unsynced) if chat_id is None else [chat_id]
            pending = [(c, self._unsynced.pop(c, set()), self._retire.pop(c, [])) for c in chats]
        for chat, what, retire in pending:
            folder = self._dir(chat)
            try:
                if what:
                    fd = os.open(folder / LOG_NAME, os.O_RDONLY | os.O_CLOEXEC)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                if "folder" in what:
                    fsync_dir(folder)
                if "root" in what:
                    fsync_dir(self.root)
                # The old format's files, now that replies.jsonl holds what they held.
                for name in retire:
                    (folder / name).unlink(missing_ok=True)
            except OSError as exc:
                log.warning("answered: could not make the mark of %s durable: %s", chat, exc)

    def _load(self, chat_id: str) -> _Chat:
        folder = self._dir(chat_id)
        raw = self._read(folder / LOG_NAME)
        if raw is not None:
            return self._parse(chat_id, raw)
        return self._load_legacy(chat_id, folder)

    def _parse(self, chat_id: str, raw: str) -> _Chat:
        folder = self._dir(chat_id)
        chat = _Chat(folder, mark={}, rewrite=not raw.endswith("\n") and bool(raw))
        bad = 0
        for text in raw.splitlines():
            chat.lines += 1
            try:
                entry = json.loads(text)
                n, ts, ids, reply = entry["n"], entry["ts"], entry["answers"], entry["reply"]
                if not (isinstance(n, int) and isinstance(ts, str) and isinstance(ids, list)):
                    raise ValueError(text[:80])
            except (ValueError, TypeError, KeyError):
                bad += 1
                chat.rewrite = True  # never append after a line that does not parse
                continue
            chat.mark = {"ts": max(ts, str(chat.mark.get("ts", ""))), "n": n}
            chat.kept.append(([str(i) for i in ids], "" if reply is None else json.dumps(reply)))
        chat.kept = chat.kept[-KEPT_REPLIES:]
        if bad:
            # Without them a redelivered message may be answered again: the lesser harm
            # than never answering. The next reply rewrites the file.
            log.error(
                "answered: %d damaged line(s) in %s; redelivered messages of %s may be "
                "answered again",
                bad,
                folder / LOG_NAME,
                chat_id,
            )
        return chat

    def _load_legacy(self, chat_id: str, folder: Path) -> _Chat:
        """`mark.json` and its slot files, or klaw.db's meta keys (earlier versions)."""
        path = folder / _LEGACY_MARK
        raw = self._read(path)
        from_files = raw is not None
        if raw is None and self._legacy is not None:
            raw = self._legacy(LEGACY_KEY.format(chat_id=chat_id))
        if not raw:
            return _Chat(folder, mark={})
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
            return _Chat(folder, mark={}, legacy=[_LEGACY_MARK] if from_files else [])
        n = int(loaded.get("n", 0))
        chat = _Chat(folder, mark={"ts": loaded.get("ts", ""), "n": n})
        if from_files:
            chat.legacy.append(_LEGACY_MARK)
        slots = loaded.get("slots")
        if not isinstance(slots, dict):
            return chat
        # Oldest first: the ring's slot after the newest one ((n - 1) % KEPT) is the oldest.
        for k in sorted(slots, key=lambda s: (int(s) - n) % KEPT_REPLIES if s.isdigit() else 0):
            ids = slots[k]
            reply = self._read(folder / f"{k}.json") if from_files else None
            if reply is None and self._legacy is not None:
                reply = self._legacy(f"{LEGACY_KEY.format(chat_id=chat_id)}:{k}")
            if isinstance(ids, list):
                chat.kept.append(([str(i) for i in ids], reply or ""))
            if from_files:
                chat.legacy.append(f"{k}.json")
        return chat

    @staticmethod
    def _read(path: Path) -> str | None:
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            log.error("answered: cannot read %s: %s", path, exc)
            return None


def _line(n: int, ts: str, ids: list[str], reply: str) -> str:
    """A line of replies.jsonl; `reply` is the outbound's JSON ("" when an old-format
    mark lost it: null)."""
    head = f'{{"n":{n},"ts":{json.dumps(ts)},"answers":{json.dumps(ids)},"reply":'
    return f"{head}{reply or 'null'}}}\n"


def _append(target: Path, text: str) -> None:
    """One write to `target` opened for appending (whole lines: O_APPEND keeps them
    together); not durable until `AnsweredMarks.sync`."""
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _write_all(fd, text)
    finally:
        os.close(fd)


def _write_all(fd: int, text: str) -> None:
    view = memoryview(text.encode("utf-8"))
    while view:
        view = view[os.write(fd, view) :]


def _replace(target: Path, text: str) -> None:
    """Replace `target` with `text` atomically (a temp file beside it, renamed over it);
    not durable until `AnsweredMarks.sync`."""
    tmp = temp_path(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            _write_all(fd, text)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

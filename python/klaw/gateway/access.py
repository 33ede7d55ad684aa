"""Who may talk to the agent, and whom it may write to: fail-closed (design §9.2).

Inbound: a chat is served when it is on the channel's allowlist (gateway.yaml
`allowedChatIds`, plus chats approved with `klaw pair approve`), when the channel
sets `allowAll: true`, or for the local console. An unknown *private* chat gets a
pairing code and nothing else; an unknown group gets nothing (groups are added by
their id). Outbound: a chat on the allowlist, or a chat that sent an inbound since
the gateway started (the implicit allow for replies).

Allowlist entries may be written as the platform id ("123456") or the full chat id
("telegram_123456"). Approvals live in `allowed-chats.json` beside gateway.yaml (the
YAML file stays the user's: comments and layout untouched); pending codes live in
`pairing.json` in the state directory. Both are small JSON files written atomically.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from klaw.errors import InvalidInput
from klaw.fsutil import atomic_write

if TYPE_CHECKING:
    from klaw.config import GatewayConfig

__all__ = ["Access", "Approvals", "PairingCode", "Pairings", "normalize_chat"]

log = logging.getLogger("klaw.gateway")

CODE_TTL = timedelta(hours=24)
# A stranger gets one pairing reply per REPLY_EVERY however much it writes, and at most
# MAX_PENDING codes wait at a time: a flood of strangers costs neither sends nor disk.
REPLY_EVERY = timedelta(minutes=10)
MAX_PENDING = 100
_NAME_CHARS = 64  # sender names kept in pairing.json (display only)
_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud or retyped
LOCAL_CHANNELS = frozenset({"console"})


def normalize_chat(channel: str, entry: str) -> str:
    """ "123" or "telegram_123" → "telegram_123" for channel "telegram"."""
    entry = str(entry).strip()
    return entry if entry.startswith(f"{channel}_") else f"{channel}_{entry}"


def _write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, ensure_ascii=False, indent=2), mkdir=True)


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="seconds")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError, OSError) as exc:
        raise InvalidInput(f"{path} is not valid JSON ({exc}); fix or remove it") from exc


@dataclass(frozen=True)
class PairingCode:
    code: str
    chat_id: str
    sender: str | None
    sender_name: str | None
    created_at: str
    replied_at: str | None = None  # the last pairing reply sent to this chat


class Pairings:
    """Pending pairing codes, one per unknown chat, in `pairing.json`."""

    def __init__(self, path: Path, now: Any = None) -> None:
        self.path = path
        self._now = now or (lambda: datetime.now(UTC))
        self._full_since: datetime | None = None  # last "too many pending" warning
        # Chats are handled concurrently (Discord: one worker per chat), each call in a
        # worker thread: without it two strangers' read-modify-writes lose one another.
        self._lock = threading.Lock()

    def _load(self) -> dict[str, PairingCode]:
        raw = _read_json(self.path) or {}
        if not isinstance(raw, dict):
            raise InvalidInput(f"{self.path} must hold a JSON object")
        limit = self._now() - CODE_TTL
        out = {}
        for code, item in raw.items():
            try:
                entry = PairingCode(code=code, **item)
                if datetime.fromisoformat(entry.created_at) >= limit:
                    out[code] = entry
            except (TypeError, ValueError):
                log.warning("ignoring a malformed pairing entry in %s", self.path)
        return out

    def _save(self, codes: dict[str, PairingCode]) -> None:
        _write_json(
            self.path,
            {
                c.code: {
                    "chat_id": c.chat_id,
                    "sender": c.sender,
                    "sender_name": c.sender_name,
                    "created_at": c.created_at,
                    "replied_at": c.replied_at,
                }
                for c in codes.values()
            },
        )

    def list(self) -> list[PairingCode]:
        return sorted(self._load().values(), key=lambda c: c.created_at)

    def code_for(self, chat_id: str, sender: str | None, sender_name: str | None) -> str:
        """The chat's pending code (the same one while it is valid), created if needed."""
        codes = self._load()
        for c in codes.values():
            if c.chat_id == chat_id:
                return c.code
        code = "".join(secrets.choice(_ALPHABET) for _ in range(8))
        codes[code] = PairingCode(
            code, chat_id, sender, sender_name, self._now().isoformat(timespec="seconds")
        )
        self._save(codes)
        return code

    def reply_code(self, chat_id: str, sender: str | None, sender_name: str | None) -> str | None:
        """The code to send to a stranger now, or None: it got one less than REPLY_EVERY
        ago, or MAX_PENDING other codes are waiting (existing ones are never evicted: one
        of them may be the owner's). Writes pairing.json only when it answers."""
        with self._lock:
            return self._reply_code(chat_id, sender, sender_name)

    def _reply_code(self, chat_id: str, sender: str | None, sender_name: str | None) -> str | None:
        now = self._now()
        codes = self._load()
        entry = next((c for c in codes.values() if c.chat_id == chat_id), None)
        if entry is None:
            if len(codes) >= MAX_PENDING:
                if self._full_since is None or self._full_since + REPLY_EVERY <= now:
                    self._full_since = now
                    log.warning(
                        "%d pairing codes are pending: new strangers get no code until some "
                        "expire (24 h) or are handled with `klaw pair`",
                        len(codes),
                    )
                return None
            code = "".join(secrets.choice(_ALPHABET) for _ in range(8))
            name = sender_name[:_NAME_CHARS] if sender_name else sender_name
            entry = PairingCode(
                code, chat_id, (sender or "")[:_NAME_CHARS] or None, name, _iso(now)
            )
        elif entry.replied_at is not None:
            try:
                if datetime.fromisoformat(entry.replied_at) + REPLY_EVERY > now:
                    return None
            except ValueError:
                pass  # a hand-edited time: answer, and write a good one
        codes[entry.code] = replace(entry, replied_at=_iso(now))
        self._save(codes)
        return entry.code

    def take(self, code: str) -> PairingCode | None:
        """Removes and returns the entry for `code` (case-insensitive), if valid."""
        codes = self._load()
        entry = codes.pop(code.strip().upper(), None)
        if entry is not None:
            self._save(codes)
        return entry


class Approvals:
    """Chats approved with `klaw pair approve`, in `allowed-chats.json`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._cache: tuple[float, frozenset[str]] | None = None

    def ids(self) -> frozenset[str]:
        """The approved chat ids; re-read when the file changes (approvals apply live)."""
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return frozenset()
        if self._cache is not None and self._cache[0] == mtime:
            return self._cache[1]
        raw = _read_json(self.path) or {}
        chats = raw.get("chats", []) if isinstance(raw, dict) else []
        ids = frozenset(c["chat_id"] for c in chats if isinstance(c, dict) and "chat_id" in c)
        self._cache = (mtime, ids)
        return ids

    def entries(self) -> list[dict[str, Any]]:
        raw = _read_json(self.path) or {}
        chats = raw.get("chats", []) if isinstance(raw, dict) else []
        return [c for c in chats if isinstance(c, dict) and "chat_id" in c]

    def add(self, entry: PairingCode) -> None:
        chats = [c for c in self.entries() if c["chat_id"] != entry.chat_id]
        chats.append(
            {
                "chat_id": entry.chat_id,
                "sender": entry.sender,
                "name": entry.sender_name,
                "approved_at": datetime.now(UTC).isoformat(timespec="seconds"),
            }
        )
        _write_json(self.path, {"chats": chats})

    def remove(self, chat_id: str) -> bool:
        chats = self.entries()
        kept = [c for c in chats if c["chat_id"] != chat_id]
        if len(kept) == len(chats):
            return False
        _write_json(self.path, {"chats": kept})
        return True


class Access:
    """The gateway's inbound and outbound checks over config, approvals and this run."""

    def __init__(self, config: GatewayConfig, approvals: Approvals, pairings: Pairings) -> None:
        self.config = config
        self.approvals = approvals
        self.pairings = pairings
        self._answering: set[str] = set()  # chats that wrote to us in this run

    def _channel(self, channel: str) -> tuple[list[str], bool]:
        section = getattr(self.config.channels, channel, None)
        if section is None:
            return [], False
        return list(getattr(section, "allowed_chat_ids", [])), bool(
            getattr(section, "allow_all", False)
        )

    def listed(self, channel: str, chat_id: str) -> bool:
        ids, _ = self._channel(channel)
        return chat_id in {normalize_chat(channel, i) for i in ids} or (
            chat_id in self.approvals.ids()
        )

    def inbound_allowed(self, channel: str, chat_id: str) -> bool:
        if channel in LOCAL_CHANNELS:
            return True
        _, allow_all = self._channel(channel)
        return allow_all or self.listed(channel, chat_id)

    def note_inbound(self, chat_id: str) -> None:
        """`chat_id` wrote to us and was served: replies to it are allowed."""
        self._answering.add(chat_id)

    def outbound_allowed(self, channel: str, chat_id: str) -> bool:
        if not chat_id.startswith(f"{channel}_"):
            return False  # a chat id bound to another channel
        if channel in LOCAL_CHANNELS:
            return True
        return chat_id in self._answering or self.listed(channel, chat_id)

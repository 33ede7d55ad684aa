"""The owner's approval of an MCP server's tools in a chat (`approval: first|always`).

A call that needs approval is not made: the model reads that the owner must send
`/approve <server>` in this chat, and tells them. `/approve` alone lists what waits.
`first`: one approval lets the server's tools run in that chat from then on (kept in
`mcp-approvals.json` in the state folder, so a restart does not ask again); `always`:
each approval lets one call run. Servers needing approval are never offered in group
chats (anyone there could approve), so `/approve` is refused there.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Final, Literal

from klaw.fsutil import atomic_write

__all__ = ["APPROVE_COMMAND", "Approvals", "Mode"]

log = logging.getLogger("klaw.mcp")

APPROVE_COMMAND: Final = "approve"
Mode = Literal["first", "always", "never"]


class Approvals:
    """Which chats approved which servers; pending requests."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._chats: set[tuple[str, str]] = set()  # (chat, server): `first` approved
        self._once: set[tuple[str, str]] = set()  # (chat, server): one `always` call
        self._pending: dict[str, dict[str, str]] = {}  # chat -> server -> tool asked for
        self._damaged = False  # the file could not be read: kept aside before a save
        self._load()

    def _load(self) -> None:
        """Only `[chat, server]` pairs of strings count; anything else approves nothing.
        A file that cannot be read is moved aside (`.bad`) before it is next written."""
        if self.path is None:
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            entries = data.get("approved") if isinstance(data, dict) else None
            if not isinstance(entries, list):
                raise ValueError('no "approved" list')
        except FileNotFoundError:
            return
        except (OSError, ValueError, RecursionError) as exc:
            # Unreadable: nothing counts as approved (the owner is asked again).
            self._damaged = True
            log.warning(
                "%s cannot be read (%s): MCP approvals start empty; the file is kept as "
                "%s.bad when an approval is next saved",
                self.path,
                exc,
                self.path.name,
            )
            return
        pairs = [e for e in entries if isinstance(e, list) and len(e) == 2]
        good = {(c, s) for c, s in pairs if isinstance(c, str) and isinstance(s, str) and c and s}
        self._chats = good
        if len(good) < len(entries):
            log.warning(
                "%s: %d entr(ies) are not a [chat, server] pair of names: they approve nothing",
                self.path,
                len(entries) - len(good),
            )

    def _save(self) -> None:
        if self.path is None:
            return
        data = {"approved": sorted([c, s] for c, s in self._chats)}
        try:
            if self._damaged and self.path.exists():
                self.path.replace(self.path.with_name(self.path.name + ".bad"))
            self._damaged = False
            atomic_write(self.path, json.dumps(data, indent=1).encode())
        except OSError as exc:
            log.warning("%s cannot be written (%s): approvals last until restart", self.path, exc)

    def check(self, chat_id: str, server: str, mode: Mode, tool: str) -> str | None:
        """None when the call may run, else what the model reads."""
        key = (chat_id, server)
        if mode == "never" or (mode == "first" and key in self._chats):
            return None
        if mode == "always" and key in self._once:
            self._once.discard(key)
            return None
        self._pending.setdefault(chat_id, {})[server] = tool
        what = "this call" if mode == "always" else "its tools in this chat"
        return (
            f"Not run: the owner has not approved the MCP server {server!r} for {what}. "
            f"Ask the owner to send /{APPROVE_COMMAND} {server} here (it lets "
            f"{'one call' if mode == 'always' else 'them'} run), then call {tool} again."
        )

    def approve(self, chat_id: str, arg: str, modes: dict[str, Mode], group: bool) -> str:
        """The reply to `/approve [server]` in `chat_id`."""
        if group:
            return (
                "MCP servers are approved in a private chat: tools needing approval are "
                "not offered in groups."
            )
        pending = self._pending.get(chat_id, {})
        server = arg.strip().split()[0] if arg.strip() else ""
        if not server:
            if not pending:
                return "Nothing waits for approval here."
            lines = [f"/{APPROVE_COMMAND} {s} (asked for {t})" for s, t in pending.items()]
            return "Waiting for approval:\n" + "\n".join(lines)
        mode = modes.get(server)
        if mode is None:
            known = ", ".join(sorted(modes)) or "none"
            return f"No MCP server {server!r} is configured (configured: {known})."
        pending.pop(server, None)
        if mode == "never":
            return f"MCP server {server!r} needs no approval."
        if mode == "always":
            self._once.add((chat_id, server))
            return f"Approved: the next call to a tool of {server!r} in this chat may run."
        self._chats.add((chat_id, server))
        self._save()
        return f"Approved: the tools of {server!r} may run in this chat from now on."

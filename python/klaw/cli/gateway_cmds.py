"""`klaw gateway` and `klaw pair list | approve CODE | revoke CHAT_ID`."""

from __future__ import annotations

import sys

from klaw.paths import KlawPaths


def gateway() -> int:
    from klaw.gateway.daemon import main

    return main(KlawPaths.from_env())


def _err(msg: str) -> int:
    print(f"klaw: {msg}", file=sys.stderr)
    return 1


def pair_list() -> int:
    from klaw.errors import InvalidInput
    from klaw.gateway.access import Approvals, Pairings

    paths = KlawPaths.from_env()
    try:
        pending = Pairings(paths.pairing).list()
        approved = Approvals(paths.approved_chats).entries()
    except InvalidInput as exc:
        return _err(str(exc))
    if not pending:
        print("No pending pairing requests.")
    else:
        print("Pending (approve with `klaw pair approve CODE`):")
        for p in pending:
            who = p.sender_name or p.sender or "?"
            print(f"  {p.code}  {p.chat_id}  {who}  since {p.created_at}")
    if approved:
        print("Approved (revoke with `klaw pair revoke CHAT_ID`):")
        for a in approved:
            who = a.get("name") or a.get("sender") or "?"
            print(f"  {a['chat_id']}  {who}  since {a.get('approved_at', '?')}")
    print(f"(gateway.yaml allowedChatIds are listed in {paths.gateway_config})")
    return 0


def pair_approve(code: str) -> int:
    from klaw.errors import InvalidInput
    from klaw.gateway.access import Approvals, Pairings

    paths = KlawPaths.from_env()
    try:
        entry = Pairings(paths.pairing).take(code)
        if entry is None:
            return _err(
                f"no pending pairing code {code.strip().upper()!r} (codes expire after 24 h; "
                "see `klaw pair list`)"
            )
        Approvals(paths.approved_chats).add(entry)
    except InvalidInput as exc:
        return _err(str(exc))
    who = entry.sender_name or entry.sender or entry.chat_id
    print(f"Approved {entry.chat_id} ({who}). The gateway serves it from the next message.")
    return 0


def pair_revoke(chat_id: str) -> int:
    from klaw.errors import InvalidInput
    from klaw.gateway.access import Approvals

    paths = KlawPaths.from_env()
    chat_id = chat_id.strip()
    if chat_id.lstrip("-").isdigit():  # a bare Telegram id, as `klaw pair list` shows it
        chat_id = f"telegram_{chat_id}"
    try:
        removed = Approvals(paths.approved_chats).remove(chat_id)
    except InvalidInput as exc:
        return _err(str(exc))
    if not removed:
        return _err(
            f"{chat_id} is not an approved chat (see `klaw pair list`); chats listed in "
            f"gateway.yaml allowedChatIds are removed by editing {paths.gateway_config}"
        )
    print(f"Revoked {chat_id}: its next message gets a pairing code again.")
    return 0

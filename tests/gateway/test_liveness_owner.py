"""Whom the gateway tells that a channel went stale (`klaw.gateway.liveness.owner_chats`):
the other channel's listed and approved chats, never a Telegram group; read from a real
gateway.yaml model and a real allowed-chats.json."""

from __future__ import annotations

from pathlib import Path

from klaw.config import GatewayConfig
from klaw.gateway.access import Access, Approvals, PairingCode, Pairings
from klaw.gateway.liveness import owner_chats


def access(tmp_path: Path, telegram: list[str], discord: list[str]) -> Access:
    cfg = GatewayConfig.model_validate(
        {
            "channels": {
                "telegram": {"token": "1:x", "allowedChatIds": telegram},
                "discord": {"enabled": True, "token": "a.b.c", "allowedChatIds": discord},
            }
        }
    )
    return Access(cfg, Approvals(tmp_path / "allowed-chats.json"), Pairings(tmp_path / "p.json"))


def test_listed_and_approved_chats_are_told_but_not_telegram_groups(tmp_path: Path) -> None:
    acc = access(tmp_path, ["100", "telegram_-100200", "-5"], ["900"])
    for chat in ("telegram_300", "discord_901"):
        acc.approvals.add(PairingCode("CODE", chat, None, None, "2026-01-01T00:00:00+00:00"))
    assert owner_chats(acc, "telegram") == ["telegram_100", "telegram_300"]
    assert owner_chats(acc, "discord") == ["discord_900", "discord_901"]
    assert owner_chats(acc, "console") == []


def test_a_channel_without_listed_or_approved_chats_tells_nobody(tmp_path: Path) -> None:
    assert owner_chats(access(tmp_path, [], []), "discord") == []

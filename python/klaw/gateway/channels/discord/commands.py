"""Discord slash commands: engine.yaml `commands` registered globally, each invocation
acknowledged within Discord's 3 s and queued with the chat's messages."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

import aiohttp
import discord

from klaw.gateway.channels.base import Incoming
from klaw.gateway.channels.discord.bot import (
    NOT_SERVED_DM,
    NOT_SERVED_GUILD,
    Bot,
    DiscordError,
    _Interaction,
    _Item,
    _name,
    log,
)

MAX_COMMANDS: Final = 100  # global slash commands an application may have
_INTERACTION_TTL_S: Final = 14 * 60.0  # Discord keeps an interaction's token for 15 min


class Commands(Bot):
    """Slash commands: registered, acknowledged, answered by `Outbound.send`."""

    def _interaction(
        self, interaction: discord.Interaction[discord.Client]
    ) -> tuple[int, _Item] | None:
        """A slash command acknowledged, and its queue item (None: nothing to queue)."""
        if interaction.type is not discord.InteractionType.application_command:
            return None
        channel = interaction.channel_id
        data: dict[str, Any] = dict(interaction.data or {})
        name = str(data.get("name", "")).lower()
        if channel is None or not name or interaction.id in self._seen:
            return None  # a RESUME may replay one: it was acknowledged and queued already
        self._seen.append(interaction.id)
        args = " ".join(
            str(o.get("value", ""))
            for o in data.get("options", []) or []
            if isinstance(o, dict) and o.get("value") is not None
        ).strip()
        chat_id = f"discord_{channel}"
        dm = interaction.guild_id is None
        ident = f"{chat_id}_{interaction.id}"
        user = interaction.user
        incoming = Incoming(
            id=ident,
            channel=self.name,
            chat_id=chat_id,
            ts=interaction.created_at,
            content=f"/{name} {args}".strip(),
            kind="command",
            command=name,
            args=args,
            sender=str(user.id),
            sender_name=_name(user.display_name),
            is_group=not dm,
        )
        served = self._served(chat_id)
        acked = self._spawn(self._acknowledge(interaction, served, dm), "klaw-discord-ack")
        if served:
            loop = asyncio.get_running_loop()
            for key in [k for k, p in self._interactions.items() if p.expires < loop.time()]:
                del self._interactions[key]
            self._interactions[ident] = _Interaction(
                interaction, acked, loop.time() + _INTERACTION_TTL_S
            )
        return channel, _Item(interaction.id, command=incoming)

    async def _acknowledge(
        self, interaction: discord.Interaction[discord.Client], served: bool, dm: bool
    ) -> bool:
        """Answers within Discord's 3 s: "thinking…" (the reply replaces it) or, for a
        chat that is not served, a refusal only its sender sees."""
        try:
            if served:
                await interaction.response.defer(thinking=True)
            else:
                text = NOT_SERVED_DM if dm else NOT_SERVED_GUILD
                await interaction.response.send_message(text, ephemeral=True)
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            log.warning("discord: acknowledging interaction %d failed: %s", interaction.id, exc)
            return False
        return served

    async def set_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        """Registers engine.yaml `commands` as global slash commands (each with one
        optional text option, `args`), unless Discord already has exactly these."""
        self._command_names = frozenset(name for name, _ in commands)
        if len(commands) > MAX_COMMANDS:
            log.warning("discord: only the first %d commands are registered", MAX_COMMANDS)
        wanted = [_command_payload(name, text) for name, text in commands[:MAX_COMMANDS]]
        await self._wait_login()
        app = self._client.application_id
        if app is None:
            raise DiscordError("registering slash commands failed: no application id")
        http = self._client.http
        try:
            current = await http.get_global_commands(app)
            if _command_keys(current) == _command_keys(wanted):
                log.debug("discord: slash commands are up to date")
                return
            await http.bulk_upsert_global_commands(app, wanted)
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            raise DiscordError(f"registering slash commands failed: {self._describe(exc)}") from exc
        log.info("discord: registered %d slash command(s)", len(wanted))


def _command_payload(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": 1,  # CHAT_INPUT: a slash command
        "description": (description.strip() or name)[:100],
        "options": [{"type": 3, "name": "args", "description": "arguments", "required": False}],
        "contexts": [0, 1],  # in servers and in DMs with the bot
        "integration_types": [0],  # installed to a server
    }


def _command_keys(commands: Sequence[Any]) -> set[tuple[Any, ...]]:
    """What Klaw sets of each command, to compare with what Discord holds."""
    out: set[tuple[Any, ...]] = set()
    for c in commands:
        if not isinstance(c, dict):
            continue
        options = tuple(
            (o.get("type"), o.get("name"), o.get("description"), bool(o.get("required")))
            for o in c.get("options") or []
            if isinstance(o, dict)
        )
        out.add((c.get("name"), c.get("description"), options))
    return out

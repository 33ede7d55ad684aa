"""Whether each chat channel still hears its platform (docs/telegram.md, "Liveness").

A channel that can go quiet without failing (a Telegram long poll that hangs, a Discord
websocket that stays open but carries nothing) keeps a `Liveness`: it calls `ok()` on
each sign of life (a poll answered, a heartbeat ACK) and `failed(why)` on a failure.
`Watch` (run by the gateway core) checks them every few seconds: a channel without a
sign of life for its `staleAfter` is stale. Each change (stale, then ok again) is logged,
told once to the owner on the other chat channels, and reported to the engine
(`klaw status`). Time is measured on the monotonic clock; wall time is only shown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from klaw.gateway.access import LOCAL_CHANNELS, normalize_chat
from klaw.wire.protocol import ChannelHealth, Health

if TYPE_CHECKING:
    from klaw.gateway.access import Access
    from klaw.gateway.channels.base import Channel

__all__ = ["Liveness", "Watch", "Watched", "owner_chats"]

log = logging.getLogger("klaw.gateway")


class Liveness:
    """A channel's last sign of life; stale after `stale_after` seconds without one."""

    def __init__(self, stale_after: float) -> None:
        self.stale_after = stale_after
        self.last_ok_at: datetime | None = None  # wall time, for showing
        self.detail = ""  # the last failure since the last sign of life
        self.gave_up = False  # the channel stopped: no sign of life can come any more
        self._last_ok = time.monotonic()  # a channel starts with its grace period

    def ok(self) -> None:
        self._last_ok = time.monotonic()
        self.last_ok_at = datetime.now(UTC)
        self.detail = ""

    def failed(self, detail: str) -> None:
        self.detail = detail

    def stopped(self, detail: str) -> None:
        """The channel gave up (a refused token): stale at the next check, not only once
        `stale_after` has passed, since no sign of life can come any more."""
        self.detail = detail
        self.gave_up = True
        self._last_ok = min(self._last_ok, time.monotonic() - self.stale_after - 1)

    @property
    def quiet_s(self) -> float:
        return time.monotonic() - self._last_ok

    @property
    def stale(self) -> bool:
        return self.quiet_s > self.stale_after

    def health(self, name: str) -> ChannelHealth:
        stale = self.stale
        return ChannelHealth(
            name=name,
            state="stale" if stale else "ok",
            last_ok=self.last_ok_at,
            detail=self.detail if stale else "",
        )


@runtime_checkable
class Watched(Protocol):
    """A channel that keeps a `Liveness`."""

    name: str
    liveness: Liveness


def owner_chats(access: Access, channel: str) -> list[str]:
    """Whom a notice about another channel goes to on `channel`: the chats of its
    `allowedChatIds` and those approved with `klaw pair approve` (pairing serves only
    private chats), without Telegram groups (negative ids)."""
    section = getattr(access.config.channels, channel, None)
    ids = getattr(section, "allowed_chat_ids", [])
    chats = {normalize_chat(channel, i) for i in ids}
    chats |= {c for c in access.approvals.ids() if c.startswith(f"{channel}_")}
    return sorted(c for c in chats if not (channel == "telegram" and "_-" in c))


class Watch:
    """Checks the watched channels every `every` seconds and acts on each change."""

    def __init__(
        self,
        channels: Mapping[str, Channel],
        access: Access,
        say: Callable[[str, str], Awaitable[None]],
        report: Callable[[Health], Awaitable[None]],
        every: float,
    ) -> None:
        self._channels = channels
        self._watched = {n: c.liveness for n, c in channels.items() if isinstance(c, Watched)}
        self._access = access
        self._say = say  # (chat_id, text): a notice, never fatal
        self._report = report
        self._every = every
        self._stale: dict[str, float] = {}  # stale channel → monotonic time it went stale

    @property
    def active(self) -> bool:
        return bool(self._watched)

    @property
    def stale(self) -> frozenset[str]:
        """The channels found stale (and told so) at the last check."""
        return frozenset(self._stale)

    def health(self) -> Health:
        return Health(channels=[lv.health(n) for n, lv in self._watched.items()])

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._every)
            await self.check()

    async def check(self) -> None:
        changed = False
        for name, lv in self._watched.items():
            stale = lv.stale
            if stale == (name in self._stale):
                continue
            changed = True
            if stale:
                self._stale[name] = time.monotonic()
                await self._went_stale(name, lv)
            else:
                began = self._stale.pop(name)
                await self._recovered(name, time.monotonic() - began + lv.stale_after)
        if changed:
            await self._report(self.health())

    async def _went_stale(self, name: str, lv: Liveness) -> None:
        last = lv.last_ok_at.strftime("%H:%M UTC") if lv.last_ok_at else "the gateway started"
        why = f" ({lv.detail})" if lv.detail else ""
        log.error(
            "channel %s is stale: no contact for %.0f s, since %s%s; still retrying",
            name,
            lv.quiet_s,
            last,
            why,
        )
        if lv.gave_up:
            await self._tell(
                name,
                f"⚠️ {name.capitalize()} stopped working ({lv.detail}). It stays off until "
                "the gateway is restarted.",
            )
            return
        await self._tell(
            name,
            f"⚠️ {name.capitalize()} has not answered me for {_minutes(lv.quiet_s)} (no "
            f"contact since {last}){why}. I keep trying; messages sent there meanwhile wait "
            "on its side and are answered when it is back.",
        )

    async def _recovered(self, name: str, quiet_s: float) -> None:
        log.warning("channel %s works again after about %.0f s without contact", name, quiet_s)
        await self._tell(
            name, f"✅ {name.capitalize()} works again (about {_minutes(quiet_s)} without contact)."
        )

    async def _tell(self, about: str, text: str) -> None:
        told = 0
        for other in self._channels:
            if other == about or other in LOCAL_CHANNELS or other in self._stale:
                continue
            for chat in owner_chats(self._access, other):
                await self._say(chat, text)
                told += 1
        if not told:
            log.warning("no other channel to tell the owner about %s", about)


def _minutes(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes >= 1 else f"{seconds:.0f} s"

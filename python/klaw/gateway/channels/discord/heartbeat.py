"""The Discord gateway's liveness: what discord.py checks, and the one check Klaw adds.

discord.py (2.7) already handles a *silent* gateway: each `poll_event` waits at most
`heartbeat_timeout` seconds for a frame (the client option; Klaw passes
`DiscordChannel(heartbeat_timeout=...)`, 60 s by default), and its keep-alive thread
also closes the socket with 4000 when nothing at all arrived for that long. Either way
the client reconnects and RESUMEs (or IDENTIFYs again when Discord refuses the resume).

It does not notice missed heartbeat ACKs while other frames still arrive: any frame
counts as a sign of life. Discord's rule is stricter (a heartbeat not acknowledged
before the next one is due means a "zombied" connection: close it with a code other
than 1000/1001 and resume), so `watch_heartbeats` reads the keep-alive's ACK time every
`every` seconds, and closes the socket with 4000 when two heartbeat intervals went by
without an ACK; discord.py then resumes. Each new ACK is the channel's sign of life
(`Liveness.ok`).

It reads two attributes of discord.py's `KeepAliveHandler` (`_last_ack`, `interval`),
checked against the pinned version by tests/gateway/test_liveness_discord.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import discord

from klaw.gateway.liveness import Liveness

__all__ = ["watch_heartbeats"]

log = logging.getLogger("klaw.gateway.discord")

#: Intervals without an ACK after which the connection is taken for a zombie.
MISSED_ACKS = 2


async def watch_heartbeats(client: discord.Client, liveness: Liveness, every: float) -> None:
    """Runs until cancelled: ACKs seen → `liveness.ok()`; none for two intervals → the
    socket is closed (code 4000) so that discord.py resumes the session."""
    seen = 0.0
    while True:
        await asyncio.sleep(every)
        ws = client.ws
        beat = getattr(ws, "_keep_alive", None)
        if ws is None or beat is None:
            continue  # connecting, or between two connections
        ack = float(beat._last_ack)
        if ack != seen and beat.latency != float("inf"):  # an ACK since the last look
            seen = ack
            liveness.ok()
        quiet = time.perf_counter() - ack
        interval = float(beat.interval or 0.0)
        if interval and quiet > MISSED_ACKS * interval:
            why = f"no heartbeat ACK for {quiet:.1f}s"
            log.warning("discord: %s: the connection is a zombie; resuming", why)
            liveness.failed(why)
            with contextlib.suppress(Exception):
                await ws.close(4000)  # poll_event sees the close and discord.py resumes

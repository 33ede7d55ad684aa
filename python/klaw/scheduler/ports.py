"""What the scheduler needs from the engine, as one port (design §2.4).

A job's run is a turn of the engine's pipeline in the job's own chat, and a summary
is one model call; both wait behind interactive turns (`klaw.lanes.SUBAGENT`). The
scheduler asks for them through `BackgroundTurns`, which the engine's `Pipeline`
satisfies as it is, and the composition root (`klaw.engine.daemon`) passes that in.
So the scheduler imports neither the engine nor the LLM layer: a model call is asked
for in the scheduler's own words, `BackgroundRequest`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from klaw.wire.protocol import Error, Inbound, Outbound

__all__ = ["BackgroundRequest", "BackgroundTurns", "Reply"]

#: Where a turn's answers go (the engine server's `Reply`).
Reply = Callable[[Outbound | Error], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class BackgroundRequest:
    """One model call without tools: an instruction (the system prompt) and a text;
    `source` is who pays (docs/costs.md)."""

    instructions: str
    text: str
    source: str = "summary"


class BackgroundTurns(Protocol):
    async def handle(
        self,
        msg: Inbound,
        reply: Reply,
        *,
        priority: int = ...,
        model: str | None = ...,
        lean: bool = ...,
        source: str | None = ...,
    ) -> None:
        """Stores `msg`, runs the turn holding it and returns once it is answered
        (through `reply`). `priority` is its lane, `model` None the chat's, `lean`
        the heartbeat's small context, `source` who pays (`klaw.spend.source_for_chat`)."""

    async def complete_background(self, request: BackgroundRequest, model: str) -> str:
        """The model's answer (its text), waiting behind interactive turns for a slot.
        Raises `klaw.errors.KlawError` when no model answers."""

    def usable_model(self, stored: str) -> str:
        """`stored` when it can be used now, else `routing.default`."""

"""Lanes: who goes first for a model slot, and where scheduled work talks.

Interactive turns (`INTERACTIVE`) get a free slot before subagent ones (`SUBAGENT`:
scheduled jobs, spawned subagents, summaries); within a lane, first come first
served. Jobs and subagents talk in their own chats, `scheduler_{job name}`. A leaf:
the engine's pipeline hands out the slots, the scheduler names its lane and chats.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Final

__all__ = ["INTERACTIVE", "SUBAGENT", "SUBAGENT_CHAT_PREFIX", "PrioritySlots"]

INTERACTIVE: Final = 0
SUBAGENT: Final = 10

#: The chats of scheduled jobs and spawned subagents: `scheduler_{job name}`.
SUBAGENT_CHAT_PREFIX: Final = "scheduler_"


class PrioritySlots:
    """A semaphore whose waiters are served by (priority, arrival): lower goes first."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"need at least one slot, got {slots}")
        self._free = slots
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    @property
    def free(self) -> int:
        return self._free

    @property
    def waiting(self) -> int:
        return sum(1 for _, _, fut in self._waiters if not fut.done())

    async def acquire(self, priority: int = INTERACTIVE) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._seq), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot was handed over just as we were cancelled
            raise

    def release(self) -> None:
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1

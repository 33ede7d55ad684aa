"""Messages the engine sends on its own (scheduled results, job notices), kept as
files until the gateway confirms delivery.

A scheduled job may finish while the gateway is down or restarting: its result must
reach the owner when the gateway is back, also across an engine restart. Each push
is written to ``{state}/outbox/`` (one JSON file, atomically) before the first try;
the file goes once the gateway answered `delivered` and the text is stored in
klaw.db under the target chat (so its main session sees it). A try that timed out
may have arrived: it is sent again with the same id, which the gateway drops if it
delivered it already. A refusal (the allowlist) is final: the file moves to
``outbox/refused/`` and the log says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from klaw.errors import KlawError
from klaw.fsutil import atomic_write, fsync_dir
from klaw.wire.loglines import line_row, outbound_line
from klaw.wire.protocol import Outbound

if TYPE_CHECKING:
    from klaw.memory.api import Memory

__all__ = ["Outbox"]

log = logging.getLogger("klaw.scheduler")

Deliver = Callable[[Outbound], Awaitable[None]]

#: Without a gateway event, pending pushes are tried again this often.
RETRY_S = 60.0


class Outbox:
    def __init__(self, root: Path, deliver: Deliver, memory: Memory | None = None) -> None:
        self.root = root
        self._deliver = deliver
        self._memory = memory
        self._wake = asyncio.Event()
        self._flushing = asyncio.Lock()

    def pending(self) -> list[Path]:
        try:
            return sorted(p for p in self.root.iterdir() if p.suffix == ".json")
        except FileNotFoundError:
            return []

    async def send(self, out: Outbound) -> bool:
        """Keeps `out` and tries it now; True when it was delivered now."""
        await asyncio.to_thread(self._keep, out)
        await self.flush()
        return not (self.root / self._name(out)).exists()

    def wake(self) -> None:
        """The gateway (re)registered: try what is pending."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Flushes on `wake` and every `RETRY_S` until `stop`."""
        while not stop.is_set():
            await self.flush()
            waiter = asyncio.ensure_future(self._wake.wait())
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait(
                    [waiter, stopper], timeout=RETRY_S, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                waiter.cancel()
                stopper.cancel()
            self._wake.clear()

    async def flush(self) -> int:
        """Tries every pending push, oldest first, until the gateway fails; returns
        how many were delivered."""
        delivered = 0
        async with self._flushing:
            for path in await asyncio.to_thread(self.pending):
                try:
                    out = Outbound.model_validate_json(path.read_bytes())
                except (OSError, ValueError) as exc:
                    log.error("outbox file %s is unreadable (%s): moved aside", path.name, exc)
                    await asyncio.to_thread(self._set_aside, path, "damaged")
                    continue
                try:
                    await self._deliver(out)
                except TimeoutError:
                    log.warning("the gateway did not confirm %s in time: trying later", out.id)
                    return delivered
                except KlawError as exc:
                    if _refused(exc):
                        log.error("push %s to %s refused: %s", out.id, out.chat_id, exc)
                        await asyncio.to_thread(self._set_aside, path, "refused")
                        continue
                    log.info("push %s to %s waits for the gateway: %s", out.id, out.chat_id, exc)
                    return delivered
                await asyncio.to_thread(self._delivered, path, out)
                delivered += 1
        return delivered

    # --- files -----------------------------------------------------------

    @staticmethod
    def _name(out: Outbound) -> str:
        return f"{int(out.ts.timestamp() * 1e6):020d}-{out.id}.json"

    def _keep(self, out: Outbound) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(self.root / self._name(out), out.model_dump_json(by_alias=True))

    def _delivered(self, path: Path, out: Outbound) -> None:
        if self._memory is not None:  # idempotent on the id: a second try adds nothing
            row = line_row(outbound_line(out), out.channel, out.chat_id)
            self._memory.store.insert_messages([row])
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        fsync_dir(self.root)

    def _set_aside(self, path: Path, why: str) -> None:
        aside = self.root / why
        aside.mkdir(exist_ok=True, mode=0o700)
        path.replace(aside / path.name)
        fsync_dir(self.root)


def _refused(exc: KlawError) -> bool:
    """The gateway will never deliver it (allowlist); a channel failure is retried."""
    from klaw.wire.protocol import ErrorCode

    return getattr(exc, "code", None) == ErrorCode.REFUSED

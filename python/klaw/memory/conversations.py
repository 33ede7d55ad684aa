"""Past conversations as memory: each chat's rounds (a user turn with the replies after
it) are chunks of archival memory under the source `chat:<chat id>`, the user's words
and the replies in chunks of their own that cite the same round.

The store returns such chunks only to a search that names that exact source, so a chat
searches its own past and never another's (group privacy). Rounds are indexed after the
reply went out, by one background task, through the embedding cache; a per-chat
watermark (the last message row indexed, in klaw.db's meta table) means nothing is
indexed twice or missed across restarts, and `klaw reindex` rebuilds it from the logs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from klaw import _core

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.memory.embedding import EmbeddingBackend

__all__ = ["CHAT_PREFIX", "ConversationIndexer", "chat_source", "index_chat", "round_chunks"]

log = logging.getLogger("klaw.memory.conversations")

CHAT_PREFIX = "chat:"  # = CHAT_SOURCE_PREFIX in the Rust store
_BATCH = 500  # messages read per step
_WATERMARK = "conversation_rowid:"


def chat_source(chat_id: str) -> str:
    return CHAT_PREFIX + chat_id


def _text(m: _core.Message) -> bool:
    # Plain user and assistant lines; commands, notices and tool records are not memory.
    return m.role in ("user", "assistant") and m.kind is None and bool(m.content.strip())


def _rounds(rows: Sequence[tuple[int, _core.Message]]) -> list[list[tuple[int, _core.Message]]]:
    rounds: list[list[tuple[int, _core.Message]]] = []
    for row in rows:
        if not _text(row[1]):
            continue
        if row[1].role == "user" and (not rounds or rounds[-1][-1][1].role != "user"):
            rounds.append([])
        elif not rounds:
            rounds.append([])  # replies with no user turn before them (a scheduled message)
        rounds[-1].append(row)
    return rounds


def round_chunks(rnd: Sequence[_core.Message], size: int, overlap: int) -> list[_core.NewChunk]:
    """A round's chunks: the user's lines (`user: …`) and the replies
    (`assistant: …`) each cut to the chunk size like any note, every chunk citing the
    whole round's message ids.

    Apart, not together: a long reply diluted the owner's own words, which are what a
    later question echoes (LongMemEval, docs/memory-eval.md: session R_all@5 0.810 with
    whole rounds, 0.881 split; the replies stay searchable for what the agent said)."""
    ids = " ".join(m.id for m in rnd)
    pieces: list[str] = []
    for role in ("user", "assistant"):
        text = "\n".join(f"{m.role}: {m.content.strip()}" for m in rnd if m.role == role)
        if text:
            pieces += [c.text for c in _core.chunk_markdown(text, size, overlap)]
    hashes = _core.text_hashes(pieces)
    return [
        _core.NewChunk(content=p, chunk_hash=h, heading=ids)
        for p, h in zip(pieces, hashes, strict=True)
    ]


def index_chat(
    store: _core.Store,
    backend: EmbeddingBackend,
    cache: _core.EmbeddingCache,
    config: EngineConfig,
    chat_id: str,
    stopping: Callable[[], bool] = lambda: False,
) -> int:
    """Indexes the chat's rounds stored since its watermark; returns chunks written.

    A trailing round that has no reply yet is left for the next call (its reply belongs
    in the same chunk). Blocking: call from a worker thread. `stopping` is asked between
    batches: a stopping engine leaves the rest for its next start.
    """
    key = _WATERMARK + chat_id
    mark = int(store.meta_get(key) or 0)
    c = config.memory.chunking
    written = 0
    while True:
        rows = store.messages_after(chat_id, mark, _BATCH)
        if not rows:
            return written
        full = len(rows) == _BATCH
        rounds = _rounds(rows)
        cut = len(rows)
        # The last round stays open while it has no reply, or when the next batch
        # could extend it; it is indexed whole on a later call.
        if rounds and (full or rounds[-1][-1][1].role == "user"):
            opened = rounds[-1][0][0]
            cut = next(i for i, r in enumerate(rows) if r[0] == opened)
            if cut > 0 or not full:
                rounds.pop()
            else:
                cut = len(rows)  # one round longer than a batch: index what there is
        for rnd in rounds:
            msgs = [m for _, m in rnd]
            chunks = round_chunks(msgs, c.size, c.overlap)
            vectors, _ = backend.embed_cached(cache, [t.content for t in chunks])
            store.add_chunks(chat_source(chat_id), chat_id, msgs[0].created_at, chunks, vectors)
            written += len(chunks)
        if cut == 0:
            return written
        mark = rows[cut - 1][0]
        store.meta_set(key, str(mark))
        if not full or stopping():
            return written


def catch_up(
    store: _core.Store,
    backend: EmbeddingBackend,
    cache: _core.EmbeddingCache,
    config: EngineConfig,
    stopping: Callable[[], bool] = lambda: False,
) -> int:
    """Indexes every chat's rounds not yet indexed (engine start, `klaw reindex`)."""
    written = 0
    for chat_id, head in store.chat_heads():
        if stopping():
            break
        if head > int(store.meta_get(_WATERMARK + chat_id) or 0):
            written += index_chat(store, backend, cache, config, chat_id, stopping)
    return written


class ConversationIndexer:
    """The engine's background task: chats whose reply went out are indexed in order.

    The pending set holds at most one entry per chat (a bounded queue that cannot
    drop work: the watermark knows what is left), and indexing runs in a worker thread
    once no reply came for `delay_s` (a burst is answered first; at most `max_wait_s`),
    so a reply never waits for an embedding nor shares the CPU with one.
    """

    def __init__(
        self,
        store: _core.Store,
        backend: EmbeddingBackend,
        cache: _core.EmbeddingCache,
        config: EngineConfig,
        delay_s: float = 2.0,
        max_wait_s: float = 60.0,
    ) -> None:
        self.store = store
        self.backend = backend
        self.cache = cache
        self.config = config
        self.delay_s = delay_s
        self.max_wait_s = max_wait_s
        self._pending: dict[str, None] = {}
        self._wake = asyncio.Event()
        self._last = 0.0  # loop time of the latest notify
        self.indexed = 0  # chunks written since start (status, tests)
        self.idle = asyncio.Event()

    async def _quiet(self, stop: asyncio.Event) -> None:
        """Waits until no reply came for `delay_s` (at most `max_wait_s` in all): a burst
        of messages is answered first and indexed after, not in between. It sleeps until
        `delay_s` after the latest reply and looks again, rather than waking at each
        reply (a task wake-up on every message's path)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait_s
        while not stop.is_set():
            until = min(self._last + self.delay_s, deadline)
            if until <= loop.time():
                return
            await _first_of(stop, timeout=until - loop.time())

    def notify(self, chat_id: str) -> None:
        """A round of `chat_id` may be complete (call on the event loop)."""
        self._pending[chat_id] = None
        self._last = asyncio.get_running_loop().time()
        self.idle.clear()
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Catches up once, then indexes notified chats until `stop` is set."""
        stopping = stop.is_set
        try:
            self.indexed += await asyncio.to_thread(
                catch_up, self.store, self.backend, self.cache, self.config, stopping
            )
        except Exception:
            log.exception("conversation index: catching up failed; retried on next message")
        while not stop.is_set():
            if not self._pending:
                self.idle.set()
                self._wake.clear()  # set by notifies already taken
                await _first_of(self._wake, stop)
                await self._quiet(stop)
                continue
            chat_id = next(iter(self._pending))
            del self._pending[chat_id]
            try:
                self.indexed += await asyncio.to_thread(
                    index_chat, self.store, self.backend, self.cache, self.config, chat_id, stopping
                )
            except Exception:
                # The watermark did not move: the chat's next reply retries.
                log.exception("conversation index: chat %s failed", chat_id)


async def _first_of(*events: asyncio.Event, timeout: float | None = None) -> bool:
    """Waits for any of `events` (or the timeout); True when one was set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    return bool(done)

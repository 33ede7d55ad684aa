"""What klaw.db hands back, by the names the engine uses. The engine reads memory
through `Memory` and this module, never `klaw._core` directly, so the Rust boundary
has one owner (`klaw.memory`)."""

from __future__ import annotations

from klaw._core import FileState, Hit, Session, count_tokens_batch
from klaw._core import Message as StoredMessage

__all__ = ["FileState", "Hit", "Session", "StoredMessage", "count_tokens_batch", "with_content"]


def with_content(row: StoredMessage, content: str) -> StoredMessage:
    """`row` with other text (rows are frozen)."""
    return StoredMessage(
        id=row.id,
        channel=row.channel,
        chat_id=row.chat_id,
        role=row.role,
        content=content,
        created_at=row.created_at,
        kind=row.kind,
        metadata=row.metadata,
    )

"""A search result that cites where it came from."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Hit:
    content: str
    source: str
    start_line: int | None
    end_line: int | None
    created_at: str
    score: float
    id: int = 0
    chat_id: str | None = None
    heading: str | None = None

    @property
    def citation(self) -> str:
        """`memory/2026-02-24.md#L12-L30`, or just the source when it has no lines; a past
        conversation's round: `chat:<chat id> 2026-02-24 msg <first id>…<last id>`."""
        if self.source.startswith("chat:") and self.heading:
            ids = self.heading.split()
            span = ids[0] if len(ids) == 1 else f"{ids[0]}…{ids[-1]}"
            return f"{self.source} {self.created_at[:10]} msg {span}"
        if self.start_line is None:
            return self.source
        return f"{self.source}#L{self.start_line}-L{self.end_line}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["citation"] = self.citation
        return d

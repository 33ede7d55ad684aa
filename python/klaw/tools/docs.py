"""Self-documentation tools (design §6.4): `docs_list`, `docs_read`, `docs_search`.

They serve Klaw's own docs (see `klaw.memory.docs` for where they come from and how
they are indexed). `docs_read` only serves pages that `docs_list` shows: a path is
looked up among them, never opened as given, so `..`, absolute paths and links out
of the docs are refused. Pages come back a page at a time like `file_read`
(`offset`/`limit` in lines); a section can be named (`memory.md#Core memory`) and
`docs_search` citations (`storage.md#L40-L72`) can be passed to `docs_read` as they are.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, ClassVar

from klaw.errors import InvalidInput
from klaw.memory.docs import resolve_doc_ref
from klaw.tools.base import DEFAULT_MAX_RESULT_CHARS, Tool, ToolError

if TYPE_CHECKING:
    from klaw.memory.docs import DocHit, Docs

__all__ = ["DocsList", "DocsRead", "DocsSearch", "format_doc_hits"]

MAX_TOP_K = 20
#: A search snippet longer than this is cut; docs_read shows the rest.
MAX_SNIPPET_CHARS = 1500
#: H2 titles listed per page by docs_list.
MAX_LISTED_SECTIONS = 12


def format_doc_hits(hits: list[DocHit]) -> str:
    """Numbered hits, each headed by its citation and section."""
    blocks = []
    for i, h in enumerate(hits, 1):
        text = h.content.strip()
        if len(text) > MAX_SNIPPET_CHARS:
            text = text[:MAX_SNIPPET_CHARS].rstrip() + f" […] (docs_read {h.citation} for all)"
        where = f" — {h.section}" if h.section else ""
        blocks.append(f"[{i}] {h.citation}{where} (score {h.score:.3f})\n{text}")
    return "\n\n".join(blocks)


class DocsList(Tool):
    name = "docs_list"
    description = (
        "List Klaw's own documentation pages with their titles and main sections. "
        "Read one with docs_read or search them all with docs_search."
    )

    def __init__(self, docs: Docs) -> None:
        self.docs = docs

    def _list(self) -> str:
        files = self.docs.files()
        if not files:
            return "No documentation is installed."
        lines = [f"Klaw documentation ({len(files)} pages):"]
        for f in files:
            size = f"{len(f.text.encode()) / 1024:.0f} KB"
            lines.append(f"- {f.path}: {f.title} ({size})")
            sections = [t for level, t in f.headings() if level == 2]
            if sections:
                shown = "; ".join(sections[:MAX_LISTED_SECTIONS])
                extra = len(sections) - MAX_LISTED_SECTIONS
                more = f"; +{extra} more" if extra > 0 else ""
                lines.append(f"  sections: {shown}{more}")
        return "\n".join(lines)

    async def run(self, args: dict[str, Any]) -> str:
        return await asyncio.to_thread(self._list)


class DocsRead(Tool):
    name = "docs_read"
    description = (
        "Read a page of Klaw's documentation. `path` is a name from docs_list "
        "(e.g. 'memory.md'), a section ('memory.md#Core memory') or a docs_search citation "
        "('memory.md#L40-L72'). Long pages come back a part at a time: pass `offset` "
        "(first line, 1-based) and `limit`."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "page from docs_list"},
            "offset": {"type": "integer", "minimum": 1, "description": "first line (1-based)"},
            "limit": {"type": "integer", "minimum": 1, "description": "maximum lines"},
        },
        "required": ["path"],
        "additionalProperties": False,
    }

    def __init__(self, docs: Docs, max_chars: int = DEFAULT_MAX_RESULT_CHARS - 300) -> None:
        self.docs = docs
        self.max_chars = max(200, max_chars)

    def _read(self, ref: str, offset: int | None, limit: int | None) -> str:
        try:
            page, start, end = resolve_doc_ref(self.docs.source, ref)
        except InvalidInput as exc:
            raise ToolError(str(exc)) from None
        if offset is None:
            offset = start or 1
            if limit is None and start is not None and end is not None and end >= start:
                limit = end - start + 1
        lines = page.text.splitlines(keepends=True)
        total = len(lines)
        if total == 0:
            return f"[{page.path} is empty]"
        if offset > total:
            raise ToolError(f"offset {offset} is past the end: {page.path} has {total} lines")
        budget = self.max_chars - 200
        stop = total if limit is None else min(total, offset - 1 + limit)
        out: list[str] = []
        used = 0
        end_line = offset - 1
        while end_line < stop and used + len(lines[end_line]) <= budget:
            out.append(lines[end_line])
            used += len(lines[end_line])
            end_line += 1
        if not out:  # one line longer than the whole budget
            out.append(lines[end_line][:budget])
            end_line += 1
        body = "".join(out).rstrip("\n")
        if offset > 1 or end_line < total:
            more = f"; continue with offset={end_line + 1}" if end_line < total else ""
            body += f"\n[{page.path}: lines {offset}-{end_line} of {total}{more}]"
        return body

    async def run(self, args: dict[str, Any]) -> str:
        offset = args.get("offset")
        limit = args.get("limit")
        return await asyncio.to_thread(
            self._read,
            args["path"],
            None if offset is None else int(offset),
            None if limit is None else int(limit),
        )


class DocsSearch(Tool):
    name = "docs_search"
    description = (
        "Search Klaw's own documentation (how Klaw works: memory, storage, commands, "
        "configuration) by meaning and keywords. Results cite page and lines for docs_read."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1},
            "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K},
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(self, docs: Docs, top_k: int = 5) -> None:
        self.docs = docs
        self.top_k = top_k

    async def run(self, args: dict[str, Any]) -> str:
        query = args["query"]
        if not query.strip():
            raise ToolError("query must not be empty")
        top_k = int(args.get("top_k", self.top_k))
        hits = await asyncio.to_thread(self.docs.search, query, top_k)
        if not hits:
            return f"Nothing in the documentation matches {query!r}; docs_list shows the pages."
        return format_doc_hits(hits)

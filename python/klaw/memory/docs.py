"""Klaw's own documentation, indexed into klaw.db for `docs_search` (design §6.4).

Where the docs come from (`DocSource.default()`):

1. a source checkout (`maturin develop`): the repository's `docs/**/*.md`, read live,
   so an edited page is served at once and re-indexed at the next start;
2. any other install: the copy compiled into `klaw._core` (`_core.bundled_docs()`,
   see rust/klaw-py/src/docs.rs), which every wheel and sdist build carries.

`ensure_docs_indexed(memory)` chunks the docs with the memory chunker, embeds them
through the embedding cache and replaces `doc_chunks` / `vec_docs` in
one transaction, recording a stamp (Klaw version, embedding model, chunking, content
hash) in `meta` in that same transaction. When the stamp is unchanged it only reads
the files and returns. It is blocking and thread-safe; the engine runs it at start
with `asyncio.to_thread`, and `Docs.search` waits for a run in progress.

    docs = Docs(memory)
    docs.ensure_indexed()
    for hit in docs.search("how do I rebuild klaw.db?"):
        print(hit.citation, hit.section)
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import klaw
from klaw import _core
from klaw.errors import InvalidInput

if TYPE_CHECKING:
    from klaw.memory.api import Memory

__all__ = [
    "DOCS_META_KEY",
    "MAX_DOC_BYTES",
    "DocFile",
    "DocHit",
    "DocSource",
    "Docs",
    "DocsIndexReport",
    "docs_stamp",
    "ensure_docs_indexed",
    "resolve_doc_ref",
]

log = logging.getLogger("klaw.memory.docs")

#: The `meta` key holding the stamp of the indexed docs.
DOCS_META_KEY = "docs_index"
#: A page larger than this is not documentation; it is skipped with a warning.
MAX_DOC_BYTES = 1024 * 1024

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_LINES_SUFFIX = re.compile(r"#L(\d+)(?:-L?(\d+))?")
#: One docs index at a time per process (engine start vs. a first docs_search).
_INDEX_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class DocFile:
    """One documentation page: `path` is relative to the docs root, with `/`."""

    path: str
    text: str

    @property
    def title(self) -> str:
        """The first `# ` heading, else the first heading, else the file name."""
        first: str | None = None
        for level, title in self.headings():
            if level == 1:
                return title
            first = first or title
        return first or PurePosixPath(self.path).stem

    def headings(self) -> list[tuple[int, str]]:
        """(level, title) of the ATX headings outside code fences."""
        return [(level, title) for level, title, _ in self._headings()]

    def _headings(self) -> list[tuple[int, str, int]]:
        out: list[tuple[int, str, int]] = []
        fence: str | None = None
        for no, line in enumerate(self.text.splitlines(), 1):
            stripped = line.lstrip()
            if stripped.startswith(("```", "~~~")):
                mark = stripped[:3]
                fence = None if fence == mark else (fence or mark)
                continue
            if fence is None and (m := _HEADING.match(line)):
                out.append((len(m.group(1)), m.group(2), no))
        return out

    def section_lines(self, name: str) -> tuple[int, int] | None:
        """1-based inclusive lines of the section titled `name` (or its #anchor slug)."""
        want = name.strip().lower()
        heads = self._headings()
        for i, (level, title, line) in enumerate(heads):
            if want in (title.lower(), _slug(title)):
                end = len(self.text.splitlines())
                for next_level, _, next_line in heads[i + 1 :]:
                    if next_level <= level:
                        end = next_line - 1
                        break
                return line, end
        return None


def _slug(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to '-'."""
    kept = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


@dataclass(frozen=True, slots=True)
class DocHit:
    path: str
    section: str | None
    content: str
    start_line: int | None
    end_line: int | None
    chunk: int
    score: float

    @property
    def citation(self) -> str:
        """`memory.md#L12-L30`: a path docs_read accepts as is."""
        if self.start_line is None:
            return self.path
        return f"{self.path}#L{self.start_line}-L{self.end_line}"


@dataclass
class DocsIndexReport:
    indexed: bool = False
    files: int = 0
    chunks: int = 0
    cache_hits: int = 0
    seconds: float = 0.0
    origin: str = ""
    stamp: str = ""
    skipped: list[str] = field(default_factory=list)


def _normalise(path: str) -> str:
    """A clean relative POSIX path inside the docs root; InvalidInput otherwise."""
    raw = path.strip()
    if not raw:
        raise InvalidInput("the docs path is empty; docs_list shows the pages")
    if "\\" in raw or "\0" in raw:
        raise InvalidInput(f"{path!r} is not a docs path; use a name from docs_list")
    p = PurePosixPath(raw)
    if p.is_absolute() or ".." in p.parts:
        raise InvalidInput(
            f"{path!r} is outside the documentation; paths are relative to it, "
            "e.g. 'memory.md' (docs_list shows them all)"
        )
    clean = "/".join(part for part in p.parts if part not in ("", "."))
    if not clean:
        raise InvalidInput("the docs path is empty; docs_list shows the pages")
    return clean


class DocSource:
    """A set of Markdown pages: a directory read on every call, or a fixed bundle."""

    def __init__(
        self,
        *,
        root: Path | None = None,
        bundle: Sequence[tuple[str, str]] | None = None,
        origin: str = "",
    ) -> None:
        if (root is None) == (bundle is None):
            raise ValueError("a DocSource has either a root directory or a bundle")
        self.root = root
        self._bundle = (
            None
            if bundle is None
            else sorted((DocFile(_normalise(p), t) for p, t in bundle), key=lambda f: f.path)
        )
        self.origin = origin or (str(root) if root is not None else "bundled")
        self._warned: set[str] = set()

    @classmethod
    def from_dir(cls, root: Path | str) -> DocSource:
        return cls(root=Path(root))

    @classmethod
    def bundled(cls) -> DocSource:
        """The docs compiled into `klaw._core` at build time."""
        return cls(bundle=_core.bundled_docs(), origin="bundled with klaw._core")

    @classmethod
    def default(cls) -> DocSource:
        """The checkout's docs/ when running from source, else the bundled copy."""
        checkout = Path(klaw.__file__).resolve().parents[2]
        docs = checkout / "docs"
        if (checkout / "pyproject.toml").is_file() and (checkout / "rust").is_dir():
            if docs.is_dir():
                return cls.from_dir(docs)
        return cls.bundled()

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning("%s", message)

    def files(self) -> list[DocFile]:
        """Every page, sorted by path."""
        if self._bundle is not None:
            return list(self._bundle)
        assert self.root is not None
        try:
            root = self.root.resolve(strict=True)
        except OSError:
            self._warn(f"documentation directory {self.root} is missing")
            return []
        out: list[DocFile] = []
        for p in sorted(root.rglob("*.md")):
            try:
                real = p.resolve(strict=True)
                if not real.is_relative_to(root) or not real.is_file():
                    continue  # a link out of the docs is never served
                if real.stat().st_size > MAX_DOC_BYTES:
                    self._warn(f"{p} is over {MAX_DOC_BYTES} bytes; not served as documentation")
                    continue
                data = real.read_bytes()
            except OSError as exc:
                self._warn(f"{p} could not be read ({exc.strerror}); skipped")
                continue
            text = data.decode("utf-8", errors="replace")
            out.append(DocFile(p.relative_to(root).as_posix(), text))
        return out

    def get(self, path: str) -> DocFile:
        """The page at `path` (`.md` may be left out); InvalidInput names the pages."""
        clean = _normalise(path)
        pages = {f.path: f for f in self.files()}
        for name in (clean, clean + ".md"):
            if name in pages:
                return pages[name]
        known = ", ".join(pages) or "none"
        raise InvalidInput(f"No documentation page {path!r}. Pages: {known}")


def docs_stamp(files: Sequence[DocFile], model_id: str, size: int, overlap: int) -> str:
    """What the index depends on: Klaw's version, the model, the chunking, the text."""
    h = hashlib.blake2b(digest_size=16)
    for f in files:
        h.update(f.path.encode() + b"\0" + f.text.encode() + b"\0")
    return json.dumps(
        {
            "version": klaw.__version__,
            "model": model_id,
            "chunking": [size, overlap],
            "hash": h.hexdigest(),
        },
        sort_keys=True,
    )


def ensure_docs_indexed(
    memory: Memory, source: DocSource | None = None, *, force: bool = False
) -> DocsIndexReport:
    """Indexes the docs when they, Klaw's version or the embedding model changed."""
    source = source or DocSource.default()
    t0 = time.perf_counter()
    with _INDEX_LOCK:
        files = source.files()
        c = memory.config.memory.chunking
        stamp = docs_stamp(files, memory.backend.model_id, c.size, c.overlap)
        report = DocsIndexReport(files=len(files), origin=source.origin, stamp=stamp)
        if not force and memory.store.meta_get(DOCS_META_KEY) == stamp:
            report.chunks = memory.store.count_docs()
            report.seconds = time.perf_counter() - t0
            return report
        rows: list[_core.DocChunk] = []
        embed_texts: list[str] = []
        for f, chunks in zip(
            files, _core.chunk_all([f.text for f in files], c.size, c.overlap), strict=True
        ):
            for i, ch in enumerate(chunks):
                section = " > ".join(ch.heading_path) or None
                rows.append(
                    _core.DocChunk(
                        file=f.path,
                        content=ch.text,
                        chunk=i,
                        section=section,
                        start_line=ch.start_line,
                        end_line=ch.end_line,
                    )
                )
                # The headings give a chunk the context its own words may lack.
                embed_texts.append(f"{section}\n\n{ch.text}" if section else ch.text)
        vectors, hits = memory._embed(embed_texts) if embed_texts else (b"", 0)
        memory.store.replace_docs(klaw.__version__, rows, vectors, (DOCS_META_KEY, stamp))
        report.indexed = True
        report.chunks = len(rows)
        report.cache_hits = hits
        report.seconds = time.perf_counter() - t0
    log.info(
        "documentation indexed: %d files, %d chunks (%d cached) in %.2fs from %s",
        report.files,
        report.chunks,
        report.cache_hits,
        report.seconds,
        report.origin,
    )
    return report


def resolve_doc_ref(source: DocSource, ref: str) -> tuple[DocFile, int | None, int | None]:
    """The page and line range a reference names: `memory.md`, `memory.md#L12-L30`
    (a docs_search citation) or `memory.md#core-memory` (a section, by title or
    anchor). InvalidInput names the pages or sections when nothing matches."""
    ref = ref.strip()
    path, _, anchor = ref.partition("#")
    page = source.get(path)
    if not anchor:
        return page, None, None
    if m := _LINES_SUFFIX.fullmatch("#" + anchor):
        start = int(m.group(1))
        end = int(m.group(2)) if m.group(2) else start
        return page, start, max(start, end)
    lines = page.section_lines(anchor)
    if lines is None:
        titles = "; ".join(t for _, t in page.headings()[:30]) or "none"
        raise InvalidInput(f"{page.path} has no section {anchor!r}. Sections: {titles}")
    return page, lines[0], lines[1]


class Docs:
    """The documentation of this Klaw: listing, reading and hybrid search."""

    def __init__(self, memory: Memory, source: DocSource | None = None) -> None:
        self.memory = memory
        self.source = source or DocSource.default()

    def files(self) -> list[DocFile]:
        return self.source.files()

    def get(self, path: str) -> DocFile:
        return self.source.get(path)

    def ensure_indexed(self, *, force: bool = False) -> DocsIndexReport:
        return ensure_docs_indexed(self.memory, self.source, force=force)

    def search(self, query: str, top_k: int = 5) -> list[DocHit]:
        """Best first; indexes first if the index is empty (or waits for a run in progress)."""
        if not query.strip():
            raise InvalidInput("search query must not be empty")
        if top_k <= 0:
            raise InvalidInput(f"top_k must be positive, got {top_k}")
        store = self.memory.store
        if store.count_docs() == 0:
            self.ensure_indexed()
        hits = store.search_docs(
            self.memory.backend.embed_query(query), query, self.memory.search_params(top_k)
        )
        return [
            DocHit(h.file, h.section, h.content, h.start_line, h.end_line, h.chunk, h.score)
            for h in hits
        ]

"""`Memory`: archival memory over the Rust store (chunk → embed via cache → index → search).

Files stay the truth: workspace Markdown is indexed where it lies, and facts saved
with `save()` are first appended to `memory/saved.jsonl` in the data dir, so
`klaw reindex` can rebuild every chunk from files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from klaw import _core
from klaw.errors import Cancelled, InvalidInput, ModelNotFound
from klaw.fsutil import atomic_write
from klaw.lock import EngineLock
from klaw.memory.dbfile import check_db_file
from klaw.memory.embedding import EmbeddingBackend, OllamaBackend, OnnxBackend
from klaw.memory.reindex import ReindexReport, read_saved, remove_db_files, swap_in
from klaw.memory.rows import Hit
from klaw.memory.wsfiles import memory_files, open_for_index
from klaw.paths import KlawPaths
from klaw.wire.record import now_iso, to_iso

if TYPE_CHECKING:
    from klaw.config import EngineConfig

log = logging.getLogger("klaw.memory")

#: Larger Markdown files are refused: embedding them would take hours on a Pi.
MAX_INDEX_FILE_BYTES = 16 * 1024 * 1024
_DATED = re.compile(r"(\d{4}-\d{2}-\d{2})")


@dataclass
class IndexReport:
    indexed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    chunks: int = 0
    cache_hits: int = 0
    errors: list[str] = field(default_factory=list)


def load_backend(config: EngineConfig, paths: KlawPaths) -> EmbeddingBackend:
    """The embedding backend named by `memory.embedding.type`."""
    emb = config.memory.embedding
    if emb.type == "ollama":
        return OllamaBackend(emb.ollama_endpoint, emb.ollama_model)
    from klaw.memory.models import registry as models

    try:
        files = models.resolve_model_files(emb, paths)
    except ModelNotFound:
        if not models.can_install(emb):
            raise
        # First start without `klaw model install`: convert the packaged model now (once,
        # a few seconds) rather than refuse to remember anything.
        log.warning("embedding model %s is not installed: installing it now", emb.model)
        models.install_model(paths, name=emb.model)
        files = models.resolve_model_files(emb, paths)
    spec = models.model_spec(emb.model)
    max_length = emb.max_length or spec.max_length
    windows = emb.long_texts == "windows"
    embedder = _core.Embedder(
        str(files.model),
        str(files.tokenizer),
        ort_library=str(lib) if (lib := models.find_ort_library(emb)) else None,
        threads=emb.threads,
        max_length=max_length,
        windows=windows,
        query_prefix=spec.query_prefix,
        passage_prefix=spec.passage_prefix,
    )
    return OnnxBackend(embedder, models.embedding_id(files, emb))


def _init_core_memory(paths: KlawPaths) -> None:
    """Core memory starts from the workspace's USER.md, once (design §4.2)."""
    user_md = paths.workspace / "USER.md"
    if user_md.is_file() and not paths.core_memory.exists():
        from klaw.memory.core import CoreMemory

        if CoreMemory(paths.core_memory).init_from_user_md(user_md):
            log.info("core memory initialised from %s", user_md)


class Memory:
    """Archival memory. One instance owns the store; it is safe to share between threads."""

    def __init__(
        self,
        store: _core.Store,
        backend: EmbeddingBackend,
        cache: _core.EmbeddingCache,
        paths: KlawPaths,
        config: EngineConfig,
    ) -> None:
        self.store = store
        self.backend = backend
        self.cache = cache
        self.paths = paths
        self.config = config
        self._save_lock = threading.Lock()
        self._on_close: list[Callable[[], None]] = []
        #: Told (text, durable) after each saved fact: OpenClaw's write-back subscribes.
        self.on_saved: list[Callable[[str, bool], None]] = []
        #: Counts indexing passes that changed workspace memory files: auto-recall reads
        #: the bank and the daily logs again when it moves (klaw.memory.recall).
        self.generation = 0
        # Set by `cancel()`: long indexing stops between embedding batches and files, so
        # a stopping engine is done within a batch, not after a 15 MB file.
        # A Rust flag, so indexing inside one `index_document` call sees it too.
        self._cancel = _core.CancelFlag()

    # --- opening ---------------------------------------------------------

    @classmethod
    def open(
        cls,
        data_dir: Path | str | None = None,
        workspace: Path | str | None = None,
        *,
        config: EngineConfig | None = None,
        paths: KlawPaths | None = None,
        backend: EmbeddingBackend | None = None,
    ) -> Memory:
        """Opens klaw.db (XDG defaults when arguments are None); a model change re-embeds all."""
        from klaw.config import load_engine_config

        paths = paths or KlawPaths.from_env()
        if data_dir is not None:
            paths = replace(paths, data_dir=Path(data_dir))
        if config is None:
            config = load_engine_config(paths.engine_config)
        if workspace is not None:
            paths = replace(paths, workspace=Path(workspace))
        elif getattr(config, "workspace", None):
            paths = replace(paths, workspace=Path(str(config.workspace)).expanduser())
        _init_core_memory(paths)
        backend = backend or load_backend(config, paths)
        cache = _core.EmbeddingCache(str(paths.embeddings_cache))
        threads = min(2, os.cpu_count() or 1)
        store: _core.Store | None = None
        check_db_file(paths.db)
        try:
            store = _core.Store(str(paths.db), dim=backend.dim, threads=threads)
            recorded = store.meta_get("embedding_model")
        except InvalidInput as exc:
            if "dimensional" not in str(exc):
                raise
            recorded = f"a model with another vector size than {backend.dim}"
        if recorded is None and store is not None:
            store.meta_set("embedding_model", backend.model_id)
        elif recorded != backend.model_id:
            # The caller owns the engine lock (the engine, or a CLI command), so the
            # rebuild does not take it again.
            log.warning(
                "embedding model changed (%s -> %s): re-embedding", recorded, backend.model_id
            )
            if store is not None:
                store.close()
            rebuild(
                paths,
                config,
                backend=backend,
                cache=cache,
                progress=False,
                lock=False,
                conversations=False,
            )
            store = _core.Store(str(paths.db), dim=backend.dim, threads=threads)
        assert store is not None
        from klaw.memory.versioning import versioner

        # memory.git for every writer of this workspace; `true` initialises the repository
        # here, at start, rather than at the first write
        versioner(paths.workspace, config).prepare()
        return cls(store, backend, cache, paths, config)

    def on_close(self, fn: Callable[[], None]) -> None:
        """Runs `fn` after the store is closed (e.g. to release a lock)."""
        self._on_close.append(fn)

    def cancel(self) -> None:
        """Stops indexing in progress (it raises `Cancelled`) and any started later."""
        self._cancel.set()

    def _check_cancel(self) -> None:
        if self._cancel.is_set():
            raise Cancelled("indexing cancelled: memory is closing")

    def close(self) -> None:
        self.store.close()
        while self._on_close:
            self._on_close.pop()()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ---------------------------------------------------------

    def _chunks(self, text: str) -> list[_core.Chunk]:
        c = self.config.memory.chunking
        return list(_core.chunk_markdown(text, c.size, c.overlap))

    def _embed(self, texts: list[str]) -> tuple[bytes, int]:
        parts: list[bytes] = []
        hits = 0
        step = self.config.memory.embedding.batch_size
        for i in range(0, len(texts), step):
            self._check_cancel()
            vecs, h = self.backend.embed_cached(self.cache, texts[i : i + step])
            parts.append(vecs)
            hits += h
        return b"".join(parts), hits

    @staticmethod
    def _new_chunks(chunks: list[_core.Chunk], *, lines: bool = True) -> list[_core.NewChunk]:
        hashes = _core.text_hashes([c.text for c in chunks])
        return [
            _core.NewChunk(
                content=c.text,
                chunk_hash=h,
                start_line=c.start_line if lines else None,
                end_line=c.end_line if lines else None,
                heading=" > ".join(c.heading_path) or None,
            )
            for c, h in zip(chunks, hashes, strict=True)
        ]

    def save(
        self,
        text: str,
        source: str = "manual",
        chat_id: str | None = None,
        created_at: datetime | str | None = None,
        *,
        durable: bool = False,
    ) -> list[int]:
        """Saves a fact: appended to saved.jsonl (the truth), then chunked and indexed;
        then `on_saved` is told (OpenClaw's write-back: the workspace's daily log, and
        MEMORY.md when `durable`). A subscriber that fails loses nothing."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("cannot save empty text to memory")
        if not source.strip():
            raise InvalidInput("source must not be empty")
        ts = to_iso(created_at) or now_iso()
        record = {
            "id": uuid.uuid4().hex,
            "ts": ts,
            "source": source,
            "chat_id": chat_id,
            "text": text,
        }
        with self._save_lock:
            self._append_saved(record)
            ids = self._index_saved(record)
        for subscriber in self.on_saved:
            try:
                subscriber(text, durable)
            except Exception:  # the fact is saved and indexed either way
                log.exception("after saving a fact: %r failed", subscriber)
        return ids

    def _append_saved(self, record: dict[str, Any]) -> None:
        path = self.paths.saved_memory
        path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _index_saved(self, record: dict[str, Any]) -> list[int]:
        chunks = self._chunks(record["text"])
        if not chunks:
            return []
        # Saved facts have no file lines to cite: the line range is dropped.
        new = self._new_chunks(chunks, lines=False)
        vectors, _ = self._embed([c.content for c in new])
        return list(
            self.store.add_chunks(
                record["source"], record.get("chat_id"), record["ts"], new, vectors
            )
        )

    def _dated(self, name: str) -> str | None:
        """A daily log's time: the start of the day its name gives, in the owner's zone
        (scheduler.timezone, else the host's), the day the log was written for; None
        when the name holds no valid date."""
        m = _DATED.search(name)
        try:
            day = date.fromisoformat(m.group(1)) if m else None
        except ValueError:
            return None
        if day is None:
            return None
        start = datetime.combine(day, datetime.min.time())
        zone = self.config.scheduler.zone()
        return to_iso((start.replace(tzinfo=zone) if zone else start.astimezone()).astimezone(UTC))

    def source_label(self, path: Path) -> str:
        """Workspace files are cited relative to the workspace (`memory/2026-02-24.md`)."""
        path = path.resolve()
        if path == self.paths.core_memory.resolve():
            return "core_memory.json"
        try:
            return path.relative_to(self.paths.workspace.resolve()).as_posix()
        except ValueError:
            pass
        try:
            return "summaries/" + path.relative_to(self.paths.summaries.resolve()).as_posix()
        except ValueError:
            return str(path)

    def index_file(self, path: Path | str, source: str | None = None) -> int:
        """Indexes a Markdown file; returns chunks written (0 when unchanged since last time)."""
        p = Path(path)
        # As the file tools open it: a symlink out of the workspace is refused.
        fd = open_for_index(self.paths.workspace, p)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            self._check_cancel()
            if st.st_size > MAX_INDEX_FILE_BYTES:
                raise InvalidInput(
                    f"{p} is {st.st_size / 2**20:.0f} MiB; files over "
                    f"{MAX_INDEX_FILE_BYTES // 2**20} MiB are not indexed (split it into "
                    "smaller notes)"
                )
            data = f.read(MAX_INDEX_FILE_BYTES + 1)
        label = self.source_label(p)
        digest = hashlib.blake2b(data, digest_size=16).hexdigest()
        known = self.store.file_state(label)
        if known is not None and known.hash == digest:
            return 0
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            log.warning("%s is not valid UTF-8 (byte %d); undecodable bytes replaced", p, exc.start)
            text = data.decode("utf-8", errors="replace")
        del data
        if st.st_size >= 256 * 1024:  # minutes of CPU on a Pi: say what is going on
            log.info("indexing %s (%d KiB)", label, st.st_size // 1024)
        created = self._dated(p.name) or to_iso(datetime.fromtimestamp(st.st_mtime, UTC))
        assert created is not None
        from klaw.memory import facts  # its Retain bullets, after its chunks

        logged = facts.is_log(label)
        before = facts.entity_names_of(self, label) if logged else set()
        if isinstance(self.backend, OnnxBackend):
            # One crossing: chunk, hash, embed through the cache and replace, GIL free.
            c = self.config.memory.chunking
            stored, _ = _core.index_document(
                self.store,
                self.backend.embedder,
                self.cache,
                self.backend.model_id,
                path=label,
                source=source or label,
                hash=digest,
                mtime=st.st_mtime,
                size=st.st_size,
                created_at=created,
                text=text,
                chunk_size=c.size,
                chunk_overlap=c.overlap,
                batch_size=self.config.memory.embedding.batch_size,
                cancel=self._cancel,
            )
            if logged:
                facts.index_facts(self, label, text, before)
            return stored
        # Ollama embeds over HTTP from Python: the same steps, one crossing each.
        new = self._new_chunks(self._chunks(text))
        vectors, _ = self._embed([c.content for c in new])
        ids = self.store.replace_file(
            label, source or label, digest, st.st_mtime, st.st_size, created, new, vectors
        )
        if logged:
            facts.index_facts(self, label, text, before)
        return len(ids)

    def workspace_files(self) -> list[Path]:
        """MEMORY.md and memory/**/*.md of the workspace, summaries/**/*.md, core memory."""
        found = memory_files(self.paths.workspace)  # symlinks out of it left out
        if self.paths.summaries.is_dir():
            found.extend(sorted(p for p in self.paths.summaries.rglob("*.md") if p.is_file()))
        if self.paths.core_memory.is_file() and self._core_memory_has_facts():
            found.append(self.paths.core_memory)
        return found

    def _core_memory_has_facts(self) -> bool:
        try:
            data = json.loads(self.paths.core_memory.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(data, dict) and any(bool(v) for v in data.values())

    def index_workspace(self) -> IndexReport:
        """Indexes changed workspace memory files and forgets deleted ones."""
        report = IndexReport()
        present: set[str] = set()
        for p in self.workspace_files():
            label = self.source_label(p)
            present.add(label)
            try:
                n = self.index_file(p)
            except InvalidInput as exc:
                # A skipped file is said out loud: the owner would otherwise wonder why
                # a note is never found.
                log.warning("not indexed: %s", exc)
                report.errors.append(str(exc))
                continue
            (report.indexed if n else report.unchanged).append(label)
            report.chunks += n
        for path in (f.path for f in self.store.list_files()):
            owned = path in ("MEMORY.md", "core_memory.json") or path.startswith(
                ("memory/", "summaries/", "bank/")
            )
            if owned and path not in present:
                from klaw.memory import facts

                gone = facts.entity_names_of(self, path) if facts.is_log(path) else set()
                self.store.remove_file(path)
                if gone:  # what its facts superseded is current again
                    facts.supersede(self.store, gone)
                report.removed.append(path)
        if report.indexed or report.removed:
            self.generation += 1
        return report

    def import_path(self, path: Path | str) -> IndexReport:
        """Indexes one Markdown file or every *.md under a directory."""
        p = Path(path).resolve()
        files: Iterable[Path] = sorted(p.rglob("*.md")) if p.is_dir() else [p]
        report = IndexReport()
        self._record_import(p)
        for f in files:
            n = self.index_file(f)
            (report.indexed if n else report.unchanged).append(self.source_label(f))
            report.chunks += n
        return report

    @property
    def _imports_file(self) -> Path:
        return self.paths.memory_dir / "imports.json"

    def imported_paths(self) -> list[Path]:
        """Files and directories added with `import_path`, so reindex can add them again."""
        try:
            return [Path(p) for p in json.loads(self._imports_file.read_text())]
        except (OSError, ValueError):
            return []

    def _record_import(self, p: Path) -> None:
        known = self.imported_paths()
        if p in known:
            return
        self._imports_file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self._imports_file, json.dumps([str(x) for x in [*known, p]], indent=1))

    # --- reading ---------------------------------------------------------

    def search(
        self,
        query: str,
        top_k: int | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        source: str | None = None,
        *,
        recency: bool = True,
        kind: str | list[str] | None = None,
        entity: str | None = None,
    ) -> list[Hit]:
        """Hybrid search: vector + keyword candidates fused (memory.search), the newer
        of two close candidates first unless the query asks about the past; best first.
        `kind` / `entity` search the retained facts of that kind / about that entity
        instead (klaw.memory.facts); a hit holding a superseded fact gets the newer
        fact above it."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("search query must not be empty")
        s = self.config.memory.search
        k = s.top_k if top_k is None else top_k
        if k <= 0:
            raise InvalidInput(f"top_k must be positive, got {k}")
        from klaw.memory.timewords import asks_about_past  # its rules compile on import

        qvec = self.backend.embed_query(query)
        # Newer first, unless the question is about a time or about the past itself.
        recent = recency and since is None and until is None and not asks_about_past(query)
        params = self.search_params(
            k, recency=s.recency if recent else 0.0, keyword_pivot=self.keyword_pivot()
        )
        from klaw.memory import facts

        ids = None
        if kind is not None or entity is not None:
            ids = facts.filter_ids(self, kind, entity)
            if not ids:
                return []
        hits = self.store.search(
            qvec, query, params, since=to_iso(since), until=to_iso(until), source=source, ids=ids
        )
        return facts.newer_first(self.store, hits, k)

    def search_params(
        self, top_k: int, *, recency: float = 0.0, keyword_pivot: int = 0
    ) -> _core.SearchParams:
        """memory.search's ranking for `top_k` results, for memory and the docs alike."""
        s = self.config.memory.search
        wv, wk = self.fusion_weights()
        return _core.SearchParams(
            top_k=top_k,
            candidates=max(s.candidates, top_k),
            rrf_k=float(s.rrf_k),
            vector_weight=wv,
            keyword_weight=wk,
            fusion=s.fusion,
            recency=recency,
            keyword_pivot=keyword_pivot,
        )

    def fusion_weights(self) -> tuple[float, float]:
        """(vector, keyword) weights: engine.yaml's, else those measured for the model."""
        from klaw.memory.models.registry import model_spec

        s = self.config.memory.search
        spec = model_spec(self.config.memory.embedding.model)
        wv = spec.vector_weight if s.vector_weight is None else s.vector_weight
        wk = spec.keyword_weight if s.keyword_weight is None else s.keyword_weight
        return wv, wk

    def keyword_pivot(self) -> int:
        from klaw.memory.models.registry import model_spec

        s = self.config.memory.search
        spec = model_spec(self.config.memory.embedding.model)
        return spec.keyword_pivot if s.keyword_pivot is None else s.keyword_pivot

    async def asearch(self, query: str, top_k: int | None = None, **filters: Any) -> list[Hit]:
        """`search` off the event loop (the Rust work releases the GIL)."""
        import asyncio

        return await asyncio.to_thread(self.search, query, top_k, **filters)

    def search_conversation(
        self,
        chat_id: str,
        query: str,
        top_k: int | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
    ) -> list[Hit]:
        """The same hybrid search over one chat's past rounds (never another chat's)."""
        from klaw.memory.conversations import chat_source

        # No recency bonus: a chat's recent rounds would crowd out the older one asked
        # about (measured on LongMemEval, docs/memory-eval.md).
        hits = self.search(
            query, top_k, since=since, until=until, source=chat_source(chat_id), recency=False
        )
        return _whole_rounds(hits)

    async def asearch_conversation(
        self, chat_id: str, query: str, top_k: int | None = None, **filters: Any
    ) -> list[Hit]:
        import asyncio

        return await asyncio.to_thread(self.search_conversation, chat_id, query, top_k, **filters)

    def index_conversations(self, chat_id: str | None = None) -> int:
        """Indexes the rounds not yet indexed of one chat, or of all (blocking)."""
        from klaw.memory import conversations

        if chat_id is None:
            return conversations.catch_up(self.store, self.backend, self.cache, self.config)
        return conversations.index_chat(self.store, self.backend, self.cache, self.config, chat_id)

    def stats(self) -> dict[str, int]:
        return dict(self.store.stats())


def rebuild(
    paths: KlawPaths,
    config: EngineConfig,
    *,
    backend: EmbeddingBackend | None = None,
    cache: _core.EmbeddingCache | None = None,
    progress: bool = True,
    lock: bool = True,
    conversations: bool = True,
) -> ReindexReport:
    """Rebuilds `paths.db` from files alone (`klaw reindex`, or a changed embedding
    model). Raises StoreLocked while the engine holds the database.

    `conversations` also re-indexes every chat's rounds (recall memory search); a model
    change at engine start leaves them to the engine's background indexer instead, so
    the engine answers while a long history is re-embedded."""
    held = EngineLock.of(paths).acquire("klaw reindex") if lock else None
    try:
        t0 = time.perf_counter()
        backend = backend or load_backend(config, paths)
        cache = cache or _core.EmbeddingCache(str(paths.embeddings_cache))
        tmp = paths.db.with_name(paths.db.name + ".reindex")
        remove_db_files(tmp)
        paths.db.parent.mkdir(parents=True, exist_ok=True)
        stats = _core.rebuild_messages(
            str(tmp),
            str(paths.data_dir),
            dim=backend.dim,
            default_model=str(config.routing.default),
            progress=progress,
        )
        report = ReindexReport(
            messages=stats.messages,
            sessions=stats.sessions,
            summaries=stats.summaries,
            skipped=stats.skipped_samples,
            skipped_count=stats.skipped,
        )
        store = _core.Store(str(tmp), dim=backend.dim)
        mem = Memory(store, backend, cache, paths, config)
        try:
            store.meta_set("embedding_model", backend.model_id)
            ws = mem.index_workspace()
            report.files = len(ws.indexed)
            report.chunks = ws.chunks
            report.errors.extend(ws.errors)
            for imported in mem.imported_paths():
                if imported.exists():
                    report.chunks += mem.import_path(imported).chunks
                else:
                    report.errors.append(f"imported path {imported} no longer exists; skipped")
            for rec in read_saved(paths.saved_memory, report):
                report.chunks += len(mem._index_saved(rec))
                report.saved_facts += 1
            if conversations:
                report.conversation_chunks = mem.index_conversations()
        finally:
            store.close()
        swap_in(tmp, paths.db)
        report.seconds = time.perf_counter() - t0
        return report
    finally:
        if held is not None:
            held.release()


def _whole_rounds(hits: list[Hit]) -> list[Hit]:
    """A round's user and reply chunks found together are one hit (the round's message
    ids are the chunks' heading), at the better one's rank: the model reads the
    question with its answer, and a round does not take two of the top places."""
    out: list[Hit] = []
    where: dict[str, int] = {}
    for hit in hits:
        key = hit.heading
        if key is None or key not in where:
            if key is not None:
                where[key] = len(out)
            out.append(hit)
            continue
        first = out[where[key]]
        parts = sorted([first.content, hit.content], key=lambda t: not t.startswith("user: "))
        out[where[key]] = first.with_content("\n".join(parts))
    return out

"""Type stubs for the Rust extension `klaw._core` (checked by mypy.stubtest)."""

from os import PathLike
from typing import Any, final

__version__: str

class KlawError(Exception): ...
class InvalidInput(KlawError, ValueError): ...
class StoreError(KlawError, OSError): ...
class StoreCorrupt(StoreError): ...
class StoreLocked(StoreError): ...
class ModelError(KlawError): ...
class ModelNotFound(ModelError, FileNotFoundError): ...
class Cancelled(KlawError): ...

def estimate_tokens(text: str) -> int:
    """Fast script-aware token estimate, calibrated on cl100k."""

def count_tokens_batch(texts: list[str]) -> list[int]:
    """`estimate_tokens` for each text, without the GIL."""

@final
class TokenCounter:
    """Exact counts with a tokenizer.json (no special tokens, no truncation),
    or the estimate when `tokenizer_json` is None. A missing or invalid file
    raises ValueError."""

    def __new__(cls, tokenizer_json: str | PathLike[str] | None = None) -> TokenCounter: ...
    def count(self, text: str) -> int: ...
    def count_batch(self, texts: list[str]) -> list[int]: ...
    @property
    def exact(self) -> bool: ...

@final
class Chunk:
    """A chunk of Markdown: exact source text (line endings normalised to \\n),
    1-based inclusive line range, enclosing headings, estimated tokens."""

    @property
    def text(self) -> str: ...
    @property
    def start_line(self) -> int: ...
    @property
    def end_line(self) -> int: ...
    @property
    def heading_path(self) -> list[str]: ...
    @property
    def tokens(self) -> int: ...

def chunk_markdown(text: str, size: int = 400, overlap: int = 80) -> list[Chunk]:
    """Markdown-aware chunks of at most `size` estimated tokens, consecutive
    chunks sharing at most `overlap` tokens. ValueError unless 0 <= overlap < size."""

def chunk_all(texts: list[str], size: int = 400, overlap: int = 80) -> list[list[Chunk]]:
    """`chunk_markdown` for each text, in one call without the GIL."""

# --- store ---------------------------------------------------------------

@final
class NewChunk:
    """A chunk to store (`Store.replace_file`, `Store.add_chunks`); its vector is
    passed alongside."""

    def __new__(
        cls,
        *,
        content: str,
        chunk_hash: str,
        start_line: int | None = None,
        end_line: int | None = None,
        heading: str | None = None,
    ) -> NewChunk: ...
    @property
    def content(self) -> str: ...
    @property
    def chunk_hash(self) -> str: ...
    @property
    def start_line(self) -> int | None: ...
    @property
    def end_line(self) -> int | None: ...
    @property
    def heading(self) -> str | None: ...

@final
class DocChunk:
    """One chunk of a documentation page (`Store.replace_docs`): `file` relative to the
    docs root, `chunk` its position in the file from 0, `section` its headings."""

    def __new__(
        cls,
        *,
        file: str,
        content: str,
        chunk: int,
        section: str | None = None,
        start_line: int | None = None,
        end_line: int | None = None,
    ) -> DocChunk: ...
    @property
    def file(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def chunk(self) -> int: ...
    @property
    def section(self) -> str | None: ...
    @property
    def start_line(self) -> int | None: ...
    @property
    def end_line(self) -> int | None: ...

@final
class SearchParams:
    """How a hybrid search ranks: `top_k` results from `candidates` per list (at least
    `top_k`), fused by `fusion` ("peaked", "convex" or "rrf", InvalidInput otherwise)
    with the weights (peaked: each scaled by how much its list's best stands out),
    `recency` the newer-first bonus and `keyword_pivot` the query length past which
    keyword weight moves to vectors (0: off)."""

    def __new__(
        cls,
        *,
        top_k: int = 10,
        candidates: int = 20,
        rrf_k: float = 60.0,
        vector_weight: float = 0.7,
        keyword_weight: float = 0.3,
        fusion: str = "convex",
        recency: float = 0.0,
        keyword_pivot: int = 0,
    ) -> SearchParams: ...
    @property
    def top_k(self) -> int: ...
    @property
    def candidates(self) -> int: ...
    @property
    def rrf_k(self) -> float: ...
    @property
    def vector_weight(self) -> float: ...
    @property
    def keyword_weight(self) -> float: ...
    @property
    def fusion(self) -> str: ...
    @property
    def recency(self) -> float: ...
    @property
    def keyword_pivot(self) -> int: ...

@final
class Hit:
    """A search result."""

    @property
    def id(self) -> int: ...
    @property
    def content(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def chat_id(self) -> str | None: ...
    @property
    def start_line(self) -> int | None: ...
    @property
    def end_line(self) -> int | None: ...
    @property
    def heading(self) -> str | None: ...
    @property
    def created_at(self) -> str: ...
    @property
    def score(self) -> float: ...
    @property
    def citation(self) -> str:
        """`memory/2026-02-24.md#L12-L30`, or just the source when it has no lines; a past
        conversation's round: `chat:<chat id> 2026-02-24 msg <first id>…<last id>`."""
    def with_content(self, content: str) -> Hit:
        """The same hit with other text (hits are frozen)."""
    def to_dict(self) -> dict[str, Any]:
        """The fields and the citation, for JSON."""

@final
class Message:
    """One conversation message as klaw.db stores it; `metadata` is JSON text."""

    def __new__(
        cls,
        *,
        id: str,
        channel: str,
        chat_id: str,
        role: str,
        content: str,
        created_at: str,
        kind: str | None = None,
        metadata: str | None = None,
    ) -> Message: ...
    @property
    def id(self) -> str: ...
    @property
    def channel(self) -> str: ...
    @property
    def chat_id(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def kind(self) -> str | None: ...
    @property
    def content(self) -> str: ...
    @property
    def metadata(self) -> str | None: ...
    @property
    def created_at(self) -> str: ...

@final
class FileState:
    """An indexed file (`source` is empty when got by `file_state`)."""

    @property
    def path(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def hash(self) -> str: ...
    @property
    def mtime(self) -> float: ...
    @property
    def size(self) -> int: ...

@final
class Session:
    @property
    def model(self) -> str: ...
    @property
    def segment_start(self) -> str: ...
    @property
    def created_at(self) -> str: ...

@final
class NewFact:
    def __new__(
        cls,
        *,
        fact_id: str,
        content: str,
        created_at: str,
        line: int,
        end_line: int,
        kind: str | None = None,
        confidence: float | None = None,
        attribute: str | None = None,
        day: str | None = None,
        start_day: str | None = None,
        end_day: str | None = None,
        entities: list[tuple[str, list[str]]] = ...,
    ) -> NewFact: ...

@final
class FactRow:
    @property
    def chunk_id(self) -> int: ...
    @property
    def fact_id(self) -> str: ...
    @property
    def kind(self) -> str | None: ...
    @property
    def confidence(self) -> float | None: ...
    @property
    def attribute(self) -> str | None: ...
    @property
    def day(self) -> str | None: ...
    @property
    def start_day(self) -> str | None: ...
    @property
    def end_day(self) -> str | None: ...
    @property
    def created_at(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def line(self) -> int: ...
    @property
    def end_line(self) -> int: ...
    @property
    def entities(self) -> list[str]: ...
    @property
    def superseded_by(self) -> str | None: ...

@final
class Store:
    def __new__(
        cls, path: str | PathLike[str], dim: int | None = None, threads: int = 2
    ) -> Store: ...
    @property
    def path(self) -> str: ...
    @property
    def dim(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def file_state(self, path: str) -> FileState | None: ...
    def list_files(self) -> list[FileState]: ...
    def replace_file(
        self,
        path: str,
        source: str,
        hash: str,
        mtime: float,
        size: int,
        created_at: str,
        chunks: list[NewChunk],
        vectors: bytes,
    ) -> list[int]: ...
    def remove_file(self, path: str) -> int: ...
    def add_chunks(
        self,
        source: str,
        chat_id: str | None,
        created_at: str,
        chunks: list[NewChunk],
        vectors: bytes,
    ) -> list[int]: ...
    def count_chunks(self) -> int: ...
    def search(
        self,
        query_vec: bytes | None,
        query_text: str,
        params: SearchParams | None = None,
        *,
        since: str | None = None,
        until: str | None = None,
        source: str | None = None,
        ids: list[int] | None = None,
    ) -> list[Hit]:
        """Hybrid search ranked by `params` (the defaults when None), filtered by time
        (ISO 8601) and source, or restricted to the chunks `ids` (facts); best first."""
    def vector_search(
        self,
        query_vec: bytes,
        k: int = 10,
        since: str | None = None,
        until: str | None = None,
        source: str | None = None,
    ) -> list[tuple[int, float]]: ...
    def vector_search_exact(self, query_vec: bytes, k: int = 10) -> list[tuple[int, float]]: ...
    def keyword_search(
        self,
        text: str,
        k: int = 10,
        since: str | None = None,
        until: str | None = None,
        source: str | None = None,
    ) -> list[tuple[int, float]]: ...
    def get_chunks(self, ids: list[int]) -> list[Hit]: ...
    def insert_messages(self, rows: list[Message]) -> int: ...
    def count_messages(self) -> int: ...
    def recent_messages(
        self, chat_id: str, since: str | None = None, limit: int = 20
    ) -> list[Message]: ...
    def messages_after(
        self, chat_id: str, after: int = 0, limit: int = 500
    ) -> list[tuple[int, Message]]: ...
    def chat_heads(self) -> list[tuple[str, int]]: ...
    def search_messages(self, query: str, limit: int = 20) -> list[Message]: ...
    def upsert_session(
        self, chat_id: str, model: str, segment_start: str, created_at: str
    ) -> None: ...
    def get_session(self, chat_id: str) -> Session | None: ...
    def add_summary(
        self,
        chat_id: str,
        from_id: str | None,
        to_id: str | None,
        file_path: str,
        created_at: str,
    ) -> None: ...
    def meta_get(self, key: str) -> str | None: ...
    def meta_set(self, key: str, value: str) -> None: ...
    def replace_docs(
        self,
        version: str,
        chunks: list[DocChunk],
        vectors: bytes,
        meta: tuple[str, str] | None = None,
    ) -> int:
        """Replaces the whole documentation index in one transaction (with `meta`)."""
    def count_docs(self) -> int: ...
    def search_docs(
        self, query_vec: bytes | None, query_text: str, params: SearchParams | None = None
    ) -> list[DocHit]:
        """Hybrid search of the docs ranked by `params` (the defaults and top_k 5 when
        None); best first."""
    def replace_facts(self, path: str, facts: list[NewFact], vectors: bytes) -> list[int]: ...
    def fact_ids(self, kinds: list[str] = ..., entities: list[list[str]] = ...) -> list[int]: ...
    def facts(self, ids: list[int] | None = None, path: str | None = None) -> list[FactRow]: ...
    def set_superseded(self, changes: list[tuple[int, str | None]]) -> int: ...
    def stats(self) -> list[tuple[str, int]]: ...
    def integrity_check(self) -> list[str]: ...

@final
class DocHit:
    @property
    def id(self) -> int: ...
    @property
    def file(self) -> str: ...
    @property
    def section(self) -> str | None: ...
    @property
    def content(self) -> str: ...
    @property
    def chunk(self) -> int: ...
    @property
    def start_line(self) -> int | None: ...
    @property
    def end_line(self) -> int | None: ...
    @property
    def version(self) -> str: ...
    @property
    def score(self) -> float: ...

def bundled_docs() -> list[tuple[str, str]]:
    """The docs compiled into this build: (file name, Markdown text), sorted by name."""

def pack_f32(values: list[float]) -> bytes: ...
def unpack_f32(data: bytes) -> list[float]: ...
def analyze(text: str, query: bool = False) -> list[str]: ...

# --- embeddings ----------------------------------------------------------

@final
class Embedder:
    def __new__(
        cls,
        model_path: str | PathLike[str],
        tokenizer_path: str | PathLike[str],
        ort_library: str | PathLike[str] | None = None,
        threads: int = 1,
        max_length: int = 256,
        max_batch_tokens: int = 0,
        windows: bool = True,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
    ) -> Embedder: ...
    @property
    def dim(self) -> int: ...
    def embed(self, text: str) -> list[float]: ...
    def embed_batch(self, texts: list[str]) -> bytes: ...
    def embed_queries(self, texts: list[str]) -> bytes: ...
    def count_tokens(self, text: str) -> int: ...

@final
class EmbeddingCache:
    def __new__(cls, path: str | PathLike[str]) -> EmbeddingCache: ...
    def get_many(self, model: str, hashes: list[str], dim: int) -> list[bytes | None]: ...
    def put_many(self, model: str, hashes: list[str], vectors: bytes, dim: int) -> None: ...
    def count(self, model: str | None = None) -> int: ...

def embed_cached(
    embedder: Embedder, cache: EmbeddingCache, model_id: str, texts: list[str]
) -> tuple[bytes, int]: ...
def text_hashes(texts: list[str]) -> list[str]: ...

@final
class CancelFlag:
    """Set from any thread; long Rust work checks it and raises Cancelled."""

    def __new__(cls) -> CancelFlag: ...
    def set(self) -> None: ...
    def is_set(self) -> bool: ...

def index_document(
    store: Store,
    embedder: Embedder,
    cache: EmbeddingCache,
    model_id: str,
    *,
    path: str,
    source: str,
    hash: str,
    mtime: float,
    size: int,
    created_at: str,
    text: str,
    chunk_size: int,
    chunk_overlap: int,
    batch_size: int,
    cancel: CancelFlag,
) -> tuple[int, int]:
    """Chunk, embed through the cache and store one document in one call without
    the GIL; returns (chunks stored, cache hits)."""

# --- reindex -------------------------------------------------------------

@final
class ReindexStats:
    @property
    def files(self) -> int: ...
    @property
    def lines(self) -> int: ...
    @property
    def messages(self) -> int: ...
    @property
    def duplicates(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    @property
    def sessions(self) -> int: ...
    @property
    def summaries(self) -> int: ...
    @property
    def skipped_samples(self) -> list[tuple[str, int, str]]: ...

def rebuild_messages(
    db_path: str | PathLike[str],
    data_dir: str | PathLike[str],
    dim: int = 384,
    default_model: str = ...,
    progress: bool = False,
) -> ReindexStats: ...

@final
class RecordLine:
    """One valid conversation-log line, normalised: an integer id as its text,
    structured content as its JSON text, `meta` as the object's JSON text."""

    @property
    def id(self) -> str: ...
    @property
    def ts(self) -> str: ...
    @property
    def ts_us(self) -> int: ...
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def kind(self) -> str | None: ...
    @property
    def meta(self) -> str | None: ...

def check_log_line(raw: bytes) -> RecordLine | str:
    """The line (with or without its newline) as a RecordLine, or why it is skipped."""

def parse_record_ts(ts: str) -> int | None:
    """A record timestamp (ISO 8601 with a time zone) as Unix microseconds."""

# --- backup --------------------------------------------------------------

KLAW_DB_SCHEMA_VERSION: int

def backup_database(src: str | PathLike[str], dst: str | PathLike[str]) -> int:
    """Copies the database at `src` into the new file `dst` as one consistent snapshot
    (SQLite's online backup, safe while the engine writes); returns the copy's schema
    version (`PRAGMA user_version`)."""

# --- vision --------------------------------------------------------------

@final
class FittedImage:
    """An image ready for a model: `data` within the limits, `mime` its type,
    `width` x `height` its pixels (0 x 0 for a WebP passed through), `resized` True
    when it was re-encoded."""

    @property
    def data(self) -> bytes: ...
    @property
    def mime(self) -> str: ...
    @property
    def width(self) -> int: ...
    @property
    def height(self) -> int: ...
    @property
    def resized(self) -> bool: ...

def fit_image(data: bytes, max_side: int, max_bytes: int) -> FittedImage:
    """`data` within `max_side` pixels (longest side) and `max_bytes` bytes: JPEG and PNG
    are shrunk and turned upright as needed, a small WebP passes; raises InvalidInput
    with the reason an image cannot be used."""

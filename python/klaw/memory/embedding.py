"""Embedding backends behind one interface: ONNX in the Rust core, or Ollama.

Both return float32 bytes (`len(texts) * dim` values), the form the store takes.
"""

from __future__ import annotations

import struct
from typing import Protocol

from klaw import _core
from klaw.errors import EmbeddingBackendError


class EmbeddingBackend(Protocol):
    model_id: str

    @property
    def dim(self) -> int: ...

    def embed_batch(self, texts: list[str]) -> bytes: ...

    def embed_query(self, text: str) -> bytes: ...

    def embed_cached(self, cache: _core.EmbeddingCache, texts: list[str]) -> tuple[bytes, int]: ...


class OnnxBackend:
    """An ONNX sentence encoder run by ONNX Runtime inside the Rust core."""

    def __init__(self, embedder: _core.Embedder, model_id: str) -> None:
        self.embedder = embedder
        self.model_id = model_id

    @property
    def dim(self) -> int:
        return self.embedder.dim

    def embed_batch(self, texts: list[str]) -> bytes:
        return self.embedder.embed_batch(texts)

    def embed_query(self, text: str) -> bytes:
        return self.embedder.embed_queries([text])

    def embed_cached(self, cache: _core.EmbeddingCache, texts: list[str]) -> tuple[bytes, int]:
        return _core.embed_cached(self.embedder, cache, self.model_id, texts)


class OllamaBackend:
    """Ollama's `/api/embed` (memory.embedding.type: ollama)."""

    def __init__(self, endpoint: str, model: str, timeout: float = 60.0) -> None:
        import httpx  # lazy: only this backend needs it

        self._client = httpx.Client(base_url=endpoint.rstrip("/"), timeout=timeout)
        self._model = model
        self.model_id = f"ollama:{model}"
        self._dim: int | None = None

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed_batch(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed_batch(self, texts: list[str]) -> bytes:
        import httpx

        if not texts:
            return b""
        try:
            r = self._client.post("/api/embed", json={"model": self._model, "input": texts})
            r.raise_for_status()
            vectors = r.json()["embeddings"]
        except (httpx.HTTPError, KeyError, ValueError, TypeError) as exc:
            raise EmbeddingBackendError(
                f"Ollama embedding failed ({exc}); is `ollama serve` running and "
                f"`ollama pull {self._model}` done?"
            ) from exc
        if len(vectors) != len(texts) or not vectors or not all(vectors):
            raise EmbeddingBackendError("Ollama returned the wrong number of embeddings")
        dim = len(vectors[0])
        if any(len(v) != dim for v in vectors):
            raise EmbeddingBackendError("Ollama returned embeddings of mixed sizes")
        self._dim = dim
        out = bytearray()
        for v in vectors:
            norm = sum(x * x for x in v) ** 0.5 or 1.0
            out += struct.pack(f"<{dim}f", *(x / norm for x in v))
        return bytes(out)

    def embed_query(self, text: str) -> bytes:
        return self.embed_batch([text])

    def embed_cached(self, cache: _core.EmbeddingCache, texts: list[str]) -> tuple[bytes, int]:
        dim = self.dim
        hashes = _core.text_hashes(texts)
        cached = cache.get_many(self.model_id, hashes, dim)
        missing = [i for i, v in enumerate(cached) if v is None]
        fresh = self.embed_batch([texts[i] for i in missing]) if missing else b""
        if missing:
            cache.put_many(self.model_id, [hashes[i] for i in missing], fresh, dim)
        size = dim * 4
        parts = list(cached)
        for j, i in enumerate(missing):
            parts[i] = fresh[j * size : (j + 1) * size]
        return b"".join(p or b"" for p in parts), len(texts) - len(missing)

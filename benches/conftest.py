"""Benchmark fixtures: the same 100k-chunk corpus in Klaw's store and in the
stack a Python user would assemble (onnxruntime + tokenizers, sqlite-vec and
FTS5 through sqlean.py), so every figure has its baseline in the same run."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import corpus
from klaw.config import EmbeddingConfig
from klaw.memory.models.registry import model_spec
from smoke import scaled

N = scaled(100_000, 2_000)
DIM = model_spec(EmbeddingConfig().model).dim  # the default model's vectors


@pytest.fixture(scope="session")
def data100k() -> tuple[list[str], np.ndarray]:
    return corpus.texts(N), corpus.vectors(N, DIM)


@pytest.fixture(scope="session")
def klaw_store(tmp_path_factory: pytest.TempPathFactory, data100k: Any) -> Iterator[Any]:
    from klaw import _core

    texts, vecs = data100k
    s = _core.Store(str(tmp_path_factory.mktemp("klaw") / "klaw.db"), dim=DIM, threads=2)
    step = 5000
    for i in range(0, N, step):
        chunks = [
            _core.NewChunk(content=t, chunk_hash=str(i + j))
            for j, t in enumerate(texts[i : i + step])
        ]
        s.add_chunks("bench", None, "2026-01-01T00:00:00Z", chunks, vecs[i : i + step].tobytes())
    yield s
    s.close()


@pytest.fixture(scope="session")
def baseline_db(data100k: Any) -> Iterator[Any]:
    """sqlite-vec (float) + FTS5 (unicode61) in one sqlean connection, in memory."""
    import sqlean
    import sqlite_vec

    texts, vecs = data100k
    c = sqlean.connect(":memory:")
    c.enable_load_extension(True)
    sqlite_vec.load(c)
    c.execute(
        "CREATE TABLE chunks(id INTEGER PRIMARY KEY, content TEXT, source TEXT, created_at TEXT)"
    )
    c.execute(f"CREATE VIRTUAL TABLE vec USING vec0(embedding float[{DIM}])")
    c.execute("CREATE VIRTUAL TABLE fts USING fts5(content, content=chunks, content_rowid=id)")
    c.executemany(
        "INSERT INTO chunks VALUES (?, ?, 'bench', '2026-01-01T00:00:00Z')",
        ((i + 1, t) for i, t in enumerate(texts)),
    )
    c.executemany(
        "INSERT INTO vec(rowid, embedding) VALUES (?, ?)",
        ((i + 1, vecs[i].tobytes()) for i in range(N)),
    )
    c.execute("INSERT INTO fts(fts) VALUES ('rebuild')")
    c.commit()
    yield c
    c.close()


@pytest.fixture(scope="session")
def backend() -> Any:
    from klaw.config import load_engine_config
    from klaw.memory.api import load_backend
    from klaw.paths import KlawPaths

    return load_backend(load_engine_config(Path("/nonexistent")), KlawPaths.from_env())


def python_embedder(model: str | None = None) -> Callable[[list[str]], np.ndarray]:
    """The Python way: onnxruntime + tokenizers + numpy mean pooling, on the same model
    files Klaw uses (with its prefix and window; longer texts truncated)."""
    import onnxruntime as ort
    import tokenizers

    from klaw.config import EmbeddingConfig
    from klaw.memory.models.registry import model_spec, resolve_model_files

    cfg = EmbeddingConfig() if model is None else EmbeddingConfig(model=model)
    spec = model_spec(cfg.model)
    files = resolve_model_files(cfg)
    tok = tokenizers.Tokenizer.from_file(str(files.tokenizer))
    tok.enable_truncation(spec.max_length)
    tok.enable_padding()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(files.model), opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}

    def embed(texts: list[str]) -> np.ndarray:
        enc = tok.encode_batch([spec.passage_prefix + t for t in texts])
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        out = sess.run(None, {k: v for k, v in feed.items() if k in names})[0]
        if out.ndim == 2:  # the model pools itself (USE)
            return out / np.linalg.norm(out, axis=1, keepdims=True)
        pooled = (out * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    return embed


@pytest.fixture(scope="session")
def py_embed() -> Callable[[list[str]], np.ndarray]:
    return python_embedder()


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A fresh event loop for a bench that drives asyncio code from its timed function."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()

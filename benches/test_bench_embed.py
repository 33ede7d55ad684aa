"""Embedding: per-call overhead for one sentence, and batch throughput, against
onnxruntime + tokenizers from Python on the same model file.

Bars (issue #2): one sentence no worse than onnxruntime from Python; batch
throughput within 10% of raw ONNX Runtime.
"""

from __future__ import annotations

from typing import Any

import pytest

import corpus

SENTENCE = "When is my dentist appointment next week?"
CHUNKS = [" ".join(t.split()[:300]) for t in corpus.texts(32, seed=5, words=300)]


@pytest.mark.benchmark(group="embed-one")
def test_embed_one_klaw(benchmark: Any, backend: Any) -> None:
    benchmark(lambda: backend.embed_batch([SENTENCE]))


@pytest.mark.benchmark(group="embed-one")
def test_embed_one_onnxruntime(benchmark: Any, py_embed: Any) -> None:
    benchmark(lambda: py_embed([SENTENCE]))


@pytest.mark.benchmark(group="embed-batch32x256")
def test_embed_batch_klaw(benchmark: Any, backend: Any) -> None:
    benchmark.pedantic(lambda: backend.embed_batch(CHUNKS), rounds=5)


@pytest.mark.benchmark(group="embed-batch32x256")
def test_embed_batch_onnxruntime(benchmark: Any, py_embed: Any) -> None:
    benchmark.pedantic(lambda: py_embed(CHUNKS), rounds=5)

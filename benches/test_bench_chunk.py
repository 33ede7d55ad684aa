"""Rust `chunk_markdown` against the pure-Python baseline (benches/pychunker.py)
on the same ~1 MB mixed English/Russian/Chinese Markdown document.

Run: pytest benches/test_bench_chunk.py --benchmark-group-by=group
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import pytest

from klaw import _core
from pychunker import chunk_markdown as py_chunk_markdown
from smoke import SMOKE, scaled

TARGET_BYTES = scaled(1_000_000, 50_000)
MIN_SPEEDUP = 20.0

EN = (
    "The agent keeps a long-term memory on the local disk. Every note is split into "
    "overlapping pieces and embedded, so it can be found again by meaning. Token budgets "
    "matter because providers charge per token and truncate silently! Is that a problem? "
    "Version 2.7.1 fixed 38 bugs; see https://example.org/docs for details."
).split(" ")
RU = (
    "Агент хранит долговременную память на локальном диске. Каждая заметка делится на "
    "перекрывающиеся фрагменты и превращается в вектор, чтобы её можно было найти по "
    "смыслу! Бюджет токенов важен; провайдеры молча обрезают лишнее. Почему так?"
).split(" ")
ZH = list(
    "智能体把长期记忆保存在本地磁盘上。每一条笔记都会被切分成相互重叠的小片段，"
    "这样以后就能按语义找到它！词元预算很重要；服务商按词元收费？"
)


def _sentence(rng: random.Random) -> str:
    lang = rng.choice((EN, EN, RU, ZH))
    n = rng.randint(6, 30)
    start = rng.randrange(len(lang))
    words = [lang[(start + i) % len(lang)] for i in range(n)]
    return ("" if lang is ZH else " ").join(words)


def build_document(seed: int = 7) -> str:
    """Deterministic mixed Markdown: headings, paragraphs, lists, code, tables."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    section = 0
    while size < TARGET_BYTES:
        section += 1
        block: list[str] = [f"{'#' * rng.randint(1, 3)} Section {section}: {_sentence(rng)[:40]}"]
        for _ in range(rng.randint(2, 6)):
            kind = rng.random()
            if kind < 0.5:
                block.append("\n".join(_sentence(rng) for _ in range(rng.randint(1, 5))))
            elif kind < 0.7:
                block.append(
                    "\n".join(
                        f"{rng.choice(('-', '*', '1.'))} {_sentence(rng)}"
                        + (f"\n  {_sentence(rng)}" if rng.random() < 0.3 else "")
                        for _ in range(rng.randint(2, 8))
                    )
                )
            elif kind < 0.85:
                lines = [
                    f"    value_{i} = compute({i}, {_sentence(rng)[:20]!r})" for i in range(30)
                ]
                block.append(
                    "```python\ndef f():\n" + "\n".join(lines[: rng.randint(3, 30)]) + "\n```"
                )
            elif kind < 0.95:
                rows = [f"| {_sentence(rng)[:30]} | {rng.randint(0, 999)} |" for _ in range(6)]
                block.append("| name | value |\n|------|-------|\n" + "\n".join(rows))
            else:
                # An oversize paragraph exercises the sentence fallback.
                block.append(" ".join(_sentence(rng) for _ in range(120)))
        text = "\n\n".join(block)
        parts.append(text)
        size += len(text.encode()) + 2
    return "\n\n".join(parts)


DOC = build_document()


def _best_of(fn: Callable[[], Any], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.mark.benchmark(group="chunk_markdown 1 MB")
def test_bench_rust(benchmark: Any) -> None:
    chunks = benchmark(_core.chunk_markdown, DOC)
    benchmark.extra_info["chunks"] = len(chunks)
    benchmark.extra_info["bytes"] = len(DOC.encode())


@pytest.mark.benchmark(group="chunk_markdown 1 MB")
def test_bench_python_baseline(benchmark: Any) -> None:
    chunks = benchmark.pedantic(py_chunk_markdown, args=(DOC,), rounds=2, iterations=1)
    benchmark.extra_info["chunks"] = len(chunks)


def test_same_chunks_and_speedup() -> None:
    ours = _core.chunk_markdown(DOC)
    theirs = py_chunk_markdown(DOC)
    assert abs(len(ours) - len(theirs)) <= 0.05 * len(theirs)
    rust_s = _best_of(lambda: _core.chunk_markdown(DOC), 5)
    py_s = _best_of(lambda: py_chunk_markdown(DOC), 1)
    ratio = py_s / rust_s
    print(
        f"\nchunk_markdown on {len(DOC.encode()) / 1e6:.2f} MB, {len(ours)} chunks: "
        f"rust {rust_s * 1e3:.1f} ms, python {py_s * 1e3:.0f} ms, {ratio:.0f}x"
    )
    if not SMOKE:
        assert ratio >= MIN_SPEEDUP

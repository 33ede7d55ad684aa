"""Markdown chunker (klaw._core.chunk_markdown): properties and named cases."""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klaw import _core

ROOT = Path(__file__).resolve().parents[2]


from pychunker_baseline import pychunker  # noqa: E402


def source_lines(text: str) -> list[str]:
    """Lines as the chunker numbers them: split on \\n, one trailing \\r dropped."""
    return [ln.removesuffix("\r") for ln in text.split("\n")]


@dataclass
class Located:
    chunk: _core.Chunk
    start: int  # offset in the normalised text
    end: int


def locate(text: str, chunks: list[_core.Chunk]) -> tuple[str, list[Located]]:
    """Finds each chunk in the normalised source and checks its line range."""
    lines = source_lines(text)
    norm = "\n".join(lines)
    starts = [0]
    for ln in lines[:-1]:
        starts.append(starts[-1] + len(ln) + 1)
    out: list[Located] = []
    for c in chunks:
        assert 1 <= c.start_line <= c.end_line <= len(lines)
        joined = "\n".join(lines[c.start_line - 1 : c.end_line])
        base = starts[c.start_line - 1]
        # The first occurrence that starts and ends after the previous chunk's.
        pos = joined.find(c.text)
        while (
            out
            and pos >= 0
            and (base + pos <= out[-1].start or base + pos + len(c.text) <= out[-1].end)
        ):
            pos = joined.find(c.text, pos + 1)
        assert pos >= 0, f"chunk text is not a slice of its lines {c.start_line}-{c.end_line}"
        if c.text != joined:
            # Intra-line piece: first and last characters sit on the named lines.
            assert bisect.bisect_right(starts, base + pos) == c.start_line
            assert bisect.bisect_right(starts, base + pos + len(c.text) - 1) == c.end_line
        out.append(Located(c, base + pos, base + pos + len(c.text)))
    return norm, out


WORDS = st.sampled_from(
    [
        "memory",
        "agent",
        "Raspberry",
        "internationalization",
        "42",
        "3.14",
        "e.g.",
        "hello,",
        "world!",
        "why?",
        "память",
        "агента",
        "фрагмент.",
        "你好",
        "世界。",
        "记忆！",
        "**bold**",
        "`code`",
        "é",
        "😀",
    ]
)


@st.composite
def markdown(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A document and the fenced blocks it contains (as normalised text).

    Words carry a running number so that every intra-line chunk occurs once in
    the source and can be located unambiguously.
    """
    counter = iter(range(1_000_000))

    def sentence(lo: int = 1, hi: int = 25) -> str:
        words = draw(st.lists(WORDS, min_size=lo, max_size=hi))
        return " ".join(f"{next(counter)}{w}" for w in words)

    lines: list[str] = []
    fences: list[str] = []
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["h", "p", "p", "code", "list", "table", "blank", "long"]))
        if kind == "h":
            lines.append("#" * draw(st.integers(1, 4)) + " " + sentence(1, 12))
        elif kind == "p":
            lines.extend(sentence() for _ in range(draw(st.integers(1, 4))))
        elif kind == "long":
            lines.append(sentence(100, 600))
        elif kind == "code":
            body = ["    " + sentence(0, 20) for _ in range(draw(st.integers(0, 8)))]
            block = ["```py", *body, "```"]
            fences.append("\n".join(block))
            lines.extend(block)
        elif kind == "list":
            for _ in range(draw(st.integers(1, 5))):
                lines.append("- " + sentence())
                if draw(st.booleans()):
                    lines.append("  " + sentence())
        elif kind == "table":
            lines.extend("| " + sentence(1, 10) + " | x |" for _ in range(draw(st.integers(1, 4))))
        lines.extend([""] * draw(st.integers(0, 2)))
    if draw(st.booleans()):
        lines.extend(["~~~", sentence()])  # unclosed fence to EOF
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    return newline.join(lines), fences


SIZES = st.integers(8, 300).flatmap(lambda s: st.tuples(st.just(s), st.integers(0, s - 1)))


@settings(max_examples=300, deadline=None)
@given(markdown(), SIZES)
def test_chunk_properties(doc: tuple[str, list[str]], sizes: tuple[int, int]) -> None:
    text, fences = doc
    size, overlap = sizes
    chunks = _core.chunk_markdown(text, size, overlap)
    norm, located = locate(text, chunks)

    # No text lost: every non-blank character is inside some chunk.
    covered = bytearray(len(norm))
    for loc in located:
        covered[loc.start : loc.end] = b"\x01" * (loc.end - loc.start)
    lost = [i for i, ch in enumerate(norm) if not covered[i] and not ch.isspace()]
    assert not lost, f"lost text at {lost[:5]}: {norm[lost[0] : lost[0] + 20]!r}"
    if not norm.strip():
        assert chunks == []

    for loc in located:
        assert loc.chunk.text.strip()
        assert loc.chunk.tokens == _core.estimate_tokens(loc.chunk.text)
        assert loc.chunk.tokens <= size

    # Order preserved; consecutive chunks share at most `overlap` tokens.
    for a, b in itertools.pairwise(located):
        assert a.chunk.start_line <= b.chunk.start_line
        assert a.start < b.start and a.end < b.end
        if b.start < a.end:
            assert _core.estimate_tokens(norm[b.start : a.end]) <= overlap

    # A fenced block that fits is never split.
    for fence in fences:
        if _core.estimate_tokens(fence) <= size:
            assert any(fence in c.text for c in chunks), fence


@settings(max_examples=200, deadline=None)
@given(markdown(), SIZES)
def test_same_chunks_as_python_baseline(doc: tuple[str, list[str]], sizes: tuple[int, int]) -> None:
    text, _ = doc
    ours = _core.chunk_markdown(text, *sizes)
    theirs = pychunker.chunk_markdown(text, *sizes)
    assert [(c.text, c.start_line, c.end_line, c.heading_path, c.tokens) for c in ours] == [
        (c.text, c.start_line, c.end_line, c.heading_path, c.tokens) for c in theirs
    ]


def test_empty_and_blank() -> None:
    assert _core.chunk_markdown("") == []
    assert _core.chunk_markdown(" \n\t\r\n\n") == []


def test_short_text_single_chunk() -> None:
    [chunk] = _core.chunk_markdown("# Notes\n\nBuy milk.\n")
    assert chunk.text == "# Notes\n\nBuy milk."
    assert (chunk.start_line, chunk.end_line) == (1, 3)
    assert chunk.heading_path == ["Notes"]
    assert chunk.tokens == _core.estimate_tokens(chunk.text)


def test_crlf_line_ranges_and_heading_path() -> None:
    text = "# A\r\n\r\npara one\r\nline two\r\n\r\n## B ##\r\n\r\n- x\r\n- y\r\n"
    got = [
        (c.text, c.start_line, c.end_line, c.heading_path)
        for c in _core.chunk_markdown(text, size=6, overlap=0)
    ]
    assert got == [
        ("# A", 1, 1, ["A"]),
        ("para one\nline two", 3, 4, ["A"]),
        ("## B ##", 6, 6, ["A", "B"]),
        ("- x\n- y", 8, 9, ["A", "B"]),
    ]


def test_code_block_kept_whole() -> None:
    code = "```python\n" + "\n".join(f"x{i} = {i}" for i in range(40)) + "\n```"
    text = "intro " * 150 + "\n\n" + code + "\n\n" + "outro " * 150
    chunks = _core.chunk_markdown(text, size=250, overlap=40)
    assert len(chunks) >= 3
    assert sum(code in c.text for c in chunks) >= 1
    assert all(c.text.count("```") in (0, 2) for c in chunks)


def test_oversize_code_block_split_by_lines() -> None:
    code = ["```"] + [f"call_{i}(argument, other)" for i in range(300)] + ["```"]
    chunks = _core.chunk_markdown("\n".join(code), size=100, overlap=0)
    assert len(chunks) > 5
    for c in chunks:
        assert c.tokens <= 100
        assert c.text == "\n".join(code[c.start_line - 1 : c.end_line])


def test_list_items_not_split() -> None:
    items = [f"- item {i} " + "word " * 10 + f"\n  continued {i} " + "more " * 8 for i in range(30)]
    chunks = _core.chunk_markdown("\n".join(items), size=80, overlap=20)
    assert len(chunks) > 3
    for c in chunks:
        assert c.text.startswith("- item")
        assert c.text.splitlines()[-1].startswith("  continued")


def test_overlap_repeats_whole_blocks() -> None:
    paras = [f"Paragraph {i} " + "alpha beta gamma. " * 8 for i in range(30)]
    text = "\n\n".join(paras)
    chunks = _core.chunk_markdown(text, size=120, overlap=40)
    lines = source_lines(text)
    for a, b in itertools.pairwise(chunks):
        assert a.start_line < b.start_line <= a.end_line
        shared = "\n".join(lines[b.start_line - 1 : a.end_line])
        assert a.text.endswith(shared) and b.text.startswith(shared)
        assert _core.estimate_tokens(shared) <= 40


def test_cjk_and_cyrillic_sentences() -> None:
    zh = "这是一个很长的中文句子，用来测试分块。" * 40
    chunks = _core.chunk_markdown(zh, size=60, overlap=0)
    assert len(chunks) > 5
    assert "".join(c.text for c in chunks) == zh
    assert all(c.text.endswith("。") and c.tokens <= 60 for c in chunks)

    ru = "Это длинное русское предложение для проверки! " * 40
    chunks = _core.chunk_markdown(ru, size=60, overlap=10)
    assert all(c.text.endswith("проверки!") and c.tokens <= 60 for c in chunks)


def test_giant_word_split_into_windows() -> None:
    word = "x" * 5000 + "яяя" * 500
    chunks = _core.chunk_markdown(word, size=50, overlap=0)
    assert "".join(c.text for c in chunks) == word
    assert all(c.tokens <= 50 for c in chunks)
    assert all((c.start_line, c.end_line) == (1, 1) for c in chunks)


def test_chunk_all_matches_single() -> None:
    texts = ["# a\n\none", "", "two\n\n" * 300]
    assert [[c.text for c in cs] for cs in _core.chunk_all(texts, size=50, overlap=5)] == [
        [c.text for c in _core.chunk_markdown(t, size=50, overlap=5)] for t in texts
    ]


@pytest.mark.parametrize(
    ("size", "overlap", "name"),
    [(0, 0, "size"), (-5, 0, "size"), (10, 10, "overlap"), (10, -1, "overlap")],
)
def test_bad_sizes(size: int, overlap: int, name: str) -> None:
    with pytest.raises(ValueError, match=f"^{name} must be"):
        _core.chunk_markdown("text", size=size, overlap=overlap)
    with pytest.raises(ValueError, match=f"^{name} must be"):
        _core.chunk_all(["text"], size=size, overlap=overlap)

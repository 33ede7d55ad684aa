"""Markdown-ish → Telegram HTML and message splitting, checked with the fake server's
HTML parser (the same rules sendMessage applies)."""

from __future__ import annotations

import html
import re

import pytest
from fake_telegram import HtmlError, parse_html
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klaw.gateway.channels.telegram.format import (
    MIN_LIMIT,
    TELEGRAM_LIMIT,
    _blocks,
    _Code,
    split_message,
    to_html,
    utf16_len,
    visible_text,
)

# ---------------------------------------------------------------------------- to_html


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("**bold** and __bold__", "<b>bold</b> and <b>bold</b>"),
        ("*it* and _it_", "<i>it</i> and <i>it</i>"),
        ("~~gone~~", "<s>gone</s>"),
        ("***both***", "<b><i>both</i></b>"),
        ("use `x < y` here", "use <code>x &lt; y</code> here"),
        ("``a ` b``", "<code>a ` b</code>"),
        ("a & b <i> c", "a &amp; b &lt;i&gt; c"),
        (
            "[site](https://example.com/?a=1&b=2)",
            '<a href="https://example.com/?a=1&amp;b=2">site</a>',
        ),
        ("[me](tg://user?id=1)", '<a href="tg://user?id=1">me</a>'),
        ("[x](javascript:alert(1))", "[x](javascript:alert(1))"),
        ("[x](file:///etc/passwd)", "[x](file:///etc/passwd)"),
        (
            "[wiki](https://en.wikipedia.org/wiki/A_(b))",
            '<a href="https://en.wikipedia.org/wiki/A_(b)">wiki</a>',
        ),
        ("# Title", "<b>Title</b>"),
        ("### Title ###", "<b>Title</b>"),
        ("## **Bold** title", "<b>Bold title</b>"),
        ("# The `api`", "<b>The </b><code>api</code>"),
        ("#hashtag", "#hashtag"),
        ("- one\n* two\n1. three", "- one\n* two\n1. three"),
        ("> quoted", "&gt; quoted"),
        ("snake_case_name and __init__.py", "snake_case_name and <b>init</b>.py"),
        ("2 * 3 * 4", "2 * 3 * 4"),
        ("***", "***"),
        ("**unclosed", "**unclosed"),
        ("**a *b** c*", "<b>a *b</b> c*"),
        ("\\*not italic\\*", "*not italic*"),
        ("**a `c` b**", "<b>a </b><code>c</code><b> b</b>"),
        ("**two\nlines**", "**two\nlines**"),
        (
            "```python\nif a < b:\n    pass\n```",
            '<pre><code class="language-python">if a &lt; b:\n    pass</code></pre>',
        ),
        ("```\nplain\n```", "<pre>plain</pre>"),
        ("~~~js\nx\n~~~", '<pre><code class="language-js">x</code></pre>'),
        ("```bad<lang>\nx\n```", "<pre>x</pre>"),
        ("```\n**not bold**\n```", "<pre>**not bold**</pre>"),
        (
            "```py\nunclosed\nstill code",
            '<pre><code class="language-py">unclosed\nstill code</code></pre>',
        ),
        ("  ```sh\n  ls -l\n  ```", '<pre><code class="language-sh">ls -l</code></pre>'),
        ("````\n```\n````", "<pre>```</pre>"),
        ("a\r\nb", "a\nb"),
    ],
)
def test_to_html(markdown: str, expected: str) -> None:
    assert to_html(markdown) == expected
    parse_html(to_html(markdown))  # and Telegram would take it


def test_to_html_never_nests_code_in_links() -> None:
    out = to_html("[see `cfg` now](https://x.org)")
    assert out == '<a href="https://x.org">see </a><code>cfg</code><a href="https://x.org"> now</a>'


# Markdown fragments and hostile bits, glued at random: the generator hits the corner
# cases (unbalanced markers, fences, links, escapes) far more often than plain text.
_PIECES = [
    "**", "*", "_", "__", "~~", "~", "`", "``", "```", "```python\n", "\n```\n", "~~~\n",
    "[", "]", "(", ")", "](", "[a](http://x.y/a_b)", "[t](tg://user?id=1)", "[j](javascript:x)",
    "# ", "## ", "\n", "\n\n", " ", "  ", "\t", "<", ">", "&", "&amp;", "&lt;", '"', "\\",
    "a", "word", "snake_case", "é", "😀", "ж", "- ", "> ", "<b>", "</i>", "\r\n",
]  # fmt: skip
markdownish = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=4)), max_size=60).map(
    "".join
)


def _is_subsequence(small: str, big: str) -> bool:
    it = iter(big)
    return all(ch in it for ch in small)


@given(markdownish)
@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
def test_to_html_is_always_accepted_and_only_drops_characters(text: str) -> None:
    out = to_html(text)
    try:
        visible, _ = parse_html(out)  # balanced, allowed tags, legal nesting
    except HtmlError as exc:  # pragma: no cover - the assertion message is the point
        raise AssertionError(f"{text!r} -> {out!r}: {exc}") from exc
    assert visible == visible_text(out)
    # nothing is added: what Telegram counts is never longer than the Markdown
    assert _is_subsequence(visible, text.replace("\r\n", "\n"))


plain = st.text(
    st.characters(exclude_characters="*_~`[\\#\r", exclude_categories=["Cs"]), max_size=200
)


@given(plain)
def test_text_without_markup_round_trips(text: str) -> None:
    out = to_html(text)
    assert out == html.escape(text, quote=False)
    assert html.unescape(out) == text
    assert parse_html(out)[0] == text


# ---------------------------------------------------------------------------- split_message


def _check_parts(parts: list[str], limit: int) -> None:
    for part in parts:
        assert part.strip()
        assert utf16_len(part) <= limit
        visible, _ = parse_html(to_html(part))
        assert utf16_len(visible) <= limit
        for block in _blocks(part):  # no part leaves a code block open
            assert not isinstance(block, _Code) or block.closed, part


@given(markdownish, st.integers(MIN_LIMIT, 300))
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_split_parts_always_fit_and_render(text: str, limit: int) -> None:
    _check_parts(split_message(text * 4, limit), limit)


@given(plain.filter(str.strip), st.integers(MIN_LIMIT, 300))
def test_split_keeps_all_text(text: str, limit: int) -> None:
    text = text * 5
    parts = split_message(text, limit)
    _check_parts(parts, limit)
    assert "".join("".join(p.split()) for p in parts) == "".join(text.split())


def test_short_text_is_one_part() -> None:
    assert split_message("hello\n\n") == ["hello"]
    assert split_message("  \n \n") == []
    with pytest.raises(ValueError, match="at least"):
        split_message("x", MIN_LIMIT - 1)


def test_split_prefers_paragraphs_then_lines_then_spaces() -> None:
    para = "word " * 30  # 150 characters
    text = "\n\n".join([para.strip()] * 4)
    parts = split_message(text, 400)
    assert parts == ["\n\n".join([para.strip()] * 2)] * 2

    lines = "\n".join(["l" * 50] * 20)  # one paragraph of 20 lines
    parts = split_message(lines, 200)
    assert all(p == "\n".join(["l" * 50] * 3) for p in parts[:-1])

    long_line = " ".join(["abcdefghi"] * 100)
    parts = split_message(long_line, 200)
    assert all(not p.startswith(" ") and not p.endswith(" ") for p in parts)
    assert " ".join(parts) == long_line


def test_split_counts_utf16_units() -> None:
    parts = split_message("😀" * 300, MIN_LIMIT)  # each emoji is two UTF-16 units
    # 63 emoji = 126 units: a cut inside a line keeps one unit spare for a fence escape
    assert all(utf16_len(p) == 126 for p in parts[:-1])
    assert "".join(parts) == "😀" * 300


def test_long_code_block_is_closed_and_reopened_with_its_language() -> None:
    body = [f"print({i})  # a line of code" for i in range(400)]
    text = "Intro\n\n```python\n" + "\n".join(body) + "\n```\n\nOutro"
    parts = split_message(text, 1000)
    _check_parts(parts, 1000)
    assert parts[0] == "Intro"
    assert parts[-1] == "Outro"
    code_parts = parts[1:-1]
    assert len(code_parts) > 1
    got: list[str] = []
    for part in code_parts:
        assert part.startswith("```python\n") and part.endswith("\n```")
        got.extend(part.split("\n")[1:-1])
        assert to_html(part).startswith('<pre><code class="language-python">')
    assert got == body


def test_a_cut_code_line_never_closes_the_fence() -> None:
    line = "x" * (MIN_LIMIT - 10) + "```"  # cut so that a piece is only backticks
    parts = split_message("```\n" + line + "\n" + line + "\n```", MIN_LIMIT)
    _check_parts(parts, MIN_LIMIT)
    code = "".join(visible_text(to_html(p)) for p in parts)
    assert code.replace("\n", "") == line * 2


def test_text_cut_mid_line_never_opens_a_fence() -> None:
    text = "a" * (MIN_LIMIT - 2) + " ```python " + "b" * 50 + "\n\n" + "tail " * 20
    parts = split_message(text, MIN_LIMIT)
    _check_parts(parts, MIN_LIMIT)
    assert not any("<pre>" in to_html(p) for p in parts)


def test_ten_thousand_characters_with_code() -> None:
    chunks = []
    for i in range(12):
        chunks.append(f"## Step {i}\n\nSome **explanation** of step {i}: " + "text " * 60)
        chunks.append(f"```rust\n// step {i}\n" + "\n".join(f"let x{j} = {j};" for j in range(40)))
        chunks[-1] += "\n```"
    text = "\n\n".join(chunks)
    assert len(text) > 10_000
    parts = split_message(text)
    assert len(parts) >= 3
    _check_parts(parts, TELEGRAM_LIMIT)
    # no part starts or ends inside a code block that was not closed or reopened
    fences = [re.findall(r"^```", p, re.M) for p in parts]
    assert all(len(f) % 2 == 0 for f in fences)

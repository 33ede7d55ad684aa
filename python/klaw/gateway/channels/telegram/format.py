"""Markdown-ish LLM output → Telegram HTML, and long replies → message-sized parts.

`to_html` turns what models write (fenced code, `code`, **bold**, *italic*, _italic_,
~~strike~~, [text](url), # headings) into HTML for ``parse_mode=HTML``. Only tags
Telegram accepts come out, always balanced, never crossing, never code nested inside
another entity (the Bot API forbids entities inside code and is ambiguous about code
inside bold, so the renderer closes the outer tags around inline code and reopens them).
Everything it does not understand stays as escaped text.

`split_message` cuts a reply into parts Telegram accepts. How long is "too long":
Telegram limits a message to 4096 characters *after entity parsing*, i.e. the visible
text. Two decisions make a part always fit:

* Count UTF-16 code units, the unit of Telegram's entity offsets. It is never smaller
  than the number of code points, so a part that fits in UTF-16 units fits whichever
  way the server counts.
* Measure the Markdown part, not its HTML. `to_html` only ever drops characters (markers,
  fences, heading hashes, link targets; ``&amp;`` is one visible character): the visible
  text of ``to_html(part)`` is a subsequence of ``part``. So the HTML fits, and so does
  the plain-text fallback, which sends the Markdown part itself.

Parts break at blank lines, else at line ends, else at spaces, else anywhere. A fenced
code block is never cut open: when one does not fit, each part gets a closed fence and
the next reopens it with the same language tag.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = [
    "MIN_LIMIT",
    "TELEGRAM_LIMIT",
    "split_message",
    "to_html",
    "utf16_len",
    "visible_text",
]

TELEGRAM_LIMIT = 4096
# Room for a reopened fence (indent + marker + language, twice) plus some text.
MIN_LIMIT = 128

_MAX_INDENT = 12  # fences are recognised indented (LLMs nest them in lists), within reason
_MAX_MARKER = 16
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<marker>`{3,}|~{3,})(?P<info>.*)$")
_LANG = re.compile(r"[A-Za-z0-9_+#.\-]{1,32}")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(?P<text>.*?)(?:[ \t]+#+)?[ \t]*$")
_LINK = re.compile(r"\[(?P<text>[^\[\]\n]+)\]\((?P<url>[^\s()]+(?:\([^\s()]*\)[^\s()]*)*)\)")
_LINK_SCHEMES = frozenset({"http", "https", "tg"})
_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_TAG = re.compile(r"<[^>]*>")


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units: what Telegram counts."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def visible_text(html_text: str) -> str:
    """The text Telegram shows for HTML produced by `to_html` (tags dropped, unescaped)."""
    return html.unescape(_TAG.sub("", html_text))


# --------------------------------------------------------------------------- blocks


@dataclass
class _Code:
    indent: str
    marker: str
    lang: str
    opening: str  # the original fence line
    body: list[str]
    closed: bool


@dataclass
class _Text:
    lines: list[str] = field(default_factory=list)


def _blocks(text: str) -> Iterator[_Text | _Code]:
    """Lines grouped into text runs and fenced code blocks (shared by both functions)."""
    lines = text.replace("\r\n", "\n").split("\n")
    current = _Text()
    i = 0
    while i < len(lines):
        m = _fence(lines[i])
        if m is None:
            current.lines.append(lines[i])
            i += 1
            continue
        if current.lines:
            yield current
            current = _Text()
        marker = m["marker"]
        words = m["info"].split()
        lang = words[0] if words and _LANG.fullmatch(words[0]) else ""
        closer = re.compile(rf"^[ \t]*{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not closer.match(lines[j]):
            body.append(lines[j])
            j += 1
        closed = j < len(lines)
        yield _Code(m["indent"], marker, lang, lines[i], body, closed)
        i = j + 1 if closed else j
    if current.lines:
        yield current


def _fence(line: str) -> re.Match[str] | None:
    """The opening fence of a code block, or None."""
    m = _FENCE.match(line)
    if (
        m is None
        or len(m["indent"]) > _MAX_INDENT
        or len(m["marker"]) > _MAX_MARKER
        # a backtick fence's info string has no backticks (```x``` is inline code)
        or (m["marker"][0] == "`" and "`" in m["info"])
    ):
        return None
    return m


def _dedent(line: str, indent: int) -> str:
    """Drops up to `indent` leading blanks, as CommonMark does inside an indented fence."""
    k = 0
    while k < indent and k < len(line) and line[k] in " \t":
        k += 1
    return line[k:]


# --------------------------------------------------------------------------- to_html


def to_html(markdown: str) -> str:
    """Markdown-ish text → HTML for Telegram's ``parse_mode=HTML`` (see module docstring)."""
    out: list[str] = []
    for block in _blocks(markdown):
        if isinstance(block, _Code):
            body = "\n".join(_dedent(line, len(block.indent)) for line in block.body)
            if not body:
                out.append("")
            elif block.lang:
                out.append(
                    f'<pre><code class="language-{_esc(block.lang)}">{_esc(body)}</code></pre>'
                )
            else:
                out.append(f"<pre>{_esc(body)}</pre>")
        else:
            out.extend(_line_html(line) for line in block.lines)
    return "\n".join(out)


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


def _line_html(line: str) -> str:
    w = _Writer()
    heading = _HEADING.match(line)
    if heading and heading["text"]:
        w.open("b", "<b>")  # a heading is a bold line; **x** inside adds nothing
        w.render(_match(_tokens(heading["text"])))
        w.close()
    else:
        w.render(_match(_tokens(line)))
    return w.result()


@dataclass
class _Tok:
    kind: str  # "text" | "code" | "link" | "delim"
    text: str = ""  # text, code content, link href, delimiter characters
    inner: list[_Tok] = field(default_factory=list)  # link text
    can_open: bool = False
    can_close: bool = False
    partner: int = -1  # index of the matching delimiter, -1 when literal
    opener: bool = False


def _tokens(line: str) -> list[_Tok]:
    toks: list[_Tok] = []
    buf: list[str] = []

    def flush() -> None:
        if buf:
            toks.append(_Tok("text", "".join(buf)))
            buf.clear()

    i, n = 0, len(line)
    while i < n:
        ch = line[i]
        if ch == "\\" and i + 1 < n and line[i + 1] in _ASCII_PUNCT:
            buf.append(line[i + 1])
            i += 2
            continue
        if ch == "`":
            run = _run(line, i)
            end = _find_backtick_run(line, i + run, run)
            if end < 0:
                buf.append("`" * run)
                i += run
                continue
            content = line[i + run : end]
            if len(content) > 2 and content[0] == content[-1] == " " and content.strip():
                content = content[1:-1]  # CommonMark: one padding space each side
            flush()
            toks.append(_Tok("code", content))
            i = end + run
            continue
        if ch == "[":
            m = _LINK.match(line, i)
            if m and _safe_url(m["url"]):
                flush()
                toks.append(_Tok("link", m["url"], inner=_match(_tokens(m["text"]))))
                i = m.end()
                continue
        if ch in "*_~":
            run = _run(line, i)
            prev = line[i - 1] if i > 0 else " "
            nxt = line[i + run] if i + run < n else " "
            can_open = not nxt.isspace()
            can_close = not prev.isspace()
            if ch == "_":  # snake_case and __init__ words are not emphasis
                can_open = can_open and not prev.isalnum()
                can_close = can_close and not nxt.isalnum()
            sizes: list[int]
            if ch == "~":
                sizes = [2] if run == 2 else []
            elif run <= 2:
                sizes = [run]
            elif run == 3:  # ***x***: <b><i>x</i></b>
                sizes = [1, 2] if can_close and not can_open else [2, 1]
            else:
                sizes = []
            if not sizes or not (can_open or can_close):
                buf.append(ch * run)
            else:
                flush()
                for size in sizes:
                    toks.append(_Tok("delim", ch * size, can_open=can_open, can_close=can_close))
            i += run
            continue
        buf.append(ch)
        i += 1
    flush()
    return toks


def _run(line: str, i: int) -> int:
    j = i
    while j < len(line) and line[j] == line[i]:
        j += 1
    return j - i


def _find_backtick_run(line: str, start: int, run: int) -> int:
    i = line.find("`", start)
    while i >= 0:
        length = _run(line, i)
        if length == run:
            return i
        i = line.find("`", i + length)
    return -1


def _safe_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    scheme = parts.scheme.lower()
    if scheme not in _LINK_SCHEMES:
        return False
    return scheme == "tg" or bool(parts.netloc)


def _match(toks: list[_Tok]) -> list[_Tok]:
    """Pairs delimiters like CommonMark: a closer takes the nearest opener of its kind and
    openers in between become literal, so pairs nest and never cross."""
    stack: list[int] = []
    for idx, tok in enumerate(toks):
        if tok.kind != "delim":
            continue
        if tok.can_close:
            for k in range(len(stack) - 1, -1, -1):
                if toks[stack[k]].text == tok.text:
                    opener = stack[k]
                    toks[opener].partner, toks[opener].opener = idx, True
                    tok.partner = opener
                    del stack[k:]
                    break
            if tok.partner >= 0:
                continue
        if tok.can_open:
            stack.append(idx)
    return toks


_TAGS = {"**": "b", "__": "b", "*": "i", "_": "i", "~~": "s"}


class _Writer:
    """Emits HTML with lazily opened tags: a tag is written just before the first text
    inside it, so no empty entities appear, and code can close every open tag and let
    the next text reopen them."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.logical: list[tuple[str, str]] = []  # (name, opening tag), outermost first
        self.physical = 0  # how many of `logical` are written; always a prefix

    def open(self, name: str, tag: str) -> None:
        self.logical.append((name, tag))

    def close(self) -> None:
        name, _ = self.logical.pop()
        if self.physical > len(self.logical):
            self.physical -= 1
            self.parts.append(f"</{name}>")

    def active(self, name: str) -> bool:
        return any(n == name for n, _ in self.logical)

    def text(self, text: str) -> None:
        if not text:
            return
        while self.physical < len(self.logical):
            self.parts.append(self.logical[self.physical][1])
            self.physical += 1
        self.parts.append(_esc(text))

    def code(self, text: str) -> None:
        while self.physical:
            self.physical -= 1
            self.parts.append(f"</{self.logical[self.physical][0]}>")
        self.parts.append(f"<code>{_esc(text)}</code>")

    def render(self, toks: list[_Tok]) -> None:
        skipped: set[int] = set()  # openers whose tag is already active (no <b><b>)
        for idx, tok in enumerate(toks):
            if tok.kind == "text":
                self.text(tok.text)
            elif tok.kind == "code":
                self.code(tok.text)
            elif tok.kind == "link":
                self.open("a", f'<a href="{html.escape(tok.text, quote=True)}">')
                self.render(tok.inner)
                self.close()
            elif tok.partner < 0:
                self.text(tok.text)
            elif tok.opener:
                name = _TAGS[tok.text]
                if self.active(name):
                    skipped.add(idx)
                else:
                    self.open(name, f"<{name}>")
            elif tok.partner not in skipped:
                self.close()

    def result(self) -> str:
        assert not self.logical, "unbalanced renderer state"
        return "".join(self.parts)


# --------------------------------------------------------------------------- split_message


def split_message(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Splits `text` into parts of at most `limit` UTF-16 units, each valid on its own.

    Whitespace-only input gives no parts. See the module docstring for why the
    Markdown length bounds what Telegram counts.
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT}, got {limit}")
    text = text.replace("\r\n", "\n")
    if not text.strip():
        return []
    blocks = list(_blocks(text))
    if utf16_len(text) <= limit and all(isinstance(b, _Text) or b.closed for b in blocks):
        return [text.strip("\n")]

    units: list[tuple[str, str, _Code | None]] = []  # (separator before, text, code)
    for block in blocks:
        sep = "\n" if units else ""
        if isinstance(block, _Code):
            lines = [block.opening, *block.body, block.indent + block.marker]
            units.append((sep, "\n".join(lines), block))
            continue
        pieces = re.split(r"(\n[ \t]*\n)", "\n".join(block.lines))
        units.append((sep, pieces[0], None))
        for k in range(1, len(pieces), 2):
            units.append((pieces[k], pieces[k + 1], None))

    parts: list[str] = []
    current = ""
    for sep, unit, code in units:
        candidate = current + sep + unit if current else unit
        if utf16_len(candidate) <= limit:
            current = candidate
            continue
        parts.append(current)
        current = ""
        if utf16_len(unit) <= limit:
            current = unit
        elif code is not None:
            parts.extend(_split_code(code, limit))
        else:
            # one unit of room for the backslash `_unfence` may add
            parts.extend(_unfence(p) for p in _split_text(unit, limit - 1, ("\n", " ")))
    parts.append(current)
    return [p.strip("\n") for p in parts if p.strip()]


def _unfence(piece: str) -> str:
    """A piece cut mid-line may start with ``` and open a code block that was never there:
    escape the first character (`to_html` drops the backslash)."""
    m = _fence(piece.split("\n", 1)[0])
    if m is None:
        return piece
    cut = len(m["indent"])
    return piece[:cut] + "\\" + piece[cut:]


def _split_text(text: str, limit: int, seps: tuple[str, ...]) -> list[str]:
    if utf16_len(text) <= limit:
        return [text]
    if not seps:
        return _hard_split(text, limit)
    sep, rest = seps[0], seps[1:]
    parts: list[str] = []
    current: str | None = None
    for piece in text.split(sep):
        candidate = piece if current is None else current + sep + piece
        if utf16_len(candidate) <= limit:
            current = candidate
            continue
        if current is not None:
            parts.append(current)
        current = None
        if utf16_len(piece) <= limit:
            current = piece
        else:
            parts.extend(_split_text(piece, limit, rest))
    if current is not None:
        parts.append(current)
    return parts


def _hard_split(text: str, limit: int) -> list[str]:
    parts: list[str] = []
    start = size = 0
    for i, ch in enumerate(text):
        width = 2 if ord(ch) > 0xFFFF else 1
        if size + width > limit:
            parts.append(text[start:i])
            start, size = i, 0
        size += width
    parts.append(text[start:])
    return parts


def _split_code(block: _Code, limit: int) -> list[str]:
    """A code block too long for one part: each part is a closed block of its own."""
    opening = f"{block.indent}{block.marker}{block.lang}"
    closing = f"{block.indent}{block.marker}"
    budget = limit - utf16_len(opening) - utf16_len(closing) - 2  # two newlines
    chunks: list[list[str]] = []  # lines of one part's body
    current: list[str] = []
    size = 0
    for line in block.body:
        width = utf16_len(line)
        if width > budget:
            if current:
                chunks.append(current)
                current, size = [], 0
            # each piece of a cut line is a chunk alone, so a piece that happens to read
            # as a closing fence can get a fence of the other character
            chunks.extend([piece] for piece in _hard_split(line, budget))
            continue
        added = width if not current else width + 1
        if current and size + added > budget:
            chunks.append(current)
            current, size = [], 0
            added = width
        current.append(line)
        size += added
    if current or not chunks:
        chunks.append(current)

    parts = []
    for chunk in chunks:
        marker = block.marker
        if len(chunk) == 1 and _closes(chunk[0], marker):
            marker = ("~" if marker[0] == "`" else "`") * 3
        parts.append(
            "\n".join([f"{block.indent}{marker}{block.lang}", *chunk, block.indent + marker])
        )
    return parts


def _closes(line: str, marker: str) -> bool:
    stripped = line.strip(" \t")
    return len(stripped) >= len(marker) and set(stripped) == {marker[0]}

"""Pure-Python baseline for the Rust chunker: the same token estimate, block
parsing, oversize fallback and packing rules as rust/klaw-core/src/{tokens,chunk}.rs,
so a benchmark compares implementations, not algorithms. Kept readable, not tuned.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

UNITS_PER_TOKEN = 1000
LATIN_PER_CHAR = 167
DIGIT_PER_CHAR = 334
CYRILLIC_BASE = 600
CYRILLIC_PER_CHAR = 420
CJK_PER_CHAR = 1100
PUNCT_PER_CHAR = 800
OTHER_PER_CHAR = 1000
RUN_FLOOR = 1000
BREAK_COST = 1000

SPACES = frozenset(
    " \t\n\r\x0b\x0c\x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
)
SPACE, LATIN, DIGIT, CYRILLIC, CJK, PUNCT, OTHER = range(7)


def class_of(c: str) -> int:
    o = ord(c)
    if o < 128:
        if "a" <= c <= "z" or "A" <= c <= "Z":
            return LATIN
        if "0" <= c <= "9":
            return DIGIT
        return SPACE if c in SPACES else PUNCT
    if c in SPACES:
        return SPACE
    if (
        o in (0xD7, 0xF7)
        or 0xA1 <= o <= 0xBF
        or 0x2010 <= o <= 0x205E
        or 0x3000 <= o <= 0x303F
        or 0xFF00 <= o <= 0xFFEF
    ):
        return PUNCT
    if 0xC0 <= o <= 0x24F or 0x1E00 <= o <= 0x1EFF:
        return LATIN
    if 0x400 <= o <= 0x52F:
        return CYRILLIC
    if (
        0x3040 <= o <= 0x30FF
        or 0x3400 <= o <= 0x4DBF
        or 0x4E00 <= o <= 0x9FFF
        or 0xAC00 <= o <= 0xD7AF
        or 0xF900 <= o <= 0xFAFF
        or 0x20000 <= o <= 0x2FFFF
    ):
        return CJK
    return OTHER


def run_cost(k: int, n: int, newline: bool) -> int:
    if k == SPACE:
        return 0 if n == 1 and not newline else BREAK_COST
    if k == LATIN:
        return max(LATIN_PER_CHAR * n, RUN_FLOOR)
    if k == DIGIT:
        return max(DIGIT_PER_CHAR * n, RUN_FLOOR)
    if k == CYRILLIC:
        return max(CYRILLIC_BASE + CYRILLIC_PER_CHAR * n, RUN_FLOOR)
    if k == CJK:
        return CJK_PER_CHAR * n
    if k == PUNCT:
        return PUNCT_PER_CHAR * n
    return OTHER_PER_CHAR * n


def estimate_units(text: str) -> int:
    total = 0
    cls = SPACE
    run = 0
    newline = False
    for c in text:
        k = class_of(c)
        if k == cls and run > 0 and k != CJK and k != OTHER:
            run += 1
        else:
            if run > 0:
                total += run_cost(cls, run, newline)
            cls = k
            run = 1
            newline = False
        if c == "\n":
            newline = True
    if run > 0:
        total += run_cost(cls, run, newline)
    return total


def units_to_tokens(units: int) -> int:
    return (units + UNITS_PER_TOKEN // 2) // UNITS_PER_TOKEN


def estimate_tokens(text: str) -> int:
    return units_to_tokens(estimate_units(text))


@dataclass(frozen=True)
class Chunk:
    text: str
    start_line: int
    end_line: int
    heading_path: list[str] = field(default_factory=list)
    tokens: int = 0


def is_blank(line: str) -> bool:
    return all(c in SPACES for c in line)


def trim_indent(line: str) -> str:
    return line.lstrip(" \t")


def indent(line: str) -> int:
    n = 0
    for c in line:
        if c == " ":
            n += 1
        elif c == "\t":
            n += 4
        else:
            break
    return n


def run_len(s: str, ch: str) -> int:
    n = 0
    while n < len(s) and s[n] == ch:
        n += 1
    return n


def fence_open(line: str) -> tuple[str, int] | None:
    s = trim_indent(line)
    if not s or s[0] not in "`~":
        return None
    n = run_len(s, s[0])
    return (s[0], n) if n >= 3 else None


def fence_close(line: str, ch: str, n: int) -> bool:
    s = trim_indent(line)
    run = run_len(s, ch)
    return run >= n and all(c in " \t" for c in s[run:])


def heading(line: str) -> tuple[int, str] | None:
    if indent(line) > 3:
        return None
    s = trim_indent(line)
    level = run_len(s, "#")
    if not 1 <= level <= 6:
        return None
    rest = s[level:]
    if rest and rest[0] not in " \t":
        return None
    title = rest.strip(" \t")
    without_closing = title.rstrip("#")
    if not without_closing:
        title = ""
    elif without_closing[-1] in " \t":
        title = without_closing.rstrip(" \t")
    return level, title


def list_marker(line: str) -> bool:
    s = trim_indent(line)
    if not s:
        return False
    if s[0] in "-*+":
        after = 1
    elif "0" <= s[0] <= "9":
        digits = 0
        while digits < len(s) and "0" <= s[digits] <= "9":
            digits += 1
        if digits > 9 or digits >= len(s) or s[digits] not in ".)":
            return False
        after = digits + 1
    else:
        return False
    return after >= len(s) or s[after] in " \t"


def table_row(line: str) -> bool:
    return trim_indent(line).startswith("|")


HEADING, FENCE, LIST_ITEM, TABLE_ROW, PARAGRAPH = range(5)


class Doc:
    def __init__(self, text: str) -> None:
        self.lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
        self.text = "\n".join(self.lines)
        self.starts = [0]
        for ln in self.lines[:-1]:
            self.starts.append(self.starts[-1] + len(ln) + 1)

    def line_start(self, i: int) -> int:
        return self.starts[i]

    def line_end(self, i: int) -> int:
        return self.starts[i] + len(self.lines[i])

    def line_of(self, pos: int) -> int:
        return bisect.bisect_right(self.starts, pos) - 1


def fence_end(doc: Doc, i: int, ch: str, n: int) -> int:
    for j in range(i + 1, len(doc.lines)):
        if fence_close(doc.lines[j], ch, n):
            return j + 1
    return len(doc.lines)


def list_item_end(doc: Doc, i: int) -> int:
    lines = doc.lines
    ind = indent(lines[i])
    j = i + 1
    while j < len(lines):
        ln = lines[j]
        if is_blank(ln):
            k = j
            while k < len(lines) and is_blank(lines[k]):
                k += 1
            if k < len(lines) and indent(lines[k]) > ind and not list_marker(lines[k]):
                j = k
                continue
            break
        if list_marker(ln):
            break
        fence = fence_open(ln)
        if indent(ln) <= ind and (fence is not None or heading(ln) is not None or table_row(ln)):
            break
        j = fence_end(doc, j, *fence) if fence is not None else j + 1
    return j


def parse_blocks(doc: Doc) -> tuple[list[tuple[int, int, int, int]], list[list[str]]]:
    """Blocks as (kind, first line, end line exclusive, path index)."""
    lines = doc.lines
    blocks: list[tuple[int, int, int, int]] = []
    paths: list[list[str]] = [[]]
    levels: list[int] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if is_blank(line):
            i += 1
            continue
        fence = fence_open(line)
        head = heading(line) if fence is None else None
        if fence is not None:
            kind, end = FENCE, fence_end(doc, i, *fence)
        elif head is not None:
            level, title = head
            while levels and levels[-1] >= level:
                levels.pop()
            path = [*paths[-1][: len(levels)], title]
            levels.append(level)
            paths.append(path)
            kind, end = HEADING, i + 1
        elif table_row(line):
            kind, end = TABLE_ROW, i + 1
        elif list_marker(line):
            kind, end = LIST_ITEM, list_item_end(doc, i)
        else:
            end = i + 1
            while end < len(lines):
                ln = lines[end]
                if (
                    is_blank(ln)
                    or fence_open(ln) is not None
                    or heading(ln) is not None
                    or table_row(ln)
                    or list_marker(ln)
                ):
                    break
                end += 1
            kind = PARAGRAPH
        blocks.append((kind, i, end, len(paths) - 1))
        i = end
    return blocks, paths


def trim_range(text: str, a: int, b: int) -> tuple[int, int] | None:
    while a < b and text[a] in SPACES:
        a += 1
    while b > a and text[b - 1] in SPACES:
        b -= 1
    return (a, b) if a < b else None


CLOSERS = frozenset("\"')]»”’」』）")
CJK_STOPS = "。！？；"


def sentences(text: str, a: int, b: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    start = a
    i = a
    while i < b:
        c = text[i]
        i += 1
        cjk = c in CJK_STOPS
        if not (cjk or c in ".!?;"):
            continue
        while i < b and text[i] in CLOSERS:
            i += 1
        if cjk or i >= b or text[i] in SPACES:
            r = trim_range(text, start, i)
            if r:
                out.append(r)
            start = i
    r = trim_range(text, start, b)
    if r:
        out.append(r)
    return out


def windows(text: str, a: int, b: int, limit: int, out: list[tuple[int, int]]) -> None:
    s = a
    while s < b:
        if estimate_units(text[s:b]) <= limit:
            e = b
        else:
            lo, hi = s + 1, b
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if estimate_units(text[s:mid]) <= limit:
                    lo = mid
                else:
                    hi = mid - 1
            e = lo
            for k in range(lo - 1, max(s + (lo - s) // 2, s + 1) - 1, -1):
                if text[k] in SPACES:
                    e = k
                    break
        r = trim_range(text, s, e)
        if r:
            out.append(r)
        s = e
        while s < b and text[s] in SPACES:
            s += 1


def split_block(doc: Doc, kind: int, first: int, end: int, limit: int) -> list[tuple[int, int]]:
    text = doc.text
    a, b = doc.line_start(first), doc.line_end(end - 1)
    pieces: list[tuple[int, int]] = []

    def by_lines(a: int, b: int) -> None:
        for ln in range(doc.line_of(a), doc.line_of(max(b - 1, a)) + 1):
            la = max(doc.line_start(ln), a)
            lb = min(doc.line_end(ln), b)
            if la >= lb or is_blank(text[la:lb]):
                continue
            if estimate_units(text[la:lb]) <= limit:
                pieces.append((la, lb))
            else:
                windows(text, la, lb, limit, pieces)

    if kind in (FENCE, TABLE_ROW):
        by_lines(a, b)
    else:
        for sa, sb in sentences(text, a, b):
            if estimate_units(text[sa:sb]) <= limit:
                pieces.append((sa, sb))
            else:
                by_lines(sa, sb)
    return pieces


def budget(tokens: int) -> int:
    """Largest unit count that still rounds to at most `tokens`; zero stays zero."""
    return tokens * UNITS_PER_TOKEN + UNITS_PER_TOKEN // 2 - 1 if tokens else 0


def chunk_markdown(text: str, size: int = 400, overlap: int = 80) -> list[Chunk]:
    if size <= 0:
        raise ValueError(f"size must be > 0, got {size}")
    if not 0 <= overlap < size:
        raise ValueError(f"overlap must be >= 0 and < size ({size}), got {overlap}")
    doc = Doc(text)
    src = doc.text
    blocks, paths = parse_blocks(doc)
    limit = budget(size)
    olimit = budget(overlap)

    # Segments: [a, b, units, gap, path, heading, block_end]
    segs: list[list[int]] = []

    def push(a: int, b: int, units: int, path: int, head: bool) -> None:
        gap = estimate_units(src[segs[-1][1] : a]) if segs else 0
        segs.append([a, b, units, gap, path, int(head), 0])

    for kind, first, end, path in blocks:
        a, b = doc.line_start(first), doc.line_end(end - 1)
        units = estimate_units(src[a:b])
        if units <= limit:
            push(a, b, units, path, kind == HEADING)
        else:
            for pa, pb in split_block(doc, kind, first, end, limit):
                push(pa, pb, estimate_units(src[pa:pb]), path, kind == HEADING)
        if segs:
            segs[-1][6] = 1

    cum = [0]
    for s in segs:
        cum.append(cum[-1] + s[3] + s[2])

    def span(i: int, j: int) -> int:
        return cum[j + 1] - cum[i] - segs[i][3]

    chunks: list[Chunk] = []
    n = len(segs)
    i = 0
    min_end = 0  # the next chunk must end at or after this segment
    while i < n:
        j = i
        while j + 1 < n and span(i, j + 1) <= limit:
            j += 1
        clean_end = segs[j][6] and not segs[j][5]
        if j + 1 < n and not clean_end:
            for c in range(j - 1, i - 1, -1):
                if c < min_end or span(i, c) * 2 < limit:
                    break
                if segs[c][6] and not segs[c][5]:
                    j = c
                    break
        body = src[segs[i][0] : segs[j][1]]
        chunks.append(
            Chunk(
                text=body,
                start_line=doc.line_of(segs[i][0]) + 1,
                end_line=doc.line_of(segs[j][1] - 1) + 1,
                heading_path=list(paths[segs[i][4]]),
                tokens=estimate_tokens(body),
            )
        )
        if j + 1 >= n:
            break
        min_end = j + 1
        k = j + 1
        while k - 1 > i and span(k - 1, j) <= olimit and span(k - 1, j + 1) <= limit:
            k -= 1
        i = k
    return chunks

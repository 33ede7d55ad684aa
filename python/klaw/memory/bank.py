"""The bank: entity pages and opinions in the workspace (`bank/`), Markdown the owner
can read and edit (issue 25 item 3, seed workspace-memory-v2).

    bank/entities/<slug>.md    one page per entity: a summary, aliases, the facts that
                               support it with their sources, superseded facts as history
    bank/opinions.md           statements with a confidence, when last updated, and the
                               ids of the facts for and against

Klaw writes only between its markers, ``<!-- klaw:begin NAME -->`` and
``<!-- klaw:end NAME -->``; everything outside them is the owner's and is written back
byte for byte. What is inside is parsed back too (an alias or a confidence changed by
hand is what the next run starts from), and a line in a block that does not parse is
kept where it was. A page whose markers are broken (a begin without its end) is read
as far as it can be and never rewritten: the log names the file.

Files are reached without following symlinks (`bank/` or `bank/entities` made a link
to a host folder is refused) and replaced atomically (temp file, rename): a run killed
midway leaves each file whole, old or new. Slugs are made from names by `slug_for`,
which leaves no path tricks (`..`, `/`, NUL, a leading dot).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from klaw.errors import InvalidInput
from klaw.fsutil import atomic_write_at
from klaw.memory.logfacts import name_key
from klaw.memory.retain import entity_key, entity_slug

__all__ = [
    "BANK_DIR",
    "ENTITIES_DIR",
    "OPINIONS_FILE",
    "BankError",
    "EntityPage",
    "Opinion",
    "PageFact",
    "read_opinions",
    "read_page",
    "read_pages",
    "render_opinions",
    "render_page",
    "slug_for",
    "write_opinions",
    "write_page",
]

log = logging.getLogger("klaw.memory")

BANK_DIR: Final = "bank"
ENTITIES_DIR: Final = "bank/entities"
OPINIONS_FILE: Final = "bank/opinions.md"
#: A bank file larger than this is not read (a page is a few KB; this is not a page).
MAX_FILE_BYTES: Final = 1 << 20
MAX_SLUG_CHARS: Final = 64
MAX_NAME_CHARS: Final = 200

_BEGIN = re.compile(r"^<!-- klaw:begin ([a-z]+) -->\s*$")
_END = re.compile(r"^<!-- klaw:end ([a-z]+) -->\s*$")
# - 2026-03-02 W: Moved to Lisbon. (memory/2026-03-02.md#L5, f:3fa2c1)
# - 2026-01-10 W: Lives in Berlin. (memory/2026-01-10.md#L4, f:9b1e; superseded 2026-03-02
#   by f:3fa2c1)   <- one line
_FACT = re.compile(
    r"^- (?P<day>\d{4}-\d{2}-\d{2}|\?) (?P<kind>[WBOS]): (?P<text>.*?)"
    r" \((?P<source>[^(),;]*), f:(?P<id>[\w-]+)"
    r"(?:; superseded (?P<until>\d{4}-\d{2}-\d{2}) by f:(?P<by>[\w-]+))?\)$"
)
_LINE = re.compile(r"[^\n]*\n|[^\n]+$")
_ALIASES_LINE = re.compile(r"^\s*(?:\*\*)?aliases(?:\*\*)?\s*:\s*(?P<list>.+)$", re.IGNORECASE)
_OPINION_KEYS: Final = ("id", "confidence", "updated", "entities", "supporting", "contradicting")


def _lines(text: str) -> list[str]:
    """The text's lines with their ends ("\n", "\r\n"), split at "\n" only: joined
    again they are the text byte for byte (str.splitlines also splits at \x0b, \u2028...)."""
    return _LINE.findall(text)


class BankError(InvalidInput):
    """A bank file Klaw will not rewrite (broken markers, a path leading out)."""


# ------------------------------------------------------------------------ slugs


def slug_for(name: str) -> str:
    """The file name stem of an entity's page: `entity_slug` (the name's letters and
    digits of any script, accents dropped, joined by '-'; never empty or a dot-name,
    no separator), and for a name that fills its 64 characters a hash of the whole
    name at the end, so two long names do not share a page."""
    slug = entity_slug(name)
    if len(slug) < MAX_SLUG_CHARS:
        return slug
    key = entity_key(name).encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(key, digest_size=4).hexdigest()
    return slug[: MAX_SLUG_CHARS - 9].rstrip("-_") + "-" + digest


# ------------------------------------------------------------------ the pages


@dataclass(frozen=True, slots=True)
class PageFact:
    """A fact as a page lists it; `until`/`by` set when a newer fact superseded it."""

    id: str
    day: str  # YYYY-MM-DD of its source, or "?"
    kind: str  # W, B, O or S
    text: str
    source: str  # memory/2026-03-02.md#L5
    until: str | None = None
    by: str | None = None

    def line(self) -> str:
        text = " ".join(self.text.split())
        tail = f"; superseded {self.until} by f:{self.by}" if self.until and self.by else ""
        return f"- {self.day} {self.kind}: {text} ({self.source}, f:{self.id}{tail})"


@dataclass(slots=True)
class EntityPage:
    """One entity's page. `raw` is the file as read ("" for a new page): owner text
    outside the blocks comes from it; `loose` keeps block lines that did not parse."""

    slug: str
    name: str
    summary: str = ""
    aliases: list[str] = field(default_factory=list)  # in Klaw's block (editable there)
    owner_aliases: list[str] = field(default_factory=list)  # an "Aliases:" line outside
    facts: list[PageFact] = field(default_factory=list)
    history: list[PageFact] = field(default_factory=list)
    raw: str = ""
    loose: dict[str, list[str]] = field(default_factory=dict)
    broken: bool = False  # markers did not pair up: never rewritten

    def names(self) -> list[str]:
        """The name and every alias, without repeats (first spelling kept)."""
        seen: dict[str, str] = {}
        for n in [self.name, *self.owner_aliases, *self.aliases]:
            key = name_key(n)
            if key and key not in seen:
                seen[key] = n.strip()
        return list(seen.values())

    def fact_ids(self) -> set[str]:
        return {f.id for f in self.facts} | {f.id for f in self.history}


def _blocks(text: str, shown: str) -> tuple[dict[str, list[str]], bool]:
    """Lines inside each marked block by name, and whether the markers pair up."""
    blocks: dict[str, list[str]] = {}
    current: str | None = None
    ok = True
    for end_line in _lines(text):
        line = end_line.rstrip("\r\n")
        if m := _BEGIN.match(line):
            if current is not None:
                ok = False
            current = m.group(1)
            blocks[current] = []
        elif m := _END.match(line):
            if current != m.group(1):
                ok = False
            current = None
        elif current is not None:
            blocks[current].append(line)
    if current is not None:
        ok = False
    if not ok:
        log.warning(
            "%s: its klaw:begin/klaw:end markers do not pair up; Klaw will not rewrite it "
            "until they do",
            shown,
        )
    return blocks, ok


def _outside(text: str) -> Iterator[str]:
    inside = False
    for end_line in _lines(text):
        line = end_line.rstrip("\r\n")
        if _BEGIN.match(line):
            inside = True
        elif _END.match(line):
            inside = False
        elif not inside:
            yield line


def _split_aliases(text: str) -> list[str]:
    return [a.strip().lstrip("@").strip() for a in re.split(r"[,;]", text) if a.strip(" @")]


def parse_page(slug: str, text: str, shown: str = "") -> EntityPage:
    """An entity page from its Markdown (see the module docstring)."""
    blocks, ok = _blocks(text, shown or f"{ENTITIES_DIR}/{slug}.md")
    name = ""
    owner_aliases: list[str] = []
    aliases: list[str] = []
    for line in _outside(text):
        if not name and line.startswith("# "):
            name = line[2:].strip()
        elif m := _ALIASES_LINE.match(line):  # the owner's own "Aliases: a, b" line
            owner_aliases.extend(_split_aliases(m.group("list")))
    loose: dict[str, list[str]] = {}
    for line in blocks.get("aliases", []):
        item = line.strip().removeprefix("- ").strip()
        if item:
            aliases.extend(_split_aliases(item))
    facts: dict[str, list[PageFact]] = {"facts": [], "history": []}
    for key, out in facts.items():
        for line in blocks.get(key, []):
            if m := _FACT.match(line.strip()):
                out.append(
                    PageFact(
                        id=m["id"],
                        day=m["day"],
                        kind=m["kind"],
                        text=m["text"],
                        source=m["source"].strip(),
                        until=m["until"],
                        by=m["by"],
                    )
                )
            elif line.strip():
                loose.setdefault(key, []).append(line)
    summary = "\n".join(blocks.get("summary", [])).strip()
    return EntityPage(
        slug=slug,
        name=name[:MAX_NAME_CHARS] or slug,
        summary=summary,
        aliases=aliases,
        owner_aliases=owner_aliases,
        facts=facts["facts"],
        history=facts["history"],
        raw=text,
        loose=loose,
        broken=not ok,
    )


def _unmarked(line: str) -> str:
    return "&lt;" + line[1:] if _BEGIN.match(line) or _END.match(line) else line


def _block_body(page: EntityPage, name: str) -> list[str] | None:
    if name == "summary":  # a marker in the text would end the block early: escaped
        return [_unmarked(x) for x in page.summary.strip().splitlines()]
    if name == "aliases":  # the owner's line already says its own
        theirs = len(replace(page, aliases=[]).names())
        return [f"- {a}" for a in page.names()[theirs:]]
    if name in ("facts", "history"):
        items = page.facts if name == "facts" else page.history
        return [*page.loose.get(name, []), *(f.line() for f in items)]
    return None


_SKELETON: Final = (
    ("summary", None),
    ("aliases", "## Aliases"),
    ("facts", "## Facts"),
    ("history", "## History"),
)


def render_page(page: EntityPage) -> str:
    """The page's Markdown: its old text with each block's inside replaced; blocks it
    lacks are added at the end under their headings (a new page gets all four)."""
    if page.broken:
        raise BankError(f"{ENTITIES_DIR}/{page.slug}.md: its klaw markers do not pair up")
    raw = page.raw if page.raw.strip() else f"# {_one_line(page.name)}\n"
    out, present = _replace_blocks(raw, lambda name: _block_body(page, name))
    for name, heading in _SKELETON:
        if name in present:
            continue
        body = _block_body(page, name) or []
        if name != "summary" and not body and page.raw.strip():
            continue  # an owner's page without facts does not get empty sections
        if heading:
            out.append(f"\n{heading}\n")
        out.append("\n" + "".join(f"{x}\n" for x in _block(name, body)))
    return "".join(out)


def _block(name: str, body: list[str]) -> list[str]:
    return [f"<!-- klaw:begin {name} -->", *body, f"<!-- klaw:end {name} -->"]


def _replace_blocks(
    raw: str, body: Callable[[str], list[str] | None]
) -> tuple[list[str], set[str]]:
    """`raw`'s lines (their ends kept) with the inside of each block replaced by
    `body(name)` (None: a block this writer does not own, kept as it is), and the
    names of the blocks it has."""
    if raw and not raw.endswith("\n"):
        raw += "\n"
    out: list[str] = []
    present: set[str] = set()
    inside = False
    for end_line in _lines(raw):
        line = end_line.rstrip("\r\n")
        if m := _BEGIN.match(line):
            new = body(m.group(1))
            inside = new is not None
            present.add(m.group(1))
            out.append(end_line)
            out.extend(f"{x}\n" for x in new or ())
        elif _END.match(line):
            inside = False
            out.append(end_line)
        elif not inside:
            out.append(end_line)
    return out, present


def _one_line(text: str) -> str:
    return " ".join(text.split())[:MAX_NAME_CHARS]


# ------------------------------------------------------------------- opinions


@dataclass(frozen=True, slots=True)
class Opinion:
    """A belief with how sure Klaw is (`confidence` in 0..1) and its evidence."""

    id: str
    statement: str
    confidence: float
    updated: str  # YYYY-MM-DD
    entities: tuple[str, ...] = ()
    supporting: tuple[str, ...] = ()
    contradicting: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        return [
            f"### {_one_line(self.statement)}",
            f"- id: {self.id}",
            f"- confidence: {self.confidence:.2f}",
            f"- updated: {self.updated}",
            f"- entities: {', '.join(self.entities)}",
            f"- supporting: {', '.join('f:' + x for x in self.supporting)}",
            f"- contradicting: {', '.join('f:' + x for x in self.contradicting)}",
            "",
        ]


def _ids(value: str) -> tuple[str, ...]:
    return tuple(x.strip().removeprefix("f:") for x in value.split(",") if x.strip())


def parse_opinions(text: str, shown: str = OPINIONS_FILE) -> tuple[list[Opinion], bool]:
    """The opinions of the `opinions` block, and whether the file's markers pair up.
    A confidence that is not a number in 0..1 is clamped or, unreadable, logged and
    read as 0.5."""
    blocks, ok = _blocks(text, shown)
    found: list[Opinion] = []
    current: dict[str, str] | None = None

    def flush() -> None:
        if current is None:
            return
        raw_c = current.get("confidence", "0.5")
        try:
            c = min(1.0, max(0.0, float(raw_c)))
        except ValueError:
            log.warning(
                "%s: opinion %r: confidence %r is not a number; read as 0.5",
                shown,
                current.get("statement"),
                raw_c,
            )
            c = 0.5
        statement = current.get("statement", "")
        oid = (
            current.get("id")
            or "o-" + hashlib.blake2b(statement.casefold().encode(), digest_size=4).hexdigest()
        )
        found.append(
            Opinion(
                id=oid,
                statement=statement,
                confidence=c,
                updated=current.get("updated", ""),
                entities=tuple(
                    x.strip().lstrip("@")
                    for x in current.get("entities", "").split(",")
                    if x.strip()
                ),
                supporting=_ids(current.get("supporting", "")),
                contradicting=_ids(current.get("contradicting", "")),
            )
        )

    for line in blocks.get("opinions", []):
        if line.startswith("### "):
            flush()
            current = {"statement": line[4:].strip()}
        elif current is not None and (m := re.match(r"^- (\w+):\s*(.*)$", line.strip())):
            if m.group(1) in _OPINION_KEYS:
                current[m.group(1)] = m.group(2).strip()
    flush()
    return [o for o in found if o.statement], ok


def render_opinions(opinions: list[Opinion], raw: str = "") -> str:
    """bank/opinions.md with its `opinions` block replaced (the rest kept)."""
    lines = [line for o in opinions for line in o.lines()]
    if not raw.strip():
        raw = "# Opinions\n"
    out, present = _replace_blocks(raw, lambda name: lines if name == "opinions" else None)
    if "opinions" not in present:
        out.append("\n" + "".join(f"{x}\n" for x in _block("opinions", lines)))
    return "".join(out)


# ------------------------------------------------------------ files, confined

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_dir(workspace: Path, rel: str, *, create: bool) -> int | None:
    """A descriptor of workspace/rel reached without following a symlink below the
    workspace; None when absent (and not `create`). BankError for a link or a file."""
    try:
        fd = os.open(os.path.realpath(workspace), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            return None  # no workspace yet: no bank
        raise
    try:
        for part in rel.split("/"):
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    return None
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except (NotADirectoryError, OSError) as exc:
                raise BankError(
                    f"{rel}: {part!r} is a symlink or not a folder ({exc.strerror}); the bank "
                    "is kept inside the workspace: make it a plain folder"
                ) from None
            os.close(fd)
            fd = nfd
        out, fd = fd, -1
        return out
    finally:
        if fd >= 0:
            os.close(fd)


def _read_at(dir_fd: int, name: str, shown: str) -> str | None:
    """The text of a regular file in the directory, None when absent or refused."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("%s not read: %s (a symlink is not followed in the bank)", shown, exc.strerror)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            log.warning("%s not read: not a regular file", shown)
            return None
        if st.st_size > MAX_FILE_BYTES:
            log.warning("%s not read: %d bytes, over %d", shown, st.st_size, MAX_FILE_BYTES)
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def _check_slug(slug: str) -> str:
    if slug_for(slug) != slug:
        raise BankError(f"{slug!r} is not a page slug (make it with slug_for)")
    return slug


def read_page(workspace: Path, slug: str) -> EntityPage | None:
    """The page `bank/entities/<slug>.md`, None when there is none."""
    dfd = _open_dir(workspace, ENTITIES_DIR, create=False)
    if dfd is None:
        return None
    try:
        shown = f"{ENTITIES_DIR}/{_check_slug(slug)}.md"
        text = _read_at(dfd, f"{slug}.md", shown)
    finally:
        os.close(dfd)
    return None if text is None else parse_page(slug, text, shown)


#: A page file's stat, as `read_pages` keeps it: (mtime, ctime, size, inode).
Stamp = tuple[int, int, int, int]


def read_pages(
    workspace: Path, cache: dict[str, tuple[Stamp, EntityPage]] | None = None
) -> dict[str, EntityPage]:
    """Every page of `bank/entities/` by slug. A file whose name is not a slug (the
    owner named it `Peter.md`) is read too, under its stem: hand-made pages count.
    With `cache` (kept by the caller between calls), a page whose stat is unchanged
    is not read again."""
    try:
        dfd = _open_dir(workspace, ENTITIES_DIR, create=False)
    except BankError as exc:
        log.warning("%s", exc)
        return {}
    if dfd is None:
        return {}
    pages: dict[str, EntityPage] = {}
    seen: set[str] = set()
    try:
        for name in sorted(os.listdir(dfd)):
            if not name.endswith(".md") or name.startswith("."):
                continue
            stem = name[:-3]
            if cache is not None:
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    continue
                stamp = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
                seen.add(name)
                hit = cache.get(name)
                if hit is not None and hit[0] == stamp:
                    pages[stem] = hit[1]
                    continue
            shown = f"{ENTITIES_DIR}/{name}"
            text = _read_at(dfd, name, shown)
            if text is not None:
                pages[stem] = parse_page(stem, text, shown)
                if cache is not None:
                    cache[name] = (stamp, pages[stem])
    finally:
        os.close(dfd)
    if cache is not None:
        for gone in set(cache) - seen:
            del cache[gone]
    return pages


def write_page(workspace: Path, page: EntityPage) -> Path:
    """Writes the page atomically (see `render_page`); returns its path. BankError for
    a page with broken markers or a bank that leads out of the workspace."""
    text = render_page(page)
    name = f"{page.slug}.md"
    if "/" in name or name.startswith(".") or "\0" in name:
        raise BankError(f"{page.slug!r} cannot name a page")
    dfd = _open_dir(workspace, ENTITIES_DIR, create=True)
    assert dfd is not None
    try:
        atomic_write_at(dfd, name, text, mode=0o644)
    finally:
        os.close(dfd)
    return workspace / ENTITIES_DIR / name


def read_opinions(workspace: Path) -> tuple[list[Opinion], str, bool]:
    """(opinions, the file's text, markers pair up) of bank/opinions.md."""
    dfd = _open_dir(workspace, BANK_DIR, create=False)
    if dfd is None:
        return [], "", True
    try:
        text = _read_at(dfd, "opinions.md", OPINIONS_FILE) or ""
    finally:
        os.close(dfd)
    opinions, ok = parse_opinions(text)
    return opinions, text, ok


def write_opinions(workspace: Path, opinions: list[Opinion], raw: str) -> Path:
    dfd = _open_dir(workspace, BANK_DIR, create=True)
    assert dfd is not None
    try:
        atomic_write_at(dfd, "opinions.md", render_opinions(opinions, raw), mode=0o644)
    finally:
        os.close(dfd)
    return workspace / OPINIONS_FILE


def new_page(name: str) -> EntityPage:
    """An empty page for `name` (its slug from `slug_for`)."""
    clean = _one_line(name.lstrip("@"))
    return EntityPage(slug=slug_for(clean), name=clean)


def with_fact(page: EntityPage, fact: PageFact) -> EntityPage:
    """The page with `fact` listed (once: a fact already listed or in its history is
    left as it is)."""
    if fact.id in page.fact_ids():
        return page
    return replace(page, facts=[*page.facts, fact])

"""Retained facts: the `## Retain` bullets of the daily logs (`memory/YYYY-MM-DD.md`).

The format (docs/memory.md, "Retained facts"; seed: workspace-memory-v2)::

    ## Retain
    - W @Peter: Currently in Marrakech (2025-11-27..2025-12-01) for Andy's birthday.
    - B @warelay: I fixed the Baileys WS crash by wrapping the handlers in try/catch.
    - O(c=0.95) @Peter: Prefers concise replies on WhatsApp.
    - W(a=home) @Anna: Moved to Lisbon.
    - S: We planned the trip with @"Anna Schmidt" and @Жоау.

- The type prefix: `W` world, `B` experience, `O` opinion, `S` observation/summary.
  Options in parentheses after it: `c=0.0..1.0` the confidence (opinions), `a=word`
  the attribute the fact states (what a later fact about the same entity replaces).
- Entities: `@Name` anywhere in the bullet (letters, digits, `_ - . '` inside it), or
  `@"Two Words"` for a name with spaces; `anna@example.com` is no mention.
- Time: an ISO date or range the bullet names (`2025-11-27`, `2025-11-27..2025-12-01`,
  `2025-11-27 – 2025-12-01`), else a time phrase (`yesterday`, `в марте`, `上周`)
  read from the log's day, else the log's day itself.

Parsing is tolerant: a bullet without a valid prefix is still a `Fact` (kind None,
indexed as plain text) and a problem (bad confidence, too many entities, too long) is
named in `Fact.problem` instead of dropping the bullet. Owner text is never rewritten:
`append_retain` only appends (one O_APPEND write), under a `## Retain` heading of its
own when the file's last section is another.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Final

__all__ = [
    "KINDS",
    "MAX_ENTITIES",
    "MAX_FACT_CHARS",
    "Fact",
    "RetainRefused",
    "append_retain",
    "bullet_text",
    "entity_key",
    "entity_slug",
    "fact_id",
    "log_day",
    "parse_bullet",
    "parse_retain",
]

log = logging.getLogger("klaw.memory")

#: Type prefix -> kind.
KINDS: Final = {"W": "world", "B": "experience", "O": "opinion", "S": "observation"}
#: A fact's content is cut here (the file keeps it whole; its chunks index all of it).
MAX_FACT_CHARS: Final = 2000
#: Entities kept per fact; more are a problem named on the fact, not 10,000 index rows.
MAX_ENTITIES: Final = 16
#: An entity name is cut here (a quoted name could otherwise be a paragraph).
MAX_ENTITY_CHARS: Final = 80
#: Bullets read from one file; a file with more is someone's data dump, not notes.
MAX_FACTS_PER_FILE: Final = 5000

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_RETAIN = re.compile(r"^retain\b", re.I)
_BULLET = re.compile(r"^([-*+])\s+(.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_PREFIX = re.compile(r"^([WBOS])(?:\(([^)\n]{0,200})\))?(?=[\s:@]|$)\s*:?\s*")
_OPTION = re.compile(r"^\s*([a-z]+)\s*=\s*(.*?)\s*$", re.I)
_ATTRIBUTE = re.compile(r"^[\w-]{1,40}$")
# `@Name` after a start, space or punctuation (not after a letter: no e-mail), or
# `@"Two Words"` (straight or curly quotes).
_MENTION = re.compile(
    r"""(?<![\w@])@(?:["“]([^"”\n]{1,200})["”]|(\w(?:[\w'.\-]*\w)?))""",
)
_ISO_RANGE = re.compile(
    r"(?<!\d)(\d{4}-\d{2}-\d{2})(?:\s*(?:\.\.|–|—|-|to|until|bis|по|до|至|到)\s*(\d{4}-\d{2}-\d{2}))?(?!\d)"
)
_DAY = re.compile(r"(\d{4}-\d{2}-\d{2})")


class RetainRefused(OSError):
    """The daily log cannot be appended to (it leads outside the workspace, or is not
    a regular file); nothing was written."""


@dataclass(frozen=True, slots=True)
class Fact:
    """One retain bullet.

    `id` is stable across re-reads and re-extraction: a hash of the log's day (its
    path when the name holds none) and the bullet's normalised text, so the same
    bullet written twice, or the log moved under `memory/archive/`, keeps its id.
    """

    id: str
    kind: str | None  # KINDS' values; None: no valid prefix, indexed as plain text
    entities: tuple[str, ...]
    confidence: float | None
    attribute: str | None
    day: str | None  # the log's day (YYYY-MM-DD) from its name
    start: str | None  # the first day the fact names (else `day`)
    end: str | None  # the last day it names (inclusive; else `start`)
    content: str  # the bullet without its type prefix
    source: str  # the log's label, `memory/2026-02-24.md`
    line: int  # 1-based line of the bullet
    end_line: int  # its last line (continuation lines included)
    problem: str | None = None  # what could not be read, said once per bullet

    @property
    def citation(self) -> str:
        if self.end_line != self.line:
            return f"{self.source}#L{self.line}-L{self.end_line}"
        return f"{self.source}#L{self.line}"

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "kind": self.kind,
            "entities": list(self.entities),
            "confidence": self.confidence,
            "attribute": self.attribute,
            "day": self.day,
            "start": self.start,
            "end": self.end,
            "content": self.content,
            "citation": self.citation,
            "problem": self.problem,
        }


def log_day(path: str | Path) -> str | None:
    """The day a daily log's name gives (`memory/2026-02-24.md` -> `2026-02-24`)."""
    m = _DAY.search(Path(path).name)
    if m is None:
        return None
    try:
        return date.fromisoformat(m.group(1)).isoformat()
    except ValueError:
        return None


def _normal(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split()).casefold()


def fact_id(day_or_source: str, text: str) -> str:
    """The id of a bullet `text` of the log of `day_or_source`."""
    raw = f"{day_or_source}\n{_normal(text)}".encode()
    return hashlib.blake2b(raw, digest_size=10).hexdigest()


def entity_key(name: str) -> str:
    """A name compared loosely: NFKC, case folded, accents dropped, `_ -` as spaces
    (`João` = `joao`, `The-Castle` = `the castle`). Inflections are matched later by
    the keyword analyser (klaw.memory.facts)."""
    folded = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", name).casefold())
    bare = "".join(c for c in folded if not unicodedata.combining(c))
    return " ".join(re.sub(r"[_\-.'’]+", " ", bare).split())


def entity_slug(name: str) -> str:
    """A file name for an entity (`bank/entities/<slug>.md`): letters and digits of
    any script joined by `-`; never empty, never `.`/`..`, no path separator."""
    key = entity_key(name)
    slug = "-".join(re.findall(r"\w+", key))[:64].strip("-_")
    if not slug:
        slug = "entity-" + hashlib.blake2b(name.encode(), digest_size=4).hexdigest()
    return slug


def _mentions(text: str) -> list[str]:
    names: list[str] = []
    seen: set[str] = set()
    for m in _MENTION.finditer(text):
        name = " ".join((m.group(1) or m.group(2) or "").split())[:MAX_ENTITY_CHARS].strip()
        key = entity_key(name)
        if not key or key in seen:
            continue
        seen.add(key)
        names.append(name)
    return names


def _options(raw: str | None) -> tuple[float | None, str | None, list[str]]:
    """(confidence, attribute, problems) of a prefix's `(c=0.9, a=home)`."""
    if raw is None:
        return None, None, []
    confidence: float | None = None
    attribute: str | None = None
    problems: list[str] = []
    for part in re.split(r"[,;]", raw):
        if not part.strip():
            continue
        m = _OPTION.match(part)
        key, value = (m.group(1).lower(), m.group(2)) if m else ("", part.strip())
        if key == "c":
            try:
                c = float(value)
            except ValueError:
                c = float("nan")
            if not 0.0 <= c <= 1.0:  # NaN fails too
                problems.append(f"confidence {value[:20]!r} is not a number from 0 to 1")
            else:
                confidence = c
        elif key == "a" and _ATTRIBUTE.match(value):
            attribute = value.casefold()
        else:
            problems.append(f"unknown option {part.strip()[:30]!r} (use c=0.0..1.0 or a=word)")
    return confidence, attribute, problems


def _named_time(content: str, day: str | None) -> tuple[str | None, str | None]:
    """The days the bullet names: an ISO date or range, else a time phrase read from
    the log's day; (None, None) when it names none."""
    m = _ISO_RANGE.search(content)
    if m is not None:
        try:
            first = date.fromisoformat(m.group(1))
            last = date.fromisoformat(m.group(2)) if m.group(2) else first
        except ValueError:
            return None, None
        if last < first:
            first, last = last, first
        return first.isoformat(), last.isoformat()
    if day is None:
        return None, None
    from klaw.memory.timewords import find_time_range  # its rules compile on import

    noon = datetime.combine(date.fromisoformat(day), time(12), UTC)
    found = find_time_range(content, noon)
    if found is None:
        return None, None
    last = (found.until - timedelta(seconds=1)).date()
    return found.since.date().isoformat(), min(last, noon.date()).isoformat()


def parse_bullet(text: str, *, source: str, line: int, end_line: int | None = None) -> Fact:
    """One bullet's text (without its `- ` marker) as a `Fact`; never raises."""
    day = log_day(source)
    one = " ".join(text.split())
    problems: list[str] = []
    if len(one) > MAX_FACT_CHARS:
        problems.append(f"{len(one)} characters: cut at {MAX_FACT_CHARS}")
        one = one[:MAX_FACT_CHARS]
    kind: str | None = None
    confidence: float | None = None
    attribute: str | None = None
    content = one
    m = _PREFIX.match(one)
    if m is not None:
        kind = KINDS[m.group(1)]
        confidence, attribute, more = _options(m.group(2))
        problems.extend(more)
        content = one[m.end() :].strip()
    entities = _mentions(one)
    if len(entities) > MAX_ENTITIES:
        problems.append(f"{len(entities)} entities: the first {MAX_ENTITIES} kept")
        entities = entities[:MAX_ENTITIES]
    start, end = _named_time(content, day)
    return Fact(
        id=fact_id(day or source, one),
        kind=kind,
        entities=tuple(entities),
        confidence=confidence,
        attribute=attribute,
        day=day,
        start=start or day,
        end=end or start or day,
        content=content or one,
        source=source,
        line=line,
        end_line=end_line or line,
        problem="; ".join(problems) or None,
    )


def _retain_bullets(text: str) -> Iterable[tuple[int, int, str]]:
    """(first line, last line, text) of each bullet under a `Retain` heading."""
    level = 0  # the Retain heading's level while inside its section
    fence = False
    current: list[str] = []
    first = last = 0

    def flush() -> Iterable[tuple[int, int, str]]:
        if current:
            yield first, last, " ".join(current)
            current.clear()

    for n, raw in enumerate(text.splitlines(), 1):
        if _FENCE.match(raw):
            fence = not fence
            yield from flush()
            continue
        if fence:
            continue
        h = _HEADING.match(raw)
        if h is not None:
            yield from flush()
            if _RETAIN.match(h.group(2)):
                level = len(h.group(1))
            elif level and len(h.group(1)) <= level:
                level = 0
            continue
        if not level:
            continue
        b = _BULLET.match(raw)
        if b is not None:
            yield from flush()
            first = last = n
            current.append(b.group(2))
        elif current and raw[:1] in (" ", "\t") and raw.strip():
            current.append(raw.strip())  # a continuation line of the bullet
            last = n
        else:
            yield from flush()
    yield from flush()


def parse_retain(text: str, source: str) -> list[Fact]:
    """The facts of a daily log's `## Retain` sections (any heading level, as many
    sections as the file has; bullets in code fences are not facts). A bullet written
    twice is one fact, at its first line."""
    facts: list[Fact] = []
    seen: set[str] = set()
    for first, last, body in _retain_bullets(text):
        if not body.strip():
            continue
        fact = parse_bullet(body, source=source, line=first, end_line=last)
        if fact.id in seen:
            continue
        seen.add(fact.id)
        facts.append(fact)
        if len(facts) >= MAX_FACTS_PER_FILE:
            log.warning(
                "%s: more than %d retain bullets; the rest are indexed as text only",
                source,
                MAX_FACTS_PER_FILE,
            )
            break
    return facts


# --- writing -------------------------------------------------------------------

_APPEND_LOCK = threading.Lock()


def bullet_text(text: str) -> str | None:
    """`text` as one bullet line's body: one line, no list marker or heading mark,
    at most MAX_FACT_CHARS; None when nothing is left."""
    one = " ".join(text.split())
    one = re.sub(r"^(?:[-*+]\s+|#+\s*|\d+[.)]\s+)+", "", one).strip()
    return one[:MAX_FACT_CHARS] or None


def _open_log(workspace: Path, day: str) -> int:
    """An O_APPEND descriptor of `memory/<day>.md`, created if absent; refuses a
    `memory` folder or file that leads out of the workspace through a symlink."""
    date.fromisoformat(day)  # a name, never a path
    root = os.path.realpath(workspace)
    folder = workspace / "memory"
    folder.mkdir(parents=True, exist_ok=True)
    real = os.path.realpath(folder)
    if real != os.path.join(root, "memory") and not real.startswith(root + os.sep):
        raise RetainRefused(f"{folder} leads outside the workspace; nothing was retained")
    dir_fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(f"{day}.md", flags, 0o644, dir_fd=dir_fd)
        except OSError as exc:
            raise RetainRefused(
                f"memory/{day}.md cannot be appended to ({exc.strerror}): a symlink or "
                "not a file; nothing was retained"
            ) from exc
    finally:
        os.close(dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RetainRefused(f"memory/{day}.md is not a regular file; nothing was retained")
    return fd


def _ends_in_retain(text: str) -> bool:
    """Whether the file's last heading outside code fences opens a Retain section."""
    fence = False
    last: str | None = None
    for raw in text.splitlines():
        if _FENCE.match(raw):
            fence = not fence
        elif not fence and (h := _HEADING.match(raw)):
            last = h.group(2)
    return last is not None and bool(_RETAIN.match(last)) and not fence


def append_retain(workspace: Path, day: str, bullets: Sequence[str]) -> list[str]:
    """Appends the `bullets` (bodies such as `W @Anna: Moved to Lisbon.`) to the
    Retain section at the end of `memory/<day>.md`; returns the lines written.

    Bullets the file already holds (same fact id) are skipped, so extracting the same
    summary twice writes nothing the second time. Nothing before the end of the file
    is rewritten: one write on an O_APPEND descriptor, then fsync. RetainRefused when
    the log leads out of the workspace."""
    source = f"memory/{day}.md"
    with _APPEND_LOCK:
        fd = _open_log(workspace, day)
        try:
            size = os.fstat(fd).st_size
            old = os.pread(fd, size, 0).decode("utf-8", "replace") if size else ""
            known = {f.id for f in parse_retain(old, source)}
            lines: list[str] = []
            for raw in bullets:
                body = bullet_text(raw)
                if body is None:
                    continue
                fid = fact_id(day, body)
                if fid in known:
                    continue
                known.add(fid)
                lines.append(f"- {body}\n")
            if not lines:
                return []
            lead = ""
            if not size:
                lead = f"# {day}\n\n## Retain\n\n"
            elif not _ends_in_retain(old):
                lead = ("\n" if old.endswith("\n") else "\n\n") + "## Retain\n\n"
            elif not old.endswith("\n"):
                lead = "\n"
            os.write(fd, (lead + "".join(lines)).encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
    return [line.rstrip("\n") for line in lines]

"""MEMORY.md within its share of the prompt (issue 25 item 6; docs/memory.md, "A prompt
that stays small").

MEMORY.md goes into the system prompt of private chats up to its share,
`memory.prompt.memoryMdTokens`; what is beyond it is cut at a line end, with a note
telling the model the rest is found with `memory_search` (`prompt_cut`). Klaw never
shortens the file itself: when it outgrows its share Klaw writes a proposal,
`MEMORY.proposed.md`, for the owner to read, edit and accept with
`klaw memory condense --apply`.

The proposal is **extractive**: every line in it is one of the owner's lines, verbatim.
Headings stay; the entries (list items, paragraphs) are taken round-robin over the
sections, first entries first (an owner puts what matters at the top of a section),
until three quarters of the share is used, leaving room to grow; exact repeats are
taken once. Everything left out goes, under its section heading, to
`memory/archive/MEMORY-<day>.md`, indexed and searchable like any note. No model call:
nothing is invented, nothing costs tokens, and the same file gives the same proposal
(docs/decisions.md).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from klaw.errors import KlawError

__all__ = [
    "PROPOSAL_FILE",
    "CondenseError",
    "Proposal",
    "apply_proposal",
    "prompt_cut",
    "propose",
    "read_proposal",
    "write_proposal",
]

PROPOSAL_FILE: Final = "MEMORY.proposed.md"
ARCHIVE_DIR: Final = "memory/archive"
#: The proposal aims at this share of MEMORY.md's share of the prompt: room to grow.
TARGET: Final = 0.75
CUT_NOTE: Final = (
    "[MEMORY.md continues beyond its share of the prompt ({shown} of {total} tokens "
    "shown): find the rest with memory_search]"
)
_HEAD = "<!-- klaw condense: proposal for MEMORY.md {digest} -->"
_HEAD_RE = re.compile(r"^<!-- klaw condense: proposal for MEMORY\.md ([0-9a-f]{32}) -->\n")
_SPLIT = "<!-- klaw condense: what follows moves to {path} -->"
_SPLIT_RE = re.compile(r"^<!-- klaw condense: what follows moves to (\S+) -->$", re.M)
_ITEM = re.compile(r"^\s{0,3}(?:[-*+]|\d{1,9}[.)])\s")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")

Counter = Callable[[list[str]], list[int]]


class CondenseError(KlawError):
    """The proposal cannot be applied; the message says why and what to do."""


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


# ------------------------------------------------------------------ the prompt


_CUTS: dict[tuple[str, int, int], tuple[str, int, int]] = {}
_CUTS_LOCK = threading.Lock()


def prompt_cut(text: str, tokens: int, count: Counter) -> tuple[str, int, int]:
    """(what of `text` goes into the prompt, its tokens, the whole text's tokens): whole
    lines from the top within `tokens`, then a note naming how much is left out. Kept
    by text and share: MEMORY.md is the same every turn."""
    key = (text, tokens, id(count))
    with _CUTS_LOCK:
        hit = _CUTS.get(key)
    if hit is not None:
        return hit
    lines = text.splitlines(keepends=True)
    sizes = count(lines) if lines else []
    total = sum(sizes)
    if total <= tokens:
        result = (text, total, total)
    else:
        note = CUT_NOTE.format(shown="{shown}", total=total)
        room = tokens - count([note])[0]
        kept, used = [], 0
        for line, n in zip(lines, sizes, strict=True):
            if used + n > room:
                break
            kept.append(line)
            used += n
        body = "".join(kept).rstrip()
        cut = f"{body}\n{note.format(shown=used)}" if body else note.format(shown=0)
        result = (cut, count([cut])[0], total)
    with _CUTS_LOCK:
        if len(_CUTS) > 16:
            _CUTS.clear()
        _CUTS[key] = result
    return result


# ------------------------------------------------------------------ the proposal


@dataclass(frozen=True)
class _Block:
    text: str  # its lines, each ending in "\n"
    section: int
    heading: bool


def _blocks(text: str) -> list[_Block]:
    """Headings, list items with their continuation lines, fenced code, paragraphs."""
    blocks: list[_Block] = []
    section = 0
    cur: list[str] = []
    fence: str | None = None

    def close() -> None:
        if cur:
            blocks.append(_Block("".join(cur), section, False))
            cur.clear()

    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            line += "\n"
        if fence is not None:
            cur.append(line)
            if line.lstrip().startswith(fence):
                fence = None
                close()
            continue
        stripped = line.strip()
        if m := _FENCE.match(line):
            close()
            fence = m.group(1)
            cur.append(line)
        elif not stripped:
            close()
        elif line.startswith("#"):
            close()
            section += 1
            blocks.append(_Block(line, section, True))
        elif _ITEM.match(line):
            close()
            cur.append(line)
        else:
            cur.append(line)  # a continuation of an item, or a paragraph line
    close()
    return blocks


def _key(block: _Block) -> str:
    return " ".join(block.text.lower().split())


@dataclass(frozen=True)
class Proposal:
    source_digest: str  # of MEMORY.md as it was read
    condensed: str  # the new MEMORY.md
    moved: str  # the archive file's text ("" when nothing moves)
    archive_path: str  # workspace-relative
    tokens_before: int
    tokens_after: int
    entries_moved: int

    @property
    def needed(self) -> bool:
        return self.entries_moved > 0


def propose(data: bytes, share: int, count: Counter, day: str, workspace: Path) -> Proposal:
    """The extractive proposal for MEMORY.md's bytes `data` (see the module docstring);
    `day` (YYYY-MM-DD, the owner's) names the archive file."""
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n")
    blocks = _blocks(text)
    sizes = count([b.text for b in blocks]) if blocks else []
    before = sum(sizes)
    archive = _free_archive_path(workspace, day)
    footer = (
        f"\n_Condensed by Klaw on {day}: entries beyond this file's share of the prompt "
        f"are in {archive}, still searchable._\n"
    )
    budget = int(share * TARGET) - count([footer])[0]
    keep = [b.heading for b in blocks]
    used = sum(n for b, n in zip(blocks, sizes, strict=True) if b.heading)
    seen: set[str] = set()
    entries: dict[int, list[int]] = {}
    for i, b in enumerate(blocks):
        if not b.heading:
            entries.setdefault(b.section, []).append(i)
    rank = 0
    while any(rank < len(v) for v in entries.values()):
        for idx in entries.values():
            if rank >= len(idx):
                continue
            i = idx[rank]
            k = _key(blocks[i])
            if k in seen:
                continue  # a repeat of a kept entry: moves out
            if used + sizes[i] <= budget:
                keep[i] = True
                used += sizes[i]
                seen.add(k)
        rank += 1
    moved_idx = [i for i, b in enumerate(blocks) if not keep[i] and not b.heading]
    if before <= share or not moved_idx:
        return Proposal(digest(data), text, "", archive, before, before, 0)
    condensed = _join([b for b, k in zip(blocks, keep, strict=True) if k]) + footer
    moved_parts = [f"# MEMORY.md: entries moved out on {day}\n"]
    last_heading = -1
    for i in moved_idx:
        sec = blocks[i].section
        if sec != last_heading and sec > 0:
            heading = next(b for b in blocks if b.heading and b.section == sec)
            moved_parts.append("#" + heading.text)  # one level down, under the title
            last_heading = sec
        moved_parts.append(blocks[i].text)
    moved = _join_texts(moved_parts)
    after = count([condensed])[0]
    return Proposal(digest(data), condensed, moved, archive, before, after, len(moved_idx))


def _join(blocks: list[_Block]) -> str:
    return _join_texts([b.text for b in blocks])


def _join_texts(parts: list[str]) -> str:
    """Blocks separated by a blank line, list items of one list kept together."""
    out: list[str] = []
    for i, part in enumerate(parts):
        if i and not (_ITEM.match(part) and _ITEM.match(parts[i - 1])):
            out.append("\n")
        out.append(part)
    return "".join(out)


def _free_archive_path(workspace: Path, day: str) -> str:
    name = f"{ARCHIVE_DIR}/MEMORY-{day}.md"
    n = 2
    while (workspace / name).exists():
        name = f"{ARCHIVE_DIR}/MEMORY-{day}-{n}.md"
        n += 1
    return name


def write_proposal(workspace: Path, proposal: Proposal) -> Path:
    """MEMORY.proposed.md: the new MEMORY.md, then (after a marker) what moves out."""
    from klaw.fsutil import atomic_write

    path = workspace / PROPOSAL_FILE
    text = (
        _HEAD.format(digest=proposal.source_digest)
        + "\n"
        + proposal.condensed
        + "\n"
        + _SPLIT.format(path=proposal.archive_path)
        + "\n"
        + proposal.moved
    )
    atomic_write(path, text, mode=0o644)
    return path


def read_proposal(workspace: Path) -> tuple[str, str, str, str] | None:
    """(MEMORY.md's digest it was made from, the new MEMORY.md, the archive path, what
    moves there) from MEMORY.proposed.md as the owner may have edited it; None when
    there is none. Raises CondenseError when its markers are gone."""
    path = workspace / PROPOSAL_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    head = _HEAD_RE.match(text)
    split = _SPLIT_RE.search(text)
    if head is None or split is None:
        raise CondenseError(
            f"{path}: its klaw condense markers are missing or changed; delete it and run "
            "`klaw memory condense` again"
        )
    archive = split.group(1)
    if not archive.startswith(f"{ARCHIVE_DIR}/") or ".." in archive.split("/"):
        raise CondenseError(f"{path}: the archive path {archive!r} must be under {ARCHIVE_DIR}/")
    condensed = text[head.end() : split.start()].rstrip("\n") + "\n"
    moved = text[split.end() :].lstrip("\n")
    return head.group(1), condensed, archive, moved


def apply_proposal(workspace: Path, what_why: tuple[str, str] | None = None) -> list[str]:
    """Replace MEMORY.md with the proposal and write what moves out to its archive file,
    as one commit of versioned memory; the proposal file is removed. Returns the paths
    written. Refuses (CondenseError) when MEMORY.md changed since the proposal."""
    from klaw.fsutil import atomic_write
    from klaw.memory.versioning import versioner

    found = read_proposal(workspace)
    if found is None:
        raise CondenseError(
            f"no proposal ({workspace / PROPOSAL_FILE}): run `klaw memory condense` first"
        )
    source, condensed, archive, moved = found
    memory_md = workspace / "MEMORY.md"
    try:
        current = memory_md.read_bytes()
    except FileNotFoundError:
        raise CondenseError(f"{memory_md} is gone; nothing to condense") from None
    if digest(current) != source:
        raise CondenseError(
            f"{memory_md} changed since the proposal was made; run `klaw memory condense` "
            "again to see a new one"
        )
    target = workspace / archive
    folder = workspace / ARCHIVE_DIR
    if folder.is_symlink() or (workspace / "memory").is_symlink():
        raise CondenseError(f"{folder} leads outside the workspace (a symlink); nothing written")
    if moved.strip() and target.exists():
        raise CondenseError(f"{target} exists already; run `klaw memory condense` again")
    what, why = what_why or (
        "condense MEMORY.md",
        f"MEMORY.md outgrew its share of the prompt; the owner accepted the proposal. "
        f"Entries moved out are in {archive}.",
    )
    paths = [memory_md, target] if moved.strip() else [memory_md]
    mode = memory_md.stat().st_mode & 0o777
    with versioner(workspace).change(paths, what, why):
        if moved.strip():
            atomic_write(target, moved, mode=0o644, mkdir=True)
        atomic_write(memory_md, condensed, mode=mode)
    (workspace / PROPOSAL_FILE).unlink(missing_ok=True)
    return [p.relative_to(workspace).as_posix() for p in paths]

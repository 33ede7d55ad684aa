"""The retained facts of the workspace's daily logs (`memory/**/*.md`, their `## Retain`
bullets, parsed by klaw.memory.retain), as auto-recall and the reflect job read them:
each log parsed again only when its stat changes, and which facts are current.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

from klaw.memory.retain import Fact, entity_key, parse_retain
from klaw.memory.wsfiles import memory_files, open_for_index

__all__ = ["FactFiles", "current_facts"]

log = logging.getLogger("klaw.memory")


def current_facts(facts: Iterable[Fact]) -> list[Fact]:
    """`facts` without those a newer fact replaces (the same entity and attribute,
    written on a later day: the day of its log, not the day it names), newest first."""
    ordered = sorted(facts, key=lambda f: (f.day or f.start or "", f.source, f.line), reverse=True)
    seen: set[tuple[str, str]] = set()
    out: list[Fact] = []
    for f in ordered:
        if f.attribute:
            keys = {(entity_key(e), f.attribute) for e in f.entities}
            if keys & seen:
                continue
            seen |= keys
        out.append(f)
    return out


class FactFiles:
    """The retained facts of the workspace's daily logs, each file parsed again only
    when its stat changes."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self._files: dict[str, tuple[tuple[int, int, int], list[Fact]]] = {}

    def read(self) -> dict[str, list[Fact]]:
        out: dict[str, list[Fact]] = {}
        kept: dict[str, tuple[tuple[int, int, int], list[Fact]]] = {}
        for path in memory_files(self.workspace):
            label = path.relative_to(self.workspace).as_posix()
            if not label.startswith("memory/"):
                continue
            try:
                st = path.stat()
            except OSError:
                continue
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            old = self._files.get(label)
            if old is not None and old[0] == stamp:
                facts = old[1]
            else:
                facts = self._parse(path, label)
            kept[label] = (stamp, facts)
            if facts:
                out[label] = facts
        self._files = kept
        return out

    def _parse(self, path: Path, label: str) -> list[Fact]:
        try:
            fd = open_for_index(self.workspace, path)
        except Exception as exc:  # a log that leads out, a FIFO: not read, said once
            log.warning("retained facts of %s not read: %s", label, exc)
            return []
        try:
            with os.fdopen(fd, "rb") as fh:
                text = fh.read(16 << 20).decode("utf-8", errors="replace")
        except OSError as exc:
            log.warning("retained facts of %s not read: %s", label, exc.strerror)
            return []
        return parse_retain(text, label) if "etain" in text else []

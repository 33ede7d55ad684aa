"""The retained facts of the workspace's daily logs (`memory/**/*.md`, their `## Retain`
bullets, parsed by klaw.memory.retain), as auto-recall and the reflect job read them:
each log parsed again only when its stat changes, and which facts are current
(supersession is klaw.memory.facts', the same marks the index holds).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from klaw.memory.retain import Fact, entity_key, parse_retain
from klaw.memory.supersede import supersessions
from klaw.memory.wsfiles import open_for_index

__all__ = ["FactFiles", "current_facts", "name_key"]

log = logging.getLogger("klaw.memory")

#: `entity_key`, kept per name: a year of facts names the same few hundred entities
#: tens of thousands of times, and each key is a few Unicode normalisations.
name_key = functools.lru_cache(maxsize=1 << 16)(entity_key)


def current_facts(facts: Iterable[Fact], superseded: Mapping[str, str] | None = None) -> list[Fact]:
    """`facts`, newest first (the day of their log, then the line), without those a
    newer fact replaces: `superseded` (fact id -> the newer one's, from
    `klaw.memory.supersede.supersessions` over every fact), else computed from `facts`."""
    pool = list(facts)
    if superseded is None:
        superseded = supersessions(pool)
    kept = [f for f in pool if f.id not in superseded]
    return sorted(kept, key=lambda f: (f.day or f.start or "", f.source, f.line), reverse=True)


class FactFiles:
    """The retained facts of the workspace's daily logs, each file parsed again only
    when its stat changes."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self._files: dict[str, tuple[tuple[int, int, int], list[Fact]]] = {}

    def read(self) -> dict[str, list[Fact]]:
        """Facts by log label. The logs are listed and stat'ed (a few hundred stats for a
        year); only a log whose stat changed is read and parsed again."""
        out: dict[str, list[Fact]] = {}
        kept: dict[str, tuple[tuple[int, int, int], list[Fact]]] = {}
        for label, path, stamp in self._logs():
            old = self._files.get(label)
            facts = old[1] if old is not None and old[0] == stamp else self._parse(path, label)
            kept[label] = (stamp, facts)
            if facts:
                out[label] = facts
        self._files = kept
        return out

    def _logs(self) -> Iterator[tuple[str, Path, tuple[int, int, int]]]:
        """(label, path, stat stamp) of each memory/**/*.md; what a symlink leads to is
        the confined open's to refuse (`_parse`)."""
        folders = [self.workspace / "memory"]
        while folders:
            folder = folders.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for e in entries:
                try:
                    if e.is_dir(follow_symlinks=False):
                        folders.append(Path(e.path))
                    elif e.name.endswith(".md"):
                        st = e.stat()
                        path = Path(e.path)
                        label = path.relative_to(self.workspace).as_posix()
                        yield label, path, (st.st_mtime_ns, st.st_size, st.st_ino)
                except (OSError, ValueError):
                    continue

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

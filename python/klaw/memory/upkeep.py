"""The nightly upkeep of workspace memory (issue 25 item 6), run after the reflect job:
daily logs past `memory.archive.afterDays` move to memory/archive/ (klaw.memory.archive),
and a MEMORY.md over its share of the prompt gets a condense proposal for the owner
(klaw.memory.condense; never applied here)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from klaw.memory.archive import archive_logs
from klaw.memory.condense import CondenseError, digest, propose, read_proposal, write_proposal
from klaw.memory.rows import count_tokens_batch

if TYPE_CHECKING:
    from klaw.config import EngineConfig

__all__ = ["Upkeep", "nightly_upkeep"]

log = logging.getLogger("klaw.memory")


@dataclass(frozen=True)
class Upkeep:
    archived: int
    proposal: Path | None  # written this run


def nightly_upkeep(workspace: Path, config: EngineConfig, today: date) -> Upkeep:
    """Archive old daily logs and propose a condensed MEMORY.md when it is over its share
    and no proposal for its current text waits. `today` is the owner's day."""
    archived = 0
    if config.memory.archive.enabled:
        archived = len(archive_logs(workspace, config.memory.archive.after_days, today).moved)
    share = config.memory.prompt.memory_md_tokens
    memory_md = workspace / "MEMORY.md"
    if share <= 0 or not memory_md.is_file():
        return Upkeep(archived, None)
    data = memory_md.read_bytes()
    try:
        waiting = read_proposal(workspace)
    except CondenseError:
        waiting = None  # a broken proposal of the owner's is theirs: a new one replaces it
    if waiting is not None and waiting[0] == digest(data):
        return Upkeep(archived, None)
    proposal = propose(data, share, count_tokens_batch, today.isoformat(), workspace)
    if not proposal.needed:
        return Upkeep(archived, None)
    path = write_proposal(workspace, proposal)
    log.warning(
        "MEMORY.md is %d tokens, over its share of the prompt (%d): a shorter version is "
        "proposed in %s; read it and run `klaw memory condense --apply`",
        proposal.tokens_before,
        share,
        path,
    )
    return Upkeep(archived, path)

"""Workspace memory is indexed with the file tools' confinement (hostile 5, indexer
side): a `memory/x.md` symlink to a host file was indexed and served by memory_search
while file_read refused the same path. Now it is skipped (logged), at every indexing
pass and by `klaw reindex`; a link that stays inside the workspace is followed, as
file_read follows it."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from klaw.config import load_engine_config
from klaw.errors import InvalidInput
from klaw.memory import Memory
from klaw.paths import KlawPaths
from klaw.tools import builtin_registry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from sched_support import klaw

SECRET = "The NAS root password is zebra-hunter-2931."
INSIDE = "The garden shed key hangs behind the kitchen door."


def _lay_out(klaw_home: KlawPaths, tmp_path: Path) -> Path:
    """A host folder outside the workspace, linked into memory/ as a file and as a
    folder; a note elsewhere in the workspace linked into memory/ too."""
    host = tmp_path / "host"
    (host / "deep").mkdir(parents=True)
    (host / "secret.md").write_text(SECRET + "\n")
    (host / "deep" / "more.md").write_text(SECRET + " Again.\n")
    ws = klaw_home.workspace
    (ws / "memory").mkdir()
    (ws / "memory" / "x.md").symlink_to(host / "secret.md")
    (ws / "memory" / "outside").symlink_to(host / "deep", target_is_directory=True)
    (ws / "notes").mkdir()
    (ws / "notes" / "shed.md").write_text(INSIDE + "\n")
    (ws / "memory" / "shed.md").symlink_to(Path("..") / "notes" / "shed.md")
    return host


async def test_a_symlink_out_of_the_workspace_is_skipped_as_file_read_refuses_it(
    memory: Memory, klaw_home: KlawPaths, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host = _lay_out(klaw_home, tmp_path)
    caplog.set_level(logging.WARNING, logger="klaw.memory")
    report = memory.index_workspace()
    assert report.indexed == ["notes/shed.md"]  # the link inside, under its real path
    assert not any(str(host) in f.path or "x.md" in f.path for f in memory.store.list_files())
    assert "not indexed: memory/x.md leads outside the workspace through a symlink" in (caplog.text)
    # The same path through the file tool and through memory_search: refused, not found.
    reg = builtin_registry(
        klaw_home, load_engine_config(klaw_home.engine_config), memory, chat_id="telegram_1"
    )
    read = await reg.dispatch("file_read", {"path": "memory/x.md"})
    assert read.is_error and "outside the workspace" in read.content
    found = await reg.dispatch("memory_search", {"query": "NAS root password"})
    assert "zebra-hunter" not in found.content
    shed = await reg.dispatch("memory_search", {"query": "where is the garden shed key"})
    assert "kitchen door" in shed.content
    # Read race-free: the file named directly (a file swapped for a link after the
    # listing) is refused the same way.
    with pytest.raises(InvalidInput, match="outside the workspace"):
        memory.index_file(klaw_home.workspace / "memory" / "x.md")


async def test_klaw_reindex_leaves_links_out_of_the_workspace_out(
    klaw_home: KlawPaths, tmp_path: Path
) -> None:
    _lay_out(klaw_home, tmp_path)
    rc, out, err = await klaw("reindex", "--no-progress", timeout=300)
    assert rc == 0, out + err
    assert "memory/x.md leads outside the workspace" in err
    rc, out, err = await klaw("memory", "search", "NAS root password", "--json")
    assert rc == 0, err
    assert "zebra-hunter" not in out
    rc, out, err = await klaw("memory", "search", "garden shed key", "--json")
    assert rc == 0, err
    assert any("kitchen door" in h["content"] for h in json.loads(out))

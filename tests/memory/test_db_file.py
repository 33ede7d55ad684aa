"""Finding 10: a 0-byte (or foreign) klaw.db is not taken as a new empty store: Memory
refuses it with the cure, doctor fails on it, and `klaw reindex` repairs it."""

from __future__ import annotations

from typing import Any

import pytest

from klaw.cli.app import app
from klaw.cli.testing import CliRunner
from klaw.config import load_engine_config
from klaw.errors import StoreCorrupt
from klaw.memory import Memory
from klaw.paths import KlawPaths


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 a zip, not a database" * 10])
def test_a_file_that_is_no_database_is_refused_and_reindex_repairs_it(
    klaw_home: KlawPaths, backend: Any, content: bytes
) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["init"]).exit_code == 0
    (klaw_home.workspace / "MEMORY.md").write_text("# Notes\n\nThe boiler code is 4471.\n")
    klaw_home.db.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.db.write_bytes(content)
    config = load_engine_config(klaw_home.engine_config)
    with pytest.raises(StoreCorrupt, match="klaw reindex"):
        Memory.open(paths=klaw_home, config=config, backend=backend)
    assert klaw_home.db.read_bytes() == content  # left for the owner, not overwritten

    doctor = runner.invoke(app, ["doctor"])
    assert doctor.exit_code == 1
    store_lines = [ln for ln in doctor.stdout.splitlines() if "store" in ln.lower()]
    assert any(ln.startswith("FAIL") for ln in store_lines), doctor.stdout
    assert "klaw reindex" in doctor.stdout

    assert runner.invoke(app, ["reindex", "--no-progress"]).exit_code == 0
    memory = Memory.open(paths=klaw_home, config=config, backend=backend)
    try:
        assert memory.search("boiler code")  # the files are back in the index
    finally:
        memory.close()

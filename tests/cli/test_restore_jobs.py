"""`klaw restore` of a forged backup: a row in data/scheduler.db whose pickle would
run a command when loaded, with the manifest's hashes made to match. `restore
--check` and `restore` refuse it by the row's name; nothing is written and the
command never runs."""

from __future__ import annotations

import json
import sqlite3
import sys
import tarfile
from contextlib import closing
from pathlib import Path

import pytest
from test_backup import backup_to, fix_manifest, rewrite, run, unchanged

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from hostile_jobs import crafted_states, insert_job_row

from klaw.paths import KlawPaths
from klaw.scheduler.jobs import JobSpec
from klaw.scheduler.service import store_jobs
from scripted_llm import write_engine_yaml


def _agent_with_a_job(paths: KlawPaths, archive: Path) -> None:
    """Config, a workspace and scheduler.db with one job, backed up to `archive`."""
    paths.config_dir.mkdir(parents=True)
    write_engine_yaml(paths.engine_config, "http://127.0.0.1:9")
    (paths.workspace / "MEMORY.md").write_text("# Memory\n")
    spec = JobSpec(name="tidy", cron="0 0 3 * * ?", message="Tidy the inbox", timezone="UTC")
    assert store_jobs(paths.scheduler_db, [spec]) == [(spec, "added")]
    backup_to(archive)


def _forge(archive: Path, blob: bytes, tmp_path: Path, *, wal: bool = False) -> None:
    """Adds a job row with `blob` to the archive's data/scheduler.db (with `wal`: in a
    data/scheduler.db-wal beside it, as a writer leaves it before a checkpoint) and
    makes the manifest agree."""
    db = tmp_path / "forge" / "scheduler.db"
    db.parent.mkdir()

    def edit(infos: list[tarfile.TarInfo], data: dict[str, bytes]) -> None:
        db.write_bytes(data["data/scheduler.db"])
        with closing(sqlite3.connect(db)) as conn:
            if wal:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA wal_autocheckpoint=0")
            insert_job_row(conn, "evil", blob)
            data["data/scheduler.db"] = db.read_bytes()
            if wal:  # read while open: closing would fold it into the database
                infos.insert(len(infos) - 1, tarfile.TarInfo("data/scheduler.db-wal"))
                data["data/scheduler.db-wal"] = db.with_name("scheduler.db-wal").read_bytes()
        manifest = json.loads(data["manifest.json"])
        if wal:
            manifest["members"].append({"name": "data/scheduler.db-wal", "type": "file"})
            data["manifest.json"] = json.dumps(manifest).encode()
        fix_manifest(infos, data)

    rewrite(archive, edit)


@pytest.mark.parametrize("attack", ["payload", "hidden", "getattr", "func"])
def test_a_backup_with_a_crafted_job_is_refused_and_nothing_runs(
    klaw_home: KlawPaths, tmp_path: Path, attack: str
) -> None:
    marker, archive = tmp_path / "ran", tmp_path / "agent.tar.gz"
    _agent_with_a_job(klaw_home, archive)
    _forge(archive, crafted_states(marker)[attack], tmp_path)

    with unchanged(klaw_home):
        check = run("restore", "--check", str(archive))
        done = run("restore", "--force", str(archive))
    for result in (check, done):
        assert result.returncode == 1, result.stdout
        assert "scheduler.db's job 'evil'" in result.stderr
        assert "restore another one; nothing was changed" in result.stderr
        assert "Traceback" not in result.stderr
    assert not marker.exists()


def test_a_crafted_job_in_a_wal_beside_the_database_is_refused(
    klaw_home: KlawPaths, tmp_path: Path
) -> None:
    marker, archive = tmp_path / "ran", tmp_path / "agent.tar.gz"
    _agent_with_a_job(klaw_home, archive)
    _forge(archive, crafted_states(marker)["payload"], tmp_path, wal=True)

    with unchanged(klaw_home):
        done = run("restore", "--force", str(archive))
    assert done.returncode == 1 and "scheduler.db's job 'evil'" in done.stderr
    assert not marker.exists()

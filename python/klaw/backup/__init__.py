"""`klaw backup` and `klaw restore`: the whole agent in one archive (docs/operations.md).

A backup is a gzipped POSIX tar, written while the daemons run:

    config/engine.yaml, gateway.yaml    secrets replaced by ${VAR} references
    config/allowed-chats.json, skills.json
    data/klaw.db, data/scheduler.db     SQLite online backups (standalone, no -wal)
    data/...                            logs (complete lines only), memory, summaries...
    workspace/...                       the workspace in force
    manifest.json                       last: format and Klaw versions, schema versions,
                                        each member's type, size and sha256

`restore` reads the whole archive and checks it against its manifest before it writes
anything, then extracts beside the targets and swaps them in, keeping what it replaces.
"""

from __future__ import annotations

from klaw.backup.archive import FORMAT_VERSION, Manifest, Redaction
from klaw.backup.make import BackupReport, make_backup
from klaw.backup.restore import Checked, RestoreReport, check_archive, restore_backup

__all__ = [
    "FORMAT_VERSION",
    "BackupReport",
    "Checked",
    "Manifest",
    "Redaction",
    "RestoreReport",
    "check_archive",
    "make_backup",
    "restore_backup",
]

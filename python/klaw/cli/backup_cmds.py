"""`klaw backup [PATH]` and `klaw restore ARCHIVE` (docs/operations.md)."""

from __future__ import annotations

import sys
from pathlib import Path

from klaw.fsutil import human_size as _size


def _schemas(schemas: dict[str, int]) -> str:
    return ", ".join(f"{k} schema {v}" for k, v in schemas.items()) or "no databases yet"


def backup(path: Path | None) -> int:
    from klaw.backup import make_backup
    from klaw.errors import KlawError
    from klaw.paths import KlawPaths

    try:
        report = make_backup(KlawPaths.from_env(), path)
    except KlawError as exc:
        print(f"klaw: {exc}", file=sys.stderr)
        return 1
    print(
        f"backup written: {report.path} ({_size(report.size)}, {report.files} files, "
        f"{_schemas(report.schemas)}, {report.seconds:.1f} s)"
    )
    for r in report.redacted:
        print(f"  secret left out: {r.file} {r.key} reads ${{{r.variable}}} in the backup")
    for item in report.left_out:
        print(f"  left out: {item}")
    print("check it with `klaw restore --check ARCHIVE`; it holds your conversations: keep it safe")
    return 0


def restore(archive: Path, *, force: bool, reindex: bool, check: bool) -> int:
    from klaw.backup import check_archive, restore_backup
    from klaw.errors import KlawError
    from klaw.paths import KlawPaths

    try:
        checked = check_archive(archive)
        m = checked.manifest
        print(
            f"checked {checked.path}: {checked.files} files ({_size(checked.size)}) match "
            f"the manifest; made {m.created} by Klaw {m.klaw_version} "
            f"({_schemas(m.schemas)})"
        )
        if check:
            return 0
        report = restore_backup(
            KlawPaths.from_env(), archive, force=force, reindex=reindex, checked=checked
        )
    except KlawError as exc:
        print(f"klaw: {exc}", file=sys.stderr)
        return 1
    for kept in report.kept:
        print(f"  kept: {kept}")
    print(
        f"restored: config in {report.config_dir}, data in {report.data_dir}, "
        f"workspace in {report.workspace}"
    )
    if m.redacted:
        print("keys were left out of the backup; give them back before starting Klaw:")
        for r in m.redacted:
            print(
                f"  {r.file} {r.key}: set {r.variable} (in the daemon's environment, "
                f"e.g. its .env file) or write the value back in place of ${{{r.variable}}}"
            )
    for item in m.left_out:
        if not item.startswith("config/"):
            continue
        name, _, why = item.removeprefix("config/").partition(" (")
        where = report.config_dir / name
        if where.exists():
            print(f"  {where} was not in the backup and is left as it was")
        else:
            print(f"  {where} was not in the backup ({why.rstrip(')')}): recreate it if needed")
    if report.reindexed:
        print("reindexed: klaw.db was rebuilt from the restored files")
    elif report.reindex_error:
        print(
            f"klaw.db was not rebuilt ({report.reindex_error}); the backup's copy is in place: "
            "run `klaw reindex` once that is fixed",
            file=sys.stderr,
        )
    elif "klaw.db" in m.schemas:
        print(
            "klaw.db is the backup's snapshot (the keyword index is rebuilt when the engine "
            "opens it). It was taken just before the files were copied: run `klaw reindex` "
            "to rebuild it from the files, which also takes in the last seconds before the "
            "backup"
        )
    return 0

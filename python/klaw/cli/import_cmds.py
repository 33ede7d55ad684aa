"""`klaw import openclaw [PATH]`: move in from OpenClaw (docs/openclaw.md)."""

from __future__ import annotations

import sys
from pathlib import Path


def import_openclaw(
    path: Path | None, *, dry_run: bool, copy_to: Path | None, reindex: bool
) -> int:
    from klaw.config import load_engine_config
    from klaw.errors import KlawError
    from klaw.lock import daemons_stopped
    from klaw.openclaw.home import Home
    from klaw.openclaw.plan import apply_plan, build_plan
    from klaw.paths import KlawPaths

    paths = KlawPaths.from_env()
    try:
        home = Home.open(path)
        zone = None
        if paths.engine_config.exists():
            zone = load_engine_config(paths.engine_config).scheduler.timezone
        plan = build_plan(
            home,
            copy_to=copy_to.expanduser().resolve() if copy_to else None,
            zone=zone,
            paths=paths,
        )
    except KlawError as exc:
        print(f"klaw: {exc}", file=sys.stderr)
        return 1
    print(plan.render(), end="")
    if dry_run:
        print("dry run: nothing was changed")
        return 0
    try:
        with daemons_stopped(paths, "klaw import", "it writes the chat logs"):
            report = apply_plan(plan, paths, reindex=reindex)
    except KlawError as exc:
        print(f"klaw: {exc}", file=sys.stderr)
        return 1
    print(f"imported: {len(report.changed)} change(s), {len(report.kept)} already there")
    for c in report.changed:
        print(f"  + {c}")
    for k in report.kept:
        print(f"  = {k}")
    if report.reindexed:
        print("reindexed: the imported conversations are in memory search")
    elif report.messages:
        print("run `klaw reindex` to make the imported conversations searchable")
    return 0

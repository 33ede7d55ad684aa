"""`klaw service install|status|uninstall` (docs/operations.md)."""

from __future__ import annotations

import subprocess
import sys


def _units(user: bool):  # type: ignore[no-untyped-def]
    import dataclasses

    from klaw.config import load_engine_config, load_gateway_config, resolve_workspace
    from klaw.paths import KlawPaths
    from klaw.service import render_units

    paths = KlawPaths.from_env()
    config = load_engine_config(paths.engine_config)
    gateway = load_gateway_config(paths.gateway_config)
    paths = dataclasses.replace(paths, workspace=resolve_workspace(config))
    return render_units(
        paths,
        paths.workspace,
        user=user,
        engine_memory=config.service.memory_max,
        gateway_memory=gateway.service.memory_max,
    )


def _systemctl(user: bool, *args: str) -> int:
    cmd = ["systemctl", *(["--user"] if user else []), *args]
    return subprocess.run(cmd, check=False).returncode


def install(user: bool, dry_run: bool) -> int:
    from klaw.errors import KlawError
    from klaw.service import systemd_running, unit_dir

    try:
        units = _units(user)
    except KlawError as exc:
        print(f"klaw: {exc}", file=sys.stderr)
        return 1
    where = unit_dir(user)
    if dry_run:
        for u in units:
            print(f"# {where / u.name}\n{u.text}")
        return 0
    if not systemd_running():
        print(
            "klaw: systemd is not running as PID 1 here, so there is nothing to install "
            "the units into; `klaw service install --dry-run` prints them",
            file=sys.stderr,
        )
        return 1
    where.mkdir(parents=True, exist_ok=True)
    for u in units:
        (where / u.name).write_text(u.text, encoding="utf-8")
        print(f"wrote {where / u.name}")
    if _systemctl(user, "daemon-reload") != 0:
        return 1
    return _systemctl(user, "enable", "--now", *(u.name for u in units))


def status(user: bool) -> int:
    from klaw.service import UNITS, systemd_running

    if not systemd_running():
        print("klaw: systemd is not running as PID 1 here", file=sys.stderr)
        return 1
    return _systemctl(user, "status", "--no-pager", *UNITS)


def uninstall(user: bool) -> int:
    from klaw.service import UNITS, systemd_running, unit_dir

    if not systemd_running():
        print("klaw: systemd is not running as PID 1 here", file=sys.stderr)
        return 1
    _systemctl(user, "disable", "--now", *UNITS)
    for name in UNITS:
        (unit_dir(user) / name).unlink(missing_ok=True)
    return _systemctl(user, "daemon-reload")

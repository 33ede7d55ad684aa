"""Sandbox mounts as engine.yaml writes them (`codeExecution.volumeMounts`).

A leaf: config validates the entries with it and the sandbox policy turns them into
mounts, so neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = ["RESERVED", "Mount", "parse_mount"]

#: Paths inside the sandbox a mount may not cover: the system and Klaw's own mounts.
RESERVED = frozenset(
    {"/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/sbin", "/sys", "/usr"}
    | {"/code", "/output", "/tmp", "/var", "/run"}
)


@dataclass(frozen=True, slots=True)
class Mount:
    host: Path
    target: str  # absolute path inside the sandbox
    writable: bool


def parse_mount(entry: str) -> Mount:
    """`HOST[:CONTAINER][:ro|rw]` → Mount; ValueError says what is wrong.

    Without CONTAINER, `.../skills` goes to `/skills` and anything else to
    `/mnt/<name>`; without a mode the mount is read-only.
    """
    parts = entry.split(":")
    writable = False
    if parts[-1] in ("ro", "rw"):
        writable = parts.pop() == "rw"
    if not 1 <= len(parts) <= 2 or not parts[0]:
        raise ValueError(f"{entry!r}: write HOST[:CONTAINER][:ro|rw]")
    host = Path(parts[0]).expanduser()
    if not host.is_absolute():
        raise ValueError(f"{entry!r}: the host path must be absolute")
    if len(parts) == 2:
        target = parts[1]
    else:
        target = "/skills" if host.name == "skills" else f"/mnt/{host.name or 'root'}"
    pure = PurePosixPath(target)
    if not pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"{entry!r}: the sandbox path {target!r} must be absolute, without '..'")
    target = str(pure)
    covered = {str(p) for p in (pure, *pure.parents)}
    if target in RESERVED or (covered & RESERVED) - {"/"}:
        raise ValueError(f"{entry!r}: {target} is reserved inside the sandbox; pick e.g. /mnt/...")
    return Mount(host, target, writable)

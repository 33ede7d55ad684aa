"""The archive's format: member names, the manifest, and what both sides check."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final

from klaw.errors import BackupError, SchemaTooNew
from klaw.paths import KlawPaths, unsafe_workspace

FORMAT: Final = "klaw-backup"
#: Raised when the layout or the manifest changes incompatibly; a newer one is refused.
FORMAT_VERSION: Final = 1
MANIFEST: Final = "manifest.json"
ROOTS: Final = ("config", "data", "workspace")
#: The config dir's files that are Klaw's; anything else there (`*.env` files with
#: keys) stays out of the archive.
CONFIG_FILES: Final = ("engine.yaml", "gateway.yaml", "allowed-chats.json", "skills.json")
#: The SQLite files, copied with SQLite's online backup, never as files.
DATABASES: Final = ("klaw.db", "scheduler.db")


@dataclass(frozen=True)
class Redaction:
    """A secret the backup left out: `file`'s `key` now reads `${variable}`."""

    file: str
    key: str
    variable: str


@dataclass(frozen=True)
class Member:
    name: str
    type: str  # "file" | "dir"
    size: int = 0
    sha256: str = ""


@dataclass
class Manifest:
    klaw_version: str
    created: str
    workspace: str
    schemas: dict[str, int] = field(default_factory=dict)
    redacted: list[Redaction] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    members: list[Member] = field(default_factory=list)
    format_version: int = FORMAT_VERSION

    def to_json(self) -> bytes:
        doc = {
            "format": FORMAT,
            "formatVersion": self.format_version,
            "klawVersion": self.klaw_version,
            "created": self.created,
            "workspace": self.workspace,
            "schemas": self.schemas,
            "redacted": [asdict(r) for r in self.redacted],
            "leftOut": self.left_out,
            "members": [_member_json(m) for m in self.members],
        }
        return (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes) -> Manifest:
        """Parses a manifest; a newer format is refused before anything else is read."""
        try:
            doc = json.loads(raw.decode("utf-8"))
            if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                raise ValueError("not a Klaw backup manifest")
            version = doc["formatVersion"]
            if not isinstance(version, int):
                raise ValueError("formatVersion is not a number")
            if version > FORMAT_VERSION:
                raise BackupError(
                    f"this backup was made by a newer Klaw ({doc.get('klawVersion', '?')}, "
                    f"backup format {version}; this Klaw reads format {FORMAT_VERSION}): "
                    "upgrade Klaw to restore it"
                )
            return cls(
                klaw_version=str(doc["klawVersion"]),
                created=str(doc["created"]),
                workspace=str(doc["workspace"]),
                schemas={str(k): int(v) for k, v in _mapping(doc["schemas"]).items()},
                redacted=[Redaction(**_mapping(r)) for r in doc["redacted"]],
                left_out=[str(x) for x in doc["leftOut"]],
                members=[Member(**_mapping(m)) for m in doc["members"]],
                format_version=version,
            )
        except BackupError:
            raise
        except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            raise BackupError(f"{MANIFEST} is not readable ({exc})") from None


def _member_json(m: Member) -> dict[str, Any]:
    if m.type == "dir":
        return {"name": m.name, "type": "dir"}
    return asdict(m)


def _mapping(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


def check_name(name: str) -> tuple[str, PurePosixPath]:
    """(root, path below it; "." for the root itself) of a member name; BackupError for
    anything Klaw would not have written: absolute, `..`, an unknown root, a config file
    that is not Klaw's."""
    p = PurePosixPath(name)
    parts = p.parts
    if (
        "\0" in name
        or p.is_absolute()
        or not parts
        or any(part in ("", ".", "..") for part in parts)
        or parts[0] not in ROOTS
        or (parts[0] == "config" and (len(parts) != 2 or parts[1] not in CONFIG_FILES))
    ):
        raise BackupError(f"the archive holds {name!r}, which no Klaw backup contains")
    return parts[0], PurePosixPath(*parts[1:])


def supported_schemas() -> dict[str, int]:
    """The schema version of each database this Klaw reads (and migrates up to)."""
    from klaw import _core
    from klaw.scheduler.ledger import SCHEMA_VERSION

    return {"klaw.db": _core.KLAW_DB_SCHEMA_VERSION, "scheduler.db": SCHEMA_VERSION}


def check_schema(name: str, version: int, supported: Mapping[str, int]) -> None:
    """SchemaTooNew when the backup's database `name` is newer than this Klaw."""
    if version > supported[name]:
        raise SchemaTooNew(
            f"the backup's {name} has schema version {version}, newer than this Klaw's "
            f"({supported[name]}): it was made by a newer Klaw; upgrade Klaw to restore it"
        )


_SQLITE_MAGIC: Final = b"SQLite format 3\0"


def sqlite_user_version(path: Path) -> int:
    """`PRAGMA user_version` of a standalone SQLite file, read from its header (no SQLite
    library opens the file). BackupError when it is not an SQLite database."""
    with path.open("rb") as f:
        header = f.read(100)
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        raise BackupError(f"{path.name} in the archive is not an SQLite database")
    return int.from_bytes(header[60:64], "big", signed=True)


def workspace_in_force(engine_yaml: str | None, paths: KlawPaths) -> Path:
    """The workspace an engine.yaml (its text) names, else `$KLAW_WORKSPACE` or the
    default, as `klaw.config.resolve_workspace` decides, without validating the rest.
    BackupError when it is one no workspace may be (`/`, a home, /etc...): neither
    copied into an archive nor replaced by one."""
    import yaml

    from klaw.config import WORKSPACE_HINT, workspace_key

    data: Any = None
    if engine_yaml:
        try:
            data = yaml.safe_load(engine_yaml)
        except yaml.YAMLError:
            data = None
    found = workspace_key(data, os.environ)
    if found is not None and found.is_absolute():
        workspace, named = found, "engine.yaml workspace"
    else:
        workspace = paths.workspace
        named = "KLAW_WORKSPACE" if os.environ.get("KLAW_WORKSPACE") else "the default workspace"
    why = unsafe_workspace(workspace, paths)
    if why is not None:
        raise BackupError(f"{named}: {why}; {WORKSPACE_HINT}; nothing was changed")
    return workspace


def write_error(target: Path, exc: OSError) -> BackupError:
    """One line for a backup that cannot be written at `target`."""
    reasons = {
        errno.EROFS: "the filesystem is read-only",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.ENOSPC: "no space left on its device",
        errno.EDQUOT: "disk quota exceeded",
        errno.ENOENT: f"the directory {target.parent} does not exist",
        errno.ENOTDIR: f"{target.parent} is not a directory",
    }
    why = reasons.get(exc.errno or 0, exc.strerror or str(exc))
    return BackupError(f"cannot write the backup to {target}: {why}; choose another PATH")

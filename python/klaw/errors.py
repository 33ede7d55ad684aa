"""Klaw's exceptions, one tree for Rust and Python.

    KlawError                       root of everything Klaw raises on purpose
    ├── InvalidInput (ValueError)   bad argument: empty text, wrong vector size, bad path
    ├── StoreError (OSError)        klaw.db could not be opened, read or written
    │   ├── StoreCorrupt            the file is not a usable database: run `klaw reindex`
    │   ├── StoreLocked             another process (the engine) holds the database
    │   └── SchemaTooNew            scheduler.db (or a backup's database) is from a newer Klaw
    ├── ModelError                  the embedding model could not be loaded or run
    │   └── ModelNotFound (FileNotFoundError)  what to install is in the message
    ├── EmbeddingBackendError       the Ollama embedding backend failed
    ├── Cancelled                   long work (indexing) stopped on request (shutdown)
    ├── NotWritable                 a directory Klaw writes to is read-only, full or not ours
    ├── BackupError                 a backup could not be written, or an archive is damaged
    ├── SandboxError                the code sandbox could not run code (not the code's own error)
    │   └── SandboxUnavailable      no backend: no Docker engine answers, no bubblewrap
    ├── ToolError                   a tool's expected failure, worded for the model
    │   └── PathRefused             a path outside the workspace or not allowed (klaw.confined)
    └── ConfigError (ValueError)    a config file is invalid: names the file, key and line

The Rust-side classes are created in `klaw._core`; this module re-exports them so
application code never imports `_core` itself.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from klaw._core import (
    Cancelled,
    InvalidInput,
    KlawError,
    ModelError,
    ModelNotFound,
    StoreCorrupt,
    StoreError,
    StoreLocked,
)

__all__ = [
    "BackupError",
    "Cancelled",
    "ConfigError",
    "EmbeddingBackendError",
    "InvalidInput",
    "KlawError",
    "ModelError",
    "ModelNotFound",
    "NotWritable",
    "SandboxError",
    "SandboxUnavailable",
    "SchemaTooNew",
    "StoreCorrupt",
    "StoreError",
    "StoreLocked",
    "ToolError",
]


class ToolError(KlawError):
    """An expected failure whose message is written for the model (what went wrong, what to do)."""


class EmbeddingBackendError(KlawError):
    """The Ollama embedding backend could not be reached or answered badly."""


class SandboxError(KlawError):
    """The sandbox failed to run code (engine gone, image missing); the message says the cure."""


class SandboxUnavailable(SandboxError):
    """No sandbox backend can run here; the message says why and how to get one."""


class NotWritable(KlawError):
    """A directory Klaw must write to is read-only, full or not writable by this user;
    the message is one line with the path and the cure (`os_error_line`)."""


class BackupError(KlawError):
    """`klaw backup` could not write its archive, or `klaw restore` found the archive
    torn, altered or made by a newer Klaw; nothing was overwritten. The message says why."""


class SchemaTooNew(StoreError):
    """A database was written by a newer Klaw (its `user_version` is above this code's);
    the message names the file, both versions and the cure (upgrade Klaw)."""


def os_error_line(exc: OSError, path: Path | str | None = None) -> str:
    """One line for an OSError of Klaw's own files: the path, what is wrong, the cure.

    Read-only filesystems and permissions need different advice: chmod cannot fix the
    first, remounting cannot fix the second.
    """
    where = Path(path if path is not None else exc.filename or "?")
    if exc.errno == errno.EROFS:
        return (
            f"{where} is on a read-only filesystem (mounted at {_mount_point(where)}): "
            "remount it read-write, or point KLAW_DATA_DIR / KLAW_STATE_DIR at a writable "
            "directory"
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (
            f"{where}: permission denied for this user: `chown $USER {where} && "
            f"chmod u+rwx {where}` (or run Klaw as the user who owns it)"
        )
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{where}: no space left on its device: free some space and start again"
    return f"{where}: {exc.strerror or exc}"


def _mount_point(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    while not os.path.ismount(probe) and probe != probe.parent:
        probe = probe.parent
    return probe


class ConfigError(KlawError, ValueError):
    """A config file failed validation. `problems` holds one line per issue."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: invalid configuration:\n  " + "\n  ".join(problems))

"""Klaw's exceptions, one tree for Rust and Python.

    KlawError                       root of everything Klaw raises on purpose
    ├── InvalidInput (ValueError)   bad argument: empty text, wrong vector size, bad path
    ├── StoreError (OSError)        klaw.db could not be opened, read or written
    │   ├── StoreCorrupt            the file is not a usable database: run `klaw reindex`
    │   └── StoreLocked             another process (the engine) holds the database
    ├── ModelError                  the embedding model could not be loaded or run
    │   └── ModelNotFound (FileNotFoundError)  what to install is in the message
    ├── EmbeddingBackendError       the Ollama embedding backend failed
    ├── Cancelled                   long work (indexing) stopped on request (shutdown)
    └── ConfigError (ValueError)    a config file is invalid: names the file, key and line

The Rust-side classes are created in `klaw._core`; this module re-exports them so
application code never imports `_core` itself.
"""

from __future__ import annotations

from klaw._core import (
    InvalidInput,
    KlawError,
    ModelError,
    ModelNotFound,
    StoreCorrupt,
    StoreError,
    StoreLocked,
)

__all__ = [
    "Cancelled",
    "ConfigError",
    "EmbeddingBackendError",
    "InvalidInput",
    "KlawError",
    "ModelError",
    "ModelNotFound",
    "StoreCorrupt",
    "StoreError",
    "StoreLocked",
]


class EmbeddingBackendError(KlawError):
    """The Ollama embedding backend could not be reached or answered badly."""


class Cancelled(KlawError):
    """Long work (indexing) was stopped on request, e.g. because the engine is stopping."""


class ConfigError(KlawError, ValueError):
    """A config file failed validation. `problems` holds one line per issue."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: invalid configuration:\n  " + "\n  ".join(problems))

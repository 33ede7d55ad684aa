"""Core memory: ``core_memory.json``, the facts always in the system prompt (design §3.5).

The file holds two sections, each a flat object of JSON values::

    {"user": {"name": "Roman", "current_projects": ["trainer app MVP"]},
     "agent": {"learned_rules": ["Don't suggest Spring Boot"]}}

Single writer: the Engine (tools ``memory_core_get/update/delete``). Hand edits go
through ``klaw memory edit`` while the Engine is stopped. Within one process the class
is thread-safe (one lock). Every write is atomic (`klaw.fsutil.atomic_write`: temp file,
fsync, rename, fsync of the directory), so a crash leaves either the old or
the new file, never a mix. A file that does not parse is an error naming the file
and the way out; it is never silently reset.
"""

from __future__ import annotations

import copy
import json
import os
import re
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from klaw.errors import InvalidInput, KlawError
from klaw.fsutil import atomic_write, create_exclusive

__all__ = [
    "SECTIONS",
    "CoreMemory",
    "CoreMemoryCorrupt",
    "CoreMemoryError",
    "CoreMemoryKeyError",
    "parse_user_md",
    "validate_core_memory",
]

SECTIONS = ("user", "agent")


class CoreMemoryError(KlawError):
    """core_memory.json could not be read or written."""


class CoreMemoryCorrupt(CoreMemoryError, ValueError):
    """core_memory.json is not valid JSON or does not have the expected shape."""


class CoreMemoryKeyError(CoreMemoryError, KeyError):
    """The key to delete is not in the section."""

    def __init__(self, section: str, key: str) -> None:
        self.section = section
        self.key = key
        super().__init__(f"core memory section {section!r} has no key {key!r}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


def _check_section(section: str) -> str:
    if section not in SECTIONS:
        raise InvalidInput(f"unknown core memory section {section!r}: use 'user' or 'agent'")
    return section


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not key.strip():
        raise InvalidInput("core memory key must be a non-empty string")
    return key.strip()


def _dumps(data: Any, *, indent: int | None = None) -> str:
    return json.dumps(data, ensure_ascii=False, allow_nan=False, indent=indent)


def validate_core_memory(data: Any) -> dict[str, dict[str, Any]]:
    """Check the shape of a core memory document; return it with both sections.

    Raises ``CoreMemoryCorrupt`` naming the problem. Missing sections become empty;
    unknown top-level keys are refused (they would never reach the prompt).
    """
    if not isinstance(data, dict):
        raise CoreMemoryCorrupt(f"expected a JSON object, got {type(data).__name__}")
    unknown = [k for k in data if k not in SECTIONS]
    if unknown:
        raise CoreMemoryCorrupt(f"unknown sections {unknown}: only 'user' and 'agent' exist")
    out: dict[str, dict[str, Any]] = {}
    for section in SECTIONS:
        body = data.get(section, {})
        if not isinstance(body, dict):
            raise CoreMemoryCorrupt(f"section {section!r} must be an object")
        for key in body:
            if not key.strip():
                raise CoreMemoryCorrupt(f"section {section!r} has an empty key")
        out[section] = body
    try:
        _dumps(out)
    except ValueError as exc:  # NaN/Infinity sneaked in through Python callers
        raise CoreMemoryCorrupt(str(exc)) from exc
    return out


def _empty() -> dict[str, dict[str, Any]]:
    return {section: {} for section in SECTIONS}


class CoreMemory:
    """Read and change ``core_memory.json``; see the module docstring for the rules."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._data: dict[str, dict[str, Any]] | None = None
        self._stamp: tuple[int, ...] | None = None

    # ----------------------------------------------------------------- reading

    def _file_stamp(self) -> tuple[int, ...] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        # ctime too: an edit in place that keeps the size and puts the mtime back.
        return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)

    def _load(self) -> dict[str, dict[str, Any]]:
        """The current data, re-read only when the file changed on disk."""
        stamp = self._file_stamp()
        if self._data is not None and stamp == self._stamp:
            return self._data
        if stamp is None:
            data = _empty()
        else:
            try:
                raw = self.path.read_bytes()
            except OSError as exc:
                # File names only: this text can reach a chat (tool errors); the
                # host's paths must not.
                raise CoreMemoryError(f"cannot read {self.path.name}: {exc.strerror}") from exc
            try:
                data = validate_core_memory(json.loads(raw.decode("utf-8")))
            except (UnicodeDecodeError, ValueError) as exc:
                raise CoreMemoryCorrupt(
                    f"{self.path.name} is not valid core memory ({exc}). Fix it with "
                    "`klaw memory edit`, or reset it (the old file is kept as "
                    f"{self.path.name}.corrupt-<time>)"
                ) from exc
        self._data, self._stamp = data, stamp
        return data

    def exists(self) -> bool:
        return self.path.exists()

    def get(self, section: str | None = None) -> dict[str, Any]:
        """A copy of one section, or of the whole document when ``section`` is None."""
        with self._lock:
            data = self._load()
            if section is None:
                return copy.deepcopy(data)
            return copy.deepcopy(data[_check_section(section)])

    def to_prompt(self) -> str:
        """Compact text for the system prompt; empty string when there is nothing.

        Strings are shown as they are (newlines folded), other values as compact JSON.
        """
        data = self.get()
        lines: list[str] = []
        for section in SECTIONS:
            if not data[section]:
                continue
            lines.append(f"{section.capitalize()}:")
            for key, value in data[section].items():
                text = value if isinstance(value, str) else _dumps(value)
                lines.append(f"- {key}: {' '.join(text.split())}")
        return "\n".join(lines)

    # ----------------------------------------------------------------- writing

    def update(self, section: str, key: str, value: Any) -> None:
        """Set ``section.key`` to a JSON value and save."""
        _check_section(section)
        key = _check_key(key)
        try:
            _dumps(value)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"core memory value for {key!r} is not JSON: {exc}") from exc
        with self._lock:
            data = copy.deepcopy(self._load())
            data[section][key] = copy.deepcopy(value)
            self._save(data)

    def delete(self, section: str, key: str) -> None:
        """Remove ``section.key`` and save; ``CoreMemoryKeyError`` if it is not there."""
        _check_section(section)
        key = _check_key(key)
        with self._lock:
            data = copy.deepcopy(self._load())
            if key not in data[section]:
                raise CoreMemoryKeyError(section, key)
            del data[section][key]
            self._save(data)

    def replace_all(self, data: Mapping[str, Any]) -> None:
        """Replace the whole document (``klaw memory edit``) after validating it."""
        checked = validate_core_memory(copy.deepcopy(dict(data)))
        with self._lock:
            self._save(checked)

    def reset(self) -> Path | None:
        """Start over with empty sections. An existing file is kept beside it as
        ``core_memory.json.corrupt-<time>`` (if it does not load) or ``.bak-<time>``;
        returns that path, or None when there was no file."""
        with self._lock:
            kept: Path | None = None
            if self.path.exists():
                try:
                    self._data = None
                    self._load()
                    tag = "bak"
                except CoreMemoryError:
                    tag = "corrupt"
                stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
                kept = self.path.with_name(f"{self.path.name}.{tag}-{stamp}")
                try:
                    os.link(self.path, kept)  # the old bytes stay under a new name, no copy
                except OSError:  # a filesystem without hard links
                    import shutil

                    shutil.copy2(self.path, kept)
            self._save(_empty())
            return kept

    def _save(self, data: dict[str, dict[str, Any]]) -> None:
        """Atomic write: temp file in the same dir, fsync, rename over, fsync the dir."""
        atomic_write(self.path, _dumps(data, indent=2) + "\n", mkdir=True)
        self._data, self._stamp = data, self._file_stamp()

    # ------------------------------------------------------------ initialising

    def init_from_user_md(self, user_md: Path) -> bool:
        """Create core memory from USER.md, once.

        If ``core_memory.json`` exists (even empty or corrupt), nothing changes and
        False is returned: after the first import the JSON is the source of truth. A
        missing USER.md also returns False without creating anything. Otherwise the
        ``Key: value`` lines of USER.md fill the ``user`` section and True is returned.
        """
        with self._lock:
            if self.path.exists():
                return False
            try:
                # Hand-written file: a stray bad byte should not stop the engine starting.
                text = Path(user_md).read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                return False
            data = _empty()
            data["user"] = parse_user_md(text)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # "Create only if absent", atomically, even against another process racing us.
            if not create_exclusive(self.path, _dumps(data, indent=2) + "\n"):
                return False
            self._data, self._stamp = data, self._file_stamp()
            return True


# "- **Name:** Roman", "- **Name**: Roman", "* Name: Roman", "Name: Roman", "1. Name: x"
_USER_LINE = re.compile(
    r"""^(?:[-*+]|\d+[.)])?\s*          # optional list marker
        (?P<mark>\*\*|__|\*|_)?         # optional bold/italic around the key
        (?P<key>[^:*_`\[\]][^:*`]*?)    # the key (no colon, no emphasis)
        (?:(?P=mark)\s*:|:\s*(?P=mark)|:)  # the colon, inside or outside the emphasis
        \s*(?P<value>.*)$""",
    re.VERBOSE,
)
# Template placeholders such as "_(optional)_" carry no information.
_PLACEHOLDER = re.compile(r"^[_*]*\(.*\)[_*]*$")


def _snake(key: str) -> str:
    return re.sub(r"\W+", "_", key.strip().lower()).strip("_")


def parse_user_md(text: str) -> dict[str, Any]:
    """``Key: value`` facts from an OpenClaw-style USER.md, keys in snake_case.

    Headings, prose, code blocks, empty values and ``_(placeholder)_`` values are
    ignored; a key given several times collects its values in a list.
    """
    facts: dict[str, Any] = {}
    in_code = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_code = not in_code
            continue
        if in_code or not stripped or stripped.startswith(("#", ">", "|")):
            continue
        match = _USER_LINE.match(stripped)
        if match is None:
            continue
        key = _snake(match["key"])
        value = match["value"].strip()
        # Prose that merely contains a colon: long "keys", URLs ("see https://...").
        if not key or len(key) > 48 or len(match["key"].split()) > 6 or value.startswith("//"):
            continue
        if key[-1].isdigit() and value[:1].isdigit():  # a time of day: "Call at 16:00"
            continue
        if not value or _PLACEHOLDER.match(value):
            continue
        if key in facts:
            previous = facts[key]
            facts[key] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            facts[key] = value
    return facts

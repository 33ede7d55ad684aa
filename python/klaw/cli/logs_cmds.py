"""Local file commands: ``klaw logs``, ``klaw memory show``, ``klaw memory edit``.

They work on the files alone, with or without the Engine running, and must start
fast: only paths, the JSONL reader and core memory are imported here (klaw.errors
brings in klaw._core, which is cheap); subprocess/tempfile load only for ``edit``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from klaw.errors import InvalidInput
from klaw.paths import KlawPaths
from klaw.wire.logfile import (
    JsonlTailer,
    LogEntry,
    SkippedLine,
    list_chats,
    tail_records,
    validate_chat_id,
)

__all__ = ["logs", "memory_edit", "memory_show"]

POLL_SECONDS = 0.5
_sleep = time.sleep  # replaced in tests to drive --follow deterministically
_EMPTY_TEMPLATE = '{\n  "user": {},\n  "agent": {}\n}\n'


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def _report_skip(skipped: SkippedLine) -> None:
    _err(f"warning: skipped {skipped.path}:{skipped.line_no}: {skipped.reason}")


def _terminal_columns() -> int:
    """$COLUMNS, else the terminal's width, else 120 (shutil's version costs imports)."""
    try:
        return max(int(os.environ["COLUMNS"]), 20)
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno() if sys.__stdout__ else 1).columns
    except (OSError, ValueError):
        return 120


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` terminal columns (CJK counts double), with an ellipsis."""
    if text.isascii():
        return text if len(text) <= width else text[: width - 1] + "…"
    import unicodedata

    def cols(ch: str) -> int:
        if unicodedata.combining(ch):
            return 0
        return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1

    if sum(cols(c) for c in text) <= width:
        return text
    out, used = [], 0
    for ch in text:
        w = cols(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def _format(entry: LogEntry, chat_width: int, columns: int) -> str:
    record: dict[str, Any] = entry.record
    content = " ".join(record["content"].split())  # one line: fold newlines and tabs
    if record.get("type"):
        content = f"[{record['type']}] {content}".rstrip()
    prefix = f"{record['ts']}  {entry.chat_id:<{chat_width}}  {record['role']:<9}  "
    return prefix + _fit(content, max(columns - len(prefix), 10))


def logs(chat: str | None, follow: bool, lines: int) -> int:
    """Print the last ``lines`` records (of one chat, or all chats merged by time);
    with ``follow``, keep printing new ones until Ctrl-C."""
    root = KlawPaths.from_env().conversations
    if lines < 0:
        _err("error: --lines must be 0 or more")
        return 1
    chats = list_chats(root)
    if chat is not None:
        try:
            validate_chat_id(chat)
        except InvalidInput as exc:
            _err(f"error: {exc}")
            return 1
        if chat not in chats:
            known = ", ".join(chats) if chats else "none yet"
            _err(f"error: no conversation log for chat {chat!r} in {root} (known chats: {known})")
            return 1
    elif not chats:
        _err(f"no conversations yet in {root}")
        if not follow:
            return 0

    columns = _terminal_columns()
    chat_width = max((len(c) for c in ([chat] if chat else chats)), default=8)
    if not follow:
        for entry in tail_records(root, chat, lines, _report_skip):
            print(_format(entry, chat_width, columns))
        return 0
    # The tailer's snapshot bounds the initial tail, so no line is shown twice or lost
    # between printing the tail and following (a line in flight is printed once done).
    tailer = JsonlTailer(root, chat)
    for entry in tail_records(root, chat, lines, _report_skip, upto=tailer.offsets):
        print(_format(entry, chat_width, columns))
    sys.stdout.flush()
    try:
        while True:
            _sleep(POLL_SECONDS)
            for entry in tailer.poll(_report_skip):
                print(_format(entry, chat_width, columns))
            sys.stdout.flush()
    except KeyboardInterrupt:
        return 0


def memory_show() -> int:
    """Pretty-print core_memory.json."""
    from klaw.memory.core import CoreMemory, CoreMemoryError

    path = KlawPaths.from_env().core_memory
    if not path.exists():
        print(
            f"core memory is not initialised yet ({path}): the engine creates it from "
            "USER.md on first start, or run `klaw memory edit`"
        )
        return 0
    try:
        data = CoreMemory(path).get()
    except CoreMemoryError as exc:
        _err(f"error: {exc} (file: {path})")
        return 1
    if not any(data.values()):
        print(f"core memory is empty ({path})")
        return 0
    print(json.dumps(data, indent=2, ensure_ascii=False))
    return 0


def memory_edit() -> int:
    """Edit core memory in $VISUAL/$EDITOR (else vi) on a temp copy; validate the
    result and replace the file atomically. An invalid edit leaves the file as it was
    and is kept beside it as ``core_memory.rejected.json``."""
    import shlex
    import subprocess
    import tempfile

    from klaw.fsutil import atomic_write
    from klaw.memory.core import CoreMemory, CoreMemoryCorrupt, validate_core_memory

    paths = KlawPaths.from_env()
    path = paths.core_memory
    paths.memory_dir.mkdir(parents=True, exist_ok=True)
    original = path.read_bytes() if path.exists() else None
    # A corrupt file is opened as it is: editing is the way to repair it.
    initial = original if original is not None else _EMPTY_TEMPLATE.encode()
    fd, tmp_name = tempfile.mkstemp(
        prefix="core_memory.edit-", suffix=".json", dir=paths.memory_dir
    )
    tmp = Path(tmp_name)
    with os.fdopen(fd, "wb") as fh:
        fh.write(initial)

    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        status = subprocess.run([*shlex.split(editor), str(tmp)], check=False).returncode
    except (OSError, ValueError) as exc:
        tmp.unlink(missing_ok=True)
        _err(f"error: cannot run editor {editor!r}: {exc} (set $VISUAL or $EDITOR)")
        return 1
    if status != 0:
        tmp.unlink(missing_ok=True)
        _err(f"error: editor exited with status {status}; core memory unchanged")
        return 1

    edited = tmp.read_bytes()
    if edited == initial:
        tmp.unlink()
        print("no changes")
        return 0

    def reject(reason: str) -> int:
        kept = paths.memory_dir / "core_memory.rejected.json"
        atomic_write(kept, edited)  # durable before the editor's copy goes
        tmp.unlink()
        _err(f"error: {reason}; core memory unchanged (your edit is kept in {kept})")
        return 1

    try:
        data = json.loads(edited.decode("utf-8"))
    except UnicodeDecodeError:
        return reject("the edit is not valid UTF-8")
    except json.JSONDecodeError as exc:
        return reject(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")
    try:
        checked = validate_core_memory(data)
    except CoreMemoryCorrupt as exc:
        return reject(f"invalid core memory: {exc}")
    current = path.read_bytes() if path.exists() else None
    if current != original:  # the engine wrote meanwhile: do not overwrite its change
        return reject(f"{path} changed while you were editing")
    CoreMemory(path).replace_all(checked)
    tmp.unlink()
    print(f"core memory saved ({path})")
    return 0

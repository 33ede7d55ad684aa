"""What context assembly keeps between turns (each row's message, each tool schema's
JSON) follows the rows and schemas it is given."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_context import make

from filetick import next_tick
from klaw import filekey
from klaw.engine import context as context_module
from klaw.engine.context import StoredMessage
from klaw.llm.types import ToolSchema
from klaw.memory.rows import count_tokens_batch, with_content


def _row(content: str, meta: dict[str, Any] | None = None) -> StoredMessage:
    return StoredMessage(
        id="msg_1",
        channel="telegram",
        chat_id="telegram_1",
        role="user",
        content=content,
        created_at="2026-02-24T14:00:00Z",
        metadata=json.dumps(meta) if meta else None,
    )


def test_a_row_of_the_same_id_with_other_text_or_metadata_is_read_again(
    tmp_path: Path,
) -> None:
    first = _row("hi")
    assert make(tmp_path, window=[first]).messages[-1].content == "hi"
    # A debounced run merged into its last row: same id, the texts joined.
    merged = with_content(first, "hi\nthere")
    assert make(tmp_path, window=[merged]).messages[-1].content == "hi\nthere"
    attached = _row("hi", {"attachments": [{"path": "inbox/a.pdf", "mime": "application/pdf"}]})
    assert make(tmp_path, window=[attached]).messages[-1].content == (
        "hi\n[attached file: inbox/a.pdf (application/pdf)]"
    )
    assert make(tmp_path, window=[first]).messages[-1].content == "hi"


def test_a_tool_schema_with_new_parameters_is_counted_anew(tmp_path: Path) -> None:
    small = {"type": "object", "properties": {}}
    big = {"type": "object", "properties": {"query": {"type": "string", "minLength": 1}}}
    one = ToolSchema("lookup", "Look something up.", small)
    tokens = make(tmp_path, tools=[one]).report.tokens["tools"]
    assert make(tmp_path, tools=[one]).report.tokens["tools"] == tokens
    two = ToolSchema("lookup", "Look something up.", big)
    grown = make(tmp_path, tools=[two]).report.tokens["tools"]
    assert grown == tokens + len(json.dumps(big)) - len(json.dumps(small))
    # A new dict equal to the first (a tool building its schema per call) counts the same.
    again = ToolSchema("lookup", "Look something up.", json.loads(json.dumps(small)))
    assert make(tmp_path, tools=[again]).report.tokens["tools"] == tokens


def test_a_persona_file_edited_to_the_same_size_with_its_mtime_put_back_is_read_again(
    tmp_path: Path,
) -> None:
    """Counted with the default (Rust) counter, whose counts are kept by text."""
    soul = tmp_path / "SOUL.md"
    old = b"You are calm and brief, and you answer in few words.\n"
    soul.write_bytes(old)
    first = make(tmp_path, count_tokens=count_tokens_batch)
    assert "you answer in few words" in (first.messages[0].content or "")
    st = soul.stat()
    new = "Ты спокоен и краток.".encode()
    soul.write_bytes(new + b" " * (len(old) - len(new) - 1) + b"\n")
    os.utime(soul, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (soul.stat().st_size, soul.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    second = make(tmp_path, count_tokens=count_tokens_batch)
    assert "Ты спокоен и краток." in (second.messages[0].content or "")
    section = "## Soul\nТы спокоен и краток.\n"
    assert second.report.tokens["SOUL.md"] == count_tokens_batch([section])[0]
    assert second.report.tokens["SOUL.md"] != first.report.tokens["SOUL.md"]


def test_an_unchanged_persona_file_is_kept_and_an_edit_after_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept path (keys trusted once the file clock has moved on, RACY_NS 0): an
    unchanged file is served from memory, a same-size edit with its mtime put back
    is read again."""
    monkeypatch.setattr(filekey, "RACY_NS", 0)
    soul = tmp_path / "SOUL.md"
    soul.write_bytes(b"You are calm AAAA.\n")
    assert "calm AAAA" in (make(tmp_path).messages[0].content or "")
    assert str(soul) in context_module._FILE_CACHE
    st = soul.stat()
    next_tick(soul)
    soul.write_bytes(b"You are calm BBBB.\n")
    os.utime(soul, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (soul.stat().st_size, soul.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert "calm BBBB" in (make(tmp_path).messages[0].content or "")

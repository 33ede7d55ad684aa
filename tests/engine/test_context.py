"""Context window assembly (klaw.engine.context)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from klaw.config import EngineConfig
from klaw.engine.context import (
    PER_MESSAGE_OVERHEAD,
    AssembledContext,
    ContextInput,
    StoredMessage,
    assemble_context,
    budget_split,
    message_meta,
    model_limits,
    row_to_message,
)
from klaw.llm.types import Message, ToolCall, ToolSchema

NOW = datetime(2026, 2, 24, 14, 30, tzinfo=ZoneInfo("Europe/Prague"))  # a Tuesday


def chars(texts: list[str]) -> list[int]:
    """Deterministic counter: one token per character."""
    return [len(t) for t in texts]


def row(
    n: int,
    role: str,
    content: str,
    *,
    kind: str | None = None,
    meta: dict[str, Any] | None = None,
) -> StoredMessage:
    return StoredMessage(
        id=f"msg_{n:04d}",
        channel="telegram",
        chat_id="telegram_1",
        role=role,
        kind=kind,
        content=content,
        metadata=json.dumps(meta) if meta else None,
        created_at=f"2026-02-24T14:{n % 60:02d}:00Z",
    )


def user_rows(count: int, size: int = 10, start: int = 0) -> list[StoredMessage]:
    return [
        row(start + i, "user" if i % 2 == 0 else "assistant", f"{start + i:04d}".ljust(size, "x"))
        for i in range(count)
    ]


def make(workspace: Path, **kwargs: Any) -> AssembledContext:
    params: dict[str, Any] = {
        "workspace": workspace,
        "core_memory": "",
        "summary": None,
        "window": [],
        "now": NOW,
        "channel": "telegram",
        "context_budget": 100_000,
        "max_tokens": 1000,
        "window_cap": 20,
        "count_tokens": chars,
    }
    params.update(kwargs)
    return assemble_context(ContextInput(**params))


def system_text(ctx: AssembledContext) -> str:
    first = ctx.messages[0]
    assert first.role == "system"
    assert first.content is not None
    return first.content


def write_all(ws: Path) -> None:
    for name in ("SOUL.md", "IDENTITY.md", "AGENTS.md", "TOOLS.md", "USER.md"):
        (ws / name).write_text(f"content of {name}\n", encoding="utf-8")


# ------------------------------------------------------------------ system prompt


def test_sections_in_order(tmp_path: Path) -> None:
    write_all(tmp_path)
    ctx = make(
        tmp_path,
        core_memory="User:\n- name: Roman",
        summary="We talked about the trainer app.",
        skills=[("web-search", "Search the internet"), ("code-review", "Review checklist")],
    )
    text = system_text(ctx)
    headings = [
        "## Soul\ncontent of SOUL.md",
        "## Identity\ncontent of IDENTITY.md",
        "## Instructions\ncontent of AGENTS.md",
        "## Environment Notes\ncontent of TOOLS.md",
        "## About the User\ncontent of USER.md",
        "## Core Memory\nUser:\n- name: Roman",
        "## Earlier in This Conversation\nWe talked about the trainer app.",
        "## Available Skills\n- web-search: Search the internet\n- code-review: Review checklist",
        # Last, so the prefix before it stays cacheable between calls.
        "## Current Context",
    ]
    positions = [text.index(h) for h in headings]
    assert positions == sorted(positions)
    assert "Date: 2026-02-24 (Tuesday)" in text
    assert "Time: 14:30 (Europe/Prague, UTC+01:00)" in text
    assert "Channel: telegram (private chat)" in text
    assert list(ctx.report.tokens) == [
        "SOUL.md",
        "IDENTITY.md",
        "AGENTS.md",
        "TOOLS.md",
        "USER.md",
        "core_memory",
        "summary",
        "skills",
        "context",
        "window",
    ]


def test_fixed_offset_timezone(tmp_path: Path) -> None:
    from datetime import timedelta, timezone

    now = datetime(2026, 3, 1, 9, 5, tzinfo=timezone(timedelta(hours=8)))
    text = system_text(make(tmp_path, now=now))
    assert "Date: 2026-03-01 (Sunday)" in text
    assert "Time: 09:05 (UTC+08:00)" in text
    text = system_text(make(tmp_path, now=datetime(2026, 3, 1, 9, 5, tzinfo=UTC)))
    assert "Time: 09:05 (UTC)" in text


def test_naive_now_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        make(tmp_path, now=datetime(2026, 2, 24, 14, 30))


def test_missing_and_empty_files_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("Be brief.\n", encoding="utf-8")
    (tmp_path / "SOUL.md").write_text("  \n\n", encoding="utf-8")
    ctx = make(tmp_path)
    text = system_text(ctx)
    assert text.startswith("## Instructions\nBe brief.\n")
    for heading in ("## Soul", "## Identity", "## Environment Notes", "## About the User"):
        assert heading not in text
    assert "## Core Memory" not in text  # empty core memory: no section
    assert "## Earlier in This Conversation" not in text
    assert "## Available Skills" not in text
    assert set(ctx.report.tokens) == {"AGENTS.md", "context", "window"}


def test_missing_workspace_directory(tmp_path: Path) -> None:
    ctx = make(tmp_path / "nowhere", window=[row(1, "user", "hi")])
    assert system_text(ctx).startswith("## Current Context")
    assert ctx.messages[-1] == Message.user("hi")


def test_skill_bodies_are_not_read(tmp_path: Path) -> None:
    skill = tmp_path / "skills" / "web-search"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("SECRET BODY of the skill", encoding="utf-8")
    text = system_text(make(tmp_path, skills=[("web-search", "Search\n  the web")]))
    assert "- web-search: Search the web" in text
    assert "SECRET BODY" not in text
    assert "skill_load" in text


# ------------------------------------------------------------------------ budget


def test_budget_split_arithmetic() -> None:
    # 10% margin, then the reply's max_tokens.
    assert budget_split(12000, 8192) == (1200, 8192, 2608, False)
    assert budget_split(8000, 4096) == (800, 4096, 3104, False)
    assert budget_split(1001, 100) == (101, 100, 800, False)  # the margin rounds up
    # No maxTokens: the default reserve.
    assert budget_split(12000, None) == (1200, 4096, 6704, False)
    # A reserve larger than the budget is clamped so 20% stays for the input.
    margin, reserve, usable, clamped = budget_split(16000, 16384)
    assert (margin, reserve, usable, clamped) == (1600, 11520, 2880, True)
    with pytest.raises(ValueError):
        budget_split(0, 10)


def test_report_counts_every_part(tmp_path: Path) -> None:
    (tmp_path / "SOUL.md").write_text("I am Klaw.", encoding="utf-8")
    tools = [
        ToolSchema("memory_search", "Search long-term memory", {"type": "object"}),
        ToolSchema("current_time", "Now"),
    ]
    window = user_rows(3)
    ctx = make(tmp_path, tools=tools, window=window, context_budget=10_000, max_tokens=2000)
    report = ctx.report
    assert (report.margin, report.reserve, report.usable) == (1000, 2000, 7000)
    assert report.tokens["SOUL.md"] == len("## Soul\nI am Klaw.\n")
    schema_json = [
        json.dumps({"name": t.name, "description": t.description, "parameters": t.parameters})
        for t in tools
    ]
    assert report.tokens["tools"] == sum(len(s) for s in schema_json)
    assert report.tokens["window"] == 3 * (10 + PER_MESSAGE_OVERHEAD)
    parts = sum(v for k, v in report.tokens.items())
    assert report.total == parts + PER_MESSAGE_OVERHEAD  # the system message's framing
    assert ctx.tools == tools
    assert not report.over_budget and not report.was_truncated


def test_window_shrinks_to_what_fits(tmp_path: Path) -> None:
    window = user_rows(41, size=100)  # user, assistant, ..., user (the turn's message)
    fixed = make(tmp_path, window=window[-1:]).report.total  # system + the last message
    per_message = 100 + PER_MESSAGE_OVERHEAD
    # Room for the last message and exactly 6.5 more: 6 fit.
    usable = fixed + 6 * per_message + per_message // 2
    budget = (usable + 1000) * 10 // 9 + 1  # margin 10% (rounded up), reserve 1000
    ctx = make(tmp_path, window=window, context_budget=budget, window_cap=20)
    report = ctx.report
    assert report.usable >= usable - 1
    assert report.window_kept == 7
    assert report.window_dropped == 34
    assert report.total <= report.usable
    assert report.total + per_message > report.usable  # one more would not fit
    kept = [m.content for m in ctx.messages[1:]]
    assert kept == [r.content for r in window[-7:]]  # the newest, oldest first


def test_window_respects_cap(tmp_path: Path) -> None:
    window = user_rows(31)
    ctx = make(tmp_path, window=window, window_cap=5)
    assert ctx.report.window_kept == 5
    assert ctx.report.window_dropped == 26
    assert [m.content for m in ctx.messages[1:]] == [r.content for r in window[-5:]]
    # A subagent cap from the config.
    cap = model_limits(EngineConfig(), "glm/glm-4-plus", subagent=True).window_cap
    assert make(tmp_path, window=window, window_cap=cap).report.window_kept == 5


def test_session_break_is_never_crossed(tmp_path: Path) -> None:
    window = [
        *user_rows(6, start=0),
        row(6, "system", "", kind="session_break", meta={"reason": "user_reset"}),
        *user_rows(4, start=7),
        row(11, "system", "", kind="session_break"),
        *user_rows(3, start=12),
    ]
    ctx = make(tmp_path, window=window, window_cap=50)
    assert [m.content for m in ctx.messages[1:]] == [r.content for r in window[-3:]]
    assert ctx.report.window_kept == 3
    assert ctx.report.window_dropped == 0
    assert ctx.report.before_break == 12
    # A break as the very last row: nothing of the old segment comes back.
    ended = make(tmp_path, window=[*user_rows(4), row(9, "system", "", kind="session_break")])
    assert ctx.messages[0].role == "system"
    assert len(ended.messages) == 1
    assert ended.report.window_kept == 0


def _tool_round(start: int, size: int = 10) -> list[StoredMessage]:
    call = Message(
        "assistant",
        None,
        tool_calls=[ToolCall("call_a", "memory_search", {"query": "x"}), ToolCall("call_b", "t")],
    )
    return [
        row(start, "user", "u".ljust(size, "u")),
        row(start + 1, "assistant", "", meta=message_meta(call)),
        row(start + 2, "tool", "a".ljust(size, "a"), meta={"tool_call_id": "call_a"}),
        row(
            start + 3,
            "tool",
            "b".ljust(size, "b"),
            meta=message_meta(Message.tool_result("call_b", "", is_error=True)),
        ),
        row(start + 4, "assistant", "answer".ljust(size, "!")),
        row(start + 5, "user", "next".ljust(size, "?")),
    ]


def test_tool_pairs_round_trip_through_metadata() -> None:
    rows = _tool_round(0)
    assistant = row_to_message(rows[1])
    assert assistant is not None
    assert [c.id for c in assistant.tool_calls] == ["call_a", "call_b"]
    assert assistant.tool_calls[0].arguments == {"query": "x"}
    result = row_to_message(rows[3])
    assert result == Message.tool_result("call_b", "b" * 10, is_error=True)
    # The OpenAI wire shape is accepted too.
    openai = row(
        9,
        "assistant",
        "",
        meta={"tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"k": 1}'}}]},
    )
    parsed = row_to_message(openai)
    assert parsed is not None and parsed.tool_calls[0].arguments == {"k": 1}
    assert row_to_message(row(10, "system", "", kind="session_break")) is None
    assert row_to_message(row(11, "narrator", "?")) is None


def test_files_the_agent_sent_read_as_such_and_its_own_chats_sends_are_left_out() -> None:
    files = [{"path": "charts/plot.png", "mime": "image/png", "size": 2048}]
    # Sent here from another chat (or a job): the chat sees the message and the file.
    elsewhere = row(1, "assistant", "Your chart", meta={"attachments": files, "from_chat": "x_1"})
    msg = row_to_message(elsewhere)
    assert msg is not None and msg.role == "assistant"
    assert msg.content == "Your chart\n[sent file: charts/plot.png (image/png, 2 KiB)]"
    alone = row_to_message(row(2, "assistant", "", meta={"attachments": files}))
    assert alone is not None and alone.content == "[sent file: charts/plot.png (image/png, 2 KiB)]"
    # Sent by this chat's own turn: its tool call and result already tell it.
    own = row(3, "assistant", "Your chart", meta={"attachments": files, "from_chat": "telegram_1"})
    assert row_to_message(own) is None


def test_the_window_opens_with_the_user(tmp_path: Path) -> None:
    """A cut that keeps a reply but not the message it answered drops the reply:
    Anthropic refuses an assistant message first, Gemini a model turn first."""
    window = [row(i, r, f"m{i}") for i, r in enumerate(["user", "assistant"] * 3 + ["user"])]
    ctx = make(tmp_path, window=window, window_cap=4)
    assert [m.content for m in ctx.messages[1:]] == ["m4", "m5", "m6"]
    assert ctx.report.window_kept == 3 and ctx.report.window_dropped == 4
    # The turn's own message always stays, even alone.
    alone = make(tmp_path, window=[row(0, "assistant", "a"), row(1, "user", "u")], window_cap=1)
    assert [m.content for m in alone.messages[1:]] == ["u"]
    only = make(tmp_path, window=[row(0, "assistant", "from a job")], window_cap=5)
    assert [m.content for m in only.messages[1:]] == ["from a job"]


def test_tool_pairs_stay_together(tmp_path: Path) -> None:
    window = _tool_round(0)
    full = make(tmp_path, window=window)
    full_roles = ["user", "assistant", "tool", "tool", "assistant", "user"]
    assert [m.role for m in full.messages[1:]] == full_roles
    assert full.messages[4].is_error
    # A cap of 4 would start the window with a tool result: the whole round goes, and
    # the reply after it too (the window opens with the user).
    ctx = make(tmp_path, window=window, window_cap=4)
    assert [m.role for m in ctx.messages[1:]] == ["user"]
    # A cap of 6 takes the round whole, with the message that asked for it.
    ctx = make(tmp_path, window=window, window_cap=6)
    assert [m.role for m in ctx.messages[1:]] == full_roles
    assert ctx.messages[4].is_error
    # The budget, too, cuts only at unit boundaries.
    fixed = make(tmp_path, window=window[-1:]).report.total
    per = 10 + PER_MESSAGE_OVERHEAD
    usable = fixed + 3 * per  # room for 3 more messages, the round needs more
    budget = (usable + 1000) * 10 // 9 + 1
    ctx = make(tmp_path, window=window, context_budget=budget)
    assert [m.role for m in ctx.messages[1:]] == ["user"]  # no result, no orphaned reply


def test_orphan_tool_results_and_unanswered_calls_are_dropped(tmp_path: Path) -> None:
    call = Message("assistant", "checking", tool_calls=[ToolCall("c1", "f"), ToolCall("c2", "g")])
    window = [
        row(0, "tool", "orphan result", meta={"tool_call_id": "gone"}),
        row(1, "user", "hello"),
        row(2, "assistant", "checking", meta=message_meta(call)),
        row(3, "tool", "only c1", meta={"tool_call_id": "c1"}),
        row(4, "user", "and?"),
    ]
    ctx = make(tmp_path, window=window)
    msgs = ctx.messages[1:]
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "user"]
    assert [c.id for c in msgs[1].tool_calls] == ["c1"]
    assert ctx.report.orphans_dropped == 2  # the orphan result and the unanswered c2


# --------------------------------------------------------------- group privacy


def _private_setup(ws: Path) -> dict[str, Any]:
    (ws / "SOUL.md").write_text("I am Klaw.", encoding="utf-8")
    (ws / "USER.md").write_text("Name: Roman\nHealth: private detail", encoding="utf-8")
    (ws / "MEMORY.md").write_text("MEMORY-SECRET: the bank PIN", encoding="utf-8")
    return {"core_memory": "User:\n- diagnosis: CORE-SECRET", "summary": "Group talk so far."}


def test_group_chat_gets_no_private_memory(tmp_path: Path) -> None:
    kwargs = _private_setup(tmp_path)
    ctx = make(tmp_path, chat_kind="group", **kwargs)
    text = system_text(ctx)
    assert "CORE-SECRET" not in text
    assert "private detail" not in text
    assert "MEMORY-SECRET" not in text
    assert "## Core Memory" not in text and "## About the User" not in text
    assert "I am Klaw." in text and "Group talk so far." in text
    assert "Channel: telegram (group chat)" in text
    assert not ctx.report.private_memory_included
    assert "core_memory" not in ctx.report.tokens and "USER.md" not in ctx.report.tokens


def test_group_chat_with_private_memory_allowed(tmp_path: Path) -> None:
    kwargs = _private_setup(tmp_path)
    ctx = make(tmp_path, chat_kind="group", allow_private_memory_in_groups=True, **kwargs)
    text = system_text(ctx)
    assert "CORE-SECRET" in text and "private detail" in text
    assert "MEMORY-SECRET" not in text  # MEMORY.md is never read here
    assert ctx.report.private_memory_included


def test_private_chat_gets_private_memory(tmp_path: Path) -> None:
    kwargs = _private_setup(tmp_path)
    text = system_text(make(tmp_path, chat_kind="private", **kwargs))
    assert "CORE-SECRET" in text and "private detail" in text
    assert "MEMORY-SECRET" not in text


def test_limits_from_config() -> None:
    config = EngineConfig()
    glm = model_limits(config, "glm/glm-5")
    assert (glm.context_budget, glm.max_tokens, glm.window_cap) == (12000, 8192, 20)
    assert not glm.allow_private_memory_in_groups
    other = model_limits(config, "ollama/unknown")
    assert (other.context_budget, other.max_tokens) == (8000, None)
    config.context.allow_private_memory_in_groups = True
    inp = ContextInput.from_limits(
        model_limits(config, "glm/glm-5"),
        workspace=Path("/nonexistent"),
        core_memory="",
        summary=None,
        window=[],
        now=NOW,
        channel="telegram",
    )
    assert inp.allow_private_memory_in_groups and inp.context_budget == 12000


# ------------------------------------------------------------------- truncation


def test_oversize_workspace_files_are_truncated(tmp_path: Path) -> None:
    soul = "I am Klaw, a careful assistant."
    (tmp_path / "SOUL.md").write_text(soul, encoding="utf-8")
    (tmp_path / "TOOLS.md").write_text("tool note line\n" * 4000, encoding="utf-8")
    (tmp_path / "AGENTS.md").write_text("agent rule here\n" * 2000, encoding="utf-8")
    current = "the current question"
    window = [*user_rows(10), row(99, "user", current)]
    ctx = make(tmp_path, window=window, context_budget=10_000, max_tokens=1000)
    report = ctx.report
    text = system_text(ctx)
    assert set(report.truncated) == {"TOOLS.md", "AGENTS.md"}
    assert report.was_truncated
    assert "[truncated: TOOLS.md was cut to fit the context budget]" in text
    assert "[truncated: AGENTS.md was cut to fit the context budget]" in text
    assert soul in text  # the small file is untouched: largest first
    assert ctx.messages[-1] == Message.user(current)  # never dropped
    assert report.total <= report.usable
    assert not report.over_budget
    # Cut down to a common level: the two big files end up about the same size.
    assert abs(report.tokens["TOOLS.md"] - report.tokens["AGENTS.md"]) < 40
    # Cut at line ends, not mid-word.
    body = text.split("## Environment Notes\n", 1)[1].split("\n[truncated", 1)[0]
    assert all(line == "tool note line" for line in body.splitlines())


def test_current_message_is_kept_even_over_budget(tmp_path: Path) -> None:
    (tmp_path / "SOUL.md").write_text("persona " * 100, encoding="utf-8")
    huge = "q" * 5000
    ctx = make(tmp_path, window=[*user_rows(4), row(9, "user", huge)], context_budget=3000)
    assert ctx.messages[-1] == Message.user(huge)
    assert ctx.report.window_kept == 1
    assert ctx.report.over_budget
    assert ctx.report.truncated == ("SOUL.md",)
    assert "[truncated: SOUL.md" in system_text(ctx)


# ------------------------------------------------------------- real token counter


def test_real_counter_on_russian_and_chinese(tmp_path: Path) -> None:
    (tmp_path / "SOUL.md").write_text(
        "Ты — Клав, внимательный личный помощник. Отвечай кратко и по делу.\n"
        "你是Klaw，一个细心的个人助理。回答要简洁。\n",
        encoding="utf-8",
    )
    ru = "Напомни, пожалуйста, что у меня сегодня запланировано на вечер и завтра утром."
    zh = "请提醒我今天晚上和明天早上有什么安排，还有下周的会议。"
    window = [
        row(i, "user" if i % 2 == 0 else "assistant", ru if i % 3 else zh) for i in range(200)
    ]
    ctx = assemble_context(
        ContextInput(  # no count_tokens: the default, the Rust counter
            workspace=tmp_path,
            core_memory="User:\n- name: Роман\n- city: 布拉格",
            summary=None,
            window=window,
            now=NOW,
            channel="telegram",
            context_budget=6000,
            max_tokens=1000,
            window_cap=1000,
        )
    )
    report = ctx.report
    assert report.usable == 6000 - 600 - 1000
    assert report.total <= report.usable
    assert report.total >= 0.9 * report.usable  # the window filled the budget
    # Sane per-message costs: between 1 token per 6 characters and 1 per character.
    per_message = report.tokens["window"] / report.window_kept
    assert min(len(ru), len(zh)) / 6 < per_message - PER_MESSAGE_OVERHEAD < max(len(ru), len(zh))
    assert 20 < report.window_kept < 200
    assert report.window_dropped == 200 - report.window_kept

"""A turn reads about a window's worth of rows first and more only when needed: the
model gets the window it would get from the chat's whole segment, whatever stands at
the edge of the first read (typed rows, a merged user run, a tool round)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from klaw import _core
from klaw.engine.context import ContextInput, assemble_context, model_limits
from klaw.engine.pipeline import Pipeline, _merge_user_runs
from klaw.llm.openai_compat import build_payload
from klaw.llm.router import Router
from klaw.llm.types import LlmRequest
from klaw.memory import Memory
from klaw.paths import KlawPaths
from klaw.wire.protocol import Error, Inbound, Outbound
from scripted_llm import FakeLLM, engine_config

T = 10.0
CHAT = "telegram_1"
CAP = 5  # context.slidingWindow here: the first read is CAP + 10 rows


def _plain(role: str, text: str) -> tuple[str, str, str | None, dict[str, Any] | None]:
    return (role, text, None, None)


def _typed(text: str) -> tuple[str, str, str | None, dict[str, Any] | None]:
    return ("user", text, "command", None)


def _round(n: int) -> list[tuple[str, str, str | None, dict[str, Any] | None]]:
    calls = [{"id": f"c{n}", "name": "current_time", "arguments": {}}]
    return [
        ("assistant", "", None, {"tool_calls": calls}),
        ("tool", f"12:0{n}", None, {"tool_call_id": f"c{n}"}),
        ("assistant", f"it is 12:0{n}", None, None),
    ]


CASES: dict[str, list[tuple[str, str, str | None, dict[str, Any] | None]]] = {
    # Twelve command rows fill the first read: the window needs older rows.
    "typed rows": [_plain(r, f"m{i}") for i in range(8) for r in ("user", "assistant")]
    + [_typed(f"/status {i}") for i in range(12)],
    # A debounced run of user rows longer than the first read, merged into one message.
    "user run": [_plain("user", f"u{i}") for i in range(16)] + [_plain("assistant", "a")],
    # A tool round whose call is older than the first read's edge.
    "tool round": [_plain("user", "what time?"), *_round(0)]
    + [_typed(f"/status {i}") for i in range(11)],
    # Plain talk: the first read decides.
    "plain": [_plain(r, f"m{i}") for i in range(20) for r in ("user", "assistant")],
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_model_gets_the_window_of_the_whole_segment(
    case: str, tmp_path: Path, klaw_home: KlawPaths, memory: Memory, llm: FakeLLM
) -> None:
    config = engine_config(tmp_path, llm.url, debounceMs=0)
    config = config.model_copy(
        update={"context": config.context.model_copy(update={"sliding_window": CAP})}
    )
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    history = [
        _core.Message(
            id=f"h{i}",
            channel="telegram",
            chat_id=CHAT,
            role=role,
            content=text,
            created_at=(start + timedelta(seconds=i)).isoformat().replace("+00:00", "Z"),
            kind=kind,
            metadata=json.dumps(meta) if meta else None,
        )
        for i, (role, text, kind, meta) in enumerate(CASES[case])
    ]
    memory.store.insert_messages(history)
    memory.store.upsert_session(CHAT, "fake/m", history[0].created_at, history[0].created_at)

    llm.answer("ok")
    sent: list[Outbound | Error] = []

    async def reply(out: Outbound | Error) -> None:
        sent.append(out)

    router = Router(config)
    pipeline = Pipeline(config, klaw_home, memory, router)
    msg = Inbound(id="now", channel="telegram", chat_id=CHAT, ts=datetime.now(UTC), content="hi")
    try:
        await asyncio.wait_for(pipeline.handle(msg, reply), T)
    finally:
        await pipeline.aclose()
        await router.aclose()
    assert isinstance(sent[0], Outbound)

    # What assembling the whole segment gives (the rows as the turn stored them).
    rows = list(memory.store.recent_messages(CHAT, history[0].created_at, 10_000))
    whole = [r for r in rows if r.id.startswith("h")] + [r for r in rows if r.id == "now"]
    limits = model_limits(config, "fake/m")
    expected = assemble_context(
        ContextInput.from_limits(
            limits,
            workspace=klaw_home.workspace,
            core_memory="",
            summary=None,
            window=_merge_user_runs(whole),
            now=datetime.now(UTC),
            channel="telegram",
        )
    )
    want = build_payload(LlmRequest(messages=expected.messages, model="m"))["messages"][1:]
    assert llm.requests[0]["messages"][1:] == want
    assert want[-1]["role"] == "user" and want[-1]["content"].endswith("hi")

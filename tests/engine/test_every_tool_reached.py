"""Every built-in tool is still reached with the lean fixed prompt (issue 27 item 6):
the real engine, the model scripted on 127.0.0.1, engine.yaml's default `tools.eager`.
For each tool group, the model loads the group with `tools_load` when one of its tools
is folded, then calls each of its tools; every call succeeds, and the tools covered are
exactly those the engine offers a private chat (a new tool must be added here)."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from klaw.config.engine import DEFAULT_EAGER_TOOLS
from klaw.paths import KlawPaths
from klaw.sandbox.bwrap import bwrap_problem
from klaw.tools.groups import LOADER_NAME
from klaw.wire.protocol import Inbound, LogLine, Outbound, new_id
from scripted_llm import FakeLLM, call, offered

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gateway"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sandbox"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "web"))
from fake_telegram import FakeTelegram
from sandbox_support import say
from sched_support import engine_running, engine_yaml, until
from web_servers import SearchApi, Site

from engine_harness import OWNER, T, gateway_config, gateway_running

CHAT = f"telegram_{OWNER}"
OTHER = "telegram_200"
Calls = list[tuple[str, dict[str, Any]]]


def plan(site: Site) -> list[tuple[str | None, Calls]]:
    """(group to load, or None for tools offered without a group; the calls in order)."""
    return [
        (None, [("onboarding_done", {})]),  # eager while BOOTSTRAP.md is pending
        ("time", [("current_time", {"timezone": "Asia/Tokyo"})]),
        (
            "memory",
            [
                ("memory_save", {"content": "The garden shed is painted green."}),
                ("memory_search", {"query": "garden shed colour"}),
                ("memory_core_update", {"section": "user", "key": "name", "value": "Ana"}),
                ("memory_core_get", {}),
                ("memory_core_delete", {"section": "user", "key": "name"}),
            ],
        ),
        ("history", [("conversation_search", {"query": "shed"})]),
        (
            "files",
            [
                ("file_write", {"path": "notes/shed.md", "content": "Green, two windows.\n"}),
                ("file_read", {"path": "notes/shed.md"}),
                ("file_list", {}),
            ],
        ),
        (
            "messaging",
            [
                ("send_message", {"chat_id": OTHER, "text": "The shed is done."}),
                ("send_file", {"paths": ["notes/shed.md"]}),
            ],
        ),
        (
            "web",
            [
                ("web_fetch", {"url": f"{site.url}/article"}),
                ("web_search", {"query": "rain tank size"}),
            ],
        ),
        ("code", [("code_execute", {"language": "python", "code": "print(6 * 7)"})]),
        (
            "help",
            [
                ("docs_list", {}),
                ("docs_read", {"path": "engine.md", "limit": 5}),
                ("docs_search", {"query": "tool groups"}),
                ("skill_list", {}),
                ("skill_load", {"name": "code-execute"}),
            ],
        ),
        (
            "schedule",  # last: the subagent's own model call races the turn's answer
            [
                ("schedule_add", {"name": "rent", "cron": "0 0 18 ? * 6L", "message": "Rent"}),
                ("schedule_list", {}),
                ("schedule_remove", {"name": "rent"}),
                ("subagent_spawn", {"name": "research", "message": "Compare heat pumps"}),
            ],
        ),
    ]


async def test_every_built_in_tool_is_reached_through_its_group(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    site, api = Site(), SearchApi()
    await site.start()
    await api.start()
    try:
        await _every_tool(klaw_home, llm, backend, site, api)
    finally:
        await api.close()
        await site.close()


async def _every_tool(
    paths: KlawPaths, llm: FakeLLM, backend: Any, site: Site, api: SearchApi
) -> None:
    sandbox = bwrap_problem() is None  # code_execute is offered only where it can run
    engine_yaml(paths.engine_config, llm.url, maxToolCallRounds=4)
    with paths.engine_config.open("a") as f:
        f.write(
            f"codeExecution:\n  backend: {'bwrap' if sandbox else 'off'}\n"
            f'web:\n  fetch:\n    allowHosts: ["127.0.0.1:{site.port}"]\n'
            f"  search:\n    provider: searxng\n    endpoint: {api.url}\n"
        )
    (paths.workspace / "BOOTSTRAP.md").write_text("# First run\nSay hello.\n")
    turns = [(g, c) for g, c in plan(site) if sandbox or g != "code"]
    loads: list[str] = []
    for group, calls in turns:
        if group is not None and any(name not in DEFAULT_EAGER_TOOLS for name, _ in calls):
            loads.append(group)
            llm.answer(None, [call(f"load-{group}", LOADER_NAME, json.dumps({"group": group}))])
        llm.answer(None, [call(f"c{i}-{n}", n, json.dumps(a)) for i, (n, a) in enumerate(calls)])
        llm.answer("Done.")
    llm.answer("Done.")  # the subagent's run
    records: list[LogLine] = []
    telegram = FakeTelegram()  # send_message and send_file go through the real gateway
    await telegram.start()
    telegram.add_chat(OWNER)
    telegram.add_chat(200)
    cfg = gateway_config(telegram, allowedChatIds=[str(OWNER), "200"])
    async with (
        engine_running(paths, backend) as server,
        gateway_running(paths, telegram, cfg) as gateway,
    ):
        await asyncio.wait_for(gateway.connected.wait(), T)
        for group, _ in turns:
            reply = await _turn(server, f"Use the {group or 'first-run'} tools")
            assert reply.content == "Done."
            records += reply.records
        await until(lambda: not llm.replies, 60)  # the subagent answered too
        await telegram.wait_sent(200, 1, T)
    await telegram.close()
    assert [u.chat_id for u in telegram.uploads] == [OWNER]

    covered = {name for _, calls in turns for name, _ in calls}
    first = llm.requests[0]
    assert covered == offered(first) - {LOADER_NAME}, "a built-in tool is not covered here"
    sent_first = {t["function"]["name"] for t in first["tools"]}
    assert sent_first == {*DEFAULT_EAGER_TOOLS, "onboarding_done", LOADER_NAME}
    # After a group's tools_load, the next request sends every schema of the group.
    requests = iter(llm.requests)
    for request in requests:
        loaded = [m for m in request["messages"] if m.get("tool_calls")]
        if loaded and loaded[-1]["tool_calls"][0]["function"]["name"] == LOADER_NAME:
            group = json.loads(loaded[-1]["tool_calls"][0]["function"]["arguments"])["group"]
            (_, calls) = next(t for t in turns if t[0] == group)
            assert {n for n, _ in calls} <= {t["function"]["name"] for t in request["tools"]}
            loads.remove(group)
    assert loads == []
    results = [r for r in records if r.role == "tool"]
    assert [(r.meta["tool"], r.content) for r in results if r.meta.get("is_error")] == []
    assert {r.meta["tool"] for r in results} == covered | {LOADER_NAME}


async def _turn(server: Any, text: str) -> Outbound:
    """The reply to `text` in the owner's chat (its tool rounds in `records`)."""
    got: list[Any] = []

    async def reply(msg: Any) -> None:
        got.append(msg)

    msg = Inbound(id=new_id(), ts=datetime.now(UTC), channel="telegram", chat_id=CHAT, content=text)
    await server.handler.handle(msg, reply)
    (out,) = [m for m in got if isinstance(m, Outbound)]
    return out


async def test_a_folded_tool_called_without_loading_runs_and_loads_its_group(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    """A model that knows a folded tool's name (AGENTS.md names memory_core_update) calls
    it directly: it runs, and from the next call on its group's schemas are sent; a
    call with wrong arguments is told why and gets the schema the same way."""
    engine_yaml(klaw_home.engine_config, llm.url, maxToolCallRounds=4)
    update = {"section": "user", "key": "city", "value": "Brno"}
    llm.answer(None, [call("c1", "memory_core_update", json.dumps(update))])
    llm.answer("Noted.")
    llm.answer(None, [call("c2", "schedule_list", json.dumps({"verbose": True}))])
    llm.answer(None, [call("c3", "schedule_list", "{}")])
    llm.answer("No jobs of yours.")
    async with engine_running(klaw_home, backend) as server:
        assert await say(server, "I live in Brno now") == ["Noted."]
        assert await say(server, "Which jobs are there?") == ["No jobs of yours."]
    before, after, _, wrong, right = llm.requests
    names = [{t["function"]["name"] for t in r["tools"]} for r in llm.requests]
    assert "memory_core_update" not in names[0] and "memory_core_update" in offered(before)
    assert {"memory_core_get", "memory_core_update", "memory_core_delete"} <= names[1]
    assert '"city": "Brno"' in klaw_home.core_memory.read_text()
    assert "schedule_list" not in names[2]
    assert "Invalid arguments for schedule_list" in wrong["messages"][-1]["content"]
    assert "schedule_list" in names[3] and "schedule_list" in names[4]
    assert "- summaries: " in right["messages"][-1]["content"]  # the built-in job listed
    assert after["messages"][-1]["role"] == "tool"


async def test_a_group_chat_is_offered_no_private_tool_in_any_line(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    """Folding keeps group chats' privacy: no line of tools_load names a private tool,
    and calling one directly is refused as unknown. (The heartbeat's lean set, every
    schema sent though file_list is folded elsewhere: test_heartbeat_and_costs.py.)"""
    from klaw.engine.pipeline import PRIVATE_TOOLS

    engine_yaml(klaw_home.engine_config, llm.url, maxToolCallRounds=4)
    llm.answer(None, [call("c1", "memory_core_get", "{}")])
    llm.answer("Nothing for you here.")
    async with engine_running(klaw_home, backend) as server:
        got = await say(server, "what do you know about the owner?", "telegram_-300", True)
        assert got == ["Nothing for you here."]
    group, refused = llm.requests
    assert LOADER_NAME in offered(group) and not offered(group) & PRIVATE_TOOLS
    assert "Unknown tool 'memory_core_get'" in refused["messages"][-1]["content"]

"""A nearly free idle day: the heartbeat skips its model call while nothing it reads has
changed since a silent run (scheduler/quiet.py), and looks again as soon as something
does: a file it names, the owner's chats, the day when it speaks of days, or a run
that spoke."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from sched_support import (
    CHAT,
    T,
    engine_running,
    engine_yaml,
    history,
    until,
)

from klaw.paths import KlawPaths
from klaw.scheduler.quiet import heartbeat_digest
from scripted_llm import FakeLLM

EVERY_SECOND = "* * * * * ?"
SILENT = '{"silent": true, "reason": "nothing new"}'


def heartbeat_calls(llm: FakeLLM) -> int:
    return sum("HEARTBEAT.md" in str(r["messages"][-1].get("content")) for r in llm.requests)


async def statuses() -> list[str]:
    return [r["status"] for r in reversed(await history("heartbeat"))]


async def quiet_runs_after(count: int, llm: FakeLLM, calls: int) -> list[str]:
    """Waits until the heartbeat made more than `calls` model calls and `count` quiet
    runs follow the last one."""

    async def loop() -> list[str]:
        while True:
            if heartbeat_calls(llm) <= calls:
                await asyncio.sleep(0.2)
                continue
            got = await statuses()
            tail = [s for s in got if s != "skipped"]
            woke = [i for i, s in enumerate(tail) if s in ("silent", "ok")]
            if woke and tail[woke[-1] + 1 :].count("quiet") >= count:
                return got
            await asyncio.sleep(0.2)

    return await asyncio.wait_for(loop(), T)


async def test_an_unchanged_heartbeat_costs_one_call_and_a_change_wakes_it_again(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url, heartbeat={"cron": EVERY_SECOND})
    notes = klaw_home.workspace / "notes"
    notes.mkdir(parents=True)
    (notes / "todo.md").write_text("- call the plumber\n")
    for _ in range(20):
        llm.answer(SILENT)
    async with engine_running(klaw_home, backend):
        (klaw_home.workspace / "HEARTBEAT.md").write_text("- Anything overdue in notes/?\n")
        await quiet_runs_after(3, llm, 0)
        assert heartbeat_calls(llm) == 1  # one look, then quiet runs at no cost

        (notes / "todo.md").write_text("- call the plumber\n- pay the rent\n")
        await quiet_runs_after(2, llm, 1)
        assert heartbeat_calls(llm) == 2  # a file in the folder it names changed

        chat = klaw_home.conversations / CHAT
        chat.mkdir(parents=True, exist_ok=True)
        (chat / "2027-01-01.jsonl").write_text('{"id": "m1"}\n')
        await quiet_runs_after(2, llm, 2)
        assert heartbeat_calls(llm) == 3  # the owner's chat has a new message

        llm.replies.clear()
        llm.answer("The rent is due tomorrow.")  # a run that speaks …
        for _ in range(10):
            llm.answer(SILENT)
        (notes / "todo.md").write_text("- pay the rent\n")
        await quiet_runs_after(2, llm, 4)
        assert heartbeat_calls(llm) == 5  # … is followed by another look
        (klaw_home.workspace / "HEARTBEAT.md").write_text("- Anything overdue in notes/ ?\n")
        await until(lambda: "notes/ ?" in str(llm.requests[-1]["messages"][-1]["content"]))
        # a new checklist is a new look (the old job may look once more as the file's
        # stat changes before the new job replaces it), then quiet again
        await quiet_runs_after(1, llm, heartbeat_calls(llm) - 1)


def test_the_digest_names_the_day_in_the_owners_zone_only_when_the_checklist_does(
    tmp_path: Path,
) -> None:
    ws, conv = tmp_path / "ws", tmp_path / "conversations"
    ws.mkdir()
    zone = ZoneInfo("Pacific/Kiritimati")  # UTC+14: its day starts at 10:00 UTC
    before = datetime(2027, 1, 1, 9, 59, tzinfo=UTC)
    after = datetime(2027, 1, 1, 10, 1, tzinfo=UTC)
    daily = "- Anything due today?"
    plain = "- Anything in the inbox?"
    assert heartbeat_digest(daily, ws, conv, zone, before) != heartbeat_digest(
        daily, ws, conv, zone, after
    )
    assert heartbeat_digest(plain, ws, conv, zone, before) == heartbeat_digest(
        plain, ws, conv, zone, after
    )
    for word in ("сегодня", "今天"):
        assert heartbeat_digest(word, ws, conv, zone, before) != heartbeat_digest(
            word, ws, conv, zone, after
        )


def test_the_digest_never_looks_outside_the_workspace_and_stays_bounded(tmp_path: Path) -> None:
    ws, conv = tmp_path / "ws", tmp_path / "conversations"
    (ws / "big").mkdir(parents=True)
    outside = tmp_path / "secret.txt"
    outside.write_text("x")
    (ws / "link.txt").symlink_to(outside)
    for i in range(6000):
        (ws / "big" / f"{i}.md").write_text("")
    now = datetime(2027, 1, 1, tzinfo=UTC)
    text = "- check ../secret.txt, /etc/passwd, ~/x.txt, link.txt and big/"
    first = heartbeat_digest(text, ws, conv, None, now)
    outside.write_text("changed")  # outside the workspace: not looked at
    os.utime(outside, (1, 1))
    assert heartbeat_digest(text, ws, conv, None, now) == first
    (ws / "big" / "0.md").write_text("new")  # inside, within the bound
    os.utime(ws / "big" / "0.md", (2, 2))
    assert heartbeat_digest(text, ws, conv, None, now) != first

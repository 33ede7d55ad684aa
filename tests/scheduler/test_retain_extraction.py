"""Facts extracted in the summary's own model call: the real engine, the scripted model
server, the day's log in the workspace, the fact rows in klaw.db."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sched_support import engine_running, engine_yaml, until
from test_summaries import CHAT, is_summary_request, say

from klaw.config import load_engine_config
from klaw.memory import Memory
from klaw.memory.retain import parse_retain
from klaw.memory.summaries import RETAIN_MARK, newest_summary, retain_extracted, split_answer
from klaw.memory.versioning import versioner
from klaw.paths import KlawPaths
from klaw.scheduler.summaries import SYSTEM
from scripted_llm import FakeLLM

RETAIN = (
    f"{RETAIN_MARK}\n"
    "- W(a=project) @Alex: Alex is building a garden shed of larch.\n"
    "- O(c=0.7) @Alex: Alex prefers larch to pine for outdoor work.\n"
    "- no prefix, left out\n"
    "- O(c=high) @Alex: a bad confidence, left out\n"
)


def summaries(paths: KlawPaths) -> list[Path]:
    return sorted((paths.summaries / CHAT).glob("*.md"))


def facts_of(paths: KlawPaths, backend: Any) -> list[tuple[str | None, str, int]]:
    config = load_engine_config(paths.engine_config)
    with Memory.open(paths=paths, config=config, backend=backend) as mem:
        return [(f.kind, f.path, f.line) for f in mem.store.facts()]


def test_the_prompt_asks_for_retain_bullets_after_the_mark() -> None:
    assert RETAIN_MARK in SYSTEM and "@Name" in SYSTEM and "O(c=" in SYSTEM
    text, bullets = split_answer("- a summary\n\n=== retain ===\n- W @A: x\nprose\n* S: y")
    assert text == "- a summary" and bullets == ["W @A: x", "S: y"]
    assert split_answer("- only a summary") == ("- only a summary", None)


async def test_facts_come_with_the_summary_and_a_second_extraction_adds_none(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url, summarization={"everyMessages": 2})
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    llm.answer("40 planks.")
    llm.answer(f"- Alex builds a shed of larch.\n\n{RETAIN}")
    llm.answer("Thursday.")
    llm.answer(f"- Alex builds a shed; timber on Thursday.\n\n{RETAIN}")  # the same facts
    async with engine_running(klaw_home, backend) as server:
        await say(server, "How many planks for the shed?")
        await until(lambda: len(summaries(klaw_home)) == 1)
        await say(server, "When does the larch come?")
        await until(lambda: len(summaries(klaw_home)) == 2)
        await until(lambda: sum(is_summary_request(r) for r in llm.requests) == 2)
    first, second = summaries(klaw_home)
    assert RETAIN_MARK not in first.read_text() and "@Alex" not in second.read_text()
    day = second.name[:10]  # the log of the summary's day (the owner's zone)
    log_file = klaw_home.workspace / "memory" / f"{day}.md"
    text = log_file.read_text()
    assert text.count("garden shed of larch") == 1 and text.count("larch to pine") == 1
    assert "no prefix" not in text and "c=high" not in text
    facts = parse_retain(text, f"memory/{day}.md")
    assert [(f.kind, f.entities, f.attribute) for f in facts] == [
        ("world", ("Alex",), "project"),
        ("opinion", ("Alex",), None),
    ]
    # Indexed as the log was written: two rows, cited by their lines.
    assert facts_of(klaw_home, backend) == [
        ("world", f"memory/{day}.md", facts[0].line),
        ("opinion", f"memory/{day}.md", facts[1].line),
    ]


@pytest.mark.parametrize(
    "answer",
    [
        "- A summary without a retain part.",
        f"- A summary.\n\n{RETAIN_MARK}\n",
        f"- A summary.\n\n{RETAIN_MARK}\n- just words\n- O(c=7) @X: bad\n",
    ],
)
async def test_a_bad_or_empty_extraction_writes_nothing_and_says_so(
    klaw_home: KlawPaths,
    llm: FakeLLM,
    backend: Any,
    answer: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url, summarization={"everyMessages": 2})
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    llm.answer("Fine.")
    llm.answer(answer)
    with caplog.at_level(logging.WARNING):
        async with engine_running(klaw_home, backend) as server:
            await say(server, "The gate code is 4411 now")
            await until(lambda: newest_summary(klaw_home.summaries / CHAT) is not None)
            await until(lambda: "nothing retained" in caplog.text)  # after the file
    assert not (klaw_home.workspace / "memory").exists()
    assert facts_of(klaw_home, backend) == []


def test_retain_extracted_twice_writes_once_and_indexes(memory: Memory) -> None:
    bullets = ["W @Anna: Anna moved to Lisbon.", "S: We talked about the move."]
    written = retain_extracted(memory, "2026-03-02", bullets, "a test")
    assert written == ["- W @Anna: Anna moved to Lisbon.", "- S: We talked about the move."]
    assert retain_extracted(memory, "2026-03-02", bullets, "a test") == []
    assert [f.line for f in memory.store.facts()] == [5, 6]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_retained_facts_are_one_commit_when_memory_is_versioned(memory: Memory) -> None:
    ws = memory.paths.workspace
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env |= {"GIT_AUTHOR_NAME": "O", "GIT_AUTHOR_EMAIL": "o@x", "GIT_COMMITTER_NAME": "O"}
    env |= {"GIT_COMMITTER_EMAIL": "o@x"}

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(ws), *args], capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    git("init", "-q")
    git("commit", "-q", "--allow-empty", "-m", "owner: start")
    retain_extracted(memory, "2026-03-02", ["W @Anna: Anna moved to Lisbon."], "the summary x")
    assert versioner(ws, memory.config).flush(60)
    assert git("log", "-1", "--format=%s|%b").strip() == (
        "memory: retain: facts for 2026-03-02|the summary x"
    )
    assert "- W @Anna: Anna moved to Lisbon." in git("show", "HEAD:memory/2026-03-02.md")
    retain_extracted(memory, "2026-03-02", ["W @Anna: Anna moved to Lisbon."], "again")
    assert versioner(ws, memory.config).flush(60)
    assert len(git("log", "--format=%h").split()) == 2  # nothing new, no commit

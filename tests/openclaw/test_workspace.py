"""An OpenClaw workspace used as it is: OpenClaw's published templates (their real
text, from the PyPI packages that carry them: see the Makefile and docs/openclaw.md),
a Chinese workspace, BOOTSTRAP.md onboarding and BOOT.md through the real engine, and
write-back into the workspace in OpenClaw's format."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from sched_support import engine_running, engine_yaml, until

from klaw.config import load_engine_config
from klaw.engine.context import ContextInput, assemble_context
from klaw.memory.core import CoreMemory, parse_user_md
from klaw.paths import KlawPaths
from klaw.scheduler.boot import boot_spec
from klaw.scheduler.heartbeat import heartbeat_spec
from klaw.scheduler.ledger import Ledger
from klaw.tools.memory_tools import MemoryCoreUpdate
from klaw.tools.onboarding import onboarding_pending, state_file
from klaw.wire.protocol import Inbound, InboundMeta, new_id
from scripted_llm import FakeLLM, call

CHAT = "telegram_100"
TEMPLATES = Path(
    os.environ.get("KLAW_OPENCLAW_TEMPLATES")
    or Path(__file__).resolve().parents[2] / ".venv" / "openclaw-templates"
)
WHEELS = {
    "nano_openclaw-0.0.57-py3-none-any.whl": (
        "a248648a6ab1e4010a149c41594d0810e2a29a736603c201a43961a76d3764bd",
        "nano_openclaw/_template/workspace/",
    ),
    "openclaw_py-0.1.7-py3-none-any.whl": (
        "55184b52a8b7beed341325a8475e1648589887ab6b9850740104e12ac1cbf469",
        "pyclaw/agents/templates/",
    ),
}


def templates(wheel: str) -> dict[str, str]:
    """File name -> text of OpenClaw's templates inside `wheel` (hash checked)."""
    path = TEMPLATES / wheel
    assert path.is_file(), f"{path} missing: `make test` downloads it (Makefile)"
    digest, prefix = WHEELS[wheel]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    with zipfile.ZipFile(path) as z:
        return {
            n[len(prefix) :]: z.read(n).decode("utf-8")
            for n in z.namelist()
            if n.startswith(prefix) and n.endswith(".md") and "/" not in n[len(prefix) :]
        }


def system_prompt(workspace: Path, chat_kind: str = "private") -> str:
    out = assemble_context(
        ContextInput(
            workspace=workspace,
            core_memory="",
            summary=None,
            window=[],
            now=datetime(2026, 11, 26, 12, tzinfo=UTC),
            channel="telegram",
            context_budget=200_000,
            max_tokens=1000,
            window_cap=10,
            chat_kind=chat_kind,  # type: ignore[arg-type]
        )
    )
    return str(out.messages[0].content)


def body(text: str) -> str:
    from klaw.workspace_text import workspace_text

    return workspace_text(text)


# --- the templates, as OpenClaw publishes them ------------------------------------


def test_openclaws_workspace_files_reach_the_prompt_as_openclaw_sends_them(
    klaw_home: KlawPaths,
) -> None:
    files = templates("nano_openclaw-0.0.57-py3-none-any.whl")
    assert {"AGENTS.md", "SOUL.md", "IDENTITY.md", "USER.md", "TOOLS.md", "HEARTBEAT.md",
            "BOOT.md", "BOOTSTRAP.md"} <= set(files)  # fmt: skip
    assert "\r\n" in files["USER.md"]  # CRLF, as edited on Windows
    ws = klaw_home.workspace
    for name, text in files.items():
        (ws / name).write_bytes(text.encode("utf-8"))
    prompt = system_prompt(ws)
    assert "\r" not in prompt
    for name in ("SOUL.md", "IDENTITY.md", "AGENTS.md", "TOOLS.md", "USER.md", "BOOTSTRAP.md"):
        assert body(files[name]) in prompt, name
    assert prompt.index("## Soul") < prompt.index("## Identity") < prompt.index("## Instructions")
    assert "## First Run" in prompt and "onboarding_done" in prompt  # BOOTSTRAP.md: pending
    # The groups' view: no owner's file, no onboarding.
    group = system_prompt(ws, "group")
    assert body(files["USER.md"]) not in group and body(files["BOOTSTRAP.md"]) not in group
    # USER.md's template is all placeholders: no facts for core memory.
    assert parse_user_md(body(files["USER.md"])) == {}
    cfg = load_engine_config(klaw_home.engine_config)
    # HEARTBEAT.md's template is comments only: no heartbeat job, as in OpenClaw.
    assert heartbeat_spec(files["HEARTBEAT.md"], cfg, "UTC") is None
    # BOOT.md's template has instructions: it runs at start, isolated, silent unless not.
    boot = boot_spec(files["BOOT.md"], cfg, "UTC")
    assert boot is not None and body(files["BOOT.md"]) in boot.message


def test_templates_with_their_frontmatter_lose_it_like_in_openclaw(klaw_home: KlawPaths) -> None:
    files = templates("openclaw_py-0.1.7-py3-none-any.whl")
    ws = klaw_home.workspace
    for name in ("AGENTS.md", "SOUL.md", "TOOLS.md", "BOOTSTRAP.md"):
        assert files[name].startswith("---\n")
        (ws / name).write_text(files[name], encoding="utf-8")
    prompt = system_prompt(ws)
    assert "read_when" not in prompt and "summary:" not in prompt
    for name in ("AGENTS.md", "SOUL.md", "TOOLS.md", "BOOTSTRAP.md"):
        assert body(files[name]) in prompt
        assert body(files[name]).startswith("#")
    cfg = load_engine_config(klaw_home.engine_config)
    assert heartbeat_spec(files["HEARTBEAT.md"], cfg, "UTC") is None


ZH = {
    "SOUL.md": "# SOUL.md - 你是谁\n\n你是小书，一个温和的图书管理员机器人。回答要简短。\n",
    "USER.md": "# USER.md - 关于你的主人\n\n- **Name:** 王芳\n- **时区:** Asia/Shanghai\n",
    "AGENTS.md": "# AGENTS.md - 你的工作区\n\n每次会话先读 SOUL.md 和 USER.md。\n",
    "MEMORY.md": "# MEMORY.md\n\n- 王芳喜欢喝茉莉花茶。\n",
    "memory/2026-01-10.md": "# 2026-01-10\n\n- 王芳把《三体》还给了图书馆。\n",
    "HEARTBEAT.md": "# HEARTBEAT.md\n\n# 保持此文件为空（或只有注释）以跳过心跳。\n",
}


def test_a_chinese_workspace_is_read_and_searched(klaw_home: KlawPaths, memory: Any) -> None:
    """Chinese persona and memory files (written for this test: no published zh-CN
    template is reachable from these machines' registries)."""
    ws = klaw_home.workspace
    for rel, text in ZH.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text, encoding="utf-8")
    prompt = system_prompt(ws)
    assert "你是小书" in prompt and "王芳" in prompt and "每次会话先读" in prompt
    assert parse_user_md(ZH["USER.md"]) == {"name": "王芳", "时区": "Asia/Shanghai"}
    assert (
        heartbeat_spec(ZH["HEARTBEAT.md"], load_engine_config(klaw_home.engine_config), "UTC")
        is None
    )
    memory.index_workspace()
    # Both legs agree on this question. ("王芳还了哪本书？" shares only 王芳 with the log
    # in the keyword leg, which then prefers the shorter MEMORY.md; with two files and
    # equal weights the legs tie and recency decides.)
    hits = memory.search("王芳把哪本书还给了图书馆？", top_k=3)
    assert hits and hits[0].source == "memory/2026-01-10.md"


# --- BOOTSTRAP.md and BOOT.md through the engine ---------------------------------


async def say(server: Any, text: str, *, group: bool = False) -> None:
    msg = Inbound(
        id=new_id(), ts=datetime.now(UTC), channel="telegram", chat_id=CHAT, content=text,
        meta=InboundMeta(group=group),
    )  # fmt: skip

    async def reply(_: Any) -> None:
        return None

    await server.handler.handle(msg, reply)


def tools_of(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", [])}


async def test_bootstrap_onboards_the_owner_and_is_retired_like_openclaw(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    ws = klaw_home.workspace
    bootstrap = templates("openclaw_py-0.1.7-py3-none-any.whl")["BOOTSTRAP.md"]
    (ws / "BOOTSTRAP.md").write_text(bootstrap, encoding="utf-8")
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    llm.answer("Hey. I just came online. Who am I? Who are you?")
    name = json.dumps({"section": "user", "key": "name", "value": "Mara"})
    llm.answer(None, [call("c1", "memory_core_update", name)])
    llm.answer(None, [call("c2", "onboarding_done", "{}")])
    llm.answer("Nice to meet you, Mara.")
    llm.answer("Hello again.")
    async with engine_running(klaw_home, backend) as server:
        await say(server, "hi")
        first = llm.requests[0]
        assert "## First Run" in first["messages"][0]["content"]
        assert "onboarding_done" in tools_of(first)
        await say(server, "I'm Mara. You're Pip.")
        assert not (ws / "BOOTSTRAP.md").exists()
        state = json.loads(state_file(ws).read_text())
        assert state["onboardingCompletedAt"] and state["version"] == 1
        assert CoreMemory(klaw_home.core_memory).get("user") == {"name": "Mara"}
        await say(server, "how are you?")
        last = llm.requests[-1]
        assert "## First Run" not in last["messages"][0]["content"]
        assert "onboarding_done" not in tools_of(last)
    # A BOOTSTRAP.md put back by mistake is ignored once onboarding is recorded.
    (ws / "BOOTSTRAP.md").write_text(bootstrap, encoding="utf-8")
    assert not onboarding_pending(ws)


async def test_boot_md_runs_once_per_engine_start_and_speaks_only_when_needed(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url, heartbeat={"injectInto": CHAT})
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    (klaw_home.workspace / "BOOT.md").write_text(
        "---\nsummary: start-up\n---\n# BOOT.md\n\n- Tell Mara if the backup disk is missing.\n"
    )
    llm.answer("The backup disk is missing.")
    llm.answer("NO_REPLY")  # OpenClaw's silent token
    for start in (1, 2):
        async with engine_running(klaw_home, backend):

            def ran(n: int = start) -> bool:
                ledger = Ledger(klaw_home.scheduler_db)
                try:
                    done = [r for r in ledger.history("boot-md", 10) if r.status != "running"]
                    return len(done) >= n
                finally:
                    ledger.close()

            await until(ran)
    ledger = Ledger(klaw_home.scheduler_db)
    try:
        statuses = [r.status for r in reversed(ledger.history("boot-md", 10))]
    finally:
        ledger.close()
    assert statuses == ["ok", "silent"]
    boot_requests = [r for r in llm.requests if "Follow BOOT.md" in json.dumps(r)]
    assert len(boot_requests) == 2
    assert "backup disk" in json.dumps(boot_requests[0]) and "summary:" not in json.dumps(
        boot_requests[0]
    )
    # The loud one waits in the outbox for the gateway (no gateway in this test).
    pushed = [p.read_text() for p in klaw_home.outbox.glob("*.json")]
    assert ["The backup disk is missing." in p for p in pushed] == [True]
    assert CHAT in pushed[0]


# --- write-back -----------------------------------------------------------------


def writeback_yaml(paths: KlawPaths, url: str) -> None:
    engine_yaml(paths.engine_config, url)
    with paths.engine_config.open("a") as f:
        f.write("compatibility:\n  openclaw:\n    enabled: true\n")


async def test_write_back_appends_in_openclaws_format_and_never_rewrites(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    writeback_yaml(klaw_home, llm.url)
    ws = klaw_home.workspace
    owner_memory = "# MEMORY.md\n\n- Mara prefers tea.\n- Written by hand, no newline at the end"
    (ws / "MEMORY.md").write_text(owner_memory, encoding="utf-8")
    (ws / "USER.md").write_text("# USER.md\n\n- **Name:** Mara\n", encoding="utf-8")
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    bike = json.dumps({"content": "Mara's bike is blue", "durable": True})
    llm.answer(None, [call("c1", "memory_save", bike)])
    llm.answer(None, [call("c2", "memory_save", json.dumps({"content": "Dentist on Friday"}))])
    llm.answer("Noted both.")
    lena = json.dumps({"content": "Lena visits in May", "durable": True})
    llm.answer(None, [call("c3", "memory_save", lena)])
    llm.answer("Noted.")
    # The daily log is named by the day in the owner's zone (scheduler.timezone,
    # Europe/Berlin here), whatever the host's zone: before and after the run, in case
    # the owner's midnight falls during it.
    owner = ZoneInfo(str(load_engine_config(klaw_home.engine_config).scheduler.timezone))
    days = {datetime.now(owner).strftime("%Y-%m-%d")}
    async with engine_running(klaw_home, backend) as server:
        await say(server, "My bike is blue, and the dentist is on Friday.")
        # The owner edits MEMORY.md by hand while the engine runs...
        mem = server.memory
        with (ws / "MEMORY.md").open("a", encoding="utf-8") as f:
            f.write("\n- Added by hand while Klaw runs: the spare key is in the shed.\n")
        # ...which is re-indexed (the workspace watcher), never overwritten.
        await until(
            lambda: any(
                "spare key" in h.content for h in mem.search("where is the spare key", top_k=3)
            )
        )
        await say(server, "Lena visits in May.")
    days.add(datetime.now(owner).strftime("%Y-%m-%d"))
    memory_md = (ws / "MEMORY.md").read_text(encoding="utf-8")
    assert memory_md.startswith(owner_memory + "\n- Mara's bike is blue\n")
    assert (
        "- Added by hand while Klaw runs: the spare key is in the shed.\n- Lena visits in May\n"
        in memory_md
    )
    assert "Dentist" not in memory_md  # not durable: the daily log only
    logs = sorted((ws / "memory").glob("*.md"))
    assert {p.stem for p in logs} <= days, (sorted(days), [p.name for p in logs])
    entries = []
    for log in logs:
        daily = log.read_text(encoding="utf-8").splitlines()
        assert daily[0] == f"# {log.stem}" and daily[1] == ""
        entries += daily[2:]
    assert [line[8:] for line in entries] == [
        "Mara's bike is blue",
        "Dentist on Friday",
        "Lena visits in May",
    ]
    assert all(line.startswith("- ") and line[4] == ":" for line in entries)  # "- HH:MM text"


async def test_user_facts_and_summaries_are_written_back(klaw_home: KlawPaths) -> None:
    from klaw.openclaw.writeback import WriteBack

    klaw_home.engine_config.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.engine_config.write_text(
        "compatibility:\n  openclaw:\n    enabled: true\nscheduler:\n  timezone: Europe/Berlin\n"
    )
    cfg = load_engine_config(klaw_home.engine_config)
    ws = klaw_home.workspace
    (ws / "USER.md").write_text("# USER.md\n\n- **Name:** Mara", encoding="utf-8")
    tool = MemoryCoreUpdate(CoreMemory(klaw_home.core_memory), WriteBack(ws, cfg).user_fact)
    await tool.run({"section": "user", "key": "home_city", "value": "Prague"})
    await tool.run({"section": "agent", "key": "mood", "value": "cheerful"})  # not the owner's
    assert (
        ws / "USER.md"
    ).read_text() == "# USER.md\n\n- **Name:** Mara\n- **Home city:** Prague\n"
    # 23:05 UTC is already the next day in the owner's zone (Europe/Berlin), whatever
    # the host's zone: the daily log and the time are the owner's.
    WriteBack(ws, cfg).summary(
        CHAT, "We planned the trip.", datetime(2026, 11, 25, 23, 5, tzinfo=UTC)
    )
    text = (ws / "memory" / "2026-11-26.md").read_text()
    assert text.startswith("# 2026-11-26\n\n## Conversation summary (telegram_100, 00:05)")
    assert text.endswith("\n\nWe planned the trip.\n")
    off = load_engine_config(Path("/nonexistent.yaml"))
    WriteBack(ws, off).saved("nothing written when off")
    WriteBack(ws, off).summary(CHAT, "nothing")
    assert "nothing" not in (ws / "memory" / "2026-11-26.md").read_text()


@pytest.mark.parametrize("durable", [False, True])
def test_write_back_failing_never_loses_the_fact(
    klaw_home: KlawPaths, backend: Any, durable: bool
) -> None:
    from klaw.memory import Memory
    from klaw.openclaw.writeback import WriteBack

    klaw_home.engine_config.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.engine_config.write_text("compatibility:\n  openclaw:\n    enabled: true\n")
    cfg = load_engine_config(klaw_home.engine_config)
    (klaw_home.workspace / "memory").write_text("a file where the folder should be")
    (klaw_home.workspace / "MEMORY.md").mkdir()
    with Memory.open(paths=klaw_home, config=cfg, backend=backend) as mem:
        assert WriteBack.subscribe(klaw_home.workspace, cfg, mem) is not None
        assert mem.save("the boiler code is 1234", "memory_save", durable=durable)
        assert "1234" in mem.search("boiler code", top_k=1)[0].content


# --- a skill's chat command ------------------------------------------------------


async def test_a_user_invocable_skill_is_a_chat_command_the_model_runs(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    from klaw.engine.daemon import _command_menu
    from klaw.wire.protocol import Command

    engine_yaml(klaw_home.engine_config, llm.url)
    skill = klaw_home.workspace / "skills" / "image-lab"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: image-lab\ndescription: Draw an ASCII picture.\n---\n\nDraw it in ASCII.\n"
    )
    hidden = klaw_home.workspace / "skills" / "secret-recipe"
    hidden.mkdir(parents=True)
    (hidden / "SKILL.md").write_text(
        "---\nname: secret-recipe\ndescription: Grandma's cake.\nuser-invocable: false\n---\n\nX\n"
    )
    cfg = load_engine_config(klaw_home.engine_config)
    menu = {c.name: c for c in _command_menu(cfg, klaw_home)}
    assert menu["image_lab"].prompt and menu["image_lab"].description == "Draw an ASCII picture."
    assert not menu["help"].prompt and "secret_recipe" not in menu
    (klaw_home.conversations / CHAT).mkdir(parents=True)
    llm.answer(None, [call("c1", "skill_load", json.dumps({"name": "image-lab"}))])
    llm.answer("=^.^=")
    llm.answer("Unknown")
    got: list[Any] = []

    async def reply(msg: Any) -> None:
        got.append(msg)

    async with engine_running(klaw_home, backend) as server:
        cmd = Command(
            id=new_id(), channel="telegram", chat_id=CHAT, ts=datetime.now(UTC),
            name="image_lab", args="a cat",
        )  # fmt: skip
        await server.handler.handle(cmd, reply)
        first = llm.requests[0]
        assert first["messages"][-1] == {"role": "user", "content": "/image_lab a cat"}
        assert "calls /image_lab: load the skill `image-lab`" in first["messages"][0]["content"]
        assert "Draw it in ASCII." in str(llm.requests[1]["messages"][-1]["content"])
        assert got[-1].content == "=^.^="
        # A name that is no skill's stays an engine command: no model call.
        unknown = Command(
            id=new_id(), channel="telegram", chat_id=CHAT, ts=datetime.now(UTC), name="nope"
        )
        await server.handler.handle(unknown, reply)
        assert len(llm.requests) == 2 and "Unknown command /nope" in got[-1].content

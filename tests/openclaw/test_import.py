"""`klaw import openclaw` end to end on a realistic OpenClaw home (tests/openclaw/oc_home.py):
the real CLI as a process, the real klaw.db, scheduler.db and embedding model, then
the real engine on what was imported, with a scripted model server on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from oc_home import BOT_TOKEN, FACT, GROUP, LITERAL_KEY, PERSONA, RU_FACT, build_home, tree_digest
from sched_support import engine_running, klaw, log_lines

from klaw.gateway.access import Approvals
from klaw.paths import KlawPaths
from scripted_llm import FakeLLM, call

CHAT = "telegram_100"


def klaw_init_yaml(paths: KlawPaths) -> None:
    """engine.yaml as `klaw init` writes it, with the offline model off and no debounce
    (what a user would do on a machine with a provider)."""
    from klaw.config import default_engine_yaml

    text = default_engine_yaml()
    text = text.replace(
        "    enabled: true                      # no usable provider",
        "    enabled: false  # no usable provider",
        1,
    )
    text = text.replace("  debounceMs: 1500", "  debounceMs: 0", 1)
    paths.engine_config.parent.mkdir(parents=True, exist_ok=True)
    paths.engine_config.write_text(text)


def klaw_files(paths: KlawPaths) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for root in (paths.config_dir, paths.data_dir):
        if root.exists():
            for p in sorted(root.rglob("*")):
                if p.is_file() and ".keyword" not in p.parts and not p.name.startswith("klaw.db"):
                    out[str(p)] = p.read_bytes()
    return out


@pytest.fixture
def home(tmp_path: Path, llm: FakeLLM) -> Path:
    return build_home(tmp_path / "dot-openclaw", llm.url)


async def test_dry_run_prints_the_plan_and_changes_nothing(
    klaw_home: KlawPaths, home: Path
) -> None:
    klaw_init_yaml(klaw_home)
    before_source, before_klaw = tree_digest(home), klaw_files(klaw_home)
    rc, out, err = await klaw("import", "openclaw", str(home), "--dry-run")
    assert rc == 0, err
    assert "dry run: nothing was changed" in out
    assert f"use {home / 'workspace'} in place" in out
    assert "provider local: openai-compatible" in out and "${LOCAL_LLM_KEY}" in out
    assert "cron jobs: 6 of 8" in out
    assert "telegram_100: 8 from 2 session(s)" in out  # RU session + main (tool round kept)
    assert "fallback deepseek/deepseek-chat\n" in out  # the alias "ds" is the same model
    assert "DEEPSEEK_API_KEY" in out and "TELEGRAM_BOT_TOKEN" in out
    assert "'Gone'" in out and "is past" in out  # unmapped, with the reason
    assert LITERAL_KEY not in out and BOT_TOKEN not in out
    assert tree_digest(home) == before_source
    assert klaw_files(klaw_home) == before_klaw


async def test_import_then_the_engine_has_the_persona_jobs_and_past(
    klaw_home: KlawPaths, home: Path, llm: FakeLLM, backend: Any
) -> None:
    klaw_init_yaml(klaw_home)
    before = tree_digest(home)
    rc, out, err = await klaw("import", "openclaw", str(home), timeout=300)
    assert rc == 0, err + out
    assert "reindexed" in out
    assert tree_digest(home) == before  # the source is only read

    # Config: in place, providers by reference, no secret written anywhere.
    eng = yaml.safe_load(klaw_home.engine_config.read_text())
    assert eng["workspace"] == str(home / "workspace")
    local = {"type": "openai-compatible", "endpoint": f"{llm.url}/v1", "apiKey": "${LOCAL_LLM_KEY}"}
    assert eng["providers"]["local"] == local
    assert eng["providers"]["deepseek"]["apiKey"] == "${DEEPSEEK_API_KEY}"
    assert "bedrock" not in eng["providers"]
    assert eng["routing"]["default"] == "local/qwen3-8b"
    assert eng["routing"]["fallback"] == ["deepseek/deepseek-chat"]
    # input: ["text", "image"] is a model that sees images (Klaw's `vision`)
    assert eng["models"]["local/qwen3-8b"] == {
        "contextBudget": 16000,
        "maxTokens": 4000,
        "vision": True,
    }
    assert eng["scheduler"]["heartbeat"]["cron"] == "every 45m"
    assert eng["scheduler"]["heartbeat"]["injectInto"] == CHAT
    assert "# --- Scheduler (docs/scheduler.md) ---" in klaw_home.engine_config.read_text()
    gw = yaml.safe_load(klaw_home.gateway_config.read_text())
    assert gw["channels"]["telegram"]["token"] == "${TELEGRAM_BOT_TOKEN}"
    for f in klaw_files(klaw_home).values():
        assert LITERAL_KEY.encode() not in f and BOT_TOKEN.encode() not in f
    allowed = Approvals(klaw_home.approved_chats).ids()
    assert allowed == {CHAT, "telegram_200", f"telegram_{GROUP}"}
    assert (klaw_home.skills / "daily-quote" / "SKILL.md").is_file()

    # Conversations: envelopes stripped, heartbeat turns and the rewound branch left out.
    lines = log_lines(klaw_home, CHAT)
    texts = [r["content"] for r in lines if r["role"] == "user"]
    assert texts == [f"Запомни, пожалуйста: {RU_FACT}.", f"Please remember: {FACT}.",
                     "Which book did I return yesterday?"]  # fmt: skip
    assert [r.get("type") for r in lines].count("session_break") == 1
    (call_row,) = [r for r in lines if r["meta"].get("tool_calls")]
    assert call_row["meta"]["tool_calls"][0]["name"] == "memory_save"
    assert any(r["role"] == "tool" and r["meta"]["tool_call_id"] == "call_1" for r in lines)
    assert not any("HEARTBEAT" in r["content"] or "rewound" in r["content"] for r in lines)
    assert next(r["content"] for r in log_lines(klaw_home, f"telegram_{GROUP}")).startswith("Lena:")

    # The engine on the imported home.
    llm.answer("Hello, Mara.")
    search = json.dumps({"query": "код от велосипедного замка"})
    llm.answer(None, [call("c1", "conversation_search", search)])
    llm.answer("4711.")
    llm.answer(None, [call("c2", "schedule_list", "{}")])
    llm.answer("Those are your jobs.")
    # As `klaw engine` does (engine.daemon.main): engine.yaml's workspace wins.
    engine_paths = dataclasses.replace(klaw_home, workspace=Path(eng["workspace"]))
    async with engine_running(engine_paths, backend) as server:
        from test_conversation_memory import say

        def tool_result(request: dict[str, Any]) -> str:  # the last one (imported ones precede)
            return str([m["content"] for m in request["messages"] if m["role"] == "tool"][-1])

        await say(server, "Hi!")
        system = " ".join(
            str(m["content"]) for m in llm.requests[0]["messages"] if m["role"] == "system"
        )
        assert PERSONA in system and "Mara" in system  # SOUL.md and USER.md, in place
        assert any(m["role"] == "assistant" and "Dune" in str(m["content"])
                   for m in llm.requests[0]["messages"])  # fmt: skip  # the imported window
        await say(server, "What is my bike lock code?")
        found = tool_result(llm.requests[2])
        assert "4711" in found and f"chat:{CHAT}" in found
        await say(server, "Which jobs do I have?")
        listed = tool_result(llm.requests[4])
        for name in ("morning-brief", "water-plants", "call-the-dentist", "weekly-review",
                     "old-style-reminder", "ping-webhook"):  # fmt: skip
            assert f"- {name}:" in listed
        assert "every 7200s from 2025-12-31T17:00:00+00:00" in listed
        assert "at 2099-03-01T09:30:00+00:00" in listed
        assert "paused" in listed.split("- weekly-review:")[1].split("\n")[0]


async def test_a_second_import_duplicates_nothing(klaw_home: KlawPaths, home: Path) -> None:
    klaw_init_yaml(klaw_home)
    rc, _, err = await klaw("import", "openclaw", str(home), "--no-reindex", timeout=300)
    assert rc == 0, err
    first = klaw_files(klaw_home)
    rc, out, err = await klaw("import", "openclaw", str(home), "--no-reindex", timeout=300)
    assert rc == 0, err
    assert "imported: 0 change(s)" in out
    assert klaw_files(klaw_home) == first
    from klaw.scheduler.service import store_jobs

    assert store_jobs(klaw_home.scheduler_db, []) == []
    import sqlite3

    with sqlite3.connect(klaw_home.scheduler_db) as db:
        (n,) = db.execute("SELECT count(*) FROM apscheduler_jobs").fetchone()
    assert n == 6


async def test_a_malformed_source_file_is_reported_and_the_rest_imported(
    klaw_home: KlawPaths, home: Path
) -> None:
    klaw_init_yaml(klaw_home)
    (home / "cron" / "jobs.json").write_text('{ "version": 1, "jobs": [ { "id": ')
    with (home / "agents/main/sessions/5aa69cdb-42d7-48df-9377-3887a4cff539.jsonl").open("ab") as f:
        f.write(b'{"type":"message","id":"torn","parentId":"a0000009","mess')
        f.write(b"\n\xff\xfe not utf-8\n")
    rc, out, err = await klaw("import", "openclaw", str(home), "--no-reindex", timeout=300)
    assert rc == 0, err
    assert "jobs.json: not valid JSON5" in out and "cron jobs not imported" in out
    assert "line skipped" in out and "not UTF-8" in out
    assert "cron jobs: 0 of 0" in out
    users = [r["content"] for r in log_lines(klaw_home, CHAT) if r["role"] == "user"]
    assert f"Please remember: {FACT}." in users  # the good lines of that file came in
    assert not klaw_home.scheduler_db.exists() or "job " not in out.split("imported:")[1]


async def test_no_openclaw_home_is_a_clear_error(klaw_home: KlawPaths, tmp_path: Path) -> None:
    rc, _out, err = await klaw("import", "openclaw", str(tmp_path / "nowhere"))
    assert rc == 1
    assert "no OpenClaw home here" in err


async def test_import_refuses_while_the_engine_runs(
    klaw_home: KlawPaths, home: Path, backend: Any
) -> None:
    klaw_init_yaml(klaw_home)
    async with engine_running(klaw_home, backend):
        rc, _out, err = await klaw("import", "openclaw", str(home), "--no-reindex")
    assert rc == 1
    assert "stop the engine first" in err and "klaw import" in err
    assert not klaw_home.approved_chats.exists()


async def test_odd_values_other_channels_and_the_owners_own_settings(
    klaw_home: KlawPaths, home: Path
) -> None:
    klaw_init_yaml(klaw_home)
    text = klaw_home.engine_config.read_text()
    own_ws = klaw_home.workspace
    klaw_home.engine_config.write_text(
        text.replace("# workspace: ~/klaw-workspace", f"workspace: {json.dumps(str(own_ws))}")
    )
    cfg = (home / "openclaw.json").read_text()
    cfg = cfg.replace('dmPolicy: "pairing"', 'dmPolicy: "open", groupPolicy: "disabled"')
    cfg = cfg.replace(
        '"local/qwen3-8b": {},', '"local/qwen3-8b": {}, "Sonnet": { alias: "sonnet" },'
    )
    (home / "openclaw.json").write_text(cfg)
    (home / "agents/main/agent/auth-profiles.json").write_text('{"version": 1, "profiles": []}')
    (home / "cron/jobs.json").write_text(json.dumps({"version": 1, "jobs": [
        {"id": "a1", "name": "Huge", "schedule": {"kind": "every", "everyMs": 1e300},
         "payload": {"kind": "agentTurn", "message": "x"}},
        {"id": "a2", "name": "Far", "schedule": {"kind": "at", "at": 1e20},
         "payload": {"kind": "agentTurn", "message": "x"}},
        {"id": "a3", "name": 42, "schedule": {"kind": "cron", "expr": "0 9 * * *"},
         "payload": {"kind": "agentTurn", "message": "numbers for names"}},
        {"id": "a4", "name": "Never", "schedule": {"kind": "cron", "expr": "0 0 30 2 *"},
         "payload": {"kind": "agentTurn", "message": "February 30th"}},
    ]}))  # fmt: skip
    sessions = home / "agents/main/sessions"
    index = json.loads((sessions / "sessions.json").read_text())
    index["agent:main:whatsapp:group:120363@g.us"] = {"sessionId": "wa-1", "updatedAt": 1}
    (sessions / "sessions.json").write_text(json.dumps(index))
    wa = json.dumps({
        "type": "message", "id": "w1", "parentId": None, "timestamp": "2026-01-05T10:00:00Z",
        "message": {"role": "user", "content": "[WhatsApp Fam id:+4915] secret family plans"},
    }) + "\n"  # fmt: skip
    (sessions / "wa-1.jsonl").write_text(wa)
    (sessions / "stray.jsonl").write_text(wa.replace("w1", "w2"))  # not listed anywhere
    rc, out, err = await klaw("import", "openclaw", str(home), "--no-reindex", timeout=300)
    assert rc == 0, err + out
    # Other channels' chats stay out of the owner's history.
    assert not any("family plans" in r["content"] for r in log_lines(klaw_home, CHAT))
    assert "whatsapp:group" in out and "stray.jsonl: not in sessions.json" in out
    # "open" DMs are not widened into allowAll, and groups are off as in OpenClaw.
    gw = yaml.safe_load(klaw_home.gateway_config.read_text())
    assert not gw["channels"]["telegram"].get("allowAll")
    assert "dmPolicy open" in out
    assert f"telegram_{GROUP}" not in Approvals(klaw_home.approved_chats).ids()
    # The owner's workspace setting is kept and said so.
    eng = yaml.safe_load(klaw_home.engine_config.read_text())
    assert eng["workspace"] == str(own_ws) and "(yours; OpenClaw's is" in out
    # Odd job values are reported, one by one; the rest is imported.
    assert "'Huge': its interval has no usable everyMs" in out
    assert "'Far': its one-time schedule has no valid time" in out
    assert "42: 0 9 * * * (" in out  # a number for a name is a name
    assert "job never not added" in out and "never fires" in out

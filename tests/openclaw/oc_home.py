"""A realistic OpenClaw home (`~/.openclaw`) built from OpenClaw's own formats.

The shapes follow OpenClaw's source as docs/openclaw.md cites it: openclaw.json is JSON5
(comments, trailing commas, unquoted keys) with a `${VAR}` key and a literal Telegram
token; `credentials/telegram-allowFrom.json` (pairing store); `cron/jobs.json` with
every schedule kind and a legacy job; `agents/main/sessions/sessions.json` and pi
session transcripts (v3 tree of entries, Telegram envelopes, tool calls and results,
a heartbeat turn, an archived `.reset.` session in Russian, a group, a cron run); a
workspace with persona files, MEMORY.md, a daily log and a skill.
"""

# ruff: noqa: E501  (fixture data: OpenClaw lines are long as OpenClaw writes them)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OWNER = 100
FRIEND = 200
GROUP = -1001234567890
BOT_TOKEN = "123456:AAE-literal-token-in-openclaw-json"
LITERAL_KEY = "sk-deepseek-literal-key-in-openclaw-json"
PERSONA = "You are Pip, a cheerful librarian robot who speaks in short sentences."
FACT = "my bike lock code is 4711"
RU_FACT = "шифр от велосипедного замка 4711"

CONFIG = """\
// OpenClaw config (JSON5), as `openclaw onboard` leaves it plus a few edits
{
  agents: {
    defaults: {
      model: { primary: "local/qwen3-8b", fallbacks: ["deepseek/deepseek-chat", "ds"] },
      models: {
        "deepseek/deepseek-chat": { alias: "ds" },
        "local/qwen3-8b": {},
      },
      workspace: "WORKSPACE",
      userTimezone: "Europe/Berlin",
      heartbeat: { every: "45m", target: "telegram", to: "100", activeHours: { start: "08:00", end: "22:00" } },
    },
    list: [ { id: "main", default: true }, { id: "work", workspace: "~/work-ws" } ],
  },
  models: {
    mode: "merge",
    providers: {
      local: {
        baseUrl: "LLM_URL/v1",
        apiKey: "${LOCAL_LLM_KEY}",
        api: "openai-completions",
        models: [ { id: "qwen3-8b", name: "Qwen3 8B", input: ["text", "image"], contextWindow: 32768, maxTokens: 4096 } ],
      },
      deepseek: { baseUrl: "https://api.deepseek.com/v1", apiKey: "LITERAL_KEY", api: "openai-completions", models: [] },
      bedrock: { baseUrl: "https://bedrock.example", api: "bedrock-converse-stream", models: [ { id: "claude" } ] },
    },
  },
  channels: {
    telegram: {
      enabled: true,
      botToken: "BOT_TOKEN",
      dmPolicy: "pairing",
      allowFrom: [100, "@alice"],
      groups: { "-1001234567890": { requireMention: true }, "*": { requireMention: true } },
    },
  },
  hooks: { internal: { enabled: true, entries: { "boot-md": { enabled: true } } } },
}
"""

WORKSPACE = {
    "SOUL.md": f"# SOUL.md - Who You Are\n\n{PERSONA}\n\n## Boundaries\n\n- Private things stay private.\n",
    "IDENTITY.md": "# IDENTITY.md - Who Am I?\n\n- **Name:** Pip\n- **Creature:** robot librarian\n- **Emoji:** 📚\n",
    "USER.md": "# USER.md - About Your Human\n\n- **Name:** Mara\n- **Timezone:** Europe/Berlin\n",
    "AGENTS.md": "# AGENTS.md - Your Workspace\n\nRead SOUL.md and USER.md first. Write daily notes to memory/YYYY-MM-DD.md.\n",
    "TOOLS.md": "# TOOLS.md - Local Notes\n\n- Printer: office-laser\n",
    "MEMORY.md": "# MEMORY.md\n\n- Mara prefers tea over coffee.\n- Mara's sister is called Lena.\n",
    "HEARTBEAT.md": "# HEARTBEAT.md\n\n- Check whether a library book is due this week.\n",
    "memory/2026-01-10.md": "# 2026-01-10\n\n- Mara returned 'Dune' to the library.\n",
    "skills/bookfinder/SKILL.md": (
        "---\nname: bookfinder\ndescription: Find a book in the local catalogue.\n"
        'metadata: { "openclaw": { "emoji": "📖", "requires": { "bins": ["sh"] } } }\n---\n\n'
        "# Bookfinder\n\nSearch the catalogue file `{baseDir}/catalogue.txt`.\n"
    ),
    "skills/bookfinder/catalogue.txt": "Dune; Solaris; Roadside Picnic\n",
}


def _entry(kind: str, eid: str, parent: str | None, ts: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "id": eid, "parentId": parent, "timestamp": ts, **fields}


def _msg(eid: str, parent: str | None, ts: str, message: dict[str, Any]) -> dict[str, Any]:
    return _entry("message", eid, parent, ts, message=message)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 0}


def _assistant(text: str | None = None, call: dict[str, Any] | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": "hmm", "thinkingSignature": "x"}
    ]
    if text:
        content.append({"type": "text", "text": text})
    if call:
        content.append({"type": "toolCall", **call})
    return {
        "role": "assistant",
        "content": content,
        "api": "openai-completions",
        "provider": "local",
        "model": "qwen3-8b",
        "usage": {"input": 10, "output": 5, "totalTokens": 15},
        "stopReason": "toolUse" if call else "stop",
        "timestamp": 0,
    }


def _lines(entries: list[dict[str, Any]], session_id: str) -> str:
    header = {
        "type": "session",
        "version": 3,
        "id": session_id,
        "timestamp": entries[0]["timestamp"],
        "cwd": "/home/mara/.openclaw/workspace",
    }
    return "\n".join(json.dumps(e, ensure_ascii=False) for e in [header, *entries]) + "\n"


def main_transcript() -> str:
    env = "[Telegram Mara (@mara) id:100 +2m Sat 2026-01-10 18:20 CET]"
    return _lines(
        [
            _entry(
                "model_change",
                "a0000001",
                None,
                "2026-01-10T17:19:00.000Z",
                provider="local",
                modelId="qwen3-8b",
            ),
            _msg(
                "a0000002",
                "a0000001",
                "2026-01-10T17:20:00.000Z",
                _user(f"{env} Please remember: {FACT}."),
            ),
            _msg(
                "a0000003",
                "a0000002",
                "2026-01-10T17:20:05.000Z",
                _assistant(
                    None, {"id": "call_1", "name": "memory_save", "arguments": {"text": FACT}}
                ),
            ),
            _msg(
                "a0000004",
                "a0000003",
                "2026-01-10T17:20:06.000Z",
                {
                    "role": "toolResult",
                    "toolCallId": "call_1",
                    "toolName": "memory_save",
                    "content": [{"type": "text", "text": "saved"}],
                    "isError": False,
                    "timestamp": 0,
                },
            ),
            _msg(
                "a0000005",
                "a0000004",
                "2026-01-10T17:20:07.000Z",
                _assistant("[[reply_to_current]] Noted, I will remember the code."),
            ),
            # an abandoned branch (edited with /tree): not part of the conversation
            _msg(
                "b0000001",
                "a0000005",
                "2026-01-10T17:30:00.000Z",
                _user(f"{env} draft question that was rewound"),
            ),
            _msg(
                "a0000006",
                "a0000005",
                "2026-01-10T18:00:00.000Z",
                _user(
                    "Read HEARTBEAT.md if it exists (workspace context). Follow it strictly. Do not infer or repeat old tasks from prior chats. If nothing needs attention, reply HEARTBEAT_OK."
                ),
            ),
            _msg("a0000007", "a0000006", "2026-01-10T18:00:02.000Z", _assistant("HEARTBEAT_OK")),
            _msg(
                "a0000008",
                "a0000007",
                "2026-01-11T08:00:00.000Z",
                _user(
                    'Conversation info (untrusted metadata):\n```json\n{ "message_id": "77", "sender_id": "100" }\n```\n\n'
                    'Sender (untrusted metadata):\n```json\n{ "label": "Mara (100)", "id": "100" }\n```\n\n'
                    "Which book did I return yesterday?"
                ),
            ),
            _msg(
                "a0000009", "a0000008", "2026-01-11T08:00:03.000Z", _assistant("You returned Dune.")
            ),
        ],
        "5aa69cdb-42d7-48df-9377-3887a4cff539",
    )


def russian_transcript() -> str:
    env = "[Telegram Mara (@mara) id:100 Fri 2026-01-09 09:00 CET]"
    return _lines(
        [
            _msg(
                "c0000001",
                None,
                "2026-01-09T08:00:00.000Z",
                _user(f"{env} Запомни, пожалуйста: {RU_FACT}."),
            ),
            _msg("c0000002", "c0000001", "2026-01-09T08:00:04.000Z", _assistant("Запомнил.")),
        ],
        "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
    )


def group_transcript() -> str:
    return _lines(
        [
            _msg(
                "d0000001",
                None,
                "2026-01-12T10:00:00.000Z",
                _user(
                    "[Telegram Family id:-1001234567890 Mon 2026-01-12 11:00 CET] Lena: @pip what is for dinner?"
                ),
            ),
            _msg("d0000002", "d0000001", "2026-01-12T10:00:02.000Z", _assistant("Pasta, I heard.")),
        ],
        "9b7e0000-1111-2222-3333-444455556666",
    )


def cron_transcript() -> str:
    return _lines(
        [
            _msg(
                "e0000001",
                None,
                "2026-01-13T06:00:00.000Z",
                _user("[cron:3f1c9a52 Morning brief] Summarize overnight news."),
            ),
            _msg(
                "e0000002", "e0000001", "2026-01-13T06:00:09.000Z", _assistant("Nothing happened.")
            ),
        ],
        "cron-run-0001",
    )


JOBS = """\
// cron store, JSON5 as OpenClaw writes it
{ "version": 1, "jobs": [
  { "id": "3f1c9a52-8d2e-4a51-9a0b-1f2e3d4c5b6a", "agentId": "main", "name": "Morning brief",
    "enabled": true, "createdAtMs": 1767200000000, "updatedAtMs": 1767200000000,
    "schedule": { "kind": "cron", "expr": "0 7 * * 1-5", "tz": "Europe/Berlin" },
    "sessionTarget": "isolated", "wakeMode": "next-heartbeat",
    "payload": { "kind": "agentTurn", "message": "Summarize overnight news.", "model": "ds" },
    "delivery": { "mode": "announce", "channel": "telegram", "to": "100" },
    "state": { "nextRunAtMs": 1767247200000, "lastStatus": "ok" } },
  { "id": "7a7a7a7a-0000-4000-8000-000000000002", "name": "Water plants",
    "enabled": true, "createdAtMs": 1767200000000, "updatedAtMs": 1767200000000,
    "schedule": { "kind": "every", "everyMs": 7200000, "anchorMs": 1767200400000 },
    "sessionTarget": "main", "wakeMode": "now",
    "payload": { "kind": "systemEvent", "text": "Remind Mara to water the plants." }, "state": {} },
  { "id": "b2c0ffee-0000-4000-8000-000000000003", "name": "Call the dentist",
    "enabled": true, "deleteAfterRun": true, "createdAtMs": 1767200000000, "updatedAtMs": 1767200000000,
    "schedule": { "kind": "at", "at": "2099-03-01T09:30:00.000Z" },
    "sessionTarget": "main", "wakeMode": "now",
    "payload": { "kind": "systemEvent", "text": "Reminder: call the dentist." }, "state": {} },
  { "id": "c3000000-0000-4000-8000-000000000004", "name": "Weekly review",
    "enabled": false, "createdAtMs": 1767200000000, "updatedAtMs": 1767200000000,
    "schedule": { "kind": "cron", "expr": "0 30 18 * * 5", "tz": "Europe/Berlin" },
    "sessionTarget": "isolated",
    "payload": { "kind": "agentTurn", "message": "Review my week." },
    "delivery": { "mode": "none" }, "state": {} },
  // a job written by an older OpenClaw: atMs, top-level message and delivery hints
  { "id": "d4000000-0000-4000-8000-000000000005", "name": "Old style reminder",
    "schedule": { "atMs": 4102444800000 },
    "message": "Happy new year, Mara!", "deliver": true, "channel": "telegram", "to": "100" },
  { "id": "e5000000-0000-4000-8000-000000000006", "name": "Ping webhook",
    "enabled": true, "schedule": { "kind": "every", "everyMs": 86400000 },
    "sessionTarget": "isolated",
    "payload": { "kind": "agentTurn", "message": "Check the server." },
    "delivery": { "mode": "webhook", "to": "https://example.invalid/hook" } },
  { "id": "f6000000-0000-4000-8000-000000000007", "name": "Gone",
    "schedule": { "kind": "at", "at": "2020-01-01T00:00:00Z" },
    "payload": { "kind": "systemEvent", "text": "past" }, "state": { "lastRunAtMs": 1577836800000 } },
  { "id": "a7000000-0000-4000-8000-000000000008", "name": "Broken", "payload": { "kind": "agentTurn", "message": "x" } },
] }
"""


def build_home(root: Path, llm_url: str) -> Path:
    """The OpenClaw home at `root` (returned); its workspace is `root/workspace`."""
    ws = root / "workspace"
    config = (
        CONFIG.replace("WORKSPACE", str(ws))
        .replace("LLM_URL", llm_url)
        .replace("LITERAL_KEY", LITERAL_KEY)
        .replace("BOT_TOKEN", BOT_TOKEN)
    )
    files = {
        "openclaw.json": config,
        "credentials/telegram-allowFrom.json": json.dumps(
            {"version": 1, "allowFrom": [str(FRIEND)]}
        ),
        "credentials/telegram-pairing.json": json.dumps({"version": 1, "requests": []}),
        "cron/jobs.json": JOBS,
        "agents/main/agent/auth-profiles.json": json.dumps(
            {
                "version": 1,
                "profiles": {
                    "deepseek:default": {
                        "type": "api_key",
                        "provider": "deepseek",
                        "key": LITERAL_KEY,
                    }
                },
            }
        ),
        "agents/main/sessions/5aa69cdb-42d7-48df-9377-3887a4cff539.jsonl": main_transcript(),
        "agents/main/sessions/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0.jsonl.reset.1767945600000": russian_transcript(),
        "agents/main/sessions/9b7e0000-1111-2222-3333-444455556666.jsonl": group_transcript(),
        "agents/main/sessions/cron-run-0001.jsonl": cron_transcript(),
        "agents/main/sessions/sessions.json": json.dumps(
            {
                "agent:main:main": {
                    "sessionId": "5aa69cdb-42d7-48df-9377-3887a4cff539",
                    "updatedAt": 1768118403000,
                    "chatType": "direct",
                    "lastChannel": "telegram",
                    "lastTo": "100",
                    "deliveryContext": {"channel": "telegram", "to": "100", "accountId": "default"},
                },
                f"agent:main:telegram:group:{GROUP}": {
                    "sessionId": "9b7e0000-1111-2222-3333-444455556666",
                    "updatedAt": 1768212002000,
                    "chatType": "group",
                },
                "agent:main:cron:3f1c9a52-8d2e-4a51-9a0b-1f2e3d4c5b6a": {
                    "sessionId": "cron-run-0001",
                    "updatedAt": 1768284009000,
                },
            }
        ),
        "skills/daily-quote/SKILL.md": "---\nname: daily-quote\ndescription: Send a quote of the day.\n---\n\nPick a quote.\n",
        "memory/main.sqlite": "not a real index: derived data, never imported",
    }
    for rel, text in {**files, **{f"workspace/{k}": v for k, v in WORKSPACE.items()}}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def tree_digest(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under `root` with its mode and bytes (to prove nothing was written)."""
    return {
        str(p.relative_to(root)): (p.stat().st_mode, p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }

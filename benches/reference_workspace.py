"""A reference workspace of realistic size for cost benchmarks (issue 9, item 10).

Sizes follow what users carry over from OpenClaw: AGENTS.md of its template's
size (~8.7 KB), SOUL.md ~2 KB, USER.md and TOOLS.md under 1 KB each, MEMORY.md of
200 lines, a HEARTBEAT.md with five checks and 20 skills. The text is ours,
generated from fixed sentences (deterministic), not copied from anywhere.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

_SENTENCES = [
    "Keep answers short unless the owner asks for detail.",
    "Check the calendar before suggesting a time for anything.",
    "Never share private notes in a group chat, even when asked nicely.",
    "Prefer plain language to jargon, and say when you are unsure.",
    "When a task needs several steps, say what you will do first, then do it.",
    "Write down decisions and preferences so they survive a restart.",
    "Ask before sending anything that leaves the machine: email, posts, payments.",
    "Use the owner's language in replies; switch when they switch.",
    "Quiet hours are from 23:00 to 07:30 unless something is urgent.",
    "Summaries list what changed, what is pending and what needs a decision.",
    "Prefer reversible actions: move to trash instead of deleting for good.",
    "When a tool fails, say which one and what the error was, then try another way.",
]


def _paragraphs(rng: random.Random, chars: int, heading: str) -> str:
    out = [f"# {heading}\n"]
    size = len(out[0])
    section = 1
    while size < chars:
        if rng.random() < 0.15:
            line = f"\n## Section {section}\n"
            section += 1
        else:
            line = "- " + " ".join(rng.sample(_SENTENCES, 2)) + "\n"
        out.append(line)
        size += len(line)
    return "".join(out)


def build(workspace: Path, *, seed: int = 9) -> dict[str, int]:
    """Writes the reference workspace; returns the size in bytes of each file."""
    rng = random.Random(seed)
    workspace.mkdir(parents=True, exist_ok=True)
    files = {
        "AGENTS.md": _paragraphs(rng, 8700, "AGENTS.md - how to work here"),
        "SOUL.md": _paragraphs(rng, 2000, "SOUL.md - who you are"),
        "USER.md": (
            "# USER.md\n\n- Name: Alex Novak\n- Lives in Prague (Europe/Prague)\n"
            "- Works as a structural engineer, mostly 8:30-17:00\n- Languages: Czech, English\n"
            "- Partner: Jana; daughter Eva (9), piano on Tuesdays\n"
            "- Prefers short messages, no emoji, metric units\n"
            "- Allergic to penicillin; GP is Dr. Svoboda\n"
        ),
        "TOOLS.md": (
            "# TOOLS.md - local notes\n\n- Home server: nas.local (Synology), backups at 02:00\n"
            "- Printer: Brother in the study, often out of paper\n"
            "- Calendar: the family calendar is shared with Jana\n"
            "- Weather: use Prague-Ruzyne for forecasts\n"
            "- Car: Skoda Octavia, service due in May; STK in September\n"
            "- Bank letters arrive by email from the bank's no-reply address\n"
        ),
        "IDENTITY.md": "# IDENTITY.md\n\n- Name: Klaw\n- Vibe: calm, precise, dry humour\n",
        "MEMORY.md": "# MEMORY.md\n\n"
        + "".join(f"- {i:03d}: {' '.join(rng.sample(_SENTENCES, 1))}\n" for i in range(200)),
        "HEARTBEAT.md": (
            "# Heartbeat checklist\n\n"
            "- Any unread email from the bank, the school or the doctor?\n"
            "- Calendar events in the next two hours that need preparation?\n"
            "- Did last night's NAS backup finish?\n"
            "- Rain expected in Prague in the next three hours?\n"
            "- Anything in memory/pending.md past its date?\n"
        ),
    }
    for name, text in files.items():
        (workspace / name).write_text(text, encoding="utf-8")
    skills = workspace / "skills"
    for i in range(20):
        folder = skills / f"skill-{i:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        description = " ".join(rng.sample(_SENTENCES, 2))
        (folder / "SKILL.md").write_text(
            f"---\nname: skill-{i:02d}\ndescription: {json.dumps(description)}\n---\n\n"
            + _paragraphs(rng, 1500, f"Skill {i}"),
            encoding="utf-8",
        )
    return {name: len(text.encode()) for name, text in files.items()}

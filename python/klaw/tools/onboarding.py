"""First-run onboarding from BOOTSTRAP.md, retired the way OpenClaw retires it.

While the workspace has a BOOTSTRAP.md and onboarding is not recorded as done, the
owner's private chats get it in the system prompt ("First Run"): the model gets to
know its owner, writes IDENTITY.md / USER.md and core memory, and then calls
`onboarding_done`. That deletes BOOTSTRAP.md (OpenClaw's template: "Delete this file")
and records `onboardingCompletedAt` in `<workspace>/.openclaw/workspace-state.json`,
OpenClaw's own state file, so neither OpenClaw nor Klaw seeds it again. A BOOTSTRAP.md
left behind after that record is ignored, as OpenClaw ignores it.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from klaw.tools.base import Tool, ToolError

__all__ = ["BOOTSTRAP", "OnboardingDone", "onboarding_pending", "state_file"]

BOOTSTRAP = "BOOTSTRAP.md"


def state_file(workspace: Path) -> Path:
    return workspace / ".openclaw" / "workspace-state.json"


def _state(workspace: Path) -> dict[str, Any]:
    try:
        data = json.loads(state_file(workspace).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def onboarding_pending(workspace: Path) -> bool:
    """BOOTSTRAP.md is there and onboarding was never recorded as done."""
    if not (workspace / BOOTSTRAP).is_file():
        return False
    done = _state(workspace).get("onboardingCompletedAt")
    return not (isinstance(done, str) and done)


def finish_onboarding(workspace: Path) -> None:
    from klaw.fsutil import replace_durably

    state = _state(workspace)
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    state.setdefault("version", 1)
    state.setdefault("bootstrapSeededAt", now)
    state["onboardingCompletedAt"] = now
    path = state_file(workspace)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    replace_durably(tmp, path)
    (workspace / BOOTSTRAP).unlink(missing_ok=True)


class OnboardingDone(Tool):
    name = "onboarding_done"
    description = (
        "Call once the first-run conversation of BOOTSTRAP.md is complete (you know who "
        "you are and who the owner is, and saved it): retires BOOTSTRAP.md."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace

    async def run(self, args: dict[str, Any]) -> str:
        if not await asyncio.to_thread(onboarding_pending, self.workspace):
            raise ToolError("there is no onboarding in progress (no BOOTSTRAP.md)")
        await asyncio.to_thread(finish_onboarding, self.workspace)
        return "Onboarding is done: BOOTSTRAP.md was retired."

"""The owner's on/off for skills: `$XDG_CONFIG_HOME/klaw/skills.json`.

`{"enabled": {name: digest}, "disabled": [names]}`. A skill that `klaw skills check`
flags is off until the owner enables it by name (`klaw skills enable NAME`), which
records a digest of the skill's files as they are then: an edited skill is checked
again and stays off until enabled again. Any skill named in `disabled` is off. A
damaged file turns every skill off (fail closed: which ones were disabled is unknown)
until it is fixed or deleted. Written atomically by the CLI, read on every catalog
scan (the engine sees a change at its next turn).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SkillChoices"]

log = logging.getLogger("klaw.skills")


@dataclass(frozen=True, slots=True)
class SkillChoices:
    enabled: dict[str, str] = field(default_factory=dict)  # name -> digest when enabled
    disabled: frozenset[str] = frozenset()
    broken: bool = False

    @classmethod
    def load(cls, path: Path) -> SkillChoices:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            log.warning("%s unreadable (%s): every skill is off until it is fixed", path, exc)
            return cls(broken=True)
        if not isinstance(data, dict):
            return cls(broken=True)
        en = data.get("enabled", {})
        dis = data.get("disabled", [])
        if not isinstance(en, dict) or not isinstance(dis, list):
            return cls(broken=True)
        return cls(
            {k: v for k, v in en.items() if isinstance(k, str) and isinstance(v, str)},
            frozenset(v for v in dis if isinstance(v, str)),
        )

    def save(self, path: Path) -> None:
        from klaw.fsutil import replace_durably

        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        data = {"enabled": dict(sorted(self.enabled.items())), "disabled": sorted(self.disabled)}
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        replace_durably(tmp, path)

    def enable(self, name: str, digest: str) -> SkillChoices:
        return SkillChoices({**self.enabled, name: digest}, self.disabled - {name})

    def disable(self, name: str) -> SkillChoices:
        enabled = {k: v for k, v in self.enabled.items() if k != name}
        return SkillChoices(enabled, self.disabled | {name})

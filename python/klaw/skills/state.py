"""The owner's on/off for skills: `$XDG_CONFIG_HOME/klaw/skills.json`.

`{"enabled": [names], "disabled": [names]}`. A skill that `klaw skills check` flags
is off until its name is in `enabled` (`klaw skills enable NAME`); any skill named in
`disabled` is off. Written atomically by the CLI, read on every catalog scan (the
engine sees a change at its next turn).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SkillChoices"]


@dataclass(frozen=True, slots=True)
class SkillChoices:
    enabled: frozenset[str] = frozenset()
    disabled: frozenset[str] = frozenset()

    @classmethod
    def load(cls, path: Path) -> SkillChoices:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            # A damaged file must not switch flagged skills on: enable nothing.
            import logging

            logging.getLogger("klaw.skills").warning(
                "%s unreadable (%s): no skill enabled", path, exc
            )
            return cls()
        if not isinstance(data, dict):
            return cls()

        def names(key: str) -> frozenset[str]:
            value = data.get(key)
            return (
                frozenset(v for v in value if isinstance(v, str))
                if isinstance(value, list)
                else frozenset()
            )

        return cls(names("enabled"), names("disabled"))

    def save(self, path: Path) -> None:
        from klaw.fsutil import replace_durably

        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(
            json.dumps(
                {"enabled": sorted(self.enabled), "disabled": sorted(self.disabled)}, indent=2
            )
            + "\n",
            encoding="utf-8",
        )
        replace_durably(tmp, path)

    def enable(self, name: str) -> SkillChoices:
        return SkillChoices(self.enabled | {name}, self.disabled - {name})

    def disable(self, name: str) -> SkillChoices:
        return SkillChoices(self.enabled - {name}, self.disabled | {name})

"""Skills (design §6.1–6.3): `skill_list` shows names and descriptions, `skill_load` the rest.

A skill is `<dir>/<skill>/SKILL.md` starting with YAML frontmatter that has at least
`name` and `description`. Three directories are scanned: the skills shipped with Klaw
(`klaw/defaults/skills/`: built-in, e.g. `code-execute`), `$XDG_DATA_HOME/klaw/skills`
(system) and `$KLAW_WORKSPACE/skills` (the persona's). On a name clash the workspace
wins over the system, like PATH, with a warning; either one replaces a built-in skill
of that name (the way to change it; logged once, at INFO). A SKILL.md whose
frontmatter is missing or broken is skipped with a warning and listed nowhere, so one
bad file never hides the others. The directories are scanned on every call (a few
small reads), so skills added while the engine runs are seen at once; each warning is
logged once per problem.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import yaml

from klaw.tools.base import Tool, ToolError

__all__ = [
    "BUILTIN_SKILLS_DIR",
    "Skill",
    "SkillCatalog",
    "SkillList",
    "SkillLoad",
    "parse_frontmatter",
]

log = logging.getLogger("klaw.tools.skills")

#: A SKILL.md is meant to be ~500–2000 tokens; anything far bigger is not a skill.
MAX_SKILL_BYTES = 256 * 1024

#: The skills shipped in the package, like the workspace templates (`klaw.defaults`):
#: files under python/klaw go into every wheel and sdist.
BUILTIN_SKILLS_DIR = Path(str(resources.files("klaw.defaults").joinpath("skills")))


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    path: Path
    origin: str  # "workspace", "system" or "builtin"


def parse_frontmatter(text: str) -> dict[str, Any]:
    """The YAML mapping between the leading `---` lines; ValueError says what is wrong."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise ValueError("does not start with a '---' frontmatter line")
    for end in range(1, len(lines)):
        if lines[end].strip() in ("---", "..."):
            break
    else:
        raise ValueError("the frontmatter has no closing '---' line")
    try:
        data = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        raise ValueError(f"the frontmatter is not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise ValueError("the frontmatter is not a mapping of keys to values")
    for key in ("name", "description"):
        value = data.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"the frontmatter has no {key!r} (a non-empty string)")
    return data


class SkillCatalog:
    """The skills currently on disk, workspace over system over built-in.

    `builtin_dir=None` leaves the built-in skills out.
    """

    def __init__(
        self,
        workspace_dir: Path,
        system_dir: Path,
        builtin_dir: Path | None = BUILTIN_SKILLS_DIR,
    ) -> None:
        self.workspace_dir = Path(workspace_dir)
        self.system_dir = Path(system_dir)
        self.builtin_dir = None if builtin_dir is None else Path(builtin_dir)
        self._warned: set[str] = set()

    def _warn(self, message: str, level: int = logging.WARNING) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.log(level, "%s", message)

    def _scan(self, directory: Path, origin: str) -> dict[str, Skill]:
        found: dict[str, Skill] = {}
        try:
            subdirs = sorted(p for p in directory.iterdir() if p.is_dir())
        except OSError:
            return found
        for sub in subdirs:
            path = sub / "SKILL.md"
            if not path.is_file():
                continue
            try:
                if path.stat().st_size > MAX_SKILL_BYTES:
                    raise ValueError(f"it is over {MAX_SKILL_BYTES} bytes")
                meta = parse_frontmatter(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                reason = "it is not valid UTF-8" if isinstance(exc, UnicodeDecodeError) else exc
                self._warn(f"Skill file {path} skipped: {reason}")
                continue
            name = meta["name"].strip()
            if name in found:
                self._warn(
                    f"Skill {name!r} is defined twice in {directory} "
                    f"({found[name].path.parent.name}/, {sub.name}/), using the first"
                )
                continue
            found[name] = Skill(name, " ".join(meta["description"].split()), path, origin)
        return found

    def skills(self) -> dict[str, Skill]:
        """Name → skill, sorted by name."""
        merged: dict[str, Skill] = {}
        if self.builtin_dir is not None:
            merged = self._scan(self.builtin_dir, "builtin")
        for origin, directory in (("system", self.system_dir), ("workspace", self.workspace_dir)):
            for name, skill in self._scan(directory, origin).items():
                old = merged.get(name)
                if old is not None and old.origin == "builtin":
                    self._warn(
                        f"Skill {name!r} in {origin} replaces the built-in one", logging.INFO
                    )
                elif old is not None:
                    self._warn(
                        f"Skill {name!r} found in both workspace and data, using workspace version"
                    )
                merged[name] = skill
        return dict(sorted(merged.items()))

    def get(self, name: str) -> Skill | None:
        return self.skills().get(name.strip())

    def prompt_line(self) -> str:
        """`Available skills: a (…), b (…)` for the system prompt; '' when there are none."""
        skills = self.skills()
        if not skills:
            return ""
        return "Available skills: " + ", ".join(
            f"{s.name} ({s.description})" for s in skills.values()
        )


class SkillList(Tool):
    name = "skill_list"
    description = "List the available skills with their descriptions; load one with skill_load."

    def __init__(self, catalog: SkillCatalog) -> None:
        self.catalog = catalog

    async def run(self, args: dict[str, Any]) -> str:
        skills = await asyncio.to_thread(self.catalog.skills)
        if not skills:
            return "No skills are installed."
        return "\n".join(f"- {s.name}: {s.description}" for s in skills.values())


class SkillLoad(Tool):
    name = "skill_load"
    description = "Load the full instructions (SKILL.md) of a skill named by skill_list."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1}},
        "required": ["name"],
        "additionalProperties": False,
    }

    def __init__(self, catalog: SkillCatalog) -> None:
        self.catalog = catalog

    def _load(self, name: str) -> str:
        skills = self.catalog.skills()
        skill = skills.get(name.strip())
        if skill is None:
            known = ", ".join(skills) or "none are installed"
            raise ToolError(f"Unknown skill {name!r}. Available skills: {known}")
        try:
            text = skill.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            raise ToolError(f"Skill {skill.name!r} could not be read") from None
        if skill.origin == "workspace":
            folder = f"skills/{skill.path.parent.name}/"
            text += f"\n\n[This skill's files are in the workspace under {folder}; use file_read.]"
        return text

    async def run(self, args: dict[str, Any]) -> str:
        return await asyncio.to_thread(self._load, args["name"])

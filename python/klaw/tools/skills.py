"""Skills (design §6.1–6.3): `skill_list` shows names and descriptions, `skill_load` the rest.

A skill is `<dir>/<skill>/SKILL.md` starting with YAML frontmatter that has at least
`name` and `description`. Three directories are scanned: the skills shipped with Klaw
(`klaw/defaults/skills/`: built-in, e.g. `code-execute`), `$XDG_DATA_HOME/klaw/skills`
(system) and `$KLAW_WORKSPACE/skills` (the persona's). On a name clash the workspace
wins over the system, like PATH, with a warning; either one replaces a built-in skill
of that name (the way to change it; logged once, at INFO). A SKILL.md whose
frontmatter is missing or broken is skipped with a warning and listed nowhere, so one
bad file never hides the others. The directories are scanned on every call (a few
small reads), so skills added or edited while the engine runs are seen at once (the
YAML of a SKILL.md is parsed once per content); each warning is logged once per problem.

OpenClaw's and ClawHub's frontmatter is read as they write it (`klaw.skills.meta`): a
skill whose requirements are missing here is not offered, `disable-model-invocation`
keeps it out of the model's list (its chat command still works), and a skill that
`klaw skills check` flags (`klaw.skills.scan`) is off until the owner enables it by
name. A skill is instructions only: it never adds a tool, a mount or a permission.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from klaw.filekey import FileKey, file_key
from klaw.skills.frontmatter import parse_frontmatter
from klaw.skills.meta import SkillMeta, command_name, read_meta, unmet
from klaw.skills.scan import MAX_FILE_BYTES, SKIPPED_DIRS, Finding, read_skill, scan_files
from klaw.skills.state import SkillChoices
from klaw.tools.base import Tool, ToolError

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.paths import KlawPaths

__all__ = [
    "BUILTIN_SKILLS_DIR",
    "Skill",
    "SkillCatalog",
    "SkillList",
    "SkillLoad",
    "SkillStatus",
    "parse_frontmatter",
]

log = logging.getLogger("klaw.tools.skills")

#: A SKILL.md is meant to be ~500–2000 tokens; anything far bigger is not a skill.
MAX_SKILL_BYTES = 256 * 1024

#: The skills shipped in the package, like the workspace templates (`klaw.defaults`):
#: files under python/klaw go into every wheel and sdist.
BUILTIN_SKILLS_DIR = Path(str(resources.files("klaw.defaults").joinpath("skills")))


#: A resource read through `skill_load(file=...)` is cut here.
MAX_RESOURCE_BYTES = 128 * 1024


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    path: Path
    origin: str  # "workspace", "system" or "builtin"
    meta: SkillMeta = field(default_factory=SkillMeta)

    @property
    def folder(self) -> Path:
        return self.path.parent


@dataclass(frozen=True, slots=True)
class SkillStatus:
    """Whether a skill is offered, and why not."""

    skill: Skill
    unmet: tuple[str, ...]  # requirements missing on this machine
    findings: tuple[Finding, ...]  # what the safety check saw
    flagged: bool  # a critical finding: off until enabled by name
    enabled_by_owner: bool
    disabled_by_owner: bool

    @property
    def available(self) -> bool:
        if self.disabled_by_owner or self.unmet:
            return False
        return not self.flagged or self.enabled_by_owner

    @property
    def why_not(self) -> str:
        if self.disabled_by_owner:
            return "disabled by the owner (`klaw skills enable` turns it back on)"
        if self.unmet:
            return "; ".join(self.unmet)
        if self.flagged and not self.enabled_by_owner:
            return (
                "flagged by the safety check (`klaw skills check " + self.skill.name + "`); "
                "off until the owner runs `klaw skills enable " + self.skill.name + "`"
            )
        return ""


# digest of a folder's files -> what the check found in them: one scan per content,
# shared by every catalog (the pipeline makes one per turn).
_SCANS: dict[str, tuple[Finding, ...]] = {}


def _scan_cached(folder: Path) -> tuple[tuple[Finding, ...], str]:
    """(findings, digest) of the files as they are now: every file is read at each
    call and the findings are those of the very bytes the digest covers."""
    files = read_skill(folder)
    found = _SCANS.get(files.digest)
    if found is None:
        found = tuple(scan_files(files))
        if len(_SCANS) > 256:
            _SCANS.clear()
        _SCANS[files.digest] = found
    return found, files.digest[:16]


# digest of a SKILL.md's text -> (name, description, meta), or why it is refused: the
# YAML is parsed once per content (the digest, not the text, is kept: a SKILL.md may be
# 256 KiB).
_PARSED: dict[bytes, tuple[str, str, SkillMeta] | str] = {}

# SKILL.md path -> (its file key, what `_parsed` made of it): the pipeline scans once per
# turn, and a stat is what a turn pays while the file is unchanged (`klaw.filekey`:
# ctime in the key, so an edit with its size and mtime put back is read again).
_SKILL_MD: dict[Path, tuple[FileKey, tuple[str, str, SkillMeta] | str]] = {}


def _skill_md(path: Path, st: os.stat_result) -> tuple[str, str, SkillMeta]:
    """`_parsed` of the SKILL.md at `path` whose stat is `st`."""
    key = file_key(st)
    hit = _SKILL_MD.get(path)
    if key is None or hit is None or hit[0] != key:
        if st.st_size > MAX_SKILL_BYTES:
            raise ValueError(f"it is over {MAX_SKILL_BYTES} bytes")
        try:
            parsed: tuple[str, str, SkillMeta] | str = _parsed(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            if isinstance(exc, UnicodeDecodeError):
                raise
            parsed = str(exc)
        if key is not None:
            if len(_SKILL_MD) > 256:
                _SKILL_MD.clear()
            _SKILL_MD[path] = (key, parsed)
        hit = (key or (0, 0, 0, 0, 0), parsed)
    if isinstance(hit[1], str):
        raise ValueError(hit[1])
    return hit[1]


def _parsed(text: str) -> tuple[str, str, SkillMeta]:
    """A SKILL.md's name, description and meta; ValueError says why it is refused."""
    key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=20).digest()
    hit = _PARSED.get(key)
    if hit is None:
        try:
            front = parse_frontmatter(text)
            hit = (front["name"].strip(), " ".join(front["description"].split()), read_meta(front))
        except ValueError as exc:
            hit = str(exc)
        if len(_PARSED) > 256:
            _PARSED.clear()
        _PARSED[key] = hit
    if isinstance(hit, str):
        raise ValueError(hit)
    return hit


class SkillCatalog:
    """The skills currently on disk, workspace over system over built-in.

    `builtin_dir=None` leaves the built-in skills out.
    """

    def __init__(
        self,
        workspace_dir: Path,
        system_dir: Path,
        builtin_dir: Path | None = BUILTIN_SKILLS_DIR,
        *,
        choices: Path | None = None,
        config: EngineConfig | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.workspace_dir = Path(workspace_dir)
        self.system_dir = Path(system_dir)
        self.builtin_dir = None if builtin_dir is None else Path(builtin_dir)
        self.choices_path = choices
        self.config = config
        self.env = env
        self._warned: set[str] = set()
        #: SKILL.md files the last scan refused, with why (`klaw skills list` shows them).
        self.refused: dict[Path, str] = {}

    @classmethod
    def for_paths(cls, paths: KlawPaths, config: EngineConfig | None = None) -> SkillCatalog:
        """The catalog of a Klaw home: its workspace's, the system and built-in skills."""
        return cls(
            paths.workspace / "skills", paths.skills, choices=paths.skill_choices, config=config
        )

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
            try:
                st = path.stat()
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            try:
                name, desc, meta = _skill_md(path, st)
            except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
                reason = (
                    "it is not valid UTF-8"
                    if isinstance(exc, UnicodeDecodeError)
                    else "it is nested too deep to be read"
                    if isinstance(exc, RecursionError)
                    else str(exc)
                )
                self.refused[path] = reason
                self._warn(f"Skill file {path} skipped: {reason}")
                continue
            if name in found:
                self._warn(
                    f"Skill {name!r} is defined twice in {directory} "
                    f"({found[name].path.parent.name}/, {sub.name}/), using the first"
                )
                continue
            found[name] = Skill(name, desc, path, origin, meta)
        return found

    def skills(self) -> dict[str, Skill]:
        """Name → skill, sorted by name."""
        merged: dict[str, Skill] = {}
        self.refused = {}
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

    def _findings(self, skill: Skill) -> tuple[tuple[Finding, ...], str]:
        """(findings, digest of the files checked); builtin skills ship with Klaw."""
        if skill.origin == "builtin":
            return (), ""
        return _scan_cached(skill.folder)

    def status(self, skill: Skill, choices: SkillChoices | None = None) -> SkillStatus:
        if choices is None:
            choices = SkillChoices.load(self.choices_path) if self.choices_path else SkillChoices()
        findings, digest = self._findings(skill)
        problems = list(skill.meta.problems)
        if choices.broken and skill.origin != "builtin":
            # Which skills the owner turned off is unknown: none is on until it is fixed.
            problems.append(
                f"the owner's skill choices ({self.choices_path}) are damaged: fix or delete it"
            )
        missing = unmet(skill.meta, config=self.config, env=self.env or os.environ)
        return SkillStatus(
            skill,
            tuple(problems + missing),
            findings,
            any(f.severity == "critical" for f in findings),
            choices.enabled.get(skill.name) == digest,  # enabled as it is now, not an edit
            skill.name in choices.disabled,
        )

    def digest(self, skill: Skill) -> str:
        return self._findings(skill)[1]

    def statuses(self) -> dict[str, SkillStatus]:
        choices = SkillChoices.load(self.choices_path) if self.choices_path else SkillChoices()
        return {name: self.status(s, choices) for name, s in self.skills().items()}

    def offered(self) -> dict[str, Skill]:
        """The skills the model sees: available here and not kept from the model."""
        return {
            n: st.skill
            for n, st in self.statuses().items()
            if st.available and st.skill.meta.model_invocable
        }

    def commands(self, taken: set[str]) -> dict[str, Skill]:
        """Chat command -> skill, for the available user-invocable skills (OpenClaw's
        names: `image-lab` is `/image_lab`); `taken` holds the built-in commands."""
        used = set(taken)
        out: dict[str, Skill] = {}
        for st in self.statuses().values():
            if st.available and st.skill.meta.user_invocable:
                out[command_name(st.skill.name, used)] = st.skill
        return out

    def prompt_line(self) -> str:
        """`Available skills: a (…), b (…)` for the system prompt; '' when there are none."""
        skills = self.offered()
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
        skills = await asyncio.to_thread(self.catalog.offered)
        if not skills:
            return "No skills are installed."
        return "\n".join(f"- {s.name}: {s.description}" for s in skills.values())


class SkillLoad(Tool):
    name = "skill_load"
    description = (
        "Load a skill's full instructions (SKILL.md), or with `file` one of its files "
        "(a path in the skill's folder, e.g. 'references/api.md')."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "file": {"type": "string", "minLength": 1, "maxLength": 500},
        },
        "required": ["name"],
        "additionalProperties": False,
    }

    def __init__(self, catalog: SkillCatalog) -> None:
        self.catalog = catalog

    def _skill(self, name: str) -> Skill:
        skills = self.catalog.skills()
        skill = skills.get(name.strip())
        if skill is None:
            known = ", ".join(self.catalog.offered()) or "none are installed"
            raise ToolError(f"Unknown skill {name!r}. Available skills: {known}")
        status = self.catalog.status(skill)
        if not status.available:
            raise ToolError(f"Skill {skill.name!r} is not available: {status.why_not}")
        return skill

    def _load(self, name: str, file: str | None) -> str:
        skill = self._skill(name)
        if file is not None:
            return self._resource(skill, file)
        try:
            text = skill.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            raise ToolError(f"Skill {skill.name!r} could not be read") from None
        folder = skill.folder.name
        if skill.origin == "workspace":
            # Scripts run in code_execute, where the workspace's skills are at /skills.
            text = text.replace("{baseDir}", f"/skills/{folder}")
            text += (
                f"\n\n[This skill's folder: skills/{folder}/ in the workspace (file_read, or "
                f"skill_load with `file`); /skills/{folder} inside code_execute.]"
            )
        elif any(p.is_file() and p != skill.path for p in skill.folder.rglob("*")):
            text = text.replace("{baseDir}", f"<{skill.name} skill folder>")
            text += "\n\n[Read this skill's other files with skill_load and `file`.]"
        return text

    def _resource(self, skill: Skill, file: str) -> str:
        root = skill.folder.resolve()
        target = (root / file).resolve()
        if not target.is_relative_to(root) or target == root:
            raise ToolError(f"{file!r} is outside the skill's folder")
        rel = target.relative_to(root).parts
        if any(p.startswith(".") or p in SKIPPED_DIRS for p in rel):
            # .env, .git/config and the like hold secrets and were never checked.
            raise ToolError(f"{file!r} is not one of the skill's files")
        if not target.is_file():
            raise ToolError(f"Skill {skill.name!r} has no file {file!r}")
        if target.stat().st_size > MAX_FILE_BYTES:
            raise ToolError(f"{file!r} is too big to be read here; use it from code_execute")
        with target.open("rb") as f:
            raw = f.read(MAX_RESOURCE_BYTES + 1)
        if b"\0" in raw[:8192]:
            raise ToolError(f"{file!r} is a binary file; use it from code_execute")
        text = raw[:MAX_RESOURCE_BYTES].decode("utf-8", errors="replace")
        if len(raw) > MAX_RESOURCE_BYTES:
            text += f"\n[cut at {MAX_RESOURCE_BYTES // 1024} KB]"
        return text

    async def run(self, args: dict[str, Any]) -> str:
        return await asyncio.to_thread(self._load, args["name"], args.get("file"))

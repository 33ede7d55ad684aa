"""`klaw skills list|show|check|enable|disable` (docs/skills.md). Local: files only."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from klaw.paths import KlawPaths
    from klaw.tools.skills import SkillCatalog, SkillStatus


def _catalog() -> tuple[SkillCatalog, KlawPaths, set[str]]:
    import dataclasses

    from klaw.config import load_engine_config, resolve_workspace
    from klaw.paths import KlawPaths
    from klaw.tools.skills import SkillCatalog

    paths = KlawPaths.from_env()
    config = load_engine_config(paths.engine_config)
    paths = dataclasses.replace(paths, workspace=resolve_workspace(config))
    return SkillCatalog.for_paths(paths, config), paths, {c.name for c in config.commands}


def _state(st: SkillStatus) -> str:
    if st.available:
        return "on" if st.skill.meta.model_invocable else "on (command only)"
    return "off: " + st.why_not


def skills_list(as_json: bool) -> int:
    catalog, _, builtin = _catalog()
    statuses = catalog.statuses()
    commands = {s.name: c for c, s in catalog.commands(builtin).items()}
    if as_json:
        rows = [
            {
                "name": n,
                "origin": st.skill.origin,
                "available": st.available,
                "why_not": st.why_not,
                "command": commands.get(n),
                "flagged": st.flagged,
                "path": str(st.skill.path),
            }
            for n, st in statuses.items()
        ]
        refused = [{"path": str(p), "reason": r} for p, r in catalog.refused.items()]
        print(json.dumps({"skills": rows, "refused": refused}, ensure_ascii=False, indent=2))
        return 0
    if not statuses and not catalog.refused:
        print("no skills installed")
        return 0
    for name, st in statuses.items():
        cmd = f" /{commands[name]}" if name in commands else ""
        print(f"{name:<24} {st.skill.origin:<9}{cmd:<16} {_state(st)}")
        print(f"{'':<24} {st.skill.description[:100]}")
    _print_refused(catalog)
    return 0


def _print_refused(catalog: SkillCatalog) -> None:
    """The SKILL.md files that are no skill (each alone: the others are listed)."""
    for path, reason in catalog.refused.items():
        print(f"refused: {path}: {reason}")


def skills_show(name: str) -> int:
    catalog, _, builtin = _catalog()
    skill = catalog.get(name)
    if skill is None:
        print(f"klaw: no skill named {name!r} (`klaw skills list`)", file=sys.stderr)
        return 1
    st = catalog.status(skill)
    m = skill.meta
    commands = {s.name: c for c, s in catalog.commands(builtin).items()}
    print(f"name:        {skill.name}")
    print(f"description: {skill.description}")
    print(f"path:        {skill.path} ({skill.origin})")
    print(f"state:       {_state(st)}")
    if name in commands:
        print(f"command:     /{commands[name]}")
    for label, value in (
        ("homepage", m.homepage),
        ("emoji", m.emoji),
        ("needs bins", ", ".join(m.bins)),
        ("needs one of", ", ".join(m.any_bins)),
        ("needs env", ", ".join(m.env)),
        ("needs config", ", ".join(m.config)),
        ("os", ", ".join(m.os)),
    ):
        if value:
            print(f"{label + ':':<13}{value}")
    print(f"user command: {'yes' if m.user_invocable else 'no'}; "
          f"model sees it: {'yes' if m.model_invocable else 'no'}")  # fmt: skip
    files = sorted(
        p.relative_to(skill.folder).as_posix() for p in skill.folder.rglob("*") if p.is_file()
    )
    print("files:       " + ", ".join(files))
    for f in st.findings:
        print(f"  {f}")
    return 0


def skills_check(name: str | None) -> int:
    """Prints what the safety check sees; exit 1 when a skill is flagged and off."""
    catalog, _, _ = _catalog()
    statuses = catalog.statuses()
    if name is not None:
        if name not in statuses:
            print(f"klaw: no skill named {name!r} (`klaw skills list`)", file=sys.stderr)
            return 1
        statuses = {name: statuses[name]}
    blocked = 0
    for n, st in statuses.items():
        if not st.findings:
            print(f"{n}: nothing found")
            continue
        verdict = "FLAGGED" if st.flagged else "warnings"
        if st.flagged and st.enabled_by_owner:
            verdict += " (enabled by the owner)"
        elif st.flagged:
            verdict += " (off until `klaw skills enable " + n + "`)"
            blocked += 1
        print(f"{n}: {verdict}")
        for f in st.findings:
            print(f"  {f}")
    if name is None:
        _print_refused(catalog)
    return 1 if blocked else 0


def skills_toggle(name: str, on: bool) -> int:
    from klaw.skills.state import SkillChoices

    catalog, paths, _ = _catalog()
    skill = catalog.get(name)
    if skill is None:
        print(f"klaw: no skill named {name!r} (`klaw skills list`)", file=sys.stderr)
        return 1
    choices = SkillChoices.load(paths.skill_choices)
    if choices.broken:
        choices = SkillChoices()  # a damaged file is replaced: this choice starts it anew
        print(f"note: {paths.skill_choices} was damaged; it now holds only this choice")
    if on:
        choices = choices.enable(skill.name, catalog.digest(skill))
    else:
        choices = choices.disable(skill.name)
    choices.save(paths.skill_choices)
    st = catalog.status(skill)
    print(f"{skill.name}: {_state(st)}")
    if on and st.flagged:
        print("warning: the safety check flagged this skill; you enabled it by name")
    return 0

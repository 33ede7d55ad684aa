"""Skills: progressive disclosure, workspace over system over built-in, broken ones skipped."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from klaw.paths import KlawPaths
from klaw.tools import ToolRegistry
from klaw.tools.skills import (
    BUILTIN_SKILLS_DIR,
    SkillCatalog,
    SkillList,
    SkillLoad,
    parse_frontmatter,
)

WEB = """\
---
name: web-search
description: Use when you need up-to-date information from the internet.
  Not for facts already in memory.
---

# Web Search

## How to search
1. Use code_execute with curl to SearXNG.
"""


def _skill(root: Path, folder: str, text: str) -> Path:
    (root / folder).mkdir(parents=True, exist_ok=True)
    path = root / folder / "SKILL.md"
    path.write_text(text, encoding="utf-8")
    return path


def _md(name: str, description: str, body: str = "Body.\n") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n\n{body}"


#: The skill Klaw ships (klaw/defaults/skills/code-execute), as skill_list shows it.
BUILTIN_PATH = BUILTIN_SKILLS_DIR / "code-execute" / "SKILL.md"
_BUILTIN_META = parse_frontmatter(BUILTIN_PATH.read_text(encoding="utf-8"))
BUILTIN = "- code-execute: " + " ".join(_BUILTIN_META["description"].split())


@pytest.fixture
def reg(klaw_home: KlawPaths) -> ToolRegistry:
    catalog = SkillCatalog(klaw_home.workspace / "skills", klaw_home.skills)
    return ToolRegistry([SkillList(catalog), SkillLoad(catalog)])


async def test_no_skills(klaw_home: KlawPaths) -> None:
    catalog = SkillCatalog(klaw_home.workspace / "skills", klaw_home.skills, builtin_dir=None)
    reg = ToolRegistry([SkillList(catalog), SkillLoad(catalog)])
    assert (await reg.dispatch("skill_list", {})).content == "No skills are installed."
    res = await reg.dispatch("skill_load", {"name": "web-search"})
    assert res.is_error and "none are installed" in res.content


async def test_the_builtin_skill_is_there_out_of_the_box(
    reg: ToolRegistry, klaw_home: KlawPaths
) -> None:
    assert not (klaw_home.workspace / "skills").exists() and not klaw_home.skills.exists()
    assert (await reg.dispatch("skill_list", {})).content == BUILTIN
    res = await reg.dispatch("skill_load", {"name": "code-execute"})
    assert not res.is_error
    assert res.content == BUILTIN_PATH.read_text(encoding="utf-8")  # no workspace note
    for practice in ("print()", "/output", "One complete script per call", "stderr"):
        assert practice in res.content
    res = await reg.dispatch("skill_load", {"name": "web-search"})  # built in, but off
    assert res.is_error and "needs the config key(s) web.search.provider set" in res.content


def test_the_builtin_skill_is_short_and_ships_in_the_package() -> None:
    from importlib import resources

    from klaw.memory.rows import count_tokens_batch

    shipped = resources.files("klaw.defaults") / "skills" / "code-execute" / "SKILL.md"
    text = shipped.read_text(encoding="utf-8")
    assert _BUILTIN_META["name"] == "code-execute"
    assert 400 <= count_tokens_batch([text])[0] <= 800  # read by small models: keep it short


@pytest.mark.parametrize("where", ["workspace", "system"])
async def test_an_own_skill_replaces_the_builtin_one(
    reg: ToolRegistry, klaw_home: KlawPaths, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    root = klaw_home.workspace / "skills" if where == "workspace" else klaw_home.skills
    _skill(root, "my-code", _md("code-execute", "My own way.", "MINE\n"))
    with caplog.at_level(logging.INFO, logger="klaw.tools.skills"):
        listed = await reg.dispatch("skill_list", {})
        loaded = await reg.dispatch("skill_load", {"name": "code-execute"})
        await reg.dispatch("skill_list", {})
    assert listed.content == "- code-execute: My own way."
    assert loaded.content.startswith(_md("code-execute", "My own way.", "MINE\n"))
    assert "print()" not in loaded.content  # nothing of the built-in body
    records = [r for r in caplog.records if r.name == "klaw.tools.skills"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.INFO, f"Skill 'code-execute' in {where} replaces the built-in one")
    ]  # not a warning, and once


async def test_workspace_over_system_over_builtin(reg: ToolRegistry, klaw_home: KlawPaths) -> None:
    _skill(klaw_home.skills, "code-execute", _md("code-execute", "System.", "SYSTEM\n"))
    _skill(klaw_home.workspace / "skills", "code-execute", _md("code-execute", "Mine.", "MINE\n"))
    assert (await reg.dispatch("skill_list", {})).content == "- code-execute: Mine."
    assert "MINE" in (await reg.dispatch("skill_load", {"name": "code-execute"})).content


async def test_list_shows_names_and_descriptions_only(
    reg: ToolRegistry, klaw_home: KlawPaths
) -> None:
    _skill(klaw_home.workspace / "skills", "web-search", WEB)
    _skill(klaw_home.skills, "code-execute", _md("code-execute", "Run code safely."))
    res = await reg.dispatch("skill_list", {})
    assert res.content.splitlines() == [
        "- code-execute: Run code safely.",  # the system's, over the built-in one
        "- web-search: Use when you need up-to-date information from the internet. "
        "Not for facts already in memory.",
    ]
    assert "SearXNG" not in res.content  # the body is disclosed only by skill_load


async def test_load_returns_the_whole_file(reg: ToolRegistry, klaw_home: KlawPaths) -> None:
    _skill(klaw_home.workspace / "skills", "web-search", WEB)
    _skill(klaw_home.skills, "code-execute", _md("code-execute", "Run code.", "System body.\n"))
    res = await reg.dispatch("skill_load", {"name": "web-search"})
    assert not res.is_error and res.content.startswith(WEB)
    assert "skills/web-search/" in res.content  # where its extra files are
    res = await reg.dispatch("skill_load", {"name": "code-execute"})
    assert res.content.rstrip().endswith("System body.")


async def test_unknown_skill_is_an_error_listing_known(
    reg: ToolRegistry, klaw_home: KlawPaths
) -> None:
    _skill(klaw_home.workspace / "skills", "web-search", WEB)
    res = await reg.dispatch("skill_load", {"name": "../../etc/passwd"})
    assert res.is_error and "Unknown skill" in res.content and "web-search" in res.content


async def test_workspace_overrides_system_with_a_warning(
    reg: ToolRegistry, klaw_home: KlawPaths, caplog: pytest.LogCaptureFixture
) -> None:
    _skill(klaw_home.skills, "web-search", _md("web-search", "System version.", "SYSTEM\n"))
    _skill(klaw_home.workspace / "skills", "web-search", _md("web-search", "Mine.", "MINE\n"))
    with caplog.at_level(logging.WARNING, logger="klaw.tools.skills"):
        listed = await reg.dispatch("skill_list", {})
        loaded = await reg.dispatch("skill_load", {"name": "web-search"})
        await reg.dispatch("skill_list", {})
    assert listed.content.splitlines() == [BUILTIN, "- web-search: Mine."]
    assert "MINE" in loaded.content and "SYSTEM" not in loaded.content
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    expected = "Skill 'web-search' found in both workspace and data, using workspace version"
    assert warnings == [expected]  # logged once, not on every scan


BROKEN = {
    "no-frontmatter": "# Just a heading\n",
    "unclosed": "---\nname: unclosed\ndescription: x\n",
    "bad-yaml": "---\nname: [unclosed\ndescription: x\n---\n",
    "not-mapping": "---\n- a\n- b\n---\n",
    "no-name": "---\ndescription: x\n---\n",
    "empty-description": "---\nname: empty-description\ndescription: '  '\n---\n",
    "number-name": "---\nname: 42\ndescription: x\n---\n",
}


async def test_broken_frontmatter_is_skipped_with_a_warning(
    reg: ToolRegistry, klaw_home: KlawPaths, caplog: pytest.LogCaptureFixture
) -> None:
    ws_skills = klaw_home.workspace / "skills"
    for folder, text in BROKEN.items():
        _skill(ws_skills, folder, text)
    (ws_skills / "latin1").mkdir()
    (ws_skills / "latin1" / "SKILL.md").write_bytes(b"---\nname: caf\xe9\ndescription: x\n---\n")
    (ws_skills / "no-skill-md").mkdir()
    (ws_skills / "README.md").write_text("not a skill folder")
    _skill(ws_skills, "good", _md("good", "Works."))
    with caplog.at_level(logging.WARNING, logger="klaw.tools.skills"):
        res = await reg.dispatch("skill_list", {})
    assert res.content.splitlines() == [BUILTIN, "- good: Works."]
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == len(BROKEN) + 1
    for name in BROKEN:
        res = await reg.dispatch("skill_load", {"name": name})
        assert res.is_error


async def test_name_comes_from_frontmatter_and_duplicates_keep_first(
    reg: ToolRegistry, klaw_home: KlawPaths, caplog: pytest.LogCaptureFixture
) -> None:
    _skill(klaw_home.skills, "a-dir", _md("shared", "First."))
    _skill(klaw_home.skills, "b-dir", _md("shared", "Second."))
    with caplog.at_level(logging.WARNING, logger="klaw.tools.skills"):
        res = await reg.dispatch("skill_list", {})
    assert res.content.splitlines() == [BUILTIN, "- shared: First."]
    assert "defined twice" in caplog.text


def test_catalog_prompt_line(klaw_home: KlawPaths) -> None:
    catalog = SkillCatalog(klaw_home.workspace / "skills", klaw_home.skills, builtin_dir=None)
    assert catalog.prompt_line() == ""
    _skill(klaw_home.skills, "x", _md("x", "Does x."))
    assert catalog.prompt_line() == "Available skills: x (Does x.)"
    with_builtin = SkillCatalog(klaw_home.workspace / "skills", klaw_home.skills)
    assert with_builtin.prompt_line().startswith("Available skills: code-execute (Read before")
    assert with_builtin.prompt_line().endswith(", x (Does x.)")


def test_parse_frontmatter_extra_keys_and_bom() -> None:
    meta = parse_frontmatter("\ufeff---\nname: a\ndescription: b\nversion: 2\n---\nbody")
    assert meta == {"name": "a", "description": "b", "version": 2}
    with pytest.raises(ValueError, match="line 3"):
        parse_frontmatter("---\nname: a\ndescription: [b\n---\n")

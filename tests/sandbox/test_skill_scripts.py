"""A skill's scripts run only in the sandbox: `skill_load` points them at /skills, where
the workspace's skills are mounted read-only, and `code_execute` runs them there
(bubblewrap and Docker); Klaw has no tool that runs anything on the host."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sandbox_support import bwrap_or_skip, docker_engine, open_sandbox

from klaw.paths import KlawPaths
from klaw.sandbox.service import Sandbox
from klaw.tools import ToolRegistry
from klaw.tools.code import CodeExecute
from klaw.tools.skills import SkillCatalog, SkillLoad

__all__ = ["docker_engine"]

CHAT = "telegram_42"


@pytest.fixture(params=["docker", "bwrap"])
async def sandbox(request: pytest.FixtureRequest, klaw_home: KlawPaths) -> AsyncIterator[Sandbox]:
    if request.param == "docker":
        request.getfixturevalue("docker_engine")
    else:
        bwrap_or_skip()
    skill = klaw_home.workspace / "skills" / "bookfinder"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: bookfinder\ndescription: Find a book.\n---\n\n"
        "Run `sh {baseDir}/scripts/find.sh TITLE` with code_execute (bash).\n"
    )
    (skill / "scripts" / "find.sh").write_text('grep -i "$1" "$(dirname "$0")/../catalogue.txt"\n')
    (skill / "catalogue.txt").write_text("Dune, shelf 4\nSolaris, shelf 2\n")
    sb = open_sandbox(klaw_home, request.param, timeout=20)
    yield sb
    await sb.aclose()


async def test_a_skills_script_runs_in_the_sandbox_from_where_skill_load_says(
    sandbox: Sandbox, klaw_home: KlawPaths
) -> None:
    catalog = SkillCatalog.for_paths(klaw_home)
    reg = ToolRegistry([SkillLoad(catalog), CodeExecute(sandbox, CHAT)])
    text = (await reg.dispatch("skill_load", {"name": "bookfinder"})).content
    assert "sh /skills/bookfinder/scripts/find.sh TITLE" in text
    res = await reg.dispatch(
        "code_execute",
        {"language": "bash", "code": "sh /skills/bookfinder/scripts/find.sh dune"},
    )
    assert not res.is_error and "Dune, shelf 4" in res.content
    res = await reg.dispatch(
        "code_execute",
        {"language": "bash", "code": "echo x > /skills/bookfinder/catalogue.txt; echo rc=$?"},
    )
    assert "rc=1" in res.content or "Read-only" in res.content
    assert (klaw_home.workspace / "skills/bookfinder/catalogue.txt").read_text().startswith("Dune")

"""One deeply nested SKILL.md is refused alone (hostile 6): frontmatter of 20,000 `[`
or JSON5 metadata nested 5,000 deep made `klaw skills list` die with RecursionError and
the engine offer no skill at all, built-ins included. The CLI runs as a real process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from sched_support import klaw

from klaw.paths import KlawPaths
from klaw.skills.frontmatter import MAX_DEPTH, load_metadata, parse_frontmatter
from klaw.tools import ToolRegistry
from klaw.tools.skills import SkillCatalog, SkillList, SkillLoad

DEEP_FRONT = {
    "flow-20000": "foo: " + "[" * 20_000,
    "flow-closed": "foo: " + "[" * 5_000 + "]" * 5_000,
    "mappings": "foo: " + '{"a": ' * 5_000 + "1" + "}" * 5_000,
    "block-dashes": "foo:\n" + "  " + "- " * 5_000 + "x",
    "block-indent": "foo:\n" + "".join(" " * i + "k:\n" for i in range(1, 300)) + "x: 1",
    "whole-file": "[" * 250_000,  # as big as a SKILL.md may be: refused without scanning it all
}
DEEPER = f"nested deeper than {MAX_DEPTH} levels"
UNKNOWN = "its requirements are not known"


def _write(root: Path, folder: str, front: str, body: str = "Do the thing.\n") -> Path:
    d = root / folder
    d.mkdir(parents=True, exist_ok=True)
    path = d / "SKILL.md"
    path.write_text(f"---\n{front}\n---\n\n{body}", encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", sorted(DEEP_FRONT))
def test_deep_frontmatter_is_a_clear_value_error(kind: str) -> None:
    text = f"---\nname: x\ndescription: y\n{DEEP_FRONT[kind]}\n---\n"
    with pytest.raises(ValueError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_frontmatter(text)


def test_frontmatter_as_deep_as_allowed_is_read() -> None:
    flow = "[" * (MAX_DEPTH - 1) + "1" + "]" * (MAX_DEPTH - 1)
    front = parse_frontmatter(f"---\nname: x\ndescription: y\nfoo: {flow}\n---\n")
    node = front["foo"]
    for _ in range(MAX_DEPTH - 2):
        node = node[0]
    assert node == [1]


def test_deep_metadata_is_refused_before_json5_reads_it() -> None:
    ok = '{"openclaw": {"requires": {"bins": ["gh"]}}, /* "[[[[" */ "s": "]]]["}'
    assert load_metadata(ok)["openclaw"]["requires"]["bins"] == ["gh"]
    for text in (
        '{"a": ' * 5_000 + "1" + "}" * 5_000,
        "[" * 5_000 + "]" * 5_000,
        # Closing brackets hidden in strings and comments do not hide the depth.
        '"]]]]" ' + "[" * 40 + "1" + "]" * 40,
        "// ]]]]\n" + "[" * 40 + "1" + "]" * 40,
    ):
        with pytest.raises(ValueError, match=f"nested deeper than {MAX_DEPTH} levels"):
            load_metadata(text)


async def test_one_deep_skill_is_refused_alone_by_the_catalog_the_tools_and_the_cli(
    klaw_home: KlawPaths,
) -> None:
    ws = klaw_home.workspace / "skills"
    bad = _write(ws, "bad", "name: bad\ndescription: Deep.\nfoo: " + "[" * 20_000)
    meta = "'" + '{"a": ' * 5_000 + "1" + "}" * 5_000 + "'"
    _write(ws, "deep-meta", f"name: deep-meta\ndescription: Deep metadata.\nmetadata: {meta}")
    _write(ws, "good", "name: good\ndescription: Works.")

    cat = SkillCatalog.for_paths(klaw_home)
    offered = cat.offered()
    assert set(offered) == {"code-execute", "good"}  # the built-in one too
    assert cat.refused == {bad: f"the frontmatter is {DEEPER} (line 4)"}
    why = cat.statuses()["deep-meta"].why_not
    assert why == f"metadata is nested deeper than {MAX_DEPTH} levels: {UNKNOWN}"
    reg = ToolRegistry([SkillList(cat), SkillLoad(cat)])
    listed = (await reg.dispatch("skill_list", {})).content
    assert "- good: Works." in listed and "- code-execute:" in listed
    assert "Available skills: code-execute (" in cat.prompt_line()

    rc, out, err = await klaw("skills", "list")
    assert rc == 0, err
    assert "RecursionError" not in out + err
    lines = out.splitlines()
    assert any(x.startswith("good ") and x.endswith(" on") for x in lines)
    assert any(x.startswith("code-execute ") and x.endswith(" on") for x in lines)
    assert any(x.startswith("deep-meta ") and "off: metadata is nested deeper" in x for x in lines)
    assert f"refused: {bad}: the frontmatter is nested deeper than {MAX_DEPTH} levels" in out
    rc, out, err = await klaw("skills", "list", "--json")
    assert rc == 0, err
    data = json.loads(out)
    # web-search is listed off (no web.search.provider)
    assert {r["name"] for r in data["skills"]} == {
        "code-execute",
        "deep-meta",
        "good",
        "web-search",
    }
    assert [r["path"] for r in data["refused"]] == [str(bad)]

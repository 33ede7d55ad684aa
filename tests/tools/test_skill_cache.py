"""The parsed-frontmatter cache of the skill catalog follows the files: an edit is seen
at the next scan, whatever the file's size and mtime say."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from filetick import next_tick
from klaw import filekey
from klaw.paths import KlawPaths
from klaw.tools import skills as skills_module
from klaw.tools.skills import SkillCatalog


def _md(name: str, description: str) -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n\nBody.\n"


def _offered(catalog: SkillCatalog) -> dict[str, str]:
    return {name: s.description for name, s in catalog.offered().items()}


@pytest.mark.parametrize("trusted", [False, True], ids=["just-written", "kept"])
def test_an_edit_of_the_same_size_with_its_mtime_put_back_is_seen(
    klaw_home: KlawPaths, monkeypatch: pytest.MonkeyPatch, trusted: bool
) -> None:
    """Just written, a SKILL.md's key is not trusted (`klaw.filekey`'s racy window) and
    it is read again; `trusted`: keys trusted once the file clock has moved on (RACY_NS
    0), so an unchanged file is kept, and the edit is still seen (its ctime moved)."""
    if trusted:
        monkeypatch.setattr(filekey, "RACY_NS", 0)
    folder = klaw_home.workspace / "skills" / "notes"
    folder.mkdir(parents=True)
    path = folder / "SKILL.md"
    path.write_text(_md("notes", "Write notes AAAA"), encoding="utf-8")
    catalog = SkillCatalog(klaw_home.workspace / "skills", klaw_home.skills, builtin_dir=None)
    assert _offered(catalog) == {"notes": "Write notes AAAA"}
    assert (path in skills_module._SKILL_MD) == trusted  # kept only by a trusted key

    st = path.stat()
    if trusted:
        next_tick(path)
    path.write_text(_md("notes", "Write notes BBBB"), encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    # A new catalog (the pipeline makes one per turn) and the same one both see it.
    assert _offered(catalog) == {"notes": "Write notes BBBB"}
    fresh = SkillCatalog(klaw_home.workspace / "skills", klaw_home.skills, builtin_dir=None)
    assert _offered(fresh) == {"notes": "Write notes BBBB"}


def test_a_skill_renamed_broken_and_fixed_follows_its_file(klaw_home: KlawPaths) -> None:
    root: Path = klaw_home.workspace / "skills"
    (root / "a").mkdir(parents=True)
    path = root / "a" / "SKILL.md"
    catalog = SkillCatalog(root, klaw_home.skills, builtin_dir=None)

    path.write_text(_md("alpha", "First"), encoding="utf-8")
    assert _offered(catalog) == {"alpha": "First"}
    path.write_text(_md("beta", "First"), encoding="utf-8")
    assert _offered(catalog) == {"beta": "First"}

    path.write_text("---\nname: beta\n---\n", encoding="utf-8")  # no description
    assert _offered(catalog) == {}
    assert "description" in catalog.refused[path]
    # The refusal is remembered by content, and said again at each scan.
    assert _offered(catalog) == {}
    assert "description" in catalog.refused[path]

    path.write_text(_md("alpha", "First"), encoding="utf-8")  # content seen before
    assert _offered(catalog) == {"alpha": "First"}
    assert catalog.refused == {}

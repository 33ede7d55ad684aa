"""Core memory (core_memory.json): TASK-007 CoreMemoryTest plus atomicity and corruption."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from klaw.errors import InvalidInput, KlawError
from klaw.memory.core import (
    CoreMemory,
    CoreMemoryCorrupt,
    CoreMemoryKeyError,
    parse_user_md,
    validate_core_memory,
)

USER_MD = """\
# USER.md - About Your Human

_Learn about the person you're helping. Update this as you go._

- **Name:** Roman
- **What to call them**: Рома
- **Pronouns:** _(optional)_
- **Timezone:**
- Location: Prague, CZ
Occupation: KMP developer, sports trainer
* Project: trainer app MVP
* Project: Docker on RPi5

## Context

He likes answers without fluff. See https://example.com for more.
- Meeting at 16:00 every day
```
Secret: not a fact
```
"""


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "memory" / "core_memory.json"


def test_get_returns_empty_memory_for_new_installation(path: Path) -> None:
    mem = CoreMemory(path)
    assert mem.get() == {"user": {}, "agent": {}}
    assert mem.get("user") == {}
    assert mem.to_prompt() == ""
    assert not path.exists()  # reading never creates the file


def test_update_user_section(path: Path) -> None:
    mem = CoreMemory(path)
    mem.update("user", "name", "Roman")
    mem.update("user", "current_projects", ["trainer app MVP", "Docker on RPi5"])
    assert mem.get("user") == {
        "name": "Roman",
        "current_projects": ["trainer app MVP", "Docker on RPi5"],
    }
    assert mem.get("agent") == {}


def test_update_agent_section(path: Path) -> None:
    mem = CoreMemory(path)
    mem.update("agent", "learned_rules", ["Don't suggest Spring Boot"])
    mem.update("agent", "learned_rules", ["Don't suggest Spring Boot", "RPi5 has 16GB RAM"])
    assert mem.get("agent") == {"learned_rules": ["Don't suggest Spring Boot", "RPi5 has 16GB RAM"]}
    assert json.loads(path.read_text())["agent"]["learned_rules"][1] == "RPi5 has 16GB RAM"


def test_delete_existing_key(path: Path) -> None:
    mem = CoreMemory(path)
    mem.update("user", "name", "Roman")
    mem.update("user", "city", "Prague")
    mem.delete("user", "city")
    assert mem.get("user") == {"name": "Roman"}
    assert CoreMemory(path).get("user") == {"name": "Roman"}


def test_delete_non_existent_key_returns_error(path: Path) -> None:
    mem = CoreMemory(path)
    mem.update("user", "name", "Roman")
    with pytest.raises(CoreMemoryKeyError) as info:
        mem.delete("user", "age")
    assert isinstance(info.value, KlawError) and isinstance(info.value, KeyError)
    assert str(info.value) == "core memory section 'user' has no key 'age'"
    assert mem.get("user") == {"name": "Roman"}


def test_bad_section_and_key(path: Path) -> None:
    mem = CoreMemory(path)
    with pytest.raises(InvalidInput, match="section"):
        mem.update("friends", "a", 1)
    with pytest.raises(InvalidInput, match="section"):
        mem.get("friends")
    with pytest.raises(InvalidInput, match="key"):
        mem.update("user", "  ", 1)
    with pytest.raises(InvalidInput, match="key"):
        mem.delete("user", "")
    with pytest.raises(InvalidInput, match="JSON"):
        mem.update("user", "x", {1, 2})
    with pytest.raises(InvalidInput, match="JSON"):
        mem.update("user", "x", float("inf"))
    assert not path.exists()


def test_persistence_survives_read_after_write(path: Path) -> None:
    CoreMemory(path).update("user", "name", "Роман")
    again = CoreMemory(path)
    assert again.get() == {"user": {"name": "Роман"}, "agent": {}}
    assert "Роман" in path.read_text(encoding="utf-8")  # stored readable, not \\u-escaped


def test_get_returns_a_copy(path: Path) -> None:
    mem = CoreMemory(path)
    mem.update("user", "projects", ["a"])
    mem.get("user")["projects"].append("b")
    assert mem.get("user") == {"projects": ["a"]}


def test_external_edit_is_picked_up(path: Path) -> None:
    mem = CoreMemory(path)
    mem.update("user", "name", "Roman")
    path.write_text(json.dumps({"user": {"name": "Roma", "x": 1}}))
    assert mem.get() == {"user": {"name": "Roma", "x": 1}, "agent": {}}


def test_init_from_user_md_once(path: Path, tmp_path: Path) -> None:
    user_md = tmp_path / "USER.md"
    user_md.write_text(USER_MD, encoding="utf-8")
    mem = CoreMemory(path)
    assert mem.init_from_user_md(user_md) is True
    assert mem.get("user") == {
        "name": "Roman",
        "what_to_call_them": "Рома",
        "location": "Prague, CZ",
        "occupation": "KMP developer, sports trainer",
        "project": ["trainer app MVP", "Docker on RPi5"],
    }
    assert mem.get("agent") == {}
    # second call: a no-op, even after USER.md changed and memory was updated
    mem.update("user", "name", "Roma")
    user_md.write_text("- **Name:** Someone else\n")
    before = path.read_bytes()
    assert mem.init_from_user_md(user_md) is False
    assert CoreMemory(path).init_from_user_md(user_md) is False
    assert path.read_bytes() == before


def test_init_from_missing_user_md(path: Path, tmp_path: Path) -> None:
    assert CoreMemory(path).init_from_user_md(tmp_path / "USER.md") is False
    assert not path.exists()


def test_init_does_not_touch_a_corrupt_file(path: Path, tmp_path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_text("{oops")
    (tmp_path / "USER.md").write_text("Name: Roman\n")
    assert CoreMemory(path).init_from_user_md(tmp_path / "USER.md") is False
    assert path.read_text() == "{oops"


def test_parse_user_md_forms() -> None:
    assert parse_user_md("- **Name:** Roman") == {"name": "Roman"}
    assert parse_user_md("- **Name**: Roman") == {"name": "Roman"}
    assert parse_user_md("- Name: Roman") == {"name": "Roman"}
    assert parse_user_md("Name: Roman") == {"name": "Roman"}
    assert parse_user_md("# Name: heading\n## Favourite Food: x") == {}
    assert parse_user_md("- **Favourite-Food (main):** borscht") == {
        "favourite_food_main": "borscht"
    }


def test_leftover_temp_file_does_not_corrupt(path: Path) -> None:
    """A crash between writing the temp file and renaming it leaves a stray temp
    file; the real file is intact and later writes still work."""
    mem = CoreMemory(path)
    mem.update("user", "name", "Roman")
    stray = path.parent / f".{path.name}.crashed.tmp"
    stray.write_text('{"user": {"name": "half-writ')
    fresh = CoreMemory(path)
    assert fresh.get("user") == {"name": "Roman"}
    fresh.update("user", "city", "Prague")
    assert CoreMemory(path).get("user") == {"name": "Roman", "city": "Prague"}
    assert stray.exists()  # never read, never mistaken for the real file


def test_failed_write_keeps_the_old_file(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mem = CoreMemory(path)
    mem.update("user", "name", "Roman")
    before = path.read_bytes()

    def crash(*_: object) -> None:
        raise OSError("simulated crash before rename")

    monkeypatch.setattr("klaw.memory.core.os.replace", crash)
    with pytest.raises(OSError, match="simulated"):
        mem.update("user", "name", "Other")
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # temp cleaned up
    monkeypatch.undo()
    assert CoreMemory(path).get("user") == {"name": "Roman"}


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"[1, 2]", b'{"user": []}', b'{"users": {}}', b"\xff\xfe", b""],
)
def test_corrupt_file_is_a_clear_error(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    mem = CoreMemory(path)
    with pytest.raises(CoreMemoryCorrupt, match="klaw memory edit"):
        mem.get()
    with pytest.raises(CoreMemoryCorrupt):
        mem.update("user", "name", "Roman")  # never silently reset
    assert path.read_bytes() == content


def test_reset_keeps_a_copy(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_text("{broken")
    mem = CoreMemory(path)
    kept = mem.reset()
    assert kept is not None and kept.name.startswith("core_memory.json.corrupt-")
    assert kept.read_text() == "{broken"
    assert mem.get() == {"user": {}, "agent": {}}
    mem.update("user", "name", "Roman")
    kept2 = mem.reset()
    assert kept2 is not None and ".bak-" in kept2.name
    assert json.loads(kept2.read_text())["user"] == {"name": "Roman"}


def test_validate_and_replace_all(path: Path) -> None:
    assert validate_core_memory({"user": {"a": 1}}) == {"user": {"a": 1}, "agent": {}}
    with pytest.raises(CoreMemoryCorrupt, match="empty key"):
        validate_core_memory({"user": {"": 1}})
    mem = CoreMemory(path)
    mem.replace_all({"agent": {"rule": "be brief"}})
    assert CoreMemory(path).get() == {"user": {}, "agent": {"rule": "be brief"}}


def test_to_prompt(path: Path) -> None:
    mem = CoreMemory(path)
    mem.update("user", "name", "Roman")
    mem.update("user", "preferences", "Reply in Russian.\nNo fluff.")
    mem.update("agent", "learned_rules", ["Don't suggest Spring Boot", "RPi5 has 16GB RAM"])
    assert mem.to_prompt() == (
        "User:\n"
        "- name: Roman\n"
        "- preferences: Reply in Russian. No fluff.\n"
        "Agent:\n"
        '- learned_rules: ["Don\'t suggest Spring Boot", "RPi5 has 16GB RAM"]'
    )


def test_thread_safe_updates(path: Path) -> None:
    mem = CoreMemory(path)

    def work(t: int) -> None:
        for i in range(20):
            mem.update("user", f"k{t}_{i}", i)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(CoreMemory(path).get("user")) == 80

"""A SKILL.md's frontmatter and its JSON5 `metadata`, read as text a stranger wrote.

Both parsers fall over on deep nesting: PyYAML's scanner costs O(depth) per token
(20,000 `[` take seconds before anything is parsed) and its composer, like json5,
recurses once per level until RecursionError. So nesting is refused as it is met,
at `MAX_DEPTH` levels (real frontmatter has five at most): the YAML scanner and
composer count levels and stop there, and JSON5 is measured by a linear pass over
its brackets (strings and comments skipped) before json5 sees it. Either refusal is
a ValueError naming the line, so the catalog skips that one skill and says why.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["MAX_DEPTH", "load_metadata", "parse_frontmatter"]

#: Nesting levels (lists and mappings) a frontmatter or its metadata may have.
MAX_DEPTH = 16


class _TooDeep(yaml.YAMLError):
    def __init__(self, line: int) -> None:
        super().__init__(f"nested deeper than {MAX_DEPTH} levels")
        self.line = line


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that stops at MAX_DEPTH levels of flow (`[`, `{`) or block nesting."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._levels = 0

    def _one_more_flow(self) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise _TooDeep(self.get_mark().line)

    def fetch_flow_sequence_start(self) -> None:
        self._one_more_flow()
        super().fetch_flow_sequence_start()

    def fetch_flow_mapping_start(self) -> None:
        self._one_more_flow()
        super().fetch_flow_mapping_start()

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self._levels > MAX_DEPTH:  # MAX_DEPTH collections, then the scalar in them
            raise _TooDeep(self.get_mark().line)
        self._levels += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._levels -= 1


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
        data = yaml.load("\n".join(lines[1:end]), Loader=_BoundedLoader)
    except _TooDeep as exc:
        raise ValueError(f"the frontmatter is {exc} (line {exc.line + 2})") from None
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


def _json5_depth(text: str) -> int:
    """The deepest `[`/`{` nesting in JSON5 text, strings and comments left out."""
    depth = deepest = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            i += 1
            while i < n and text[i] != c:
                i += 2 if text[i] == "\\" else 1
        elif c == "/" and text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif c == "/" and text.startswith("/*", i):
            i = text.find("*/", i + 2)
            i = n if i < 0 else i + 1
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
        i += 1
    return deepest


def load_metadata(text: str) -> Any:
    """`metadata` written as a JSON5 string, parsed; ValueError when it is not JSON5
    or nests deeper than MAX_DEPTH (json5 would recurse until RecursionError)."""
    if _json5_depth(text) > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    import json5

    try:
        return json5.loads(text)
    except ValueError:
        raise ValueError("not valid JSON5") from None
    except RecursionError:  # only if the stack was nearly full already
        raise ValueError("nested too deep to be read") from None

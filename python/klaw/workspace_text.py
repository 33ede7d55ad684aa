"""Workspace Markdown as OpenClaw writes it: frontmatter and line endings.

OpenClaw's published templates start with YAML frontmatter (`title`, `summary`,
`read_when`) that its runtime strips before a file reaches the model
(`stripFrontMatter`: the body after the block, leading blank lines removed); files
edited on Windows have CRLF endings. Klaw reads persona files, HEARTBEAT.md, BOOT.md
and BOOTSTRAP.md through `workspace_text` so both arrive as the owner sees them.
"""

from __future__ import annotations

import re

__all__ = ["has_items", "has_tasks", "strip_frontmatter", "workspace_text"]

_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
# A Markdown list item with some text: "- x", "* x", "+ x", "1. x", "2) x", "- [ ] x".
_ITEM = re.compile(r"(?:[-*+]|\d{1,9}[.)])\s+(?!\[[ xX]\]\s*$)\S")


def strip_frontmatter(text: str) -> str:
    """`text` without a leading `---` YAML block (unchanged when there is none)."""
    if not text.startswith("---"):
        return text
    end = text.find("\n---", 3)
    if end < 0:
        return text
    after = text.find("\n", end + 4)
    body = "" if after < 0 else text[after + 1 :]
    return body.lstrip()


def workspace_text(raw: str) -> str:
    """LF line endings, no BOM, no frontmatter, trimmed."""
    text = raw.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    return strip_frontmatter(text).strip()


def has_tasks(text: str) -> bool:
    """Anything besides blank lines, headings, HTML comments and fences: OpenClaw's
    "keep this file empty (or with only comments)" rule for HEARTBEAT.md and BOOT.md."""
    for line in _COMMENT.sub("", workspace_text(text)).splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith(("#", "```")):
            return True
    return False


def has_items(text: str) -> bool:
    """Whether a checklist has at least one list item with text, outside comments and
    fenced code: prose, headings and comments alone ask for nothing (HEARTBEAT.md,
    whose every run wakes the model)."""
    fenced = False
    for line in _COMMENT.sub("", workspace_text(text)).splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and _ITEM.match(stripped):
            return True
    return False

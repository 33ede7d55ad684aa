"""A skill's frontmatter as OpenClaw and ClawHub write it, and what it requires.

`metadata` holds a JSON5 object (or a YAML mapping) with the block under `openclaw`
(older skills: `clawdbot`; ClawHub also `clawdis`): `requires.bins` (all on PATH),
`requires.anyBins` (one of them), `requires.env` (set in Klaw's environment),
`requires.config` (truthy engine.yaml keys, dotted), `os` (`linux`, `darwin`,
`win32`), `always` (skip the requirement checks, not the OS one), `primaryEnv`,
`emoji`, `homepage`, `skillKey`. Top level: `user-invocable` (default true: the skill
is a chat command), `disable-model-invocation` (default false: true keeps it out of
the model's list, the command still works), `homepage`. Values are read leniently, as
OpenClaw does (a list may be a comma-separated string, booleans may be "yes"/"on").
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SkillMeta", "command_name", "read_meta", "unmet"]

_MANIFEST_KEYS = ("openclaw", "clawdbot", "clawdis")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


@dataclass(frozen=True, slots=True)
class SkillMeta:
    user_invocable: bool = True
    model_invocable: bool = True
    homepage: str | None = None
    emoji: str | None = None
    key: str | None = None  # metadata.openclaw.skillKey (config entries use it)
    bins: tuple[str, ...] = ()
    any_bins: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    config: tuple[str, ...] = ()
    os: tuple[str, ...] = ()
    always: bool = False
    primary_env: str | None = None
    problems: tuple[str, ...] = field(default=())


def _flag(value: Any, default: bool) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if value is not None else ""
    return True if text in _TRUE else False if text in _FALSE else default


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items: list[Any] = value.split(",")
    elif isinstance(value, list):
        items = value
    else:
        return ()
    return tuple(s for s in (str(v).strip() for v in items if isinstance(v, (str, int))) if s)


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def read_meta(front: Mapping[str, Any]) -> SkillMeta:
    problems: list[str] = []
    raw = front.get("metadata")
    if isinstance(raw, str):
        from klaw.skills.frontmatter import load_metadata

        try:
            raw = load_metadata(raw)
        except ValueError as exc:
            problems.append(f"metadata is {exc}: its requirements are not known")
            raw = None
    block: Mapping[str, Any] = {}
    if isinstance(raw, Mapping):
        for key in _MANIFEST_KEYS:
            if isinstance(raw.get(key), Mapping):
                block = raw[key]
                break
    requires = block.get("requires") if isinstance(block.get("requires"), Mapping) else {}
    assert isinstance(requires, Mapping)
    return SkillMeta(
        user_invocable=_flag(front.get("user-invocable"), True),
        model_invocable=not _flag(front.get("disable-model-invocation"), False),
        homepage=_text(front.get("homepage")) or _text(block.get("homepage")),
        emoji=_text(block.get("emoji")),
        key=_text(block.get("skillKey")),
        bins=_names(requires.get("bins")),
        any_bins=_names(requires.get("anyBins")),
        env=_names(requires.get("env")),
        config=_names(requires.get("config")),
        os=_names(block.get("os")),
        always=block.get("always") is True,
        primary_env=_text(block.get("primaryEnv")),
        problems=tuple(problems),
    )


def _config_value(config: Any, dotted: str) -> Any:
    node = config
    for part in dotted.split("."):
        if isinstance(node, Mapping):
            node = node.get(part)
        else:
            attr = re.sub(r"(?<!^)(?=[A-Z])", "_", part).lower()  # camelCase key -> attribute
            node = getattr(node, attr, None)
        if node is None:
            return None
    return node


def unmet(
    meta: SkillMeta,
    *,
    config: Any = None,
    env: Mapping[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    platform: str = sys.platform,
) -> list[str]:
    """Why the skill cannot be offered here (empty: it can), in OpenClaw's order."""
    env = os.environ if env is None else env
    if meta.os and platform not in meta.os:
        return [f"needs {'/'.join(meta.os)} (this is {platform})"]
    if meta.always:
        return []
    out: list[str] = []
    missing = [b for b in meta.bins if which(b) is None]
    if missing:
        out.append("needs the program(s) " + ", ".join(missing) + " on PATH")
    if meta.any_bins and all(which(b) is None for b in meta.any_bins):
        out.append("needs one of the programs " + ", ".join(meta.any_bins) + " on PATH")
    unset = [v for v in meta.env if not env.get(v)]
    if unset:
        out.append("needs the environment variable(s) " + ", ".join(unset))
    off = [k for k in meta.config if not _config_value(config, k)]
    if off:
        out.append("needs the config key(s) " + ", ".join(off) + " set")
    return out


def command_name(name: str, used: set[str]) -> str:
    """OpenClaw's chat command for a skill: lowercase `[a-z0-9_]`, at most 32
    characters, `skill` when nothing is left, `_2`, `_3`... on a clash."""
    base = re.sub(r"_+", "_", re.sub(r"[^a-z0-9_]+", "_", name.lower())).strip("_")[:32]
    base = base or "skill"
    if base not in used:
        used.add(base)
        return base
    for i in range(2, 1000):
        suffix = f"_{i}"
        candidate = base[: max(1, 32 - len(suffix))] + suffix
        if candidate not in used:
            used.add(candidate)
            return candidate
    candidate = base[:30] + "_x"
    used.add(candidate)
    return candidate

"""The loader of engine.yaml and gateway.yaml: YAML into a section model, with precise errors.

YAML keys are camelCase as the design writes them; attributes are snake_case. Unknown keys
are rejected (a typo must not silently fall back to a default). String values may use
`${VAR}` and `${VAR:-default}` (`$${` writes a literal `${`; `${VAR:-}` allows empty). An
unset variable without a default is an error naming the key, the line and the variable,
except in the secrets whose absence means "off" (a provider's `apiKey`, the Telegram and
Discord tokens); an unclosed `${` is an error too. Aliases are refused (a YAML
alias bomb would otherwise expand without bound) and files over 1 MiB are not read.
Every problem is reported as `FILE:LINE: dotted.key: message`, the line taken from the
YAML node the value came from.
"""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Final, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from klaw.errors import ConfigError

__all__ = [
    "MAX_CONFIG_BYTES",
    "SECRET_KEYS",
    "Loc",
    "is_secret_key",
    "parse_size",
    "substitute_env",
    "template",
    "validate",
]


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]?)i?b?\s*$", re.IGNORECASE)


def parse_size(value: str) -> int:
    """Bytes in a Docker-style size ("256m", "64M", "1g", "1048576"); ValueError otherwise."""
    match = _SIZE.match(value)
    if match is None:
        raise ValueError(f"{value!r} is not a size: write e.g. 256m, 64k, 1g or a byte count")
    unit = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match.group(2).lower()]
    size = int(float(match.group(1)) * unit)
    if size <= 0:
        raise ValueError(f"{value!r} must be more than 0 bytes")
    return size


def template(name: str) -> str:
    """The commented file `klaw init` writes (klaw/defaults/NAME)."""
    return resources.files("klaw.defaults").joinpath(name).read_text(encoding="utf-8")


# --------------------------------------------------------------------------- ${VAR}

_VAR = re.compile(r"\$(\$)\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|(\$\{)")


def substitute_env(
    text: str,
    env: Mapping[str, str],
    unset: list[str] | None = None,
    malformed: list[str] | None = None,
) -> str:
    """Expand `${VAR}` / `${VAR:-default}` (default used when unset or empty) in `text`.

    Names of variables that were unset and had no default are appended to `unset`; a `${`
    that does not start a well-formed reference (no closing brace, a bad name) appends the
    text from there to `malformed` and is kept literally.
    """

    def repl(match: re.Match[str]) -> str:
        if match.group(1):  # `$${` escape
            return "${"
        if match.group(4):
            if malformed is not None:
                malformed.append(text[match.start() : match.start() + 40])
            return "${"
        name, default = match.group(2), match.group(3)
        value = env.get(name, "")
        if value:
            return value
        if default is not None:
            return default
        if unset is not None and name not in env:
            unset.append(name)
        return ""

    return _VAR.sub(repl, text)


# --------------------------------------------------------------------------- YAML + lines

Loc = tuple[str | int, ...]


@dataclass
class _Document:
    """Parsed YAML plus where each value sits, and which keys used unset variables."""

    data: Any
    root: yaml.Node | None
    unset: dict[Loc, list[str]] = field(default_factory=dict)
    malformed: dict[Loc, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    missing: bool = False  # the file does not exist; `data` comes from the template


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases: config never needs them, and a few nested ones
    (a "billion laughs" file) would expand into billions of nodes and hang the loader."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None,
                None,
                f"YAML aliases (*{event.anchor}) are not supported in Klaw config; "
                "write the value out",
                event.start_mark,
            )
        return super().compose_node(parent, index)


def _parse(path: Path, text: str) -> _Document:
    loader = _NoAliasLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and context_mark is not None:
            problem += f" ({context} at line {context_mark.line + 1})"
        raise ConfigError(str(path), [f"{where}: malformed YAML: {problem}"]) from exc
    finally:
        loader.dispose()
    doc = _Document(data=data if data is not None else {}, root=root)
    if not isinstance(doc.data, dict):
        line = root.start_mark.line + 1 if root is not None else 1
        raise ConfigError(str(path), [f"{path}:{line}: the top level must be a mapping of keys"])
    doc.problems.extend(_duplicate_keys(path, root))
    return doc


def _duplicate_keys(path: Path, node: yaml.Node | None, loc: Loc = ()) -> Iterator[str]:
    # SafeLoader keeps the last of two equal keys silently; a config should say so.
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                dotted = _dotted((*loc, key))
                yield f"{path}:{key_node.start_mark.line + 1}: {dotted}: duplicate key"
            seen.add(key)
            yield from _duplicate_keys(path, value_node, (*loc, key))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            yield from _duplicate_keys(path, item, (*loc, i))


def _node_at(root: yaml.Node | None, loc: Loc) -> tuple[yaml.Node | None, bool]:
    """The deepest node along `loc`, and whether the whole of `loc` was found."""
    node = root
    for part in loc:
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            for key_node, value_node in node.value:
                if key_node.value == part:
                    child = value_node
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if 0 <= part < len(node.value):
                child = node.value[part]
        if child is None:
            return node, False
        node = child
    return node, True


def _key_line(root: yaml.Node | None, loc: Loc) -> int | None:
    """1-based line of the key (or item) at `loc`, else of its deepest present parent."""
    if root is None:
        return None
    if loc and isinstance(loc[-1], str):
        parent, found = _node_at(root, loc[:-1])
        if found and isinstance(parent, yaml.MappingNode):
            for key_node, _ in parent.value:
                if key_node.value == loc[-1]:
                    return int(key_node.start_mark.line) + 1
    node, _ = _node_at(root, loc)
    return int(node.start_mark.line) + 1 if node is not None else None


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "(top level)"


def _expand_tree(
    value: Any,
    env: Mapping[str, str],
    loc: Loc,
    unset: dict[Loc, list[str]],
    malformed: dict[Loc, str] | None = None,
) -> Any:
    if isinstance(value, str):
        names: list[str] = []
        bad: list[str] = []
        out = substitute_env(value, env, names, bad)
        if names:
            unset[loc] = names
        if bad and malformed is not None:
            malformed[loc] = bad[0]
        return out
    if isinstance(value, dict):
        return {k: _expand_tree(v, env, (*loc, str(k)), unset, malformed) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_tree(v, env, (*loc, i), unset, malformed) for i, v in enumerate(value)]
    return value


# --------------------------------------------------------------------------- error text

_M = TypeVar("_M", bound=BaseModel)


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated[...] and `X | None` down to X."""
    while True:
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if origin is Annotated:
            annotation = args[0]
        elif origin in (typing.Union, types.UnionType):
            rest = [a for a in args if a is not type(None)]
            if len(rest) != 1:
                return annotation
            annotation = rest[0]
        else:
            return annotation


def _step(annotation: Any, part: str | int) -> Any:
    """The annotation one level down `part` (a field, a mapping key or a list index)."""
    annotation = _unwrap(annotation)
    origin = typing.get_origin(annotation)
    if origin is dict:
        return typing.get_args(annotation)[1]
    if origin is list:
        return typing.get_args(annotation)[0]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, info in annotation.model_fields.items():
            if part in (name, info.alias):
                return info.annotation
    return None


def _section_at(model: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The section model that holds the key at `loc` (for "did you mean" hints)."""
    annotation: Any = model
    for part in loc[:-1]:
        annotation = _step(annotation, part)
        if annotation is None:
            return None
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _yaml_loc(root: yaml.Node | None, loc: Loc) -> Loc:
    # Pydantic may append a union branch name after a scalar ("...mmrLambda.float").
    while len(loc) > 1:
        parent, found = _node_at(root, loc[:-1])
        if not (found and isinstance(parent, yaml.ScalarNode)):
            break
        loc = loc[:-1]
    return loc


def _describe(model: type[BaseModel], err: ErrorDetails, loc: Loc) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        section = _section_at(model, loc)
        retired: dict[str, tuple[Any, str]] = getattr(section, "retired", {})
        if str(loc[-1]) in retired:
            value, why = retired[str(loc[-1])]
            return f"can only be {json.dumps(value)}: {why}; remove the key"
        known = [f.alias or n for n, f in section.model_fields.items()] if section else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"unknown key{hint}; known keys: {', '.join(known)}"
    if kind == "missing":
        return "is required"
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind != "value_error" and "input" in err and not isinstance(err["input"], dict | list):
        msg += f", got {err['input']!r}"
    return msg


def _where(path: Path, doc: _Document, loc: Loc) -> str:
    if doc.missing:  # the template stood in: its line numbers would mislead
        return f"{path} (not found, defaults used; `klaw init` writes it)"
    line = _key_line(doc.root, loc)
    return f"{path}:{line}" if line is not None else str(path)


def _problems(
    path: Path, model: type[BaseModel], exc: ValidationError, doc: _Document
) -> list[str]:
    out: list[str] = []
    for err in exc.errors():
        loc = _yaml_loc(doc.root, tuple(err["loc"]))
        text = _describe(model, err, loc)
        names = doc.unset.get(loc)
        if names:
            text += f" (from ${{{names[0]}}}, which is not set)"
        out.append(f"{_where(path, doc, loc)}: {_dotted(loc)}: {text}")
    return out


# --------------------------------------------------------------------------- loading


def validate(
    model: type[_M],
    path: Path,
    env: Mapping[str, str],
    template: Callable[[], str],
    optional: Callable[[_M, Loc], bool],
    extend_env: Callable[[Mapping[str, str], Any], Mapping[str, str]] | None = None,
) -> _M:
    text = _read(path)
    doc = _parse(path, template() if text is None else text)
    doc.missing = text is None
    if extend_env is not None:
        env = extend_env(env, doc.data)
    doc.data = _expand_tree(doc.data, env, (), doc.unset, doc.malformed)
    for loc, fragment in doc.malformed.items():
        doc.problems.append(
            f"{_where(path, doc, loc)}: {_dotted(loc)}: malformed variable reference "
            f"{fragment!r}: write ${{NAME}} or ${{NAME:-default}} (or $${{ for a literal ${{)"
        )
    try:
        # Validators that depend on the environment (the workspace) read it from here.
        cfg = model.model_validate(doc.data, context={"env": env})
    except ValidationError as exc:
        raise ConfigError(str(path), doc.problems + _problems(path, model, exc, doc)) from None
    for loc, names in doc.unset.items():
        if not optional(cfg, loc):
            doc.problems.append(
                f"{_where(path, doc, loc)}: {_dotted(loc)}: environment variable {names[0]} "
                f"is not set; export {names[0]}=..., write the value in the file, or give a "
                f"default with ${{{names[0]}:-...}} (${{{names[0]}:-}} for empty)"
            )
    if doc.problems:
        raise ConfigError(str(path), doc.problems)
    return cfg


#: A config file is a few KiB; anything far larger is a mistake (or an attack).
MAX_CONFIG_BYTES = 1024 * 1024


def _read(path: Path) -> str | None:
    """The file's text, or None when it does not exist (then the template, i.e. the
    defaults, stands in)."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(
                str(path),
                [f"{path}: larger than {MAX_CONFIG_BYTES // 1024} KiB; not a config file?"],
            )
        return raw.decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), [f"{path}: cannot read: {exc}"]) from exc


#: The keys that hold secrets, per file: (path, default variable). "*" in a path is any
#: name, "{name}" in the variable that name in upper case. The one list behind two
#: rules: an unset `${VAR}` there means "off", not an error (below), and `klaw backup`
#: writes a `${VAR}` in place of a key in clear (klaw.backup.redact).
SECRET_KEYS: Final[dict[str, tuple[tuple[tuple[str, ...], str], ...]]] = {
    # A provider whose key variable is unset is simply not callable (Ollama needs none;
    # the router and doctor report it), so `make run` with no keys still works.
    # A search provider without its key is off too (no web_search; doctor says why).
    "engine.yaml": (
        (("providers", "*", "apiKey"), "{name}_API_KEY"),
        (("web", "search", "apiKey"), "WEB_SEARCH_API_KEY"),
    ),
    # A channel runs only once its token variable is set (a fresh install chats on the
    # console); an enabled channel without one is off, and `klaw doctor` says so. A
    # transcription key may be unset (a local server needs none).
    "gateway.yaml": (
        (("channels", "*", "token"), "{name}_BOT_TOKEN"),
        (("transcription", "apiKey"), "TRANSCRIPTION_API_KEY"),
    ),
}


def is_secret_key(file: str, loc: Loc) -> bool:
    """Whether `loc` is one of `file`'s SECRET_KEYS."""
    return any(
        len(loc) == len(path) and all(p in ("*", part) for p, part in zip(path, loc, strict=True))
        for path, _ in SECRET_KEYS.get(file, ())
    )

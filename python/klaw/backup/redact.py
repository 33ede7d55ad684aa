"""Keys out of engine.yaml and gateway.yaml before they go into a backup.

A secret written in clear (a provider's `apiKey`, a channel's `token`, the transcription
`apiKey`: `klaw.config.SECRET_KEYS`) is replaced in the text by a `${VAR}` reference, so
the file keeps its comments and layout and still loads (an unset key means "off").
Values that already are a plain `${VAR}` stay. Comments are redacted too: a word in one
that looks like a key or a token (`# old key sk-…`, a bot token, a long mixed-case or
hex string) reads `<redacted>`, whether or not it is the key in use. The result is
parsed again and checked; a file that cannot be made safe is left out instead.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from typing import Final

import yaml

from klaw.backup.archive import Redaction
from klaw.config import SECRET_KEYS

_REFERENCE: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME_IN: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")
#: A value this long is also removed wherever else it appears (a comment holding an old
#: key). Shorter ones are placeholders such as Ollama's "ollama", which may also name a
#: provider or a model: only their own slot is replaced.
_MIN_SECRET: Final = 16


#: Words of a comment that are keys or tokens by their form: providers' prefixes, a
#: Telegram bot token, three dot-separated parts (Discord, JWT), and else long strings
#: mixing upper and lower case with digits (base64) or long hex.
_KEYLIKE: Final = re.compile(
    r"(?:sk|pk|rk)[-_][A-Za-z0-9_-]{8,}"
    r"|(?:ghp|gho|ghs|ghu|github_pat|glpat|gsk|hf|xox[abprs])[-_][A-Za-z0-9_-]{8,}"
    r"|AIza[0-9A-Za-z_-]{20,}"
    r"|[0-9]{5,}:[A-Za-z0-9_-]{20,}"
    r"|[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{16,}"
)
_WORD: Final = re.compile(r"[A-Za-z0-9+/=_.:-]{20,}")
_HEX: Final = re.compile(r"[0-9a-fA-F]{32,}")


class Unsafe(ValueError):
    """The file's secrets cannot be located or replaced: it must stay out."""


def _env_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", text).upper()


def _child(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            found: yaml.Node = v
            return found
    return None


def _entries(node: yaml.Node | None) -> Iterator[tuple[str, yaml.Node]]:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                yield k.value, v


def _secrets(file: str, root: yaml.Node | None) -> Iterator[tuple[str, str, yaml.Node]]:
    """(dotted key, default variable, value node) of every secret slot in the file
    (`klaw.config.SECRET_KEYS`)."""
    for path, variable in SECRET_KEYS.get(file, ()):
        yield from _slots(root, path, variable, ())


def _slots(
    node: yaml.Node | None, path: tuple[str, ...], variable: str, done: tuple[str, ...]
) -> Iterator[tuple[str, str, yaml.Node]]:
    if node is None:
        return
    if not path:
        yield ".".join(done), variable, node
        return
    head, rest = path[0], path[1:]
    if head != "*":
        yield from _slots(_child(node, head), rest, variable, (*done, head))
        return
    for name, child in _entries(node):
        named = variable.replace("{name}", _env_name(name))
        yield from _slots(child, rest, named, (*done, name))


def _compose(text: str) -> yaml.Node | None:
    try:
        if any(isinstance(e, yaml.AliasEvent) for e in yaml.parse(text, Loader=yaml.SafeLoader)):
            raise Unsafe("it uses YAML aliases, which Klaw refuses")
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise Unsafe(f"it is not valid YAML ({str(exc).splitlines()[0]})") from None


def _clean(node: yaml.Node) -> bool:
    if not isinstance(node, yaml.ScalarNode):
        return False
    return (
        node.tag == "tag:yaml.org,2002:null"
        or node.value == ""
        or bool(_REFERENCE.fullmatch(node.value))
    )


def redact(file: str, text: str) -> tuple[str, list[Redaction]]:
    """`text` with every secret in clear replaced by a `${VAR}` reference, and what was
    replaced. Raises Unsafe when that cannot be done and checked."""
    found: list[tuple[int, int, str, str, str]] = []  # start, end, key, variable, value
    for key, default, node in _secrets(file, _compose(text)):
        if _clean(node):
            continue
        if not isinstance(node, yaml.ScalarNode):
            raise Unsafe(f"{key} is not a plain value")
        named = _NAME_IN.search(node.value)
        variable = named.group(1) if named else default
        found.append((node.start_mark.index, node.end_mark.index, key, variable, node.value))
    out = text
    for start, end, _key, variable, _value in sorted(found, reverse=True):
        span = out[start:end]
        out = out[:start] + f'"${{{variable}}}"' + ("\n" if span.endswith("\n") else "") + out[end:]
    for *_, variable, value in found:  # the same key in a comment or another value
        if len(value) >= _MIN_SECRET:
            out = out.replace(value, f"${{{variable}}}")
    out = _redact_comments(out)
    left = [key for key, _, node in _secrets(file, _compose(out)) if not _clean(node)]
    if left or any(len(v) >= _MIN_SECRET and v in out for *_, v in found):
        raise Unsafe(f"{', '.join(left) or 'a secret'} could not be replaced")
    return out, [Redaction(file, key, variable) for _, _, key, variable, _ in found]


def _redact_comments(text: str) -> str:
    """`text` with every key-like word of its comments replaced by `<redacted>`. A
    comment is a `#` at a line's start or after a blank that no scalar holds."""
    spans = sorted(_scalar_spans(_compose(text)))
    starts = [s for s, _ in spans]
    out: list[str] = []
    done = 0
    for mark in re.finditer(r"(?:^|(?<=[ \t]))#", text, re.MULTILINE):
        at = mark.start()
        i = bisect.bisect_right(starts, at) - 1
        if at < done or (i >= 0 and spans[i][0] <= at < spans[i][1]):
            continue
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        out += [text[done:at], _KEYLIKE.sub("<redacted>", text[at:end])]
        out[-1] = _WORD.sub(_generic, out[-1])
        done = end
    return "".join(out) + text[done:]


def _generic(word: re.Match[str]) -> str:
    w = word.group(0)
    mixed = any(c.isupper() for c in w) and any(c.islower() for c in w)
    base64ish = mixed and any(c.isdigit() for c in w) and "://" not in w and "." not in w
    hexish = bool(_HEX.fullmatch(w)) and any(c.isdigit() for c in w)
    return "<redacted>" if base64ish or hexish else w


def _scalar_spans(node: yaml.Node | None) -> Iterator[tuple[int, int]]:
    """Where each scalar (keys included) of the document lies in its text."""
    stack = [node] if node is not None else []
    while stack:
        n = stack.pop()
        if isinstance(n, yaml.ScalarNode):
            yield n.start_mark.index, n.end_mark.index
        elif isinstance(n, yaml.MappingNode):
            stack += [part for pair in n.value for part in pair]
        elif isinstance(n, yaml.SequenceNode):
            stack += n.value

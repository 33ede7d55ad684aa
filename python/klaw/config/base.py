"""What every config section is built on: camelCase keys, no unknown keys, and the
value types both engine.yaml and gateway.yaml use."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)
from pydantic.alias_generators import to_camel

__all__ = ["ChatIds", "MemoryMax", "NonNegativeInt", "PositiveInt", "Section", "empty_to_none"]


class Section(BaseModel):
    """Base of every config section: camelCase aliases, snake_case names, no unknown keys."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,  # Python code and tests may build sections by attribute name
        extra="forbid",
        defer_build=True,  # build validators on first use: import stays cheap for the CLI
    )

    #: Keys the section no longer has because only one value was ever allowed: older
    #: files may still write that value (dropped here); any other is an unknown key,
    #: which the loader reports with the reason given here.
    retired: ClassVar[dict[str, tuple[Any, str]]] = {}

    @model_validator(mode="before")
    @classmethod
    def _drop_retired(cls, data: Any) -> Any:
        if not cls.retired or not isinstance(data, dict):
            return data
        return {
            key: value
            for key, value in data.items()
            if not (key in cls.retired and _same(value, cls.retired[key][0]))
        }


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # `1` is not `true`


def _chat_ids(value: Any) -> Any:
    # Telegram ids are numbers in YAML (`[-100123]`) but strings everywhere else.
    if isinstance(value, list):
        return [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
    return value


def empty_to_none(value: Any) -> Any:
    # `apiKey: "${GLM_API_KEY}"` with the variable unset means "no key", not an empty key.
    return None if value == "" else value


ChatIds = Annotated[list[str], BeforeValidator(_chat_ids)]
PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]


def _memory_max(value: str) -> str:
    # systemd's MemoryMax= syntax: bytes with an optional K/M/G/T suffix, a percentage of
    # the machine's memory, or infinity. Checked here so a typo fails `klaw doctor`, not
    # the unit at boot.
    if not re.fullmatch(r"[1-9][0-9]*[KMGT]?|[1-9][0-9]?%|100%|infinity", value):
        raise ValueError(f"{value!r} is not a systemd MemoryMax= value (e.g. 700M, 1G, 30%)")
    return value


MemoryMax = Annotated[str, AfterValidator(_memory_max)]

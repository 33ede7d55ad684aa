"""A tool as the model sees it (`Tool`) and what a call gives back (`ToolResult`): the
bottom of the tool framework, below the groups (`klaw.tools.groups`) and the registry
(`klaw.tools.base`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from klaw.llm.types import ToolSchema

__all__ = ["Tool", "ToolResult"]


@dataclass(frozen=True, slots=True)
class ToolResult:
    content: str
    is_error: bool = False


class Tool(ABC):
    """A built-in tool. Subclasses set the class attributes and implement `run`.

    `run` receives arguments already validated against `parameters` and returns the
    text given back to the model; it raises `ToolError` for failures the model
    should read about.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }

    @abstractmethod
    async def run(self, args: dict[str, Any]) -> str: ...

    def schema(self) -> ToolSchema:
        return ToolSchema(self.name, self.description, self.parameters)

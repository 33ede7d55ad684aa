"""Klaw's own request/response types, independent of any provider's wire format."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "DeltaCallback",
    "FinishReason",
    "LlmClient",
    "LlmRequest",
    "LlmResponse",
    "Message",
    "Role",
    "ToolCall",
    "ToolSchema",
    "Usage",
]

Role = Literal["system", "user", "assistant", "tool"]
# Normalised across providers; anything unknown becomes "other".
FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "error", "other"]
# Receives each text delta of a streamed answer, in order.
DeltaCallback = Callable[[str], Awaitable[None]]


@dataclass
class ToolCall:
    """A tool call asked for by the model.

    When the model sent arguments that are not a JSON object, `error` says why and
    `arguments` is empty: the engine answers the call with a tool error instead of running it.
    `raw_arguments` keeps what the model sent, for logs and for that error message.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    raw_arguments: str | None = None

    @property
    def malformed(self) -> bool:
        return self.error is not None


@dataclass
class Message:
    """One message of the conversation sent to the model."""

    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)  # assistant only
    tool_call_id: str | None = None  # tool only: the call this answers
    is_error: bool = False  # tool only: the result reports a failure
    # Assistant only: DeepSeek's reasoner wants it back within a tool-call round.
    reasoning_content: str | None = None

    @classmethod
    def system(cls, content: str) -> Message:
        return cls("system", content)

    @classmethod
    def user(cls, content: str) -> Message:
        return cls("user", content)

    @classmethod
    def tool_result(cls, tool_call_id: str, content: str, *, is_error: bool = False) -> Message:
        return cls("tool", content, tool_call_id=tool_call_id, is_error=is_error)


@dataclass
class ToolSchema:
    """A tool offered to the model; `parameters` is a JSON Schema object."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass
class Usage:
    tokens_in: int = 0
    tokens_out: int = 0


@dataclass
class LlmRequest:
    """A chat request. `model` is the provider's model id (the router fills it in)."""

    messages: list[Message]
    model: str = ""
    tools: list[ToolSchema] = field(default_factory=list)
    max_tokens: int | None = None
    temperature: float | None = None
    stream: bool = False


@dataclass
class LlmResponse:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: FinishReason = "stop"
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    reasoning_content: str | None = None

    def to_message(self) -> Message:
        """The assistant message to append to the history before the tool results."""
        return Message(
            "assistant",
            self.content,
            tool_calls=list(self.tool_calls),
            reasoning_content=self.reasoning_content,
        )


class LlmClient(Protocol):
    """A wire protocol (OpenAI-compatible, Anthropic) bound to one provider's endpoint."""

    provider: str

    async def complete(
        self, request: LlmRequest, on_delta: DeltaCallback | None = None
    ) -> LlmResponse:
        """One attempt, no retries. Raises ProviderError (or a subclass)."""
        ...

    async def aclose(self) -> None: ...

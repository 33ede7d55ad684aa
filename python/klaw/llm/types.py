"""Klaw's own request/response types, independent of any provider's wire format."""

from __future__ import annotations

import base64
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from klaw.spend.log import Call

__all__ = [
    "DeltaCallback",
    "FinishReason",
    "ImagePart",
    "LlmClient",
    "LlmRequest",
    "LlmResponse",
    "Message",
    "Role",
    "ToolCall",
    "ToolSchema",
    "Usage",
    "image_note",
    "images_for_model",
    "not_shown",
    "with_notes",
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
    # Opaque state the provider wants back with this call in the next request of the
    # turn (Gemini's `thoughtSignature`); never logged, never shown.
    signature: str | None = None

    @property
    def malformed(self) -> bool:
        return self.error is not None


@dataclass(frozen=True)
class ImagePart:
    """An image sent with a user message to a model with `vision: true`.

    `data` is what goes on the wire (already within the size limits of
    `klaw.engine.images`), `mime` its type (image/jpeg, image/png or image/webp), `ref`
    the file's workspace path: what the log keeps and what a model without vision is
    told instead (`image_note`).
    """

    ref: str
    mime: str
    data: bytes = field(repr=False)

    @functools.cached_property
    def base64(self) -> str:
        """The data as base64 text, encoded once: every tool round and every retry of a
        turn sends the same images again (up to 4 × 3.75 MB)."""
        return base64.b64encode(self.data).decode("ascii")


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
    images: list[ImagePart] = field(default_factory=list)  # user only; sent before the text

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
    # Of tokens_in, those the provider read from its prompt cache (billed at its
    # cached-input price; docs/costs.md).
    cached_in: int = 0


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
    # Set when the budget was spent and `budget.offlineModel` answered: the one-line
    # notice the user is shown with the answer.
    budget_note: str | None = None
    # The call as the spend meter recorded it (its cost, None when its price is
    # unknown); None when the router has no meter.
    spent: Call | None = None

    def to_message(self) -> Message:
        """The assistant message to append to the history before the tool results."""
        return Message(
            "assistant",
            self.content,
            tool_calls=list(self.tool_calls),
            reasoning_content=self.reasoning_content,
        )


def not_shown(image: ImagePart, reason: str) -> str:
    """The note a model reads for an image it does not get."""
    return f"[image {image.ref} not shown: {reason}]"


def image_note(image: ImagePart) -> str:
    """What a model without vision reads in place of an image."""
    return not_shown(image, "this model does not take images")


def with_notes(m: Message, images: list[ImagePart], notes: Sequence[str]) -> Message:
    """`m` sending only `images`, with `notes` (`not_shown`) after its text."""
    text = "\n".join(x for x in (m.content, *notes) if x)
    return dataclasses.replace(m, content=text or None, images=images)


def images_for_model(messages: Sequence[Message], *, vision: bool) -> list[Message]:
    """`messages` as one model gets them: a model without vision reads `image_note` in
    place of every image; a model with vision gets the images whose bytes were loaded,
    and a note for any placeholder that was not (`klaw.engine.images`)."""
    out: list[Message] = []
    for m in messages:
        if not m.images:  # most messages: nothing to do
            out.append(m)
            continue
        keep = [i for i in m.images if vision and i.data]
        if len(keep) < len(m.images):
            notes = [
                not_shown(i, "it was not loaded") if vision else image_note(i)
                for i in m.images
                if not (vision and i.data)
            ]
            m = with_notes(m, keep, notes)
        out.append(m)
    return out


class LlmClient(Protocol):
    """A wire protocol (OpenAI-compatible, Anthropic, Gemini) bound to one provider's endpoint."""

    provider: str

    async def complete(
        self, request: LlmRequest, on_delta: DeltaCallback | None = None
    ) -> LlmResponse:
        """One attempt, no retries. Raises ProviderError (or a subclass)."""
        ...

    async def aclose(self) -> None: ...

"""Errors of the LLM layer (the tree is drawn in `klaw.llm`'s docstring)."""

from __future__ import annotations

from klaw.errors import KlawError

__all__ = [
    "AllProvidersFailed",
    "ContentBlocked",
    "LlmConfigError",
    "LlmError",
    "MalformedResponse",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderTimeout",
    "TruncatedStream",
]

USER_MESSAGE = (
    "All models are unavailable right now; your message is saved and I will answer "
    "when one is back."
)


class LlmError(KlawError):
    """Root of everything the LLM layer raises."""


class LlmConfigError(LlmError, ValueError):
    """A model reference or provider in engine.yaml cannot be used; the message names the key."""


class ProviderError(LlmError):
    """One call to one provider failed.

    `status` is the HTTP status (None for transport failures), `retry_after` the delay the
    provider asked for in seconds, `message` the provider's own explanation (never a secret).
    """

    #: Transport failures (timeouts, refused connections) are worth retrying; HTTP failures
    #: are retried according to `llm.retryOn`.
    transient: bool = False

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        model: str = "",
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.message = message
        self.provider = provider
        self.model = model
        self.status = status
        self.retry_after = retry_after
        where = f"{provider}/{model}" if model else provider
        code = f" HTTP {status}" if status is not None else ""
        super().__init__(f"{where}:{code} {message}")


class ProviderTimeout(ProviderError):
    """No answer within `llm.requestTimeoutMs`."""

    transient = True


class ProviderConnectionError(ProviderError):
    """The endpoint could not be reached (refused, DNS, reset)."""

    transient = True


class MalformedResponse(ProviderError):
    """The provider answered 2xx with a body we cannot read as a chat completion."""


class TruncatedStream(MalformedResponse):
    """A streamed answer ended before the provider's end marker (OpenAI's `finish_reason`
    or `[DONE]`, Anthropic's `message_stop`, Gemini's `finishReason`): the rest of the
    answer may be missing, so it is never taken for a complete one.

    Retried like a dropped connection: the same request usually streams whole next time.
    """

    transient = True


class ContentBlocked(ProviderError):
    """The provider's safety filter blocked the prompt or the whole answer (Gemini's
    `promptFeedback.blockReason`, `finishReason` SAFETY, RECITATION, PROHIBITED_CONTENT...).

    Not retried: the same request would be blocked again. `reason` is the provider's code.
    """

    def __init__(self, message: str, *, provider: str, model: str = "", reason: str = "") -> None:
        self.reason = reason
        super().__init__(message, provider=provider, model=model)


class AllProvidersFailed(LlmError):
    """Every model of the fallback chain failed.

    `user_message` is safe to show the user; `failures` maps each model tried to its last
    error, in chain order.
    """

    def __init__(
        self, failures: dict[str, ProviderError], user_message: str = USER_MESSAGE
    ) -> None:
        self.failures = failures
        self.user_message = user_message
        detail = "; ".join(str(e) for e in failures.values()) or "no model was tried"
        super().__init__(f"{user_message} ({detail})")

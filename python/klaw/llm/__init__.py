"""The LLM layer: provider clients and the router with retries and fallback.

Clients speak a wire protocol (`OpenAICompatClient` for GLM, DeepSeek, Qwen, Ollama,
OpenRouter; `AnthropicClient`; `GeminiClient`) and make one attempt; the `Router` resolves
`provider/model-id` references from engine.yaml, retries and falls back.

Exceptions (all under `klaw.errors.KlawError`):

    LlmError                        root of the LLM layer
    ├── LlmConfigError (ValueError) unknown model, provider or task; unsupported type
    ├── ProviderError               one call failed: .provider .model .status .retry_after
    │   ├── ProviderTimeout         no answer within llm.requestTimeoutMs, or a stream
    │   │                           silent for llm.streamIdleTimeoutMs (retried)
    │   ├── ProviderConnectionError endpoint unreachable (retried)
    │   ├── MalformedResponse       2xx but not a chat completion (falls back)
    │   │   └── TruncatedStream     a stream ended before its end marker (retried)
    │   └── ContentBlocked          a safety filter blocked prompt or answer: .reason (falls back)
    └── AllProvidersFailed          the whole chain failed: .user_message, .failures

A tool call whose arguments are not a JSON object is not an exception: it comes back as
a `ToolCall` with `.error` set, to be answered to the model as a tool error.
"""

from __future__ import annotations

from klaw.llm.anthropic import AnthropicClient
from klaw.llm.errors import (
    USER_MESSAGE,
    AllProvidersFailed,
    ContentBlocked,
    LlmConfigError,
    LlmError,
    MalformedResponse,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    TruncatedStream,
)
from klaw.llm.gemini import GeminiClient
from klaw.llm.openai_compat import OpenAICompatClient
from klaw.llm.router import ModelRef, Router, build_client
from klaw.llm.types import (
    DeltaCallback,
    FinishReason,
    ImagePart,
    LlmClient,
    LlmRequest,
    LlmResponse,
    Message,
    Role,
    ToolCall,
    ToolSchema,
    Usage,
)

__all__ = [
    "USER_MESSAGE",
    "AllProvidersFailed",
    "AnthropicClient",
    "ContentBlocked",
    "DeltaCallback",
    "FinishReason",
    "GeminiClient",
    "ImagePart",
    "LlmClient",
    "LlmConfigError",
    "LlmError",
    "LlmRequest",
    "LlmResponse",
    "MalformedResponse",
    "Message",
    "ModelRef",
    "OpenAICompatClient",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderTimeout",
    "Role",
    "Router",
    "ToolCall",
    "ToolSchema",
    "TruncatedStream",
    "Usage",
    "build_client",
]

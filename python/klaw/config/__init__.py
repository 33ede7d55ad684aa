"""engine.yaml and gateway.yaml: models, defaults and a loader with precise errors (design §9.2).

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
import os
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails

from klaw.errors import ConfigError
from klaw.paths import KlawPaths

__all__ = [
    "ChannelsConfig",
    "ChunkingConfig",
    "CodeExecutionConfig",
    "CommandSpec",
    "CompatibilityConfig",
    "ConsoleConfig",
    "ContextConfig",
    "DiscordConfig",
    "EmbeddingConfig",
    "EngineConfig",
    "FilesConfig",
    "GatewayConfig",
    "HeartbeatConfig",
    "LlmConfig",
    "LoggingConfig",
    "MemoryConfig",
    "ModelConfig",
    "OpenClawConfig",
    "OpenClawSyncConfig",
    "ProcessingConfig",
    "ProviderConfig",
    "RoutingConfig",
    "RoutingTasks",
    "SchedulerConfig",
    "SearchConfig",
    "SummarizationConfig",
    "TelegramConfig",
    "WatchConfig",
    "default_engine_yaml",
    "default_gateway_yaml",
    "load_engine_config",
    "load_gateway_config",
    "parse_size",
    "resolve_workspace",
    "substitute_env",
]

DEFAULT_EMBEDDING_MODEL = "use-multilingual-v3"


class _Section(BaseModel):
    """Base of every config section: camelCase aliases, snake_case names, no unknown keys."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,  # Python code and tests may build sections by attribute name
        extra="forbid",
        defer_build=True,  # build validators on first use: import stays cheap for the CLI
    )


def _chat_ids(value: Any) -> Any:
    # Telegram ids are numbers in YAML (`[-100123]`) but strings everywhere else.
    if isinstance(value, list):
        return [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
    return value


def _empty_to_none(value: Any) -> Any:
    # `apiKey: "${GLM_API_KEY}"` with the variable unset means "no key", not an empty key.
    return None if value == "" else value


ChatIds = Annotated[list[str], BeforeValidator(_chat_ids)]
PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]


# --------------------------------------------------------------------------- gateway.yaml


class TelegramConfig(_Section):
    @property
    def active(self) -> bool:
        """Enabled and given a token: the gateway connects to Telegram."""
        return self.enabled and bool(self.token)

    enabled: bool = True
    token: str = ""
    api_server: str = "https://api.telegram.org"
    # Inbound: empty = accept from everyone allowed by pairing; outbound: empty = reject all
    # except replies to the current inbound chat (design §9.2).
    allowed_chat_ids: ChatIds = Field(default_factory=list)
    allow_all: bool = False
    # Show replies while they are written (drafts in private chats, else edits).
    streaming: bool = False


class DiscordConfig(_Section):
    @property
    def active(self) -> bool:
        """Enabled and given a token: the gateway connects to Discord."""
        return self.enabled and bool(self.token)

    enabled: bool = False
    token: str = ""
    # The REST base (…/api/v10 is added) and, through its GET /gateway/bot, the websocket.
    api_server: str = "https://discord.com"
    # DM and guild channel ids; the same two-way whitelist as Telegram's (design §9.2).
    allowed_chat_ids: ChatIds = Field(default_factory=list)
    allow_all: bool = False
    # Show replies while they are written (one message, edited as the reply grows).
    streaming: bool = False


class ConsoleConfig(_Section):
    enabled: bool = True


class ChannelsConfig(_Section):
    telegram: TelegramConfig = Field(default_factory=TelegramConfig)
    discord: DiscordConfig = Field(default_factory=DiscordConfig)
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)


def _memory_max(value: str) -> str:
    # systemd's MemoryMax= syntax: bytes with an optional K/M/G/T suffix, a percentage of
    # the machine's memory, or infinity. Checked here so a typo fails `klaw doctor`, not
    # the unit at boot.
    if not re.fullmatch(r"[1-9][0-9]*[KMGT]?|[1-9][0-9]?%|100%|infinity", value):
        raise ValueError(f"{value!r} is not a systemd MemoryMax= value (e.g. 700M, 1G, 30%)")
    return value


MemoryMax = Annotated[str, AfterValidator(_memory_max)]


class GatewayServiceConfig(_Section):
    """The systemd unit `klaw service install` writes for the gateway."""

    memory_max: MemoryMax = "200M"


class TranscriptionConfig(_Section):
    """Voice notes to text through an OpenAI-compatible `/audio/transcriptions` (the
    gateway transcribes as it takes a message in, like it downloads a photo)."""

    @property
    def active(self) -> bool:
        return bool(self.endpoint)

    endpoint: str = ""  # e.g. https://api.openai.com/v1; empty: voice notes stay files
    api_key: Annotated[str | None, BeforeValidator(_empty_to_none)] = None
    model: str = "whisper-1"
    language: str | None = None  # ISO-639-1 hint ("ru"); None: detected
    max_seconds: PositiveInt = 600
    max_mb: PositiveInt = 25  # OpenAI's limit for one file
    timeout_s: PositiveInt = 120


class GatewayConfig(_Section):
    channels: ChannelsConfig = Field(default_factory=ChannelsConfig)
    transcription: TranscriptionConfig = Field(default_factory=TranscriptionConfig)
    service: GatewayServiceConfig = Field(default_factory=GatewayServiceConfig)


# --------------------------------------------------------------------------- engine.yaml


def is_loopback(endpoint: str) -> bool:
    """True when `endpoint`'s host is localhost or a loopback address."""
    import ipaddress
    from urllib.parse import urlsplit

    host = (urlsplit(endpoint).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ProviderConfig(_Section):
    type: Literal["openai-compatible", "anthropic", "gemini"] = "openai-compatible"
    endpoint: str
    api_key: Annotated[str | None, BeforeValidator(_empty_to_none)] = None

    @property
    def callable_without_probe(self) -> bool:
        """An API key, or a keyless server on this machine (Ollama, the offline model)."""
        return bool(self.api_key) or is_loopback(self.endpoint)


class ModelConfig(_Section):
    max_tokens: PositiveInt | None = None
    context_budget: PositiveInt | None = None
    temperature: Annotated[float, Field(ge=0)] | None = None
    # False: the model gets no tool schemas (a tiny model that cannot use them
    # would spend its whole budget on them).
    tools: bool = True
    # True: photos the user sends reach the model as images (docs/providers.md, vision);
    # otherwise the model reads a short note naming the file.
    vision: bool = False


class RoutingTasks(_Section):
    """Models of background work: subagents (scheduled jobs without a model of their
    own) and background summarization."""

    summarization: str = "ollama/qwen3:8b"
    subagent: str = "glm/glm-4-plus"


class RoutingConfig(_Section):
    default: str = "glm/glm-5"
    fallback: list[str] = Field(
        default_factory=lambda: ["deepseek/deepseek-chat", "ollama/qwen3:8b"]
    )
    tasks: RoutingTasks = Field(default_factory=RoutingTasks)


class EmbeddingConfig(_Section):
    type: Literal["onnx", "ollama"] = "onnx"
    model: str = DEFAULT_EMBEDDING_MODEL
    model_path: str | None = None  # a directory holding model.onnx, or the model.onnx itself
    tokenizer_path: str | None = None
    ort_library: str | None = None  # libonnxruntime.so; default: the onnxruntime wheel's
    threads: Annotated[int, Field(ge=1)] = 1
    # Tokens per model run; None = the model's own window (MiniLM 256, E5 512).
    max_length: Annotated[int, Field(ge=8, le=512)] | None = None
    # Longer texts: embed every window and pool them, or keep only the first window.
    long_texts: Literal["windows", "truncate"] = "windows"
    batch_size: Annotated[int, Field(ge=1)] = 16
    ollama_endpoint: str = "http://localhost:11434"
    ollama_model: str = "all-minilm:l6-v2"


class ChunkingConfig(_Section):
    size: PositiveInt = 400
    overlap: NonNegativeInt = 80

    @field_validator("overlap")
    @classmethod
    def _overlap_below_size(cls, overlap: int, info: ValidationInfo) -> int:
        size = info.data.get("size")  # absent when size itself failed validation
        if size is not None and overlap >= size:
            raise ValueError(f"must be smaller than memory.chunking.size ({size}), got {overlap}")
        return overlap


class SearchConfig(_Section):
    top_k: PositiveInt = 10
    candidates: PositiveInt = 20
    # convex: weighted sum of min-max normalised scores; rrf: reciprocal rank fusion.
    fusion: Literal["convex", "rrf"] = "convex"
    rrf_k: PositiveInt = 60
    # None: the weights measured for the embedding model (e5 0.7/0.3, MiniLM 0.4/0.6).
    vector_weight: Annotated[float, Field(ge=0)] | None = None
    keyword_weight: Annotated[float, Field(ge=0)] | None = None
    # Bonus for the newest candidate (0..this by date): updated facts' new values first
    # (archival memory; past conversations are searched without it).
    recency: Annotated[float, Field(ge=0, le=1)] = 0.2
    # A query of more terms than this gives part of its keyword weight to the vectors;
    # None: the model's (4; MiniLM, English-only, 0 = off).
    keyword_pivot: NonNegativeInt | None = None


class WatchConfig(_Section):
    enabled: bool = True
    debounce_ms: NonNegativeInt = 1000


class MemoryConfig(_Section):
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    chunking: ChunkingConfig = Field(default_factory=ChunkingConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    watch: WatchConfig = Field(default_factory=WatchConfig)


class ContextConfig(_Section):
    default_budget_tokens: PositiveInt = 8000
    sliding_window: PositiveInt = 20
    subagent_window: PositiveInt = 5  # rows of its own chat a subagent sees
    allow_private_memory_in_groups: bool = False


class ProcessingConfig(_Section):
    debounce_ms: NonNegativeInt = 1500
    max_concurrent_llm: PositiveInt = 2
    max_tool_call_rounds: PositiveInt = 10


class LocalModelConfig(_Section):
    # Start the offline llama.cpp model when no provider has a key or answers (§ providers).
    enabled: bool = True


class LlmConfig(_Section):
    local: LocalModelConfig = Field(default_factory=LocalModelConfig)
    max_retries: NonNegativeInt = 2
    request_timeout_ms: PositiveInt = 60000
    initial_backoff_ms: NonNegativeInt = 1000
    backoff_multiplier: Annotated[float, Field(ge=1)] = 2.0
    retry_on: list[int] = Field(default_factory=lambda: [429, 500, 502, 503, 504, 529])


class LoggingConfig(_Section):
    """Logs of scheduled jobs' chats (``conversations/scheduler_{name}/``)."""

    subagent_conversations: bool = True


class HeartbeatConfig(_Section):
    """The `heartbeat` job made from the workspace's HEARTBEAT.md."""

    # hourly, on the hour (Quartz; 5-field crontab and `every 30m` work too)
    cron: str = "0 0 * * * ?"
    model: str | None = None  # None: routing.tasks.subagent
    inject_into: str | None = None  # where a non-silent result goes; None: the log only
    precheck: str | None = None  # a command: exit 1 = nothing to look at, no tokens
    daily_token_cap: PositiveInt | None = None

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        from klaw.scheduler.cron import At, CronError, parse_schedule

        if isinstance(parse_schedule(value), At):  # CronError (a ValueError) names the field
            raise CronError("the heartbeat repeats: use a cron expression or 'every 30m'")
        return value


class SummarizationConfig(_Section):
    """Background summaries of chats into summaries/ (docs/scheduler.md)."""

    enabled: bool = True
    every_messages: PositiveInt = 50  # new messages of a chat that trigger a summary
    cron: str = "0 30 3 * * ?"  # and nightly, for chats with a few left over

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        from klaw.scheduler.cron import parse_cron

        parse_cron(value)
        return value


class SchedulerConfig(_Section):
    enabled: bool = True  # false: no jobs run, no heartbeat (scheduler.db untouched)
    timezone: str | None = None  # IANA name for jobs added without one; None: the system's
    catch_up_hours: Annotated[float, Field(gt=0)] = 12.0  # a due time later than this is missed
    heartbeat: HeartbeatConfig = Field(default_factory=HeartbeatConfig)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is not None:
            from klaw.scheduler.cron import zone_named

            zone_named(value)  # CronError (a ValueError) says what is expected
        return value


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


class CodeExecutionConfig(_Section):
    """`code_execute`'s sandbox (docs/sandbox.md): backend, limits and mounts."""

    # auto: Docker when its socket answers, else bubblewrap, else no code_execute tool.
    backend: Literal["auto", "docker", "bwrap", "off"] = "auto"
    docker_image: str = "klaw-sandbox:latest"
    docker_host: str | None = None  # None: $DOCKER_HOST, else unix:///var/run/docker.sock
    timeout: PositiveInt = 30  # seconds, the hard limit (a call may ask for less)
    # Off unless asked: the design's example allowed it; code that can reach the
    # network can reach the owner's LAN and exfiltrate what it reads (decisions.md).
    allow_network: bool = False
    max_memory: str = "256m"
    max_cpus: str = "1.0"
    max_processes: PositiveInt = 64  # pids limit: a fork bomb stops here
    max_output_bytes: str = "64m"  # each file written, and all /output keeps of one run
    tmp_size: str = "64m"  # the tmpfs at /tmp
    read_only_rootfs: Literal[True] = True  # the sandbox's root is never writable
    no_privileged: Literal[True] = True  # design §6.5: hardcoded, accepted only as true
    keep_alive: bool = True  # one warm container and `exec` (fast) instead of one per run
    keep_alive_idle_timeout_min: PositiveInt = 10
    keep_alive_max_executions: PositiveInt = 50
    # HOST[:CONTAINER][:ro|rw]; the only host paths the sandbox sees besides /output.
    volume_mounts: list[str] = Field(default_factory=lambda: ["${KLAW_WORKSPACE}/skills:ro"])

    @field_validator("backend", mode="before")
    @classmethod
    def _backend(cls, value: Any) -> Any:
        if value is False:  # YAML 1.1 reads a bare `off` as false
            return "off"
        return "bwrap" if value == "bubblewrap" else value

    @field_validator("max_memory", "max_output_bytes", "tmp_size")
    @classmethod
    def _size(cls, value: str) -> str:
        parse_size(value)
        return value

    @field_validator("max_cpus")
    @classmethod
    def _cpus(cls, value: str) -> str:
        try:
            cpus = float(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a number of CPUs (e.g. 1.0 or 0.5)") from None
        if not 0.01 <= cpus <= 64:
            raise ValueError(f"{value!r} CPUs is out of range (0.01 to 64)")
        return value

    @field_validator("volume_mounts")
    @classmethod
    def _mounts(cls, value: list[str]) -> list[str]:
        from klaw.sandbox.policy import parse_mount

        for entry in value:
            if "${" not in entry:  # checked again after ${VAR} expansion by the loader
                parse_mount(entry)
        return value


class FilesConfig(_Section):
    max_file_size_bytes: PositiveInt = 1_048_576


class CommandSpec(_Section):
    name: Annotated[str, Field(pattern=r"^[a-z0-9_]{1,32}$")]  # Telegram's command rules
    description: str


def _default_commands() -> list[CommandSpec]:
    return [
        CommandSpec(name="new", description="New session (context reset)"),
        CommandSpec(name="model", description="Show/change the LLM model"),
        CommandSpec(name="models", description="List available models"),
        CommandSpec(name="memory", description="Show core memory"),
        CommandSpec(name="status", description="Agent status"),
        CommandSpec(name="help", description="List commands"),
    ]


class OpenClawSyncConfig(_Section):
    # The design spells these keys in snake_case (§4.6).
    memory_md: bool = Field(default=True, alias="memory_md")
    daily_logs: bool = Field(default=True, alias="daily_logs")
    user_md: bool = Field(default=True, alias="user_md")


class OpenClawConfig(_Section):
    enabled: bool = False
    sync: OpenClawSyncConfig = Field(default_factory=OpenClawSyncConfig)


class CompatibilityConfig(_Section):
    """OpenClaw write-back (docs/openclaw.md; klaw.openclaw.writeback), off by default."""

    openclaw: OpenClawConfig = Field(default_factory=OpenClawConfig)


def _default_providers() -> dict[str, ProviderConfig]:
    return {
        "glm": ProviderConfig(endpoint="https://open.bigmodel.cn/api/paas/v4"),
        "deepseek": ProviderConfig(endpoint="https://api.deepseek.com/v1"),
        "ollama": ProviderConfig(endpoint="http://localhost:11434/v1"),
        "anthropic": ProviderConfig(type="anthropic", endpoint="https://api.anthropic.com/v1"),
    }


def _default_models() -> dict[str, ModelConfig]:
    return {
        "glm/glm-4-plus": ModelConfig(max_tokens=4096, context_budget=8000),
        "glm/glm-5": ModelConfig(max_tokens=8192, context_budget=12000),
        "deepseek/deepseek-chat": ModelConfig(context_budget=12000),
        "deepseek/deepseek-reasoner": ModelConfig(max_tokens=16384, context_budget=16000),
        "ollama/qwen3:8b": ModelConfig(context_budget=6000),
        "anthropic/claude-sonnet-4-20250514": ModelConfig(
            max_tokens=8192, context_budget=16000, vision=True
        ),
    }


class EngineServiceConfig(_Section):
    """The systemd unit `klaw service install` writes for the engine."""

    memory_max: MemoryMax = "700M"


class EngineConfig(_Section):
    # None: $KLAW_WORKSPACE, else ~/klaw-workspace; when set it wins (see resolve_workspace).
    workspace: Path | None = None
    providers: dict[str, ProviderConfig] = Field(default_factory=_default_providers)
    models: dict[str, ModelConfig] = Field(default_factory=_default_models)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    processing: ProcessingConfig = Field(default_factory=ProcessingConfig)
    llm: LlmConfig = Field(default_factory=LlmConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    summarization: SummarizationConfig = Field(default_factory=SummarizationConfig)
    code_execution: CodeExecutionConfig = Field(default_factory=CodeExecutionConfig)
    files: FilesConfig = Field(default_factory=FilesConfig)
    commands: list[CommandSpec] = Field(default_factory=_default_commands)
    compatibility: CompatibilityConfig = Field(default_factory=CompatibilityConfig)
    service: EngineServiceConfig = Field(default_factory=EngineServiceConfig)

    @field_validator("workspace")
    @classmethod
    def _absolute_workspace(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        value = value.expanduser()
        if not value.is_absolute():
            raise ValueError(f"must be an absolute path (or start with ~), got {str(value)!r}")
        return value

    @field_validator("models")
    @classmethod
    def _model_ids(cls, value: dict[str, ModelConfig]) -> dict[str, ModelConfig]:
        bad = [key for key in value if "/" not in key.strip("/")]
        if bad:
            raise ValueError(f"model ids must look like provider/model-id, got {bad}")
        return value


def resolve_workspace(cfg: EngineConfig, env: Mapping[str, str] | None = None) -> Path:
    """The workspace in force: engine.yaml `workspace`, else `$KLAW_WORKSPACE`, else default.

    The file key wins: `klaw init --workspace` writes it so that every process (systemd
    units included) finds the workspace without extra environment.
    """
    if cfg.workspace is not None:
        return cfg.workspace
    return KlawPaths.from_env(os.environ if env is None else env).workspace


# --------------------------------------------------------------------------- templates


def _template(name: str) -> str:
    return resources.files("klaw.defaults").joinpath(name).read_text(encoding="utf-8")


def default_engine_yaml() -> str:
    """The commented engine.yaml that `klaw init` writes; it spells out every default."""
    return _template("engine.yaml")


def default_gateway_yaml() -> str:
    """The commented gateway.yaml that `klaw init` writes."""
    return _template("gateway.yaml")


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


def _validate(
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
        cfg = model.model_validate(doc.data)
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
    "engine.yaml": ((("providers", "*", "apiKey"), "{name}_API_KEY"),),
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


def _engine_optional(cfg: EngineConfig, loc: Loc) -> bool:
    return is_secret_key("engine.yaml", loc)


def _gateway_optional(cfg: GatewayConfig, loc: Loc) -> bool:
    return is_secret_key("gateway.yaml", loc)


def workspace_key(data: Any, env: Mapping[str, str]) -> Path | None:
    """The `workspace` an engine.yaml's parsed data names (`${VAR}`s and `~` expanded),
    None when it names none."""
    raw = data.get("workspace") if isinstance(data, dict) else None
    if isinstance(raw, str) and raw:
        return Path(substitute_env(raw, env)).expanduser()
    return None


def _with_workspace(env: Mapping[str, str], data: Any) -> dict[str, str]:
    """`env` with KLAW_WORKSPACE set to the workspace in force (see resolve_workspace), so
    `${KLAW_WORKSPACE}` in sandbox mounts names the right directory."""
    named = workspace_key(data, env)
    return {**env, "KLAW_WORKSPACE": str(named or KlawPaths.from_env(env).workspace)}


def load_engine_config(
    path: Path | None = None, env: Mapping[str, str] | None = None
) -> EngineConfig:
    """Load and validate engine.yaml (default: the XDG config path); raise ConfigError."""
    env = os.environ if env is None else env
    path = KlawPaths.from_env(env).engine_config if path is None else path
    cfg = _validate(EngineConfig, path, env, default_engine_yaml, _engine_optional, _with_workspace)
    # Defaults never went through the YAML pass: expand the default mounts too.
    mounts_env = _with_workspace(env, {"workspace": str(cfg.workspace or "")})
    mounts = cfg.code_execution.volume_mounts
    cfg.code_execution.volume_mounts = [substitute_env(m, mounts_env) for m in mounts]
    return cfg


def load_gateway_config(
    path: Path | None = None, env: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Load and validate gateway.yaml (default: the XDG config path); raise ConfigError."""
    env = os.environ if env is None else env
    path = KlawPaths.from_env(env).gateway_config if path is None else path
    return _validate(GatewayConfig, path, env, default_gateway_yaml, _gateway_optional)

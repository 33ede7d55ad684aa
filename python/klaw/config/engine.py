"""engine.yaml: providers and models, memory, context, the scheduler, the sandbox, the
workspace, and the engine's service unit."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal
from zoneinfo import ZoneInfo

if TYPE_CHECKING:
    from ipaddress import IPv4Network, IPv6Network

    IPNetwork = IPv4Network | IPv6Network

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator

from klaw.config.base import MemoryMax, NonNegativeInt, PositiveInt, Section, empty_to_none
from klaw.config.loader import Loc, is_secret_key, parse_size, substitute_env, template, validate
from klaw.config.mcp import McpServeConfig, McpServerConfig, check_server_names
from klaw.errors import ConfigError
from klaw.mounts import parse_mount
from klaw.paths import KlawPaths, expand_home, unsafe_workspace

__all__ = [
    "DEFAULT_EAGER_TOOLS",
    "DEFAULT_EMBEDDING_MODEL",
    "WORKSPACE_HINT",
    "ArchiveConfig",
    "AutoRecallConfig",
    "BudgetConfig",
    "ChunkingConfig",
    "CodeExecutionConfig",
    "CommandSpec",
    "CompatibilityConfig",
    "ContextConfig",
    "EmbeddingConfig",
    "EngineConfig",
    "EngineServiceConfig",
    "FilesConfig",
    "HeartbeatConfig",
    "LlmConfig",
    "LocalModelConfig",
    "LoggingConfig",
    "LoopsConfig",
    "MemoryConfig",
    "ModelConfig",
    "OpenClawConfig",
    "OpenClawSyncConfig",
    "PriceConfig",
    "ProcessingConfig",
    "PromptMemoryConfig",
    "ProviderConfig",
    "ReflectConfig",
    "RoutingConfig",
    "RoutingTasks",
    "SchedulerConfig",
    "SearchConfig",
    "SummarizationConfig",
    "ToolsConfig",
    "WatchConfig",
    "WebConfig",
    "WebFetchConfig",
    "WebSearchConfig",
    "default_engine_yaml",
    "is_loopback",
    "load_engine_config",
    "parse_allow_host",
    "resolve_workspace",
    "workspace_key",
]

DEFAULT_EMBEDDING_MODEL = "use-multilingual-v3"


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


class ProviderConfig(Section):
    type: Literal["openai-compatible", "anthropic", "gemini"] = "openai-compatible"
    endpoint: str
    api_key: Annotated[str | None, BeforeValidator(empty_to_none)] = None

    @property
    def callable_without_probe(self) -> bool:
        """An API key, or a keyless server on this machine (Ollama, the offline model)."""
        return bool(self.api_key) or is_loopback(self.endpoint)


#: A price, cap or rate: `.inf` is refused (inf × 0 tokens is NaN, which no cap stops).
Amount = Annotated[float, Field(ge=0, allow_inf_nan=False)]
#: Per million tokens: the dearest models cost ~100; 1e308 × tokens overflowed to inf.
PerMillion = Annotated[float, Field(ge=0, le=1_000_000, allow_inf_nan=False)]


class PriceConfig(Section):
    """A model's list price per million tokens (docs/costs.md); `cachedInput` is the
    price of input tokens read from the provider's cache (unset: the input price)."""

    input: PerMillion
    output: PerMillion
    cached_input: PerMillion | None = None
    currency: Literal["CNY", "USD"]


class ModelConfig(Section):
    max_tokens: PositiveInt | None = None
    context_budget: PositiveInt | None = None
    temperature: Annotated[float, Field(ge=0)] | None = None
    # False: the model gets no tool schemas (a tiny model that cannot use them
    # would spend its whole budget on them).
    tools: bool = True
    # True: photos the user sends reach the model as images (docs/providers.md, vision);
    # otherwise the model reads a short note naming the file.
    vision: bool = False
    # None: the shipped price list (defaults/prices.json), else the cost is unknown.
    price: PriceConfig | None = None


class RoutingTasks(Section):
    """Models of background work: subagents (scheduled jobs without a model of their
    own) and background summarization."""

    summarization: str = "ollama/qwen3:8b"
    subagent: str = "glm/glm-4-plus"


class RoutingConfig(Section):
    default: str = "glm/glm-5"
    fallback: list[str] = Field(
        default_factory=lambda: ["deepseek/deepseek-chat", "ollama/qwen3:8b"]
    )
    tasks: RoutingTasks = Field(default_factory=RoutingTasks)


class EmbeddingConfig(Section):
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


class ChunkingConfig(Section):
    size: PositiveInt = 400
    overlap: NonNegativeInt = 80

    @field_validator("overlap")
    @classmethod
    def _overlap_below_size(cls, overlap: int, info: ValidationInfo) -> int:
        size = info.data.get("size")  # absent when size itself failed validation
        if size is not None and overlap >= size:
            raise ValueError(f"must be smaller than memory.chunking.size ({size}), got {overlap}")
        return overlap


class SearchConfig(Section):
    top_k: PositiveInt = 10
    candidates: PositiveInt = 20
    # convex: weighted sum of min-max normalised scores; peaked: the same with each weight
    # scaled by how peaked its list is for the query; rrf: reciprocal rank fusion.
    fusion: Literal["convex", "peaked", "rrf"] = "convex"
    rrf_k: PositiveInt = 60
    # None: the weights chosen for the embedding model (USE 0.5/0.5, e5 0.7/0.3, MiniLM
    # 0.4/0.6; docs/memory-eval.md).
    vector_weight: Annotated[float, Field(ge=0)] | None = None
    keyword_weight: Annotated[float, Field(ge=0)] | None = None
    # Bonus for the newest candidate (0..this by date): updated facts' new values first
    # (archival memory; past conversations are searched without it).
    recency: Annotated[float, Field(ge=0, le=1)] = 0.2
    # A query of more terms than this gives part of its keyword weight to the vectors;
    # None: the model's (USE 8, e5 4; MiniLM, English-only, 0 = off).
    keyword_pivot: NonNegativeInt | None = None


class WatchConfig(Section):
    enabled: bool = True
    debounce_ms: NonNegativeInt = 1000


class AutoRecallConfig(Section):
    """Bank pages and retained facts put into the context when a message names what
    they are about, with no model call (docs/memory.md, "Auto-recall")."""

    enabled: bool = True
    max_tokens: PositiveInt = 600
    # Tier 2: the message's embedding against pages' and facts' descriptors (cosine).
    similarity: bool = True
    # null: measured for the model (klaw.memory.recall.MIN_SIMILARITY)
    min_similarity: Annotated[float, Field(ge=0, le=1)] | None = None


class ReflectConfig(Section):
    """The nightly reflect job: bank/ pages and opinions from new retained facts."""

    enabled: bool = True
    cron: str = "0 0 4 * * ?"  # after the nightly summaries (their facts included)
    daily_token_cap: PositiveInt | None = 60_000
    max_facts: PositiveInt = 150  # new facts sent per model call

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        from klaw.cronexpr import parse_cron

        parse_cron(value)
        return value


class PromptMemoryConfig(Section):
    """What is in every prompt (docs/memory.md, "A prompt that stays small")."""

    # Persona files, core memory, MEMORY.md and auto-recall together; MEMORY.md gives
    # way when the others leave it less than its share.
    max_tokens: PositiveInt = 5000
    # MEMORY.md's share (private chats); beyond it the prompt holds its first lines and
    # `klaw memory condense` proposes a shorter file. 0: MEMORY.md only through search.
    memory_md_tokens: NonNegativeInt = 1200


class ArchiveConfig(Section):
    """Daily logs older than `afterDays` move to memory/archive/ (still searchable)."""

    enabled: bool = True  # at the nightly reflect run; `klaw memory condense` too
    after_days: PositiveInt = 90


class MemoryConfig(Section):
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    chunking: ChunkingConfig = Field(default_factory=ChunkingConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    watch: WatchConfig = Field(default_factory=WatchConfig)
    auto_recall: AutoRecallConfig = Field(default_factory=AutoRecallConfig)
    reflect: ReflectConfig = Field(default_factory=ReflectConfig)
    # Commit each change Klaw makes to workspace memory files (docs/memory.md): null =
    # when the workspace is a git repository; true = also initialise one; false = never.
    git: bool | None = None
    prompt: PromptMemoryConfig = Field(default_factory=PromptMemoryConfig)
    archive: ArchiveConfig = Field(default_factory=ArchiveConfig)


class ContextConfig(Section):
    default_budget_tokens: PositiveInt = 8000
    sliding_window: PositiveInt = 20
    subagent_window: PositiveInt = 5  # rows of its own chat a subagent sees
    allow_private_memory_in_groups: bool = False


class LoopsConfig(Section):
    """Loop breakers of one turn, besides `maxToolCallRounds` (docs/costs.md)."""

    enabled: bool = True
    max_tokens: PositiveInt = 200_000  # tokens in + out of the turn's model calls
    max_seconds: PositiveInt = 300  # the turn's wall time, waits for a slot included
    # The same call (tool and arguments) this many times in a row, or a pair of calls
    # alternating this many times (A,B,A,B,A,B), ends the turn.
    repeats: Annotated[int, Field(ge=2)] = 3


class ProcessingConfig(Section):
    debounce_ms: NonNegativeInt = 1500
    max_concurrent_llm: PositiveInt = 2
    max_tool_call_rounds: PositiveInt = 10
    loops: LoopsConfig = Field(default_factory=LoopsConfig)


class BudgetConfig(Section):
    """Spend caps in `currency`, per owner's day and month (docs/costs.md). `perSource`
    caps a day's spend of each source its key matches (`heartbeat`, `job:*`, `chat:*`,
    `summary`...; the most specific key wins). `rates` convert other currencies: one
    unit of the key's currency is worth this much of `currency`."""

    daily: Amount | None = None
    monthly: Amount | None = None
    currency: Literal["CNY", "USD"] = "USD"
    per_source: dict[str, Amount] = Field(default_factory=dict)
    rates: dict[Literal["CNY", "USD"], Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict
    )
    # A chat over its cap is answered by this model (the offline one) after the notice.
    offline_model: str | None = None

    @property
    def active(self) -> bool:
        return self.daily is not None or self.monthly is not None or bool(self.per_source)

    @field_validator("per_source")
    @classmethod
    def _sources(cls, value: dict[str, float]) -> dict[str, float]:
        # A misspelt key would cap nothing, silently.
        for key in value:
            kind, sep, rest = key.partition(":")
            named = key in {"heartbeat", "summary", "reflect"} or set(key) <= {"*", "?"}
            if not (named or (sep and rest and kind in {"chat", "job", "subagent"})):
                raise ValueError(
                    f"{key!r} names no source: use heartbeat, summary, reflect, "
                    "chat:<chat id>, job:<name> or subagent:<name> (* and ? match any)"
                )
        return value


class LocalModelConfig(Section):
    # Start the offline llama.cpp model when no provider has a key or answers (§ providers).
    enabled: bool = True


class LlmConfig(Section):
    local: LocalModelConfig = Field(default_factory=LocalModelConfig)
    max_retries: NonNegativeInt = 2
    request_timeout_ms: PositiveInt = 60000  # the whole request, streamed or not
    # A stream silent this long (keep-alive comments do not count) has failed.
    stream_idle_timeout_ms: PositiveInt = 30000
    initial_backoff_ms: NonNegativeInt = 1000
    backoff_multiplier: Annotated[float, Field(ge=1)] = 2.0
    retry_on: list[int] = Field(default_factory=lambda: [429, 500, 502, 503, 504, 529])


class LoggingConfig(Section):
    """Logs of scheduled jobs' chats (``conversations/scheduler_{name}/``)."""

    subagent_conversations: bool = True


class HeartbeatConfig(Section):
    """The `heartbeat` job made from the workspace's HEARTBEAT.md."""

    # hourly, on the hour (Quartz; 5-field crontab and `every 30m` work too)
    cron: str = "0 0 * * * ?"
    model: str | None = None  # None: routing.tasks.subagent
    inject_into: str | None = None  # where a non-silent result goes; None: the log only
    precheck: str | None = None  # a command: exit 1 = nothing to look at, no tokens
    daily_token_cap: PositiveInt | None = None
    # skip the model call while nothing it reads changed since a silent run (a checklist
    # about mail or the web, outside the workspace, wants false or a pre-check)
    skip_unchanged: bool = True

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        from klaw.cronexpr import At, CronError, parse_schedule

        if isinstance(parse_schedule(value), At):  # CronError (a ValueError) names the field
            raise CronError("the heartbeat repeats: use a cron expression or 'every 30m'")
        return value


class SummarizationConfig(Section):
    """Background summaries of chats into summaries/ (docs/scheduler.md)."""

    enabled: bool = True
    every_messages: PositiveInt = 50  # new messages of a chat that trigger a summary
    cron: str = "0 30 3 * * ?"  # and nightly, for chats with a few left over

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        from klaw.cronexpr import parse_cron

        parse_cron(value)
        return value


class SchedulerConfig(Section):
    enabled: bool = True  # false: no jobs run, no heartbeat (scheduler.db untouched)
    timezone: str | None = None  # IANA name for jobs added without one; None: the system's
    catch_up_hours: Annotated[float, Field(gt=0)] = 12.0  # a due time later than this is missed
    heartbeat: HeartbeatConfig = Field(default_factory=HeartbeatConfig)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is not None:
            from klaw.cronexpr import zone_named

            zone_named(value)  # CronError (a ValueError) says what is expected
        return value

    def zone(self) -> ZoneInfo | None:
        """The owner's zone, None for the host's: the one zone in which jobs, daily logs,
        summaries and the model's clock name their days."""
        return ZoneInfo(self.timezone) if self.timezone else None


class CodeExecutionConfig(Section):
    """`code_execute`'s sandbox (docs/sandbox.md): backend, limits and mounts."""

    retired: ClassVar[dict[str, tuple[Any, str]]] = {
        "readOnlyRootfs": (True, "the sandbox's root is never writable"),
        "noPrivileged": (True, "sandboxed code never runs privileged (design §6.5)"),
    }

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
        for entry in value:
            if "${" not in entry:  # checked again after ${VAR} expansion by the loader
                parse_mount(entry)
        return value


class FilesConfig(Section):
    max_file_size_bytes: PositiveInt = 1_048_576


#: Built-in tools whose schemas go in every request; the others are one line of a
#: group each, loaded on demand (klaw.tools.builtin_groups, docs/engine.md#tools).
DEFAULT_EAGER_TOOLS: tuple[str, ...] = (
    "memory_search",
    "memory_save",
    "file_read",
    "current_time",
    "send_message",
    "skill_load",
    "web_search",
)


class ToolsConfig(Section):
    # "*": every built-in schema in every request (no groups).
    eager: list[Annotated[str, Field(pattern=r"^(\*|[a-z][a-z0-9_]{0,63})$")]] = Field(
        default_factory=lambda: list(DEFAULT_EAGER_TOOLS)
    )


def parse_allow_host(entry: str) -> tuple[str | IPNetwork, int | None]:
    """A `web.fetch.allowHosts` entry: (lowercase name or network, port or None).
    Names may start with `*.` (any subdomain); ValueError says what is expected."""
    import ipaddress

    text = entry.strip().lower()
    port: int | None = None
    if text.startswith("["):  # [v6] or [v6]:port
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":") or not rest[1:].isdigit():
                raise ValueError(f"{entry!r}: write [ADDRESS]:PORT")
            port = int(rest[1:])
    elif text.count(":") == 1:
        host, _, num = text.partition(":")
        if not num.isdigit():
            raise ValueError(f"{entry!r}: the port after ':' must be a number")
        port = int(num)
    else:
        host = text
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"{entry!r}: port {port} is out of range")
    try:
        return ipaddress.ip_network(host, strict=False), port
    except ValueError:
        pass
    name = host.removeprefix("*.")
    if not name or not all(
        part and len(part) < 64 and part.replace("-", "").replace("_", "").isalnum()
        for part in name.split(".")
    ):
        raise ValueError(
            f"{entry!r} is not a host name, address or network "
            "(e.g. nas.lan, *.lan, 192.168.1.10, 10.0.0.0/8, localhost:8080)"
        )
    return host, port


class WebFetchConfig(Section):
    """`web_fetch` (docs/web.md): what it may reach and how much it reads."""

    enabled: bool = True
    # Private, loopback or link-local hosts it may reach all the same: a name
    # ("nas.lan", "*.lan"), an address or a network ("192.168.1.10", "10.0.0.0/8"),
    # each optionally with ":PORT". Cloud metadata addresses only when listed literally.
    allow_hosts: list[str] = Field(default_factory=list)
    max_bytes: str = "2m"  # of the body (decompressed); a longer page is cut there
    timeout_seconds: PositiveInt = 20  # the whole fetch: connect, redirects and body
    max_redirects: NonNegativeInt = 5
    max_tokens: Annotated[int, Field(ge=100)] = 3000  # result cap; a call may ask for less
    cache_minutes: NonNegativeInt = 10  # the same URL within this is not fetched again

    @field_validator("max_bytes")
    @classmethod
    def _size(cls, value: str) -> str:
        parse_size(value)
        return value

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        for entry in value:
            parse_allow_host(entry)  # ValueError says what is expected
        return value


class WebSearchConfig(Section):
    """`web_search` (docs/web.md): off until a provider is set."""

    provider: Literal["searxng", "brave", "tavily", "bocha", "zhipu"] | None = None
    # searxng: your instance's URL (required); others: their API's URL (the default).
    endpoint: Annotated[str | None, BeforeValidator(empty_to_none)] = None
    api_key: Annotated[str | None, BeforeValidator(empty_to_none)] = None
    count: Annotated[int, Field(ge=1, le=20)] = 5  # results when the call names none
    timeout_seconds: PositiveInt = 15

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"must be an http(s) URL, got {value!r}")
        return value


class WebConfig(Section):
    fetch: WebFetchConfig = Field(default_factory=WebFetchConfig)
    search: WebSearchConfig = Field(default_factory=WebSearchConfig)


class CommandSpec(Section):
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


class OpenClawSyncConfig(Section):
    # The design spells these keys in snake_case (§4.6).
    memory_md: bool = Field(default=True, alias="memory_md")
    daily_logs: bool = Field(default=True, alias="daily_logs")
    user_md: bool = Field(default=True, alias="user_md")


class OpenClawConfig(Section):
    enabled: bool = False
    sync: OpenClawSyncConfig = Field(default_factory=OpenClawSyncConfig)


class CompatibilityConfig(Section):
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


class EngineServiceConfig(Section):
    """The systemd unit `klaw service install` writes for the engine."""

    memory_max: MemoryMax = "700M"


class EngineConfig(Section):
    # None: $KLAW_WORKSPACE, else ~/klaw-workspace; when set it wins (see resolve_workspace).
    workspace: Path | None = None
    providers: dict[str, ProviderConfig] = Field(default_factory=_default_providers)
    models: dict[str, ModelConfig] = Field(default_factory=_default_models)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    processing: ProcessingConfig = Field(default_factory=ProcessingConfig)
    llm: LlmConfig = Field(default_factory=LlmConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    summarization: SummarizationConfig = Field(default_factory=SummarizationConfig)
    code_execution: CodeExecutionConfig = Field(default_factory=CodeExecutionConfig)
    files: FilesConfig = Field(default_factory=FilesConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    commands: list[CommandSpec] = Field(default_factory=_default_commands)
    compatibility: CompatibilityConfig = Field(default_factory=CompatibilityConfig)
    service: EngineServiceConfig = Field(default_factory=EngineServiceConfig)
    # MCP servers (docs/mcp.md): none unless listed.
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    mcp_serve: McpServeConfig = Field(default_factory=McpServeConfig)

    @field_validator("mcp_servers")
    @classmethod
    def _mcp_names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        return check_server_names(value)

    @field_validator("workspace")
    @classmethod
    def _absolute_workspace(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is None:
            return None
        env = info.context.get("env") if isinstance(info.context, dict) else None
        value = expand_home(value, os.environ if env is None else env)
        if not value.is_absolute():
            raise ValueError(f"must be an absolute path (or start with ~), got {str(value)!r}")
        if env is not None and (why := unsafe_workspace(value, KlawPaths.from_env(env), env)):
            raise ValueError(f"{why}; {WORKSPACE_HINT}")
        return value

    @field_validator("models")
    @classmethod
    def _model_ids(cls, value: dict[str, ModelConfig]) -> dict[str, ModelConfig]:
        bad = [key for key in value if "/" not in key.strip("/")]
        if bad:
            raise ValueError(f"model ids must look like provider/model-id, got {bad}")
        return value


#: What to do about a workspace `unsafe_workspace` refuses.
WORKSPACE_HINT = (
    "the agent's file tools read and write all of the workspace: give it a folder of its "
    "own (e.g. ~/klaw-workspace)"
)


def resolve_workspace(cfg: EngineConfig, env: Mapping[str, str] | None = None) -> Path:
    """The workspace in force: engine.yaml `workspace`, else `$KLAW_WORKSPACE`, else default.

    The file key wins: `klaw init --workspace` writes it so that every process (systemd
    units included) finds the workspace without extra environment.
    """
    if cfg.workspace is not None:
        return cfg.workspace
    return KlawPaths.from_env(os.environ if env is None else env).workspace


def default_engine_yaml() -> str:
    """The commented engine.yaml that `klaw init` writes; it spells out every default."""
    return template("engine.yaml")


def _engine_optional(cfg: EngineConfig, loc: Loc) -> bool:
    return is_secret_key("engine.yaml", loc)


def workspace_key(data: Any, env: Mapping[str, str]) -> Path | None:
    """The `workspace` an engine.yaml's parsed data names (`${VAR}`s and `~` expanded),
    None when it names none."""
    raw = data.get("workspace") if isinstance(data, dict) else None
    if isinstance(raw, str) and raw:
        return expand_home(substitute_env(raw, env), env)
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
    cfg = validate(EngineConfig, path, env, default_engine_yaml, _engine_optional, _with_workspace)
    if cfg.workspace is None:  # the file's key was checked with the rest
        paths = KlawPaths.from_env(env)
        if why := unsafe_workspace(paths.workspace, paths, env):
            named = "KLAW_WORKSPACE" if env.get("KLAW_WORKSPACE") else "the default workspace"
            raise ConfigError(str(path), [f"{named}: {why}; {WORKSPACE_HINT}"])
    # Defaults never went through the YAML pass: expand the default mounts too.
    mounts_env = _with_workspace(env, {"workspace": str(cfg.workspace or "")})
    mounts = cfg.code_execution.volume_mounts
    cfg.code_execution.volume_mounts = [substitute_env(m, mounts_env) for m in mounts]
    return cfg

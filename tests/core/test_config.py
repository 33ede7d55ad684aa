"""engine.yaml / gateway.yaml: defaults from the design, ${ENV}, and errors with key and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from klaw.config import (
    EmbeddingConfig,
    EngineConfig,
    GatewayConfig,
    default_engine_yaml,
    default_gateway_yaml,
    load_engine_config,
    load_gateway_config,
    resolve_workspace,
    substitute_env,
)
from klaw.errors import ConfigError


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home")}


def write(tmp_path: Path, text: str, name: str = "engine.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(exc: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    return exc.value.problems


# --------------------------------------------------------------------------- defaults


def test_engine_defaults_match_design() -> None:
    cfg = EngineConfig()
    assert cfg.workspace is None
    assert set(cfg.providers) == {"glm", "deepseek", "ollama", "anthropic"}
    glm = cfg.providers["glm"]
    assert (glm.type, glm.endpoint) == ("openai-compatible", "https://open.bigmodel.cn/api/paas/v4")
    assert cfg.providers["deepseek"].endpoint == "https://api.deepseek.com/v1"
    assert cfg.providers["ollama"].endpoint == "http://localhost:11434/v1"
    assert cfg.providers["ollama"].api_key is None
    assert cfg.providers["anthropic"].type == "anthropic"
    assert cfg.providers["anthropic"].endpoint == "https://api.anthropic.com/v1"
    models = {k: (v.max_tokens, v.context_budget) for k, v in cfg.models.items()}
    assert models == {
        "glm/glm-4-plus": (4096, 8000),
        "glm/glm-5": (8192, 12000),
        "deepseek/deepseek-chat": (None, 12000),
        "deepseek/deepseek-reasoner": (16384, 16000),
        "ollama/qwen3:8b": (None, 6000),
        "anthropic/claude-sonnet-4-20250514": (8192, 16000),
    }
    assert cfg.routing.default == "glm/glm-5"
    assert cfg.routing.fallback == ["deepseek/deepseek-chat", "ollama/qwen3:8b"]
    assert cfg.routing.tasks.summarization == "ollama/qwen3:8b"
    assert cfg.routing.tasks.subagent == "glm/glm-4-plus"
    ctx = cfg.context
    assert (ctx.default_budget_tokens, ctx.sliding_window, ctx.subagent_window) == (8000, 20, 5)
    assert ctx.allow_private_memory_in_groups is False
    proc = cfg.processing
    assert (proc.debounce_ms, proc.max_concurrent_llm, proc.max_tool_call_rounds) == (1500, 2, 10)
    llm = cfg.llm
    assert (llm.max_retries, llm.request_timeout_ms, llm.initial_backoff_ms) == (2, 60000, 1000)
    assert llm.backoff_multiplier == 2.0
    assert llm.retry_on == [429, 500, 502, 503, 504, 529]
    assert cfg.logging.subagent_conversations is True
    assert cfg.files.max_file_size_bytes == 1048576
    assert [c.name for c in cfg.commands] == ["new", "model", "models", "memory", "status", "help"]
    assert cfg.commands[0].description == "New session (context reset)"
    assert cfg.compatibility.openclaw.enabled is False


def test_code_execution_defaults_match_design() -> None:
    ce = EngineConfig().code_execution
    assert (ce.backend, ce.docker_image, ce.docker_host) == ("auto", "klaw-sandbox:latest", None)
    # allowNetwork is off by default, unlike the design's example (docs/decisions.md).
    assert (ce.timeout, ce.allow_network, ce.max_memory, ce.max_cpus) == (30, False, "256m", "1.0")
    assert (ce.max_processes, ce.max_output_bytes, ce.tmp_size) == (64, "64m", "64m")
    assert ce.keep_alive is True
    assert (ce.keep_alive_idle_timeout_min, ce.keep_alive_max_executions) == (10, 50)
    assert ce.volume_mounts == ["${KLAW_WORKSPACE}/skills:ro"]


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("codeExecution:\n  maxMemory: lots\n", "codeExecution.maxMemory"),
        ("codeExecution:\n  maxCpus: many\n", "codeExecution.maxCpus"),
        ("codeExecution:\n  maxCpus: '100'\n", "codeExecution.maxCpus"),
        ("codeExecution:\n  backend: podman\n", "codeExecution.backend"),
        ("codeExecution:\n  noPrivileged: false\n", "codeExecution.noPrivileged"),
        ("codeExecution:\n  readOnlyRootfs: false\n", "codeExecution.readOnlyRootfs"),
        ("codeExecution:\n  volumeMounts: ['relative/dir:ro']\n", "codeExecution.volumeMounts"),
        ("codeExecution:\n  volumeMounts: ['/srv/data:/usr:ro']\n", "reserved inside the sandbox"),
        ("codeExecution:\n  volumeMounts: ['/srv/data:/x:rx:ro']\n", "HOST[:CONTAINER][:ro|rw]"),
    ],
)
def test_bad_code_execution_keys_are_named(
    tmp_path: Path, env: dict[str, str], yaml_text: str, expected: str
) -> None:
    path = tmp_path / "engine.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as info:
        load_engine_config(path, env=env)
    assert expected in str(info.value)


def test_bubblewrap_is_accepted_as_the_backends_long_name(
    tmp_path: Path, env: dict[str, str]
) -> None:
    path = tmp_path / "engine.yaml"
    path.write_text("codeExecution:\n  backend: bubblewrap\n  maxMemory: 1g\n")
    ce = load_engine_config(path, env=env).code_execution
    assert ce.backend == "bwrap" and ce.max_memory == "1g"
    path.write_text("codeExecution:\n  backend: off\n")  # YAML 1.1: a bare off is false
    assert load_engine_config(path, env=env).code_execution.backend == "off"


def test_memory_defaults() -> None:
    mem = EngineConfig().memory
    emb = mem.embedding
    assert (emb.type, emb.model) == ("onnx", "use-multilingual-v3")
    assert (emb.model_path, emb.tokenizer_path, emb.ort_library) == (None, None, None)
    assert (emb.threads, emb.max_length, emb.long_texts, emb.batch_size) == (
        1,
        None,  # the model's own window
        "windows",
        16,
    )
    assert emb.ollama_endpoint == "http://localhost:11434"
    assert emb.ollama_model == "all-minilm:l6-v2"
    assert (mem.chunking.size, mem.chunking.overlap) == (400, 80)
    s = mem.search
    assert (s.top_k, s.candidates, s.fusion, s.rrf_k, s.recency) == (10, 20, "convex", 60, 0.2)
    assert s.keyword_pivot is None  # the model's
    assert (s.vector_weight, s.keyword_weight) == (None, None)  # the model's own
    assert (mem.watch.enabled, mem.watch.debounce_ms) == (True, 1000)


def test_gateway_defaults() -> None:
    ch = GatewayConfig().channels
    assert ch.telegram.enabled is True
    assert ch.telegram.api_server == "https://api.telegram.org"
    assert ch.telegram.allowed_chat_ids == []
    assert ch.telegram.allow_all is False
    assert ch.discord.enabled is False
    assert ch.console.enabled is True


def test_missing_engine_file_gives_defaults(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = load_engine_config(tmp_path / "absent.yaml", env=env)
    expected = EngineConfig()
    ws = Path(env["HOME"]) / "klaw-workspace"
    expected.code_execution.volume_mounts = [f"{ws}/skills:ro"]
    assert cfg == expected


def test_engine_template_is_the_defaults(tmp_path: Path, env: dict[str, str]) -> None:
    from_file = load_engine_config(write(tmp_path, default_engine_yaml()), env=env)
    assert from_file == load_engine_config(tmp_path / "absent.yaml", env=env)


def test_gateway_template_is_the_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, default_gateway_yaml(), "gateway.yaml")
    cfg = load_gateway_config(path, env={"TELEGRAM_BOT_TOKEN": "t"})
    assert cfg == GatewayConfig(channels={"telegram": {"token": "t"}})  # type: ignore[arg-type]


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, info in model.model_fields.items():
        key = f"{prefix}{info.alias or name}"
        out.append(key)
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(_keys(ann, key + "."))
    return out


def _has(data: Any, dotted: str) -> bool:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


@pytest.mark.parametrize(
    ("template", "model"),
    [(default_engine_yaml, EngineConfig), (default_gateway_yaml, GatewayConfig)],
)
def test_templates_spell_out_every_key(template: Any, model: type[BaseModel]) -> None:
    data = yaml.safe_load(template())
    text = template()
    for key in _keys(model):
        # `workspace` is shown commented out: its default is "not set".
        assert _has(data, key) or f"# {key.split('.')[-1]}:" in text, key


# --------------------------------------------------------------------------- ${ENV}


def test_substitute_env_forms() -> None:
    env = {"A": "x", "EMPTY": ""}
    unset: list[str] = []
    assert substitute_env("${A}-${A:-d}", env, unset) == "x-x"
    assert substitute_env("${EMPTY:-d}/${NOPE:-dflt}", env, unset) == "d/dflt"
    assert substitute_env("[${NOPE}]", env, unset) == "[]"
    assert substitute_env("$${A} $A", env, unset) == "${A} $A"
    assert unset == ["NOPE"]


def test_env_substitution_in_config(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "providers:\n"
        "  glm:\n"
        "    endpoint: ${GLM_URL:-https://example.test/v4}\n"
        '    apiKey: "${GLM_API_KEY}"\n'
        "  deepseek:\n"
        "    endpoint: https://api.deepseek.com/v1\n"
        "    apiKey: ${DEEPSEEK_API_KEY}\n"
        "memory:\n"
        "  chunking:\n"
        "    size: ${CHUNK:-300}\n"
        "  embedding:\n"
        "    modelPath: ${MODELS}/minilm\n",
    )
    env = {"GLM_API_KEY": "secret", "MODELS": "/opt/m", "HOME": str(tmp_path)}
    cfg = load_engine_config(path, env=env)
    assert cfg.providers["glm"].api_key == "secret"
    assert cfg.providers["glm"].endpoint == "https://example.test/v4"
    # An unset key is allowed (not required): it reads as "no key".
    assert cfg.providers["deepseek"].api_key is None
    assert cfg.memory.chunking.size == 300  # substituted text still converts to int
    assert cfg.memory.embedding.model_path == "/opt/m/minilm"


def test_workspace_expands_in_volume_mounts(tmp_path: Path) -> None:
    path = write(tmp_path, f"workspace: {tmp_path}/ws\n")
    cfg = load_engine_config(path, env={"HOME": str(tmp_path)})
    assert cfg.code_execution.volume_mounts[0] == f"{tmp_path}/ws/skills:ro"
    # The file key wins over the environment, for mounts as for everything else.
    cfg = load_engine_config(path, env={"HOME": str(tmp_path), "KLAW_WORKSPACE": "/w"})
    assert cfg.code_execution.volume_mounts[0] == f"{tmp_path}/ws/skills:ro"
    cfg = load_engine_config(tmp_path / "absent.yaml", env={"KLAW_WORKSPACE": "/w"})
    assert cfg.code_execution.volume_mounts[0] == "/w/skills:ro"


def test_resolve_workspace_order(tmp_path: Path) -> None:
    cfg = EngineConfig(workspace=tmp_path / "cfg")
    assert resolve_workspace(cfg, {"KLAW_WORKSPACE": "/env"}) == tmp_path / "cfg"
    assert resolve_workspace(EngineConfig(), {"KLAW_WORKSPACE": "/env"}) == Path("/env")
    assert resolve_workspace(EngineConfig(), {"HOME": "/h"}) == Path("/h/klaw-workspace")
    assert EngineConfig(workspace="~/ws").workspace == Path.home() / "ws"  # type: ignore[arg-type]


def test_default_path_from_environment(tmp_path: Path) -> None:
    (tmp_path / "klaw").mkdir()
    write(tmp_path / "klaw", "memory:\n  search:\n    topK: 3\n")
    cfg = load_engine_config(env={"XDG_CONFIG_HOME": str(tmp_path), "HOME": str(tmp_path)})
    assert cfg.memory.search.top_k == 3


def test_gateway_tokens_are_optional_an_unset_one_leaves_its_channel_off(tmp_path: Path) -> None:
    path = write(tmp_path, 'channels:\n  telegram:\n    token: "${TELEGRAM_BOT_TOKEN}"\n', "g.yaml")
    tg = load_gateway_config(path, env={}).channels.telegram
    assert tg.token == "" and tg.enabled and not tg.active  # console-only until the token is set
    assert load_gateway_config(path, env={"TELEGRAM_BOT_TOKEN": "t"}).channels.telegram.active
    path.write_text('channels:\n  discord:\n    enabled: true\n    token: "${DISCORD_BOT_TOKEN}"\n')
    dc = load_gateway_config(path, env={}).channels.discord
    assert dc.enabled and dc.token == "" and not dc.active  # off; `klaw doctor` says why
    assert load_gateway_config(path, env={"DISCORD_BOT_TOKEN": "a.b.c"}).channels.discord.active


def test_chat_ids_accept_numbers(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "channels:\n  telegram:\n    token: t\n    allowedChatIds: [123, '-100', -5]\n",
        "g.yaml",
    )
    assert load_gateway_config(path, env={}).channels.telegram.allowed_chat_ids == [
        "123",
        "-100",
        "-5",
    ]


def test_snake_case_names_in_python() -> None:
    emb = EmbeddingConfig(model_path="/m", max_length=128)
    assert emb.model_dump(by_alias=True)["modelPath"] == "/m"


# --------------------------------------------------------------------------- errors


def test_wrong_type_names_file_key_and_line(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path, "memory:\n  search:\n    topK: ten\n")
    with pytest.raises(ConfigError) as exc:
        load_engine_config(path, env=env)
    [problem] = problems_of(exc)
    assert problem.startswith(f"{path}:3: memory.search.topK: ")
    assert "integer" in problem and "'ten'" in problem
    assert str(path) in str(exc.value)


def test_unknown_key_is_a_typo(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path, "memory:\n  chunking:\n    size: 300\n    overlpa: 20\n")
    with pytest.raises(ConfigError) as exc:
        load_engine_config(path, env=env)
    [problem] = problems_of(exc)
    assert problem.startswith(f"{path}:4: memory.chunking.overlpa: unknown key")
    assert "did you mean 'overlap'" in problem


def test_unknown_key_inside_a_provider(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path, "providers:\n  glm:\n    endpoint: https://x\n    apikey: k\n")
    with pytest.raises(ConfigError) as exc:
        load_engine_config(path, env=env)
    assert "providers.glm.apikey: unknown key (did you mean 'apiKey'?)" in problems_of(exc)[0]


@pytest.mark.parametrize(("size", "overlap"), [(100, 100), (100, 150)])
def test_overlap_must_be_below_size(
    tmp_path: Path, env: dict[str, str], size: int, overlap: int
) -> None:
    path = write(tmp_path, f"memory:\n  chunking:\n    size: {size}\n    overlap: {overlap}\n")
    with pytest.raises(ConfigError) as exc:
        load_engine_config(path, env=env)
    [problem] = problems_of(exc)
    assert problem.startswith(f"{path}:4: memory.chunking.overlap: must be smaller")


def test_overlap_checked_against_default_size(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path, "memory:\n  chunking:\n    overlap: 400\n")
    with pytest.raises(ConfigError, match=r"memory\.chunking\.overlap"):
        load_engine_config(path, env=env)


def test_malformed_yaml_has_a_line(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path, "memory:\n  chunking:\n    size: 400\n   overlap: [80\n")
    with pytest.raises(ConfigError) as exc:
        load_engine_config(path, env=env)
    [problem] = problems_of(exc)
    assert problem.startswith(f"{path}:4: malformed YAML")


def test_fixed_sandbox_keys_of_older_files_load_only_as_true(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # readOnlyRootfs and noPrivileged are no keys any more (they could only be true);
    # a file written by an older `klaw init` still loads.
    old = "codeExecution:\n  readOnlyRootfs: true\n  noPrivileged: true\n"
    assert load_engine_config(write(tmp_path, old), env=env).code_execution.timeout == 30
    path = write(tmp_path, "codeExecution:\n  readOnlyRootfs: true\n  noPrivileged: 1\n")
    with pytest.raises(ConfigError) as exc:
        load_engine_config(path, env=env)
    assert problems_of(exc) == [
        f"{path}:3: codeExecution.noPrivileged: can only be true: sandboxed code never runs "
        "privileged (design §6.5); remove the key"
    ]


def test_several_problems_reported_together(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(
        tmp_path,
        "processing:\n  debounceMs: -1\n"
        "codeExecution:\n  noPrivileged: false\n"
        "memory:\n  embedding:\n    type: bert\n    maxLength: 1024\n"
        "commands:\n  - name: New Session\n    description: x\n",
    )
    with pytest.raises(ConfigError) as exc:
        load_engine_config(path, env=env)
    text = "\n".join(problems_of(exc))
    assert f"{path}:2: processing.debounceMs" in text
    assert f"{path}:4: codeExecution.noPrivileged" in text
    assert f"{path}:7: memory.embedding.type" in text
    assert f"{path}:8: memory.embedding.maxLength" in text
    assert f"{path}:10: commands[0].name" in text


def test_duplicate_key(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path, "context:\n  slidingWindow: 10\n  slidingWindow: 30\n")
    with pytest.raises(ConfigError, match=r"engine\.yaml:3: context\.slidingWindow: duplicate"):
        load_engine_config(path, env=env)


def test_top_level_must_be_mapping(tmp_path: Path, env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_engine_config(write(tmp_path, "- a\n- b\n"), env=env)


def test_empty_file_is_defaults(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = load_engine_config(write(tmp_path, "# nothing yet\n"), env=env)
    assert cfg.memory.chunking.size == 400


def test_relative_workspace_rejected(tmp_path: Path, env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"engine\.yaml:1: workspace: must be an absolute"):
        load_engine_config(write(tmp_path, "workspace: relative/ws\n"), env=env)


def test_bad_model_id(tmp_path: Path, env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"engine\.yaml:1: models: model ids must look like"):
        load_engine_config(write(tmp_path, "models:\n  glm5: {}\n"), env=env)


def test_value_from_unset_variable_is_named(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path, "processing:\n  maxConcurrentLlm: ${SLOTS}\n")
    with pytest.raises(ConfigError, match=r"from \$\{SLOTS\}, which is not set"):
        load_engine_config(path, env=env)

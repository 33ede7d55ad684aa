"""Hostile and mistaken config files: unset variables, unclosed `${`, alias bombs, huge files.

Each must fail at load with the file, the line, the key and the cause, and quickly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from klaw.cli.app import main
from klaw.cli.testing import CliRunner
from klaw.config import load_engine_config, load_gateway_config
from klaw.errors import ConfigError
from klaw.paths import KlawPaths


def write(tmp_path: Path, text: str, name: str = "engine.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def one_problem(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    [problem] = exc.value.problems
    return problem


@pytest.mark.parametrize(
    ("text", "line", "key", "var"),
    [
        (
            "providers:\n  mine:\n    type: openai-compatible\n    endpoint: '${NOPE_URL}'\n",
            4,
            "providers.mine.endpoint",
            "NOPE_URL",
        ),
        ("routing:\n  default: '${NOPE_MODEL}'\n", 2, "routing.default", "NOPE_MODEL"),
    ],
)
def test_unset_variable_is_an_error_naming_key_line_and_variable(
    tmp_path: Path, text: str, line: int, key: str, var: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_engine_config(path, env={"HOME": str(tmp_path)})
    problem = one_problem(exc)
    assert problem.startswith(f"{path}:{line}: {key}: environment variable {var} is not set")


def test_unset_api_server_is_an_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "channels:\n  telegram:\n    token: t\n    apiServer: '${NOPE_SERVER}'\n",
        "g.yaml",
    )
    with pytest.raises(ConfigError) as exc:
        load_gateway_config(path, env={})
    assert one_problem(exc).startswith(f"{path}:4: channels.telegram.apiServer:")
    assert "NOPE_SERVER is not set" in one_problem(exc)


def test_explicit_default_allows_empty_and_set_variables_work(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "providers:\n  mine:\n    type: openai-compatible\n"
        "    endpoint: '${URL:-http://127.0.0.1:9/v1}'\n    apiKey: '${KEY:-}'\n",
    )
    cfg = load_engine_config(path, env={"HOME": str(tmp_path)})
    assert cfg.providers["mine"].endpoint == "http://127.0.0.1:9/v1"
    assert cfg.providers["mine"].api_key is None
    cfg = load_engine_config(path, env={"HOME": str(tmp_path), "URL": "http://h/v1"})
    assert cfg.providers["mine"].endpoint == "http://h/v1"


def test_secrets_whose_absence_means_off_stay_optional(tmp_path: Path) -> None:
    # What `klaw init` writes: provider keys and the bot token from the environment.
    engine = write(
        tmp_path,
        "providers:\n  glm:\n    type: openai-compatible\n    endpoint: https://h/v4\n"
        "    apiKey: '${GLM_API_KEY}'\n",
    )
    assert load_engine_config(engine, env={"HOME": str(tmp_path)}).providers["glm"].api_key is None
    gateway = write(
        tmp_path, "channels:\n  telegram:\n    token: '${TELEGRAM_BOT_TOKEN}'\n", "g.yaml"
    )
    assert not load_gateway_config(gateway, env={}).channels.telegram.active


@pytest.mark.parametrize("value", ["'${NOPE_URL'", "'http://${}/v1'", "'${1BAD}'"])
def test_malformed_reference_is_an_error(tmp_path: Path, value: str) -> None:
    path = write(
        tmp_path, f"providers:\n  mine:\n    type: openai-compatible\n    endpoint: {value}\n"
    )
    with pytest.raises(ConfigError) as exc:
        load_engine_config(path, env={"HOME": str(tmp_path), "NOPE_URL": "x"})
    problem = one_problem(exc)
    assert problem.startswith(f"{path}:4: providers.mine.endpoint: malformed variable reference")


def test_escaped_dollar_brace_is_literal(tmp_path: Path) -> None:
    path = write(tmp_path, "memory:\n  embedding:\n    modelPath: '/opt/$${x}'\n")
    cfg = load_engine_config(path, env={"HOME": str(tmp_path)})
    assert cfg.memory.embedding.model_path == "/opt/${x}"


BOMB = "\n".join(
    ["a: &a ['lol','lol','lol','lol','lol','lol','lol','lol','lol']"]
    + [
        f"{chr(ord('a') + i)}: &{chr(ord('a') + i)} [{','.join(['*' + chr(ord('a') + i - 1)] * 9)}]"
        for i in range(1, 9)
    ]
    + ["memory: *i", ""]
)


def test_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, BOMB)
    with pytest.raises(ConfigError) as exc:
        load_engine_config(path, env={"HOME": str(tmp_path)})
    problem = one_problem(exc)
    assert problem.startswith(f"{path}:2: malformed YAML:")
    assert "aliases" in problem


def test_any_alias_is_refused_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "memory:\n  search: &s\n    topK: 3\nrouting: *s\n")
    with pytest.raises(ConfigError) as exc:
        load_engine_config(path, env={"HOME": str(tmp_path)})
    assert one_problem(exc).startswith(f"{path}:4: malformed YAML:")


def test_huge_file_is_not_read(tmp_path: Path) -> None:
    path = write(tmp_path, "# " + "x" * (2 * 1024 * 1024) + "\n")
    with pytest.raises(ConfigError) as exc:
        load_engine_config(path, env={"HOME": str(tmp_path)})
    assert "larger than 1024 KiB" in one_problem(exc)


def test_doctor_reports_the_bomb_and_fails(klaw_home: KlawPaths) -> None:
    klaw_home.engine_config.parent.mkdir(parents=True, exist_ok=True)
    klaw_home.engine_config.write_text(BOMB)
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code != 0
    assert "aliases" in result.stdout + result.stderr

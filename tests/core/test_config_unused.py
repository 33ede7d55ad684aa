"""Config keys nothing reads yet: each is marked planned, and setting one says so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from klaw.cli.app import app
from klaw.cli.testing import CliRunner
from klaw.config import (
    PLANNED_KEYS,
    EngineConfig,
    GatewayConfig,
    default_engine_yaml,
    default_gateway_yaml,
    load_engine_config,
    load_gateway_config,
    planned_settings,
)
from klaw.paths import KlawPaths

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "klaw"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home")}


def engine(tmp_path: Path, text: str, env: dict[str, str]) -> list[str]:
    path = tmp_path / "engine.yaml"
    path.write_text(text, encoding="utf-8")
    return planned_settings(load_engine_config(path, env), env)


def keys(lines: list[str]) -> list[str]:
    return [line.partition(":")[0] for line in lines]


def test_defaults_and_the_init_template_say_nothing(tmp_path: Path, env: dict[str, str]) -> None:
    # `klaw init` writes every default, sandbox mounts with ${KLAW_WORKSPACE} included.
    assert engine(tmp_path, default_engine_yaml(), env) == []
    assert planned_settings(load_engine_config(tmp_path / "absent.yaml", env), env) == []
    path = tmp_path / "gateway.yaml"
    path.write_text(default_gateway_yaml(), encoding="utf-8")
    assert planned_settings(load_gateway_config(path, env), env) == []


def test_one_line_per_planned_key_set_to_something_else(
    tmp_path: Path, env: dict[str, str]
) -> None:
    text = (
        default_engine_yaml()
        .replace("timeout: 30 ", "timeout: 5  ")
        .replace("allowNetwork: false", "allowNetwork: true ")
        .replace("subagentConversations: true", "subagentConversations: false")
        .replace("subagent: glm/glm-4-plus", "subagent: glm/glm-5")
        .replace("subagentWindow: 5 ", "subagentWindow: 3 ")
        .replace("enabled: false\n    sync:", "enabled: true\n    sync:")
    )
    # Every engine.yaml capability has landed (OpenClaw compatibility with issue 12):
    # nothing in engine.yaml is reported any more.
    assert engine(tmp_path, text, env) == []
    assert PLANNED_KEYS[EngineConfig] == {}


def test_only_what_the_file_changes(tmp_path: Path, env: dict[str, str]) -> None:
    # The default written out by hand is no change; gateway.yaml has no planned key left
    # (Discord landed with issue 14).
    path = tmp_path / "gateway.yaml"
    path.write_text("channels:\n  discord:\n    enabled: false\n", encoding="utf-8")
    assert planned_settings(load_gateway_config(path, env), env) == []
    assert PLANNED_KEYS[GatewayConfig] == {}


def test_discord_in_gateway_yaml_is_no_longer_planned(tmp_path: Path, env: dict[str, str]) -> None:
    path = tmp_path / "gateway.yaml"
    text = "channels:\n  discord:\n    enabled: true\n    token: a.b.c\n    allowedChatIds: ['1']\n"
    path.write_text(text, encoding="utf-8")
    assert planned_settings(load_gateway_config(path, env), env) == []


def test_planned_sections_are_read_by_nothing_else() -> None:
    # When a capability lands, its keys must leave PLANNED_KEYS (and the warning).
    attrs = {path[-1] for keys in PLANNED_KEYS.values() for path in keys}
    readers = [
        f"{src.relative_to(PACKAGE)}: .{name}"
        for src in PACKAGE.rglob("*.py")
        if src.name != "config.py"
        for name in attrs
        if re.search(rf"\.{name}\b", src.read_text(encoding="utf-8"))
    ]
    assert readers == []


def test_doctor_warns_per_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in (
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_CACHE_HOME",
        "KLAW_CONFIG_DIR",
        "KLAW_DATA_DIR",
        "KLAW_STATE_DIR",
        "KLAW_CACHE_DIR",
        "KLAW_WORKSPACE",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    paths = KlawPaths.from_env()
    runner = CliRunner()
    assert runner.invoke(app, ["init", "--no-model"]).exit_code == 0
    out = runner.invoke(app, ["doctor"]).output
    assert "not built yet" not in out and "no effect" not in out
    text = paths.gateway_config.read_text(encoding="utf-8")
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "456:def")
    text = text.replace(
        '    enabled: false\n    token: "${DISCORD_BOT_TOKEN}"',
        '    enabled: true\n    token: "${DISCORD_BOT_TOKEN}"',
    )
    paths.gateway_config.write_text(text, encoding="utf-8")
    result = runner.invoke(app, ["doctor"])
    assert "not built yet" not in result.output and "no effect" not in result.output
    assert "discord: enabled but no bot token" not in result.output

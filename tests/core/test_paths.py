"""KlawPaths: XDG base directories, KLAW_* overrides and the workspace (design §9.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from klaw.paths import KlawPaths


def test_fallbacks_under_home(tmp_path: Path) -> None:
    paths = KlawPaths.from_env({"HOME": str(tmp_path)})
    assert paths.config_dir == tmp_path / ".config/klaw"
    assert paths.data_dir == tmp_path / ".local/share/klaw"
    assert paths.state_dir == tmp_path / ".local/state/klaw"
    assert paths.cache_dir == tmp_path / ".cache/klaw"
    assert paths.workspace == tmp_path / "klaw-workspace"


def test_xdg_variables(tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "c"),
        "XDG_DATA_HOME": str(tmp_path / "d"),
        "XDG_STATE_HOME": str(tmp_path / "s"),
        "XDG_CACHE_HOME": str(tmp_path / "k"),
    }
    paths = KlawPaths.from_env(env)
    assert paths.config_dir == tmp_path / "c/klaw"
    assert paths.data_dir == tmp_path / "d/klaw"
    assert paths.state_dir == tmp_path / "s/klaw"
    assert paths.cache_dir == tmp_path / "k/klaw"


@pytest.mark.parametrize(
    ("var", "attr", "fallback"),
    [
        ("XDG_CONFIG_HOME", "config_dir", ".config/klaw"),
        ("XDG_DATA_HOME", "data_dir", ".local/share/klaw"),
        ("XDG_STATE_HOME", "state_dir", ".local/state/klaw"),
        ("XDG_CACHE_HOME", "cache_dir", ".cache/klaw"),
    ],
)
def test_relative_xdg_ignored(tmp_path: Path, var: str, attr: str, fallback: str) -> None:
    # The XDG spec: a relative path in these variables is invalid and must be ignored.
    paths = KlawPaths.from_env({"HOME": str(tmp_path), var: "relative/dir"})
    assert getattr(paths, attr) == tmp_path / fallback


def test_klaw_overrides_beat_xdg(tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "KLAW_CONFIG_DIR": str(tmp_path / "cfg"),
        "KLAW_DATA_DIR": str(tmp_path / "data"),
        "KLAW_STATE_DIR": str(tmp_path / "state"),
        "KLAW_CACHE_DIR": str(tmp_path / "cache"),
        "KLAW_WORKSPACE": str(tmp_path / "ws"),
    }
    paths = KlawPaths.from_env(env)
    assert paths.config_dir == tmp_path / "cfg"  # used as is, no /klaw appended
    assert paths.data_dir == tmp_path / "data"
    assert paths.state_dir == tmp_path / "state"
    assert paths.cache_dir == tmp_path / "cache"
    assert paths.workspace == tmp_path / "ws"


def test_derived_files(tmp_path: Path) -> None:
    paths = KlawPaths.from_env({"HOME": str(tmp_path)})
    assert paths.engine_config == paths.config_dir / "engine.yaml"
    assert paths.gateway_config == paths.config_dir / "gateway.yaml"
    assert paths.conversations == paths.data_dir / "conversations"
    assert paths.summaries == paths.data_dir / "summaries"
    assert paths.core_memory == paths.data_dir / "memory/core_memory.json"
    assert paths.skills == paths.data_dir / "skills"
    assert paths.db == paths.data_dir / "klaw.db"
    assert paths.scheduler_db == paths.data_dir / "scheduler.db"
    assert paths.socket == paths.state_dir / "engine.sock"
    assert paths.gateway_buffer == paths.state_dir / "gateway-buffer.jsonl"
    assert paths.logs == paths.state_dir / "logs"
    assert paths.models == paths.cache_dir / "models"


def test_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "d"))
    monkeypatch.delenv("KLAW_DATA_DIR", raising=False)
    assert KlawPaths.from_env().data_dir == tmp_path / "d/klaw"

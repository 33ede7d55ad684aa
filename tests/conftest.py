"""Shared fixtures: an isolated Klaw home per test and the real embedding model."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from klaw.paths import KlawPaths

# Tests never see the real user's directories: before any test module runs, HOME, the
# XDG dirs and Klaw's own overrides point into a throwaway root (each test's `klaw_home`
# then narrows them further). The embedding model comes from KLAW_TEST_CACHE_DIR, which
# `make test` fills once with `klaw model install` (a cache of the test venv's own), or
# else from the PyPI model packages.
REAL_HOME = os.path.expanduser("~")
TEST_ROOT = Path(tempfile.mkdtemp(prefix="klaw-tests-"))
atexit.register(shutil.rmtree, TEST_ROOT, True)
for _var, _sub in [
    ("HOME", "home"),
    ("XDG_CONFIG_HOME", "xdg-config"),
    ("XDG_DATA_HOME", "xdg-data"),
    ("XDG_STATE_HOME", "xdg-state"),
    ("XDG_CACHE_HOME", "xdg-cache"),
    ("KLAW_CONFIG_DIR", "config"),
    ("KLAW_DATA_DIR", "data"),
    ("KLAW_STATE_DIR", "state"),
    ("KLAW_WORKSPACE", "workspace"),
]:
    os.environ[_var] = str(TEST_ROOT / _sub)
os.environ["KLAW_CACHE_DIR"] = os.environ.get("KLAW_TEST_CACHE_DIR") or str(TEST_ROOT / "cache")
MODELS = Path(os.environ["KLAW_CACHE_DIR"]) / "models"


@pytest.fixture
def klaw_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KlawPaths:
    """All Klaw directories under tmp_path, via the env overrides a user would set."""
    for var, sub in [
        ("KLAW_CONFIG_DIR", "config"),
        ("KLAW_DATA_DIR", "data"),
        ("KLAW_STATE_DIR", "state"),
        ("KLAW_CACHE_DIR", "cache"),
        ("KLAW_WORKSPACE", "workspace"),
    ]:
        monkeypatch.setenv(var, str(tmp_path / sub))
    paths = KlawPaths.from_env()
    paths.workspace.mkdir(parents=True)
    if MODELS.is_dir():
        # The installed models are shared (converting e5 takes seconds); the embedding
        # cache beside them stays the test's own.
        paths.models.parent.mkdir(parents=True, exist_ok=True)
        paths.models.symlink_to(MODELS)
    return paths


@pytest.fixture(scope="session")
def backend():  # type: ignore[no-untyped-def]
    """The real all-MiniLM-L6-v2 through ONNX Runtime, loaded once per session."""
    from klaw.config import load_engine_config
    from klaw.memory.api import load_backend

    paths = KlawPaths.from_env()
    return load_backend(load_engine_config(Path("/nonexistent/engine.yaml")), paths)


@pytest.fixture
def memory(klaw_home: KlawPaths, backend):  # type: ignore[no-untyped-def]
    from klaw.config import load_engine_config
    from klaw.memory import Memory

    mem = Memory.open(
        paths=klaw_home, config=load_engine_config(klaw_home.engine_config), backend=backend
    )
    yield mem
    mem.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[object]:
    from klaw import _core

    s = _core.Store(str(tmp_path / "klaw.db"), dim=384)
    yield s
    s.close()


@pytest.fixture
async def llm():  # type: ignore[no-untyped-def]
    """A scripted OpenAI-compatible server on 127.0.0.1 (see tests/scripted_llm.py)."""
    from scripted_llm import FakeLLM

    server = FakeLLM()
    await server.start()
    yield server
    await server.close()

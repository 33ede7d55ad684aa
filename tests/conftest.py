"""Shared fixtures: an isolated Klaw home per test and the real embedding model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from klaw.paths import KlawPaths


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

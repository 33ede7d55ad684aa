"""Loads benches/pychunker.py (the pure-Python chunker with the same rules) for tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pychunker", ROOT / "benches" / "pychunker.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("pychunker", module)
    spec.loader.exec_module(module)
    return module


pychunker = _load()

"""Klaw's memory: core memory (core_memory.json) and archival memory (hybrid search).

    from klaw.memory import Memory, CoreMemory, Hit
    mem = Memory.open()
    mem.save("The wifi password is on the fridge")
    mem.search("wifi password")

Names load on first use so `klaw logs` and `klaw memory show` stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from klaw.memory.api import IndexReport, Memory
    from klaw.memory.core import CoreMemory
    from klaw.memory.rows import Hit

__all__ = ["CoreMemory", "Hit", "IndexReport", "Memory"]

_WHERE = {
    "Memory": "klaw.memory.api",
    "IndexReport": "klaw.memory.api",
    "CoreMemory": "klaw.memory.core",
    "Hit": "klaw.memory.rows",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'klaw.memory' has no attribute {name!r}")

"""Klaw's memory: core memory (core_memory.json) and archival memory (hybrid search).

    from klaw.memory import Memory, CoreMemory, Hit
    mem = Memory.open()
    mem.save("The wifi password is on the fridge")
    mem.search("wifi password")
"""

from klaw.memory.api import IndexReport, Memory
from klaw.memory.core import CoreMemory
from klaw.memory.hit import Hit

__all__ = ["CoreMemory", "Hit", "IndexReport", "Memory"]

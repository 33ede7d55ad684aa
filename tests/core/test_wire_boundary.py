"""`klaw.wire` is importable by gateway, engine, tools and CLI without pulling any of them."""

from __future__ import annotations

import subprocess
import sys

SIDES = ("klaw.engine", "klaw.gateway", "klaw.tools", "klaw.cli", "klaw.memory.api")


def test_wire_imports_no_side() -> None:
    code = (
        "import sys, klaw.wire.protocol, klaw.wire.loglines, klaw.wire.record, klaw.wire.logfile\n"
        f"print([m for m in sys.modules if m.startswith({SIDES!r})])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

"""What Klaw does not take from an MCP server as it comes: terminal controls in its
words, and messages over a size. The bottom of `klaw.mcp` (stdio, HTTP, the client
and the tools all read them)."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["CONTROLS", "MAX_MESSAGE_BYTES"]

#: A line the server writes is read up to this size (a 10 MB result fits); a longer
#: one ends the connection (the server is restarted).
MAX_MESSAGE_BYTES: Final = 32 * 1024 * 1024

#: Terminal escapes (CSI, OSC) and other C0/C1 controls but tab and newline: what a
#: server writes must not drive the owner's terminal (log, `klaw doctor`) or hide text.
CONTROLS: Final = re.compile(
    r"\x1b\[[0-9;:?<=>]*[ -/]*[@-~]"  # CSI: colours, cursor moves, clearing
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window title, clipboard
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)

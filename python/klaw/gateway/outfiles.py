"""Workspace files going out with a message (`Outbound.attachments`).

The engine names them (the `send_file` tool checked them); the gateway opens them
itself, the same race-free way the file tools read (`klaw.confined`), so
a path swapped for a symlink after the tool's check still cannot send a file from
outside the workspace. Each is then read through its descriptor, never by path again.
A file that is missing, outside, not regular or over the channel's upload limit
refuses the whole message before anything is sent, saying which file and why.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from pathlib import Path

from klaw.confined import Confined
from klaw.errors import KlawError, ToolError
from klaw.fsutil import human_size
from klaw.gateway.channels.base import OutFile, display_name
from klaw.wire.protocol import Attachment, mime_of

__all__ = ["FileRefused", "close_files", "open_files", "shown_name"]

_MIME = re.compile(r"[A-Za-z0-9][\w.+-]*/[\w.+-]+")


class FileRefused(KlawError):
    """A file of an outbound message cannot be sent (the message is not sent either)."""


def open_files(
    workspace: Path, attachments: Sequence[Attachment], *, limit: int, channel: str
) -> list[OutFile]:
    """Opened `attachments`, or `FileRefused` (with nothing left open)."""
    space = Confined(workspace)
    files: list[OutFile] = []
    try:
        for att in attachments:
            try:
                fd, size, rel = space.open_file(att.path)
            except ToolError as exc:
                raise FileRefused(str(exc)) from None
            except (OSError, ValueError) as exc:  # the workspace itself is gone or unreadable
                raise FileRefused(f"{att.path!r} cannot be opened: {exc}") from None
            name = shown_name(att.name or posixpath.basename(rel))
            files.append(
                OutFile(
                    name=name,
                    mime=_mime(att.mime, name),
                    size=size,
                    fd=fd,
                    path=str(Path(space.root, rel)),
                )
            )
            if size > limit:
                raise FileRefused(
                    f"{rel!r} is {human_size(size)}; {channel} takes files up to "
                    f"{human_size(limit)}"
                )
            if size == 0:
                raise FileRefused(f"{rel!r} is empty; {channel} does not send empty files")
    except BaseException:
        close_files(files)
        raise
    return files


def shown_name(name: str) -> str:
    """The name the user sees, without control characters: a model can make a file
    named ``a\nb.txt``, and a line break in a multipart header is refused (or worse)."""
    return (display_name(name) or "").strip() or "file"


def _mime(declared: str | None, name: str) -> str:
    return declared if declared and _MIME.fullmatch(declared) else mime_of(name)


def close_files(files: Sequence[OutFile]) -> None:
    for f in files:
        try:
            os.close(f.fd)
        except OSError:
            pass

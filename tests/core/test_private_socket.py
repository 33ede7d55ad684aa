"""`bind_private_socket`: the one bind of engine.sock and console.sock (P1)."""

from __future__ import annotations

import logging
import os
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from klaw.errors import KlawError
from klaw.wire.accept import bind_private_socket

log = logging.getLogger("test")


class Refused(KlawError):
    pass


@pytest.fixture
def path() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="klaw-") as tmp:  # socket paths must stay short
        yield Path(tmp) / "run" / "x.sock"


def test_a_new_socket_is_private_from_birth(path: Path) -> None:
    bound = bind_private_socket(path, "engine", Refused, log)
    try:
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.lstat().st_mode) == 0o700
        assert not bound.sock.getblocking()
    finally:
        bound.sock.close()
        bound.unlink()
    assert not path.exists()


def test_a_stale_socket_is_replaced_a_live_one_or_a_file_never(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path.parent.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens: what a crash leaves
    with caplog.at_level(logging.WARNING, "test"):
        bound = bind_private_socket(path, "gateway", Refused, log)
    assert "left by a gateway that did not stop cleanly" in caplog.text
    with pytest.raises(Refused, match="another process serves"):
        bind_private_socket(path, "gateway", Refused, log)
    assert path.lstat().st_ino == bound.ino  # the live socket was not stolen
    bound.sock.close()
    bound.unlink()
    path.write_text("mine")
    with pytest.raises(Refused, match="is not a socket; move it away and start the engine"):
        bind_private_socket(path, "engine", Refused, log)
    assert path.read_text() == "mine"


def test_unlink_leaves_a_successors_socket(path: Path) -> None:
    first = bind_private_socket(path, "engine", Refused, log)
    first.sock.close()
    os.rename(path, path.with_name("old.sock"))  # still there: its inode is not reused
    second = bind_private_socket(path, "engine", Refused, log)
    first.unlink()  # the old owner stopping late must not remove the new socket
    assert path.lstat().st_ino == second.ino
    second.sock.close()
    second.unlink()

"""File tools: confinement to the workspace (hostile paths, symlinks, races), limits, atomicity."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from klaw.paths import KlawPaths
from klaw.tools import ToolRegistry
from klaw.tools.files import FileList, FileRead, FileWrite, Workspace

LIMIT = 4096
SECRET = "TOP-SECRET-OUTSIDE"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace holding a secret the tools must never reach."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text(SECRET)
    return d


@pytest.fixture
def ws(klaw_home: KlawPaths, outside: Path) -> Path:
    root = klaw_home.workspace
    (root / "notes").mkdir()
    (root / "notes" / "todo.md").write_text("one\ntwo\nthree\n")
    (root / "MEMORY.md").write_text("# Memory\n")
    (root / "link_out").symlink_to(outside / "secret.txt")
    (root / "dir_out").symlink_to(outside)
    (root / "notes" / "deep_out").symlink_to("../../outside")
    (root / "abs_etc").symlink_to("/etc")
    (root / "passwd").symlink_to("/etc/passwd")
    (root / "loop").symlink_to("loop")
    (root / "dangling_out").symlink_to(outside / "new.txt")
    (root / "null").symlink_to("/dev/null")
    (root / "link_in").symlink_to("notes/todo.md")
    (root / "dir_in").symlink_to("notes")
    os.mkfifo(root / "fifo")
    return root


@pytest.fixture
def reg(ws: Path) -> ToolRegistry:
    w = Workspace(ws, LIMIT, max_output_chars=2000)
    return ToolRegistry([FileRead(w), FileWrite(w), FileList(w)])


HOSTILE = [
    "/etc/passwd",
    "//etc/passwd",
    "../outside/secret.txt",
    "..",
    "../",
    "./../outside/secret.txt",
    "notes/../../outside/secret.txt",
    "notes/../notes/../../outside/secret.txt",
    "a/b/../../../outside/secret.txt",
    "notes/./../..//outside/secret.txt",
    "~/secret.txt",
    "~root/.bashrc",
    "~",
    "",
    "   ",
    "notes/todo.md\x00.png",
    "\x00",
    "x" * 256,
    "notes/" + "y" * 300 + "/z.md",
    "a/" * 2100,
    "link_out",
    "dir_out/secret.txt",
    "notes/deep_out/secret.txt",
    "abs_etc/passwd",
    "passwd",
    "loop",
    "dangling_out",
    "null",
    "fifo",
    "dir_out",
    "notes/deep_out",
    "/",
    ".",
]


@pytest.mark.parametrize("path", HOSTILE, ids=lambda p: repr(p)[:40])
async def test_hostile_paths_are_refused_for_read(reg: ToolRegistry, path: str) -> None:
    res = await reg.dispatch("file_read", {"path": path})
    assert res.is_error, res.content
    assert SECRET not in res.content
    assert "root:" not in res.content
    assert "Traceback" not in res.content


@pytest.mark.parametrize("path", HOSTILE, ids=lambda p: repr(p)[:40])
async def test_hostile_paths_are_refused_for_write(
    reg: ToolRegistry, path: str, outside: Path, ws: Path
) -> None:
    res = await reg.dispatch("file_write", {"path": path, "content": "pwned"})
    assert res.is_error, res.content
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == SECRET
    assert not any("pwned" in p.read_text() for p in ws.rglob("*") if _regular(p))


def _regular(p: Path) -> bool:
    return stat.S_ISREG(p.lstat().st_mode)


@pytest.mark.parametrize(
    "path",
    ["/", "/etc", "..", "../outside", "notes/../..", "dir_out", "notes/deep_out", "abs_etc", "~"],
)
async def test_hostile_paths_are_refused_for_list(reg: ToolRegistry, path: str) -> None:
    res = await reg.dispatch("file_list", {"path": path})
    assert res.is_error, res.content
    assert "secret.txt" not in res.content


async def test_error_messages_never_show_host_paths(reg: ToolRegistry, ws: Path) -> None:
    for path in ["link_out", "missing/file.md", "notes/todo.md/x", "fifo", "loop"]:
        res = await reg.dispatch("file_read", {"path": path})
        assert res.is_error
        assert str(ws) not in res.content and str(ws.parent) not in res.content


async def test_device_node_is_refused(reg: ToolRegistry, ws: Path) -> None:
    try:
        os.mknod(ws / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    except (PermissionError, OSError):
        pytest.skip("cannot create device nodes here")
    res = await reg.dispatch("file_read", {"path": "zero"})
    assert res.is_error and "not a regular file" in res.content
    res = await reg.dispatch("file_write", {"path": "zero", "content": "x"})
    assert res.is_error and "not a regular file" in res.content


async def test_unix_socket_is_refused(reg: ToolRegistry, ws: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    cwd = os.getcwd()
    os.chdir(ws)  # AF_UNIX paths are short: bind relative to the workspace
    try:
        s.bind("sock")
    finally:
        os.chdir(cwd)
    try:
        res = await reg.dispatch("file_read", {"path": "sock"})
        assert res.is_error and "regular file" in res.content
    finally:
        s.close()


# --------------------------------------------------------------------- happy paths


async def test_read_whole_file(reg: ToolRegistry) -> None:
    res = await reg.dispatch("file_read", {"path": "notes/todo.md"})
    assert not res.is_error
    assert res.content == "one\ntwo\nthree\n"


async def test_read_through_dotdot_inside_and_symlinks_inside(reg: ToolRegistry) -> None:
    for path in ["notes/../notes/./todo.md", "link_in", "dir_in/todo.md", "./notes//todo.md"]:
        res = await reg.dispatch("file_read", {"path": path})
        assert not res.is_error, (path, res.content)
        assert res.content.startswith("one\n")


async def test_read_pages_with_offset_and_limit(reg: ToolRegistry) -> None:
    res = await reg.dispatch("file_read", {"path": "notes/todo.md", "offset": 2, "limit": 1})
    assert res.content == "two\n[lines 2-2 of 3; continue with offset=3]"
    res = await reg.dispatch("file_read", {"path": "notes/todo.md", "offset": 3})
    assert res.content == "three\n[lines 3-3 of 3]"
    res = await reg.dispatch("file_read", {"path": "notes/todo.md", "offset": 9})
    assert res.is_error and "past the end" in res.content
    res = await reg.dispatch("file_read", {"path": "notes/todo.md", "offset": 0})
    assert res.is_error and "at least 1" in res.content


async def test_long_file_is_paged_to_fit_the_output(reg: ToolRegistry, ws: Path) -> None:
    (ws / "long.md").write_text("".join(f"line {i:04d} " + "x" * 40 + "\n" for i in range(80)))
    res = await reg.dispatch("file_read", {"path": "long.md"})
    assert not res.is_error and len(res.content) <= 2000
    assert res.content.startswith("line 0000")
    nxt = int(res.content.rsplit("offset=", 1)[1].rstrip("]"))
    res2 = await reg.dispatch("file_read", {"path": "long.md", "offset": nxt})
    assert res2.content.startswith(f"line {nxt - 1:04d}")


async def test_single_huge_line_is_cut_with_a_note(reg: ToolRegistry, ws: Path) -> None:
    (ws / "wide.txt").write_text("z" * 3000)
    res = await reg.dispatch("file_read", {"path": "wide.txt"})
    assert not res.is_error and "only the start shown" in res.content


async def test_empty_file(reg: ToolRegistry, ws: Path) -> None:
    (ws / "empty.md").write_text("")
    res = await reg.dispatch("file_read", {"path": "empty.md"})
    assert not res.is_error and "empty" in res.content


async def test_invalid_utf8_is_replaced_with_a_note(reg: ToolRegistry, ws: Path) -> None:
    (ws / "bad.md").write_bytes(b"caf\xe9 ok\n")
    res = await reg.dispatch("file_read", {"path": "bad.md"})
    assert not res.is_error
    assert "caf\ufffd ok" in res.content and "not valid UTF-8" in res.content


async def test_binary_file_is_refused(reg: ToolRegistry, ws: Path) -> None:
    (ws / "img.png").write_bytes(b"\x89PNG\x00\x00\x01")
    res = await reg.dispatch("file_read", {"path": "img.png"})
    assert res.is_error and "binary" in res.content


async def test_read_over_the_size_limit_is_refused(reg: ToolRegistry, ws: Path) -> None:
    (ws / "big.md").write_text("a" * (LIMIT + 1))
    res = await reg.dispatch("file_read", {"path": "big.md"})
    assert res.is_error and "maxFileSizeBytes" in res.content and str(LIMIT + 1) in res.content
    (ws / "edge.md").write_text("a" * LIMIT)
    res = await reg.dispatch("file_read", {"path": "edge.md"})
    assert not res.is_error


async def test_directory_and_missing(reg: ToolRegistry) -> None:
    res = await reg.dispatch("file_read", {"path": "notes"})
    assert res.is_error and "file_list" in res.content
    res = await reg.dispatch("file_read", {"path": "nope.md"})
    assert res.is_error and "not found" in res.content


async def test_write_creates_parents_and_is_readable(reg: ToolRegistry, ws: Path) -> None:
    res = await reg.dispatch("file_write", {"path": "a/b/c.md", "content": "привет\n"})
    assert not res.is_error, res.content
    assert (ws / "a/b/c.md").read_text(encoding="utf-8") == "привет\n"
    assert stat.S_IMODE((ws / "a/b/c.md").stat().st_mode) == 0o644
    res = await reg.dispatch("file_read", {"path": "a/b/c.md"})
    assert res.content == "привет\n"
    assert not [p for p in ws.rglob(".*.tmp")]  # no temp files left


async def test_overwrite_keeps_mode_and_append_appends(reg: ToolRegistry, ws: Path) -> None:
    target = ws / "notes" / "todo.md"
    target.chmod(0o600)
    inode = target.stat().st_ino
    assert not (
        await reg.dispatch("file_write", {"path": "notes/todo.md", "content": "A\n"})
    ).is_error
    assert target.read_text() == "A\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.stat().st_ino != inode  # replaced by rename, not rewritten in place
    res = await reg.dispatch(
        "file_write", {"path": "notes/todo.md", "content": "B\n", "append": True}
    )
    assert not res.is_error and "Appended" in res.content
    assert target.read_text() == "A\nB\n"
    res = await reg.dispatch("file_write", {"path": "new.md", "content": "N", "append": True})
    assert not res.is_error and (ws / "new.md").read_text() == "N"


async def test_write_through_symlink_inside_goes_to_its_target(reg: ToolRegistry, ws: Path) -> None:
    assert not (await reg.dispatch("file_write", {"path": "link_in", "content": "via"})).is_error
    assert (ws / "notes/todo.md").read_text() == "via"
    assert (ws / "link_in").is_symlink()
    assert not (await reg.dispatch("file_write", {"path": "dir_in/x.md", "content": "x"})).is_error
    assert (ws / "notes/x.md").read_text() == "x"


async def test_write_size_limit(reg: ToolRegistry, ws: Path) -> None:
    res = await reg.dispatch("file_write", {"path": "big.md", "content": "é" * (LIMIT // 2 + 1)})
    assert res.is_error and "maxFileSizeBytes" in res.content  # counted in bytes, not chars
    assert not (ws / "big.md").exists()
    (ws / "log.md").write_text("a" * (LIMIT - 2))
    res = await reg.dispatch("file_write", {"path": "log.md", "content": "bcd", "append": True})
    assert res.is_error and "appending" in res.content
    assert (ws / "log.md").read_text() == "a" * (LIMIT - 2)


async def test_write_refusals(reg: ToolRegistry, ws: Path) -> None:
    (ws / ".git").mkdir()
    (ws / "g").symlink_to(".git")
    for path in [".git/hooks/pre-commit", "notes/../.git/config", "g/config"]:
        res = await reg.dispatch("file_write", {"path": path, "content": "x"})
        assert res.is_error and ".git" in res.content, path
    res = await reg.dispatch("file_write", {"path": "notes", "content": "x"})
    assert res.is_error and "directory" in res.content
    res = await reg.dispatch("file_write", {"path": "notes/todo.md/x", "content": "x"})
    assert res.is_error and "not a directory" in res.content


async def test_list(reg: ToolRegistry, ws: Path) -> None:
    res = await reg.dispatch("file_list", {})
    assert not res.is_error
    lines = res.content.splitlines()
    assert lines[0].startswith("./ (")
    assert "notes/" in lines and "MEMORY.md  (9 bytes)" in lines
    assert "link_out@  (symlink)" in lines and "fifo  (special file)" in lines
    assert SECRET not in res.content
    res = await reg.dispatch("file_list", {"path": "notes"})
    assert "todo.md  (14 bytes)" in res.content
    res = await reg.dispatch("file_list", {"path": "dir_in"})
    assert not res.is_error and "todo.md" in res.content
    (ws / "vide").mkdir()
    assert "empty" in (await reg.dispatch("file_list", {"path": "vide"})).content
    res = await reg.dispatch("file_list", {"path": "notes/todo.md"})
    assert res.is_error and "not a directory" in res.content


# --------------------------------------------------------------------- races


async def test_directory_swapped_for_symlink_after_the_check(
    reg: ToolRegistry, ws: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path checks out, then `notes` becomes a symlink to outside before the open."""
    original = Workspace._resolve

    def swap_then_resolve(self: Workspace, rel: str) -> tuple[str, list[str]]:
        result = original(self, rel)
        (ws / "notes").rename(ws / "notes.old")
        (ws / "notes").symlink_to(outside)
        return result

    monkeypatch.setattr(Workspace, "_resolve", swap_then_resolve)
    (outside / "todo.md").write_text(SECRET)
    res = await reg.dispatch("file_read", {"path": "notes/todo.md"})
    assert res.is_error and SECRET not in res.content and "symlink" in res.content


async def test_file_swapped_for_symlink_after_the_check(
    reg: ToolRegistry, ws: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Workspace._resolve

    def swap_then_resolve(self: Workspace, rel: str) -> tuple[str, list[str]]:
        result = original(self, rel)
        (ws / "MEMORY.md").unlink()
        (ws / "MEMORY.md").symlink_to(outside / "secret.txt")
        return result

    monkeypatch.setattr(Workspace, "_resolve", swap_then_resolve)
    res = await reg.dispatch("file_read", {"path": "MEMORY.md"})
    assert res.is_error and SECRET not in res.content


async def test_write_after_swap_never_writes_outside(
    reg: ToolRegistry, ws: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Workspace._resolve

    def swap_then_resolve(self: Workspace, rel: str) -> tuple[str, list[str]]:
        result = original(self, rel)
        (ws / "MEMORY.md").unlink()
        (ws / "MEMORY.md").symlink_to(outside / "secret.txt")
        return result

    monkeypatch.setattr(Workspace, "_resolve", swap_then_resolve)
    res = await reg.dispatch("file_write", {"path": "MEMORY.md", "content": "pwned"})
    assert res.is_error and "symlink" in res.content
    assert (outside / "secret.txt").read_text() == SECRET


async def test_symlinked_workspace_root_works(tmp_path: Path, outside: Path) -> None:
    real = tmp_path / "real_ws"
    real.mkdir()
    (tmp_path / "ws_link").symlink_to(real)
    w = Workspace(tmp_path / "ws_link", LIMIT)
    reg = ToolRegistry([FileRead(w), FileWrite(w)])
    assert not (await reg.dispatch("file_write", {"path": "a.md", "content": "hi"})).is_error
    assert (real / "a.md").read_text() == "hi"
    assert (await reg.dispatch("file_read", {"path": "a.md"})).content == "hi"
    assert (await reg.dispatch("file_read", {"path": "../outside/secret.txt"})).is_error


async def test_missing_workspace_is_an_error_result(tmp_path: Path) -> None:
    w = Workspace(tmp_path / "nope", LIMIT)
    res = await ToolRegistry([FileRead(w)]).dispatch("file_read", {"path": "a.md"})
    assert res.is_error and "does not exist" in res.content

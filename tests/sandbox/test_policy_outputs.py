"""The policy's mount whitelist and /output's staging, on real directories."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from klaw.config import CodeExecutionConfig
from klaw.errors import ConfigError
from klaw.mounts import Mount, parse_mount
from klaw.paths import KlawPaths
from klaw.sandbox.outputs import Outputs, chat_dir_name
from klaw.sandbox.policy import Policy


def test_mount_forms() -> None:
    assert parse_mount("/srv/skills:ro") == Mount(Path("/srv/skills"), "/skills", False)
    assert parse_mount("/srv/data") == Mount(Path("/srv/data"), "/mnt/data", False)
    assert parse_mount("/srv/data:/mnt/in:rw") == Mount(Path("/srv/data"), "/mnt/in", True)
    for bad in ("data:ro", "/a:/b:/c", "/a:relative", "/a:/mnt/../etc", "/a:/proc/x", "/a:/output"):
        with pytest.raises(ValueError):
            parse_mount(bad)


@pytest.mark.parametrize(
    "mount",
    [
        "/:ro",
        "/var/run:ro",  # holds docker.sock
        "/run:/mnt/run:ro",
        "{home}:ro",  # the owner's home: .ssh, .config
        "{config}:ro",  # Klaw's config: tokens
        "{data}/memory:/mnt/m:ro",  # inside Klaw's data: the owner's memory
        "{state}:/mnt/s:rw",
        "{workspace}:/mnt/ws:rw",  # holds every chat's outputs and /output's staging
        "{workspace}/outputs/telegram_1:/mnt/o:ro",
    ],
)
def test_mounts_that_would_expose_secrets_are_refused_by_key(
    klaw_home: KlawPaths, mount: str
) -> None:
    entry = mount.format(
        home=os.environ["HOME"],
        config=klaw_home.config_dir,
        data=klaw_home.data_dir,
        state=klaw_home.state_dir,
        workspace=klaw_home.workspace,
    )
    cfg = CodeExecutionConfig(volume_mounts=[entry])
    with pytest.raises(ConfigError) as info:
        Policy.from_config(cfg, klaw_home)
    assert "codeExecution.volumeMounts[0]" in str(info.value)
    assert "would expose" in str(info.value)


def test_the_default_mount_is_the_workspace_skills_read_only(klaw_home: KlawPaths) -> None:
    policy = Policy.from_config(CodeExecutionConfig(), klaw_home)
    assert policy.mounts == (Mount(klaw_home.workspace / "skills", "/skills", False),)
    assert policy.existing_mounts() == []  # no skills dir yet: no mount, no error
    (klaw_home.workspace / "skills").mkdir()
    assert len(policy.existing_mounts()) == 1
    assert (policy.memory_bytes, policy.tmp_bytes, policy.cpus) == (256 << 20, 64 << 20, 1.0)


def outputs(tmp_path: Path, cap: int = 1 << 20) -> Outputs:
    ws = tmp_path / "ws"
    ws.mkdir()
    return Outputs(ws, ws / ".sandbox-staging", uid=os.getuid(), gid=os.getgid(), cap_bytes=cap)


def test_staging_keeps_new_files_per_chat_and_drops_links_and_what_is_over_the_cap(
    tmp_path: Path,
) -> None:
    out = outputs(tmp_path, cap=1000)
    staged = out.prepare("telegram_1")
    stage = out.staging
    (stage / "a.txt").write_text("a")
    (stage / "sub").mkdir()
    (stage / "sub" / "b.csv").write_text("b" * 600)
    (stage / "sub" / "c.bin").write_bytes(b"c" * 600)  # over the cap with b.csv
    (stage / "passwd").symlink_to("/etc/passwd")
    (stage / "dir-link").symlink_to("/etc")
    os.mkfifo(stage / "fifo")
    kept, dropped = out.collect(staged)
    assert [f.path for f in kept] == ["a.txt", "sub/b.csv"]
    assert set(dropped) == {
        "sub/c.bin (over maxOutputBytes)",
        "passwd (not a regular file)",
        "dir-link (not a regular file)",
        "fifo (not a regular file)",
    }
    chat = out.chat_dir("telegram_1")
    assert sorted(p.name for p in chat.rglob("*")) == ["a.txt", "b.csv", "sub"]
    assert not any(p.is_symlink() for p in chat.rglob("*"))
    assert list(stage.iterdir()) == []


def test_a_chats_files_come_back_unlisted_unless_changed_and_deletion_loses_nothing(
    tmp_path: Path,
) -> None:
    out = outputs(tmp_path)
    first = out.prepare("c1")
    (out.staging / "keep.txt").write_text("v1")
    (out.staging / "edit.txt").write_text("v1")
    out.collect(first)
    second = out.prepare("c1")
    assert sorted(p.name for p in out.staging.iterdir()) == ["edit.txt", "keep.txt"]
    (out.staging / "edit.txt").write_text("v2 longer")
    (out.staging / "keep.txt").unlink()
    kept, _ = out.collect(second)
    assert [f.path for f in kept] == ["edit.txt"]
    chat = out.chat_dir("c1")
    assert (chat / "edit.txt").read_text() == "v2 longer" and (chat / "keep.txt").exists()
    other = out.prepare("c2")
    assert list(out.staging.iterdir()) == []
    out.collect(other)


def test_a_run_keeps_at_most_max_files(tmp_path: Path) -> None:
    from klaw.sandbox.outputs import MAX_FILES

    out = outputs(tmp_path)
    staged = out.prepare("c1")
    for i in range(MAX_FILES + 5):
        (out.staging / f"f{i:05d}").touch()
    kept, dropped = out.collect(staged)
    assert len(kept) == MAX_FILES and len(dropped) == 5
    assert len(list(out.chat_dir("c1").iterdir())) == MAX_FILES


def test_a_deep_tree_and_locked_dirs_neither_break_later_runs_nor_leak_to_other_chats(
    tmp_path: Path,
) -> None:
    from klaw.sandbox.outputs import MAX_DEPTH

    out = outputs(tmp_path)
    staged = out.prepare("a")
    deep = out.staging
    for _ in range(1500):  # deeper than Python's recursion limit
        deep = deep / "d"
        deep.mkdir()
    (deep / "bottom.txt").write_text("x")
    locked = out.staging / "locked"
    locked.mkdir()
    (locked / "secret.txt").write_text("chat a's secret")
    locked.chmod(0)
    _, dropped = out.collect(staged)
    assert any(f"(deeper than {MAX_DEPTH} levels)" in d for d in dropped)
    assert list(out.staging.iterdir()) == []  # emptied all the same
    other = out.prepare("b")
    assert list(out.staging.iterdir()) == []  # nothing of chat a's run
    assert out.collect(other) == ([], [])


def test_a_file_where_a_directory_was_kept_and_the_reverse_are_dropped_not_raised(
    tmp_path: Path,
) -> None:
    out = outputs(tmp_path)
    first = out.prepare("c")
    (out.staging / "a").mkdir()
    (out.staging / "a" / "b.txt").write_text("1")
    (out.staging / "f").write_text("file")
    out.collect(first)
    second = out.prepare("c")
    (out.staging / "a" / "b.txt").unlink()
    (out.staging / "a").rmdir()
    (out.staging / "a").write_text("now a file")
    (out.staging / "f").unlink()
    (out.staging / "f").mkdir()
    (out.staging / "f" / "g.txt").write_text("g")
    (out.staging / "z.txt").write_text("z")
    kept, dropped = out.collect(second)
    assert [f.path for f in kept] == ["z.txt"]
    assert sorted(d.split(" (")[0] for d in dropped) == ["a", "f/g.txt"]
    chat = out.chat_dir("c")
    assert (chat / "a" / "b.txt").read_text() == "1" and (chat / "f").read_text() == "file"


def test_the_staging_dir_swapped_for_a_symlink_is_refused(tmp_path: Path) -> None:
    from klaw.errors import SandboxError

    out = outputs(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    out.staging.symlink_to(victim)
    with pytest.raises(SandboxError, match="is not a plain directory"):
        out.prepare("c")
    assert (victim / "precious.txt").read_text() == "keep me"


def test_chat_dir_names_are_plain() -> None:
    assert chat_dir_name("telegram_-100123") == "telegram_-100123"
    assert chat_dir_name("../../etc") == "_.._etc"
    assert chat_dir_name("a/b:c") == "a_b_c"

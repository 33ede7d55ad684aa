"""`klaw backup` and `klaw restore` as processes, on real parts: the engine and the
gateway running (with the scripted model and the fake Telegram Bot API), klaw.db,
scheduler.db, conversation logs. A round trip, torn and altered archives, databases
from a newer Klaw, targets that cannot be written, and keys that never leave home."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from sched_support import (  # noqa: F401 (fixture)
    CHAT,
    OWNER,
    FakeTelegram,
    T,
    engine_running,
    engine_yaml,
    gateway_running,
    klaw,
    log_lines,
    telegram_fixture,
    until,
)

from klaw import _core
from klaw.backup.redact import Unsafe, redact
from klaw.config import default_engine_yaml, load_engine_config
from klaw.memory import Memory
from klaw.paths import KlawPaths
from klaw.scheduler.jobs import JobSpec
from klaw.scheduler.ledger import SCHEMA_VERSION as SCHEDULER_DB_VERSION
from klaw.scheduler.service import store_jobs
from scripted_llm import FakeLLM, call, write_engine_yaml

KEY = "sk-LIVE-KEY-0123456789abcdef"
TOKEN = "123456789:LIVE-TOKEN-abcdefghijklmnop"
ENV_SECRET = "sk-ENV-FILE-SECRET-42"
FACT = "The spare key is under the blue flowerpot."


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "klaw.cli.app", *args],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=120,
        check=False,
    )


def tree(*roots: Path) -> dict[str, bytes]:
    """Every file under `roots` (and their siblings made by a restore) with its bytes."""
    out: dict[str, bytes] = {}
    for root in roots:
        for p in sorted(root.parent.glob(root.name + "*")) + sorted(root.parent.glob(".*")):
            for f in [p] if p.is_file() else sorted(p.rglob("*")):
                if f.is_file():
                    out[str(f)] = f.read_bytes()
    return out


def agent_dirs(paths: KlawPaths) -> tuple[Path, Path, Path]:
    return paths.config_dir, paths.data_dir, paths.workspace


def secrets_in_config(paths: KlawPaths) -> None:
    """A key and a token in clear, and a .env file beside them."""
    text = paths.engine_config.read_text()
    text = text.replace(
        "    type: openai-compatible\n", f"    type: openai-compatible\n    apiKey: {KEY}\n", 1
    )
    paths.engine_config.write_text(text)
    paths.gateway_config.write_text(
        "# the bot's token: " + TOKEN + "\n"
        "channels:\n  telegram:\n    token: '" + TOKEN + "'\n    allowedChatIds: ['100']\n"
    )
    (paths.config_dir / "engine.env").write_text(f"GLM_API_KEY={ENV_SECRET}\n")


def make_agent(paths: KlawPaths, backend: Any) -> None:
    """An agent with the engine stopped: config, a saved fact in klaw.db, a log, a job in
    scheduler.db and a workspace."""
    paths.config_dir.mkdir(parents=True, exist_ok=True)
    write_engine_yaml(paths.engine_config, "http://127.0.0.1:9")
    secrets_in_config(paths)
    (paths.workspace / "MEMORY.md").write_text("# Memory\n\nThe boat is moored at pier 7.\n")
    config = load_engine_config(paths.engine_config)
    with Memory.open(paths=paths, config=config, backend=backend) as mem:
        mem.save(FACT)
    chat = paths.conversations / CHAT
    chat.mkdir(parents=True)
    (chat / "2026-01-05.jsonl").write_text(
        '{"id": "m1", "ts": "2026-01-05T10:00:00Z", "role": "user", "content": "hello"}\n'
    )
    spec = JobSpec(name="tidy", cron="0 0 3 * * ?", message="Tidy the inbox", timezone="UTC")
    assert store_jobs(paths.scheduler_db, [spec])[0][1] == "added"


def backup_to(archive: Path) -> subprocess.CompletedProcess[str]:
    done = run("backup", str(archive))
    assert done.returncode == 0, done.stderr
    return done


def members(archive: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    with tarfile.open(archive, "r:gz") as tar:
        for info in tar:
            f = tar.extractfile(info)
            out[info.name] = f.read() if f is not None else b""
    return out


def rewrite(archive: Path, edit: Callable[[list[tarfile.TarInfo], dict[str, bytes]], None]) -> None:
    """Rebuilds `archive` after `edit` changed its members (a well-formed gzip + tar)."""
    with tarfile.open(archive, "r:gz") as tar:
        infos = tar.getmembers()
        data = {i.name: (tar.extractfile(i) or io.BytesIO()).read() for i in infos}
    edit(infos, data)
    with tarfile.open(archive, "w:gz") as tar:
        for info in infos:
            if info.isreg():
                info.size = len(data[info.name])
                tar.addfile(info, io.BytesIO(data[info.name]))
            else:
                tar.addfile(info)


def fix_manifest(infos: list[tarfile.TarInfo], data: dict[str, bytes]) -> None:
    """Makes the manifest agree with the members again (a deliberate forgery)."""
    manifest = json.loads(data["manifest.json"])
    for m in manifest["members"]:
        if m["type"] == "file":
            m["size"] = len(data[m["name"]])
            m["sha256"] = hashlib.sha256(data[m["name"]]).hexdigest()
    data["manifest.json"] = json.dumps(manifest).encode()


def set_user_version(db: Path, version: int) -> None:
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(f"PRAGMA user_version = {version}")


# ------------------------------------------------------------------ the round trip


async def test_round_trip_with_the_engine_and_the_gateway_running(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, telegram: FakeTelegram, tmp_path: Path
) -> None:
    paths = klaw_home
    engine_yaml(paths.engine_config, llm.url)
    secrets_in_config(paths)
    (paths.workspace / "MEMORY.md").write_text("# Memory\n\nThe boat is moored at pier 7.\n")
    # Another writer's log with a line in progress: only complete lines are kept.
    other = paths.conversations / "telegram_555" / "2026-01-05.jsonl"
    other.parent.mkdir(parents=True)
    done_line = b'{"id": "x1", "ts": "2026-01-05T10:00:00Z", "role": "user", "content": "hi"}\n'
    other.write_bytes(done_line + b'{"id": "x2", "ts": "2026-01-05T10:00:01Z", "ro')
    telegram.add_chat(OWNER)
    llm.answer(None, [call("c1", "memory_save", json.dumps({"content": FACT}))])
    llm.answer("Saved.")
    archive = tmp_path / "backups" / "agent.tar.gz"
    archive.parent.mkdir()
    paths.workspace.chmod(0o751)
    async with engine_running(paths, backend), gateway_running(paths, telegram) as gw:
        await asyncio.wait_for(gw.connected.wait(), T)
        telegram.text(OWNER, "Remember where the spare key is: under the blue flowerpot")
        (reply,) = await telegram.wait_sent(OWNER, 1, T)
        assert reply.visible == "Saved."
        rc, _, err = await klaw("schedule", "add", "tidy", "0 0 3 * * ?", "Tidy the inbox")
        assert rc == 0, err

        rc, out, err = await klaw("backup", str(archive))
        assert rc == 0, err
        assert f"backup written: {archive}" in out and "klaw.db schema" in out
        assert "config/engine.env" in out  # left out, and said so

        rc, _, err = await klaw("restore", "--force", str(archive))
        assert rc == 1 and "stop the engine first" in err
    before_logs = {
        p.relative_to(paths.conversations): p.read_bytes()
        for p in paths.conversations.rglob("*.jsonl")
    }
    before_chat = log_lines(paths, CHAT)
    assert before_chat[0]["content"].startswith("Remember where")

    # No secret of the config dir is anywhere in the archive, compressed or not.
    raw = gzip.decompress(archive.read_bytes())
    for secret in (KEY, TOKEN, ENV_SECRET):
        assert secret.encode() not in raw

    for d in agent_dirs(paths):
        shutil.rmtree(d)
    rc, out, err = await klaw("restore", str(archive))
    assert rc == 0, err
    assert "FAKE_API_KEY" in out and "TELEGRAM_BOT_TOKEN" in out  # what to set again
    assert "klaw.db is the backup's snapshot" in out

    # Logs: an identical prefix ending at a complete line.
    for rel, data in before_logs.items():
        restored = (paths.conversations / rel).read_bytes()
        assert data.startswith(restored) and restored.endswith(b"\n"), rel
    assert (paths.conversations / "telegram_555" / "2026-01-05.jsonl").read_bytes() == done_line
    assert log_lines(paths, CHAT) == before_chat
    assert "${FAKE_API_KEY}" in paths.engine_config.read_text()
    assert stat.S_IMODE(paths.workspace.stat().st_mode) == 0o751

    async with engine_running(paths, backend):
        rc, out, err = await klaw("memory", "search", "where is the spare key", "--json")
        assert rc == 0, err
        # From the restored klaw.db at once (saved facts are not watched files).
        assert any(FACT in h["content"] for h in json.loads(out))
        rc, out, err = await klaw("schedule", "list", "--json")
        assert rc == 0, err
        jobs = {j["name"]: j for j in json.loads(out)["jobs"]}
        assert jobs["tidy"]["cron"] == "0 0 3 * * ?" and jobs["tidy"]["message"] == "Tidy the inbox"

        async def boat_found() -> bool:
            rc, out, _ = await klaw("memory", "search", "where is the boat moored", "--json")
            return rc == 0 and any("pier 7" in h["content"] for h in json.loads(out))

        async with asyncio.timeout(T):  # the workspace is watched and indexed at start
            while not await boat_found():
                await asyncio.sleep(0.1)


# ------------------------------------------------------------------ damaged archives


@pytest.fixture
def archive(klaw_home: KlawPaths, backend: Any, tmp_path: Path) -> Path:
    make_agent(klaw_home, backend)
    path = tmp_path / "agent.tar.gz"
    backup_to(path)
    return path


@contextmanager
def unchanged(paths: KlawPaths) -> Iterator[None]:
    before = tree(*agent_dirs(paths))
    yield
    assert tree(*agent_dirs(paths)) == before


@pytest.mark.parametrize("keep", [0.5, -8, -1, 40], ids=["half", "no-trailer", "last-byte", "head"])
def test_a_torn_archive_is_refused_and_nothing_is_overwritten(
    klaw_home: KlawPaths, archive: Path, keep: float
) -> None:
    data = archive.read_bytes()
    cut = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    archive.write_bytes(data[:cut])
    with unchanged(klaw_home):
        done = run("restore", "--force", str(archive))
    assert done.returncode == 1
    assert "is damaged or incomplete" in done.stderr and "nothing was changed" in done.stderr
    assert "Traceback" not in done.stderr


def _alter(infos: list[tarfile.TarInfo], data: dict[str, bytes]) -> None:
    data["data/memory/saved.jsonl"] = data["data/memory/saved.jsonl"].replace(b"blue", b"gold")


def _drop(infos: list[tarfile.TarInfo], data: dict[str, bytes]) -> None:
    infos[:] = [i for i in infos if i.name != "workspace/MEMORY.md"]


def _add(infos: list[tarfile.TarInfo], data: dict[str, bytes]) -> None:
    info = tarfile.TarInfo("workspace/extra.md")
    infos.insert(len(infos) - 1, info)
    data[info.name] = b"# not from the backup\n"


def _escape(infos: list[tarfile.TarInfo], data: dict[str, bytes]) -> None:
    _add(infos, data)
    infos[-2].name = "workspace/../../evil.md"
    data["workspace/../../evil.md"] = data.pop("workspace/extra.md")
    fix_manifest(infos, data)


def _newer_inside(infos: list[tarfile.TarInfo], data: dict[str, bytes]) -> None:
    """klaw.db says schema 99 in its header while the manifest (redone) says 3."""
    db = bytearray(data["data/klaw.db"])
    db[60:64] = (99).to_bytes(4, "big")
    data["data/klaw.db"] = bytes(db)
    fix_manifest(infos, data)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_alter, "data/memory/saved.jsonl does not match the manifest"),
        (_drop, "workspace/MEMORY.md is missing from the archive"),
        (_add, "workspace/extra.md is not in the manifest"),
        (_escape, "which no Klaw backup contains"),
        (_newer_inside, "the backup's klaw.db has schema version 99, newer than this Klaw's"),
    ],
    ids=["altered", "dropped", "added", "escape", "newer-inside"],
)
def test_an_altered_archive_is_refused_and_nothing_is_overwritten(
    klaw_home: KlawPaths,
    archive: Path,
    edit: Callable[[list[tarfile.TarInfo], dict[str, bytes]], None],
    message: str,
) -> None:
    rewrite(archive, edit)
    with unchanged(klaw_home):
        done = run("restore", "--force", str(archive))
    assert done.returncode == 1, done.stdout
    assert message in done.stderr
    assert "Traceback" not in done.stderr


# ------------------------------------------------------------------ newer databases


@pytest.mark.parametrize(
    ("db", "supported"),
    [("klaw.db", _core.KLAW_DB_SCHEMA_VERSION), ("scheduler.db", SCHEDULER_DB_VERSION)],
)
def test_a_backup_of_a_newer_database_is_refused_by_name_and_versions(
    klaw_home: KlawPaths, backend: Any, tmp_path: Path, db: str, supported: int
) -> None:
    make_agent(klaw_home, backend)
    set_user_version(klaw_home.data_dir / db, 42)
    archive = tmp_path / "from-a-newer-klaw.tar.gz"
    assert f"{db} schema 42" in backup_to(archive).stdout
    with unchanged(klaw_home):
        done = run("restore", "--force", str(archive))
    assert done.returncode == 1
    assert (
        f"the backup's {db} has schema version 42, newer than this Klaw's ({supported}): "
        "it was made by a newer Klaw; upgrade Klaw to restore it"
    ) in done.stderr


def test_the_engine_refuses_a_newer_klaw_db_by_name_and_versions(
    klaw_home: KlawPaths, backend: Any
) -> None:
    make_agent(klaw_home, backend)
    set_user_version(klaw_home.db, 42)
    before = klaw_home.db.read_bytes()
    done = run("engine")
    assert done.returncode == 1
    (line,) = [ln for ln in done.stderr.splitlines() if " ERROR " in ln]
    assert (
        f"klaw.db has schema version 42, newer than this Klaw ({_core.KLAW_DB_SCHEMA_VERSION})"
        in line
    )
    assert klaw_home.db.read_bytes() == before


def test_a_newer_backup_format_is_refused(klaw_home: KlawPaths, archive: Path) -> None:
    def newer(infos: list[tarfile.TarInfo], data: dict[str, bytes]) -> None:
        manifest = json.loads(data["manifest.json"])
        manifest["formatVersion"] = 2
        data["manifest.json"] = json.dumps(manifest).encode()

    rewrite(archive, newer)
    with unchanged(klaw_home):
        done = run("restore", "--force", str(archive))
    assert done.returncode == 1
    assert "backup format 2; this Klaw reads format 1" in done.stderr
    assert "upgrade Klaw" in done.stderr


# ------------------------------------------------------------------ restoring over an agent


def test_restore_keeps_the_agent_it_replaces_and_only_with_force(
    klaw_home: KlawPaths, archive: Path
) -> None:
    paths = klaw_home
    (paths.workspace / "MEMORY.md").write_text("# Memory\n\nWritten after the backup.\n")
    approved = paths.config_dir / "allowed-chats.json"  # Klaw's, and not in the backup
    approved.write_text('["telegram_777"]')
    with unchanged(paths):
        refused = run("restore", str(archive))
    assert refused.returncode == 1 and "an agent is already here" in refused.stderr
    assert "--force" in refused.stderr

    done = run("restore", "--force", "--reindex", str(archive))
    assert done.returncode == 0, done.stderr
    assert "reindexed" in done.stdout
    assert "The boat is moored at pier 7." in (paths.workspace / "MEMORY.md").read_text()
    (old_ws,) = paths.workspace.parent.glob(paths.workspace.name + ".before-restore-*")
    assert "Written after the backup." in (old_ws / "MEMORY.md").read_text()
    (old_data,) = paths.data_dir.parent.glob(paths.data_dir.name + ".before-restore-*")
    assert (old_data / "klaw.db").is_file()
    (old_config,) = paths.config_dir.parent.glob(paths.config_dir.name + ".before-restore-*")
    assert KEY in (old_config / "engine.yaml").read_text()  # the replaced file, as it was
    assert not approved.exists() and (old_config / approved.name).is_file()
    # The .env file was not in the backup and stays where it is.
    assert (paths.config_dir / "engine.env").read_text() == f"GLM_API_KEY={ENV_SECRET}\n"
    assert "${FAKE_API_KEY}" in paths.engine_config.read_text()
    leftovers = [p.name for p in paths.data_dir.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_check_reads_the_archive_and_changes_nothing(klaw_home: KlawPaths, archive: Path) -> None:
    with unchanged(klaw_home):
        done = run("restore", "--check", str(archive))
    assert done.returncode == 0, done.stderr
    schema = f"klaw.db schema {_core.KLAW_DB_SCHEMA_VERSION}"
    assert "match the manifest" in done.stdout and schema in done.stdout


# ------------------------------------------------------------------ targets


@contextmanager
def tmpfs(where: Path, options: str) -> Iterator[None]:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@needs_root
@pytest.mark.parametrize(
    ("options", "why"),
    [("ro,size=1m", "the filesystem is read-only"), ("size=64k", "")],
    ids=["read-only", "full"],
)
def test_a_target_that_cannot_be_written_is_one_clear_error(
    klaw_home: KlawPaths, backend: Any, tmp_path: Path, options: str, why: str
) -> None:
    make_agent(klaw_home, backend)
    where = tmp_path / "mnt"
    with tmpfs(where, options):
        done = run("backup", str(where / "agent.tar.gz"))
        left = sorted(p.name for p in where.iterdir())
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"cannot write the backup to {where / 'agent.tar.gz'}" in done.stderr
    if why:
        assert why in done.stderr
    else:
        assert "no space left" in done.stderr or "disk is full" in done.stderr
    assert left == []  # no partial archive, no temp files


def test_a_missing_directory_or_an_existing_file_is_refused(
    klaw_home: KlawPaths, backend: Any, tmp_path: Path
) -> None:
    make_agent(klaw_home, backend)
    done = run("backup", str(tmp_path / "no" / "such" / "dir" / "a.tar.gz"))
    assert done.returncode == 1
    assert f"the directory {tmp_path / 'no' / 'such' / 'dir'} does not exist" in done.stderr
    taken = tmp_path / "taken.tar.gz"
    taken.write_bytes(b"mine")
    done = run("backup", str(taken))
    assert done.returncode == 1 and "already exists" in done.stderr
    assert taken.read_bytes() == b"mine"
    # A directory gets a dated name inside it.
    done = run("backup", str(tmp_path))
    assert done.returncode == 0, done.stderr
    (made,) = tmp_path.glob("klaw-backup-*.tar.gz")
    assert run("restore", "--check", str(made)).returncode == 0


# ------------------------------------------------------------------ keys


def test_keys_in_clear_become_references_and_the_file_still_loads(tmp_path: Path) -> None:
    text = (
        "# providers\n"
        "providers:\n"
        "  glm:\n"
        "    endpoint: https://x\n"
        f"    apiKey: {KEY}   # my key\n"
        "  ds:\n"
        "    endpoint: https://y\n"
        '    apiKey: "${DEEPSEEK_API_KEY}"\n'
        "  my-llm:\n"
        "    endpoint: https://z\n"
        "    apiKey: '${MY_KEY:-sk-default-in-clear-99}'\n"
        "  ollama:\n"
        "    endpoint: http://localhost:11434/v1\n"
        "    apiKey: ollama\n"
        "models:\n"
        "  ollama/qwen3:8b: {}\n"
        f"# old: {KEY}\n"
    )
    clean, found = redact("engine.yaml", text)
    assert KEY not in clean and "sk-default-in-clear-99" not in clean
    assert [(r.key, r.variable) for r in found] == [
        ("providers.glm.apiKey", "GLM_API_KEY"),
        ("providers.my-llm.apiKey", "MY_KEY"),
        ("providers.ollama.apiKey", "OLLAMA_API_KEY"),
    ]
    assert "  ollama:\n" in clean and "ollama/qwen3:8b" in clean  # a placeholder, in its slot
    assert '    apiKey: "${GLM_API_KEY}"   # my key\n' in clean
    assert '"${DEEPSEEK_API_KEY}"' in clean and "# providers\n" in clean
    path = tmp_path / "engine.yaml"
    path.write_text(clean)
    cfg = load_engine_config(path, env={})
    assert cfg.providers["glm"].api_key is None  # unset: off, not an error

    block = "channels:\n  telegram:\n    token: |\n      " + TOKEN + "\n    enabled: true\n"
    clean, found = redact("gateway.yaml", block)
    assert TOKEN not in clean and found[0].variable == "TELEGRAM_BOT_TOKEN"
    # The transcription key too: every key klaw.config.SECRET_KEYS names.
    voice = f"transcription:\n  endpoint: https://stt\n  apiKey: {KEY}\n"
    clean, found = redact("gateway.yaml", voice)
    assert KEY not in clean and [(r.key, r.variable) for r in found] == [
        ("transcription.apiKey", "TRANSCRIPTION_API_KEY")
    ]
    with pytest.raises(Unsafe):
        redact("engine.yaml", "providers: [unclosed\n")


def test_keys_in_comments_stay_out_of_the_backup(klaw_home: KlawPaths, tmp_path: Path) -> None:
    # An old key in a comment is no slot's value: only its form gives it away.
    old_key, old_token = "sk-proj-OLDkey0123456789abcdef", "987654321:AAFoldTOKENabcdefghij0123"
    b64 = "c2VjcmV0IGtleSBvZiBteSBvd24gMTIzNDU2"
    klaw_home.config_dir.mkdir(parents=True, exist_ok=True)
    template = default_engine_yaml()
    klaw_home.engine_config.write_text(f"# old key {old_key}\n{template}# was {b64}\n")
    klaw_home.gateway_config.write_text(
        f"channels:\n  telegram:\n    token: '${{TELEGRAM_BOT_TOKEN}}'  # was {old_token}\n"
    )
    archive = tmp_path / "b.tar.gz"
    backup_to(archive)
    inside = members(archive)
    for secret in (old_key, old_token, b64):
        assert not any(secret.encode() in data for data in inside.values()), secret
    engine = inside["config/engine.yaml"].decode()
    assert engine == f"# old key <redacted>\n{template}# was <redacted>\n"  # the rest as is
    assert (
        "token: '${TELEGRAM_BOT_TOKEN}'  # was <redacted>" in inside["config/gateway.yaml"].decode()
    )
    assert run("restore", "--check", str(archive)).returncode == 0


def test_a_workspace_behind_a_symbolic_link_is_restored_where_it_points(
    klaw_home: KlawPaths, backend: Any, tmp_path: Path
) -> None:
    real = tmp_path / "ssd" / "ws"
    real.parent.mkdir()
    klaw_home.workspace.rename(real)
    klaw_home.workspace.symlink_to(real)
    make_agent(klaw_home, backend)
    archive = tmp_path / "agent.tar.gz"
    backup_to(archive)
    (real / "MEMORY.md").write_text("# Memory\n\nChanged since.\n")

    done = run("restore", "--force", str(archive))
    assert done.returncode == 0, done.stderr
    assert klaw_home.workspace.is_symlink() and klaw_home.workspace.resolve() == real
    assert "pier 7" in (real / "MEMORY.md").read_text()
    (kept,) = real.parent.glob("ws.before-restore-*")
    assert "Changed since." in (kept / "MEMORY.md").read_text()


def test_a_backup_naming_a_system_directory_as_its_workspace_is_refused(
    klaw_home: KlawPaths, archive: Path
) -> None:
    # A forged engine.yaml with matching hashes: the manifest proves integrity, not
    # origin. With `workspace: /etc` restore renamed /etc aside and wrote the archive's
    # workspace in its place; /proc here, where nothing can be written should the
    # guard ever break again.
    def _system(infos: list[tarfile.TarInfo], data: dict[str, bytes]) -> None:
        data["config/engine.yaml"] = b"workspace: /proc/ws\n" + data["config/engine.yaml"]
        fix_manifest(infos, data)

    rewrite(archive, _system)
    with unchanged(klaw_home):
        done = run("restore", "--force", str(archive))
    assert done.returncode == 1, done.stdout
    assert "engine.yaml workspace: /proc/ws is inside the system directory /proc" in done.stderr
    assert "nothing was changed" in done.stderr and "Traceback" not in done.stderr


def test_a_workspace_that_is_the_home_is_not_backed_up(
    klaw_home: KlawPaths, tmp_path: Path
) -> None:
    klaw_home.config_dir.mkdir(parents=True, exist_ok=True)
    klaw_home.engine_config.write_text('workspace: "~"\n')
    done = run("backup", str(tmp_path / "home.tar.gz"))
    assert done.returncode == 1
    assert "engine.yaml workspace:" in done.stderr and "is a home directory" in done.stderr
    assert not (tmp_path / "home.tar.gz").exists()

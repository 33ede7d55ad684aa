"""A workspace the file tools would turn into a leak (`/`, a home, /etc, Klaw's own dirs)
is refused wherever it comes from: engine.yaml, KLAW_WORKSPACE and `klaw init
--workspace` (hostile run, case 2). Backups: tests/cli/test_backup.py; the OpenClaw
import: tests/openclaw/test_import_hostile.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from klaw.cli.app import app
from klaw.cli.testing import CliRunner
from klaw.config import load_engine_config
from klaw.errors import ConfigError
from klaw.paths import KlawPaths, unsafe_workspace


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


def paths_under(home: Path) -> KlawPaths:
    return KlawPaths.from_env({"HOME": str(home)})


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("/", "/ is the whole filesystem"),
        ("/etc", "/etc is a system directory"),
        ("/etc/klaw", "/etc/klaw is inside the system directory /etc"),
        ("/usr/local/share/ws", "inside the system directory /usr"),
        ("/var/lib/ws", "inside the system directory /var"),
        ("/proc/self", "inside the system directory /proc"),
        ("/dev", "/dev is a system directory"),
        ("/boot", "/boot is a system directory"),
        ("/root", "/root is a home directory"),
        ("/home", "/home holds the users' homes"),
    ],
)
def test_system_places_are_refused(home: Path, where: str, said: str) -> None:
    why = unsafe_workspace(Path(where), paths_under(home), {"HOME": str(home)})
    assert why is not None and said in why


def test_the_home_and_klaws_own_dirs_are_refused(home: Path) -> None:
    paths, env = paths_under(home), {"HOME": str(home)}
    assert unsafe_workspace(home, paths, env) == f"{home} is a home directory"
    assert unsafe_workspace(home.parent, paths, env) == f"{home.parent} holds the home {home}"
    config = home / ".config" / "klaw"
    assert unsafe_workspace(home / ".config", paths, env) == (
        f"{home / '.config'} holds Klaw's config directory {config}"
    )
    inside = home / ".local" / "share" / "klaw" / "ws"
    assert "is inside Klaw's data directory" in (unsafe_workspace(inside, paths, env) or "")
    state = home / ".local" / "state" / "klaw"
    assert "Klaw's state directory" in (unsafe_workspace(state, paths, env) or "")


def test_a_symlink_is_judged_by_where_it_leads(home: Path) -> None:
    link = home / "ws"
    link.symlink_to("/etc")
    why = unsafe_workspace(link, paths_under(home), {"HOME": str(home)})
    assert why == "/etc is a system directory"


def test_a_folder_of_its_own_is_fine(home: Path, tmp_path: Path) -> None:
    paths, env = paths_under(home), {"HOME": str(home)}
    assert unsafe_workspace(home / "klaw-workspace", paths, env) is None
    assert unsafe_workspace(tmp_path / "elsewhere" / "ws", paths, env) is None
    # A service user whose home lies in /var keeps its workspace there.
    service = {"HOME": "/var/lib/klaw"}
    assert unsafe_workspace(Path("/var/lib/klaw/ws"), KlawPaths.from_env(service), service) is None


@pytest.mark.parametrize("value", ["~", "/etc", "/"])
def test_engine_yaml_workspace_is_refused_naming_the_key_and_line(
    home: Path, tmp_path: Path, value: str
) -> None:
    path = tmp_path / "engine.yaml"
    path.write_text(f"# mine\nworkspace: {value!r}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_engine_config(path, {"HOME": str(home)})
    (problem,) = exc.value.problems
    assert problem.startswith(f"{path}:2: workspace: ")
    assert "a folder of its own" in problem


def test_klaw_workspace_is_refused_naming_the_variable(home: Path, tmp_path: Path) -> None:
    env = {"HOME": str(home), "KLAW_WORKSPACE": str(home / ".local" / "share" / "klaw")}
    with pytest.raises(ConfigError) as exc:
        load_engine_config(tmp_path / "absent.yaml", env)
    (problem,) = exc.value.problems
    assert problem.startswith("KLAW_WORKSPACE: ") and "holds Klaw's data directory" in problem
    # engine.yaml's own key wins over the variable, as everywhere.
    path = tmp_path / "engine.yaml"
    path.write_text(f"workspace: {str(tmp_path / 'ws')!r}\n", encoding="utf-8")
    assert load_engine_config(path, env).workspace == tmp_path / "ws"


def test_the_engine_does_not_start_in_a_system_directory(tmp_path: Path) -> None:
    # /proc, not /etc: should the guard ever break, nothing can be written there.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KLAW_", "XDG_"))}
    env |= {"HOME": str(tmp_path), "KLAW_WORKSPACE": "/proc/klaw-workspace"}
    done = subprocess.run(
        [sys.executable, "-m", "klaw.cli.app", "engine"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "KLAW_WORKSPACE: /proc/klaw-workspace is inside the system directory" in done.stderr
    assert not (tmp_path / ".local" / "state" / "klaw" / "engine.sock").exists()


def test_init_refuses_the_home_and_writes_nothing_there(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in [v for v in os.environ if v.startswith(("KLAW_", "XDG_"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(home))
    result = CliRunner().invoke(app, ["init", "--no-model", "--workspace", str(home)])
    assert result.exit_code == 1
    assert f"--workspace: {home} is a home directory" in result.output
    assert sorted(p.name for p in home.iterdir()) == []

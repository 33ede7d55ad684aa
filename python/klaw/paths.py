"""Where Klaw keeps things (design §9.1).

Each base directory comes from its `KLAW_*_DIR` override, else `$XDG_*_HOME/klaw`,
else the XDG fallback under the home directory. The workspace is `$KLAW_WORKSPACE`,
else `~/klaw-workspace`; `unsafe_workspace` says why a directory cannot be one.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: Where the system keeps its programs, settings, devices and state: never a workspace,
#: nor anything inside one.
SYSTEM_DIRS = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
    "/sbin", "/sys", "/usr", "/var",
)  # fmt: skip

_BASES = {
    "config": ("KLAW_CONFIG_DIR", "XDG_CONFIG_HOME", ".config"),
    "data": ("KLAW_DATA_DIR", "XDG_DATA_HOME", ".local/share"),
    "state": ("KLAW_STATE_DIR", "XDG_STATE_HOME", ".local/state"),
    "cache": ("KLAW_CACHE_DIR", "XDG_CACHE_HOME", ".cache"),
}


def _base(kind: str, env: Mapping[str, str], home: Path) -> Path:
    override, xdg, fallback = _BASES[kind]
    if env.get(override):
        return Path(env[override]).expanduser()
    # XDG says relative values are invalid and must be ignored.
    xdg_value = env.get(xdg, "")
    root = Path(xdg_value) if xdg_value and os.path.isabs(xdg_value) else home / fallback
    return root / "klaw"


@dataclass(frozen=True)
class KlawPaths:
    config_dir: Path
    data_dir: Path
    state_dir: Path
    cache_dir: Path
    workspace: Path

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KlawPaths:
        env = os.environ if env is None else env
        home = Path(env.get("HOME") or Path.home())
        workspace = env.get("KLAW_WORKSPACE") or str(home / "klaw-workspace")
        return cls(
            config_dir=_base("config", env, home),
            data_dir=_base("data", env, home),
            state_dir=_base("state", env, home),
            cache_dir=_base("cache", env, home),
            workspace=Path(workspace).expanduser(),
        )

    # config
    @property
    def engine_config(self) -> Path:
        return self.config_dir / "engine.yaml"

    @property
    def gateway_config(self) -> Path:
        return self.config_dir / "gateway.yaml"

    # data
    @property
    def conversations(self) -> Path:
        return self.data_dir / "conversations"

    @property
    def answered(self) -> Path:
        """Per-chat answered watermarks (exactly-once redelivery; klaw/engine/answered.py)."""
        return self.data_dir / "answered"

    @property
    def summaries(self) -> Path:
        return self.data_dir / "summaries"

    @property
    def memory_dir(self) -> Path:
        return self.data_dir / "memory"

    @property
    def core_memory(self) -> Path:
        return self.memory_dir / "core_memory.json"

    @property
    def saved_memory(self) -> Path:
        """Facts saved with `memory_save` / `klaw memory save`: the file behind them."""
        return self.memory_dir / "saved.jsonl"

    @property
    def skills(self) -> Path:
        return self.data_dir / "skills"

    @property
    def db(self) -> Path:
        return self.data_dir / "klaw.db"

    @property
    def scheduler_db(self) -> Path:
        return self.data_dir / "scheduler.db"

    @property
    def spend(self) -> Path:
        """One line per model call and its cost (klaw/spend/log.py), a file per UTC day."""
        return self.data_dir / "spend"

    # state
    @property
    def socket(self) -> Path:
        return self.state_dir / "engine.sock"

    @property
    def engine_lock(self) -> Path:
        return self.state_dir / "engine.lock"

    @property
    def outbox(self) -> Path:
        """Pushes the engine sends on its own, kept until the gateway confirms."""
        return self.state_dir / "outbox"

    @property
    def gateway_buffer(self) -> Path:
        return self.state_dir / "gateway-buffer.jsonl"

    @property
    def gateway_lock(self) -> Path:
        return self.state_dir / "gateway.lock"

    @property
    def console_socket(self) -> Path:
        """Where the gateway's console channel accepts `klaw chat` (mode 600)."""
        return self.state_dir / "console.sock"

    @property
    def pairing(self) -> Path:
        """Pending pairing codes of unknown chats (gateway state)."""
        return self.state_dir / "pairing.json"

    @property
    def skill_choices(self) -> Path:
        """Skills the owner enabled or disabled by name (`klaw skills enable|disable`)."""
        return self.config_dir / "skills.json"

    @property
    def approved_chats(self) -> Path:
        """Chats approved with `klaw pair approve`, added to gateway.yaml's allowedChatIds."""
        return self.config_dir / "allowed-chats.json"

    @property
    def inbox(self) -> Path:
        """Files users send (photos, documents), inside the workspace."""
        return self.workspace / "inbox"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    # cache
    @property
    def models(self) -> Path:
        return self.cache_dir / "models"

    @property
    def embeddings_cache(self) -> Path:
        return self.cache_dir / "embeddings.db"


def expand_home(path: str | Path, env: Mapping[str, str]) -> Path:
    """`path` with a leading `~` read as `env`'s HOME (`~user` as that user's home)."""
    text = str(path)
    if text == "~" or text.startswith("~/"):
        return Path(env.get("HOME") or Path.home()) / text[2:]
    return Path(os.path.expanduser(text))


def unsafe_workspace(
    workspace: Path, paths: KlawPaths, env: Mapping[str, str] | None = None
) -> str | None:
    """Why `workspace` must not be the agent's workspace, or None when it may be.

    The file tools read and write everything in it (and `~/.ssh`, Klaw's keys or `/etc`
    must stay out of their reach), so it may be neither `/`, a home directory or one
    holding a home, a system directory or anything inside one (unless it is inside the
    owner's home), nor hold or lie inside Klaw's config, data or state directory. The
    path as written and the one its symlinks lead to are both checked.
    """
    env = os.environ if env is None else env
    homes = {Path(env.get("HOME") or Path.home())}
    try:
        homes.add(Path(pwd.getpwuid(os.getuid()).pw_dir))
    except KeyError:  # a uid without a passwd entry (a container's --user)
        pass
    klaw = [("config", paths.config_dir), ("data", paths.data_dir), ("state", paths.state_dir)]
    for p in dict.fromkeys((Path(os.path.abspath(workspace)), Path(os.path.realpath(workspace)))):
        if p == Path("/"):
            return "/ is the whole filesystem"
        for home in homes:
            if p == home or p in home.parents:
                return f"{p} is a home directory" if p == home else f"{p} holds the home {home}"
        if p == Path("/home"):
            return "/home holds the users' homes"
        if _someones_home(p):
            return f"{p} is a home directory"
        # A service user's home may lie in /var: what is inside it is the owner's own.
        inside_home = any(home in p.parents for home in homes)
        for system in map(Path, SYSTEM_DIRS if not inside_home else ()):
            if p == system:
                return f"{p} is a system directory"
            if system in p.parents:
                return f"{p} is inside the system directory {system}"
        for kind, base in klaw:
            for d in dict.fromkeys((Path(os.path.abspath(base)), Path(os.path.realpath(base)))):
                if p == d or p in d.parents:
                    return f"{p} holds Klaw's {kind} directory {d}"
                if d in p.parents:
                    return f"{p} is inside Klaw's {kind} directory {d}"
    return None


def _someones_home(path: Path) -> bool:
    """`/root`, or `/home/NAME` when NAME is a user whose home it is."""
    if path == Path("/root"):
        return True
    if path.parent != Path("/home"):
        return False
    try:
        return pwd.getpwnam(path.name).pw_dir == str(path)
    except KeyError:
        return False

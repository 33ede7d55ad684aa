"""An OpenClaw home (`~/.openclaw`) read where it lies, never written.

Formats follow OpenClaw's own source (docs/openclaw.md cites the files): the config is
JSON5 (`openclaw.json`, or the older `clawdbot.json` / `moltbot.json`) with `$include`
and `${VAR}` references; the workspace is `agents.defaults.workspace` (default
`<home>/workspace`); transcripts are `agents/<id>/sessions/*.jsonl` indexed by
`sessions.json`; cron jobs `cron/jobs.json`; approved Telegram senders
`credentials/telegram-allowFrom.json`. Every file is read on its own: one that is
missing or malformed is reported (`Home.problems`) and the rest still imports.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from klaw.errors import InvalidInput

__all__ = ["CONFIG_NAMES", "Home", "open_regular", "read_json5"]

CONFIG_NAMES = ("openclaw.json", "clawdbot.json", "moldbot.json", "moltbot.json")
_MAX_FILE = 64 * 1024 * 1024
_MAX_INCLUDE_DEPTH = 10


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading if it is a regular file; `InvalidInput` otherwise. A
    device (`/dev/zero` never ends), a FIFO (the open would wait for a writer) or a
    socket is refused before a byte is read; a symlink to a regular file is one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidInput(f"{path}: {exc.strerror or exc}") from None
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        raise InvalidInput(f"{path}: not a regular file (a device, FIFO or socket), not read")
    return f


def read_json5(path: Path) -> Any:
    """JSON5 as OpenClaw writes it; `InvalidInput` names the file and the line."""
    import json5

    with open_regular(path) as f:
        try:
            data = f.read(_MAX_FILE + 1)  # no more, even if it grows while read
        except OSError as exc:
            raise InvalidInput(f"{path}: {exc.strerror or exc}") from None
    if len(data) > _MAX_FILE:
        raise InvalidInput(f"{path}: over {_MAX_FILE // (1024 * 1024)} MiB, not read")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{path}: not UTF-8 text") from None
    try:
        return json.loads(text)  # the common case, and 50x faster than json5
    except ValueError:
        pass
    except RecursionError:
        raise InvalidInput(f"{path}: nested too deeply, not read") from None
    try:
        return json5.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"{path}: not valid JSON5 ({exc})") from None
    except RecursionError:
        raise InvalidInput(f"{path}: nested too deeply, not read") from None


def _merge(a: Any, b: Any) -> Any:
    """OpenClaw's `$include` merge: objects recursively, arrays concatenated, b wins."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = _merge(out[k], v) if k in out else v
        return out
    if isinstance(a, list) and isinstance(b, list):
        return a + b
    return b


def _includes(data: Any, base: Path, depth: int, seen: tuple[Path, ...]) -> Any:
    if isinstance(data, list):
        return [_includes(v, base, depth, seen) for v in data]
    if not isinstance(data, dict):
        return data
    out: dict[str, Any] = {}
    inc = data.get("$include")
    if inc is not None:
        if depth >= _MAX_INCLUDE_DEPTH:
            raise InvalidInput(f"$include nested deeper than {_MAX_INCLUDE_DEPTH} levels")
        names = [inc] if isinstance(inc, str) else inc
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InvalidInput("$include must name a file or a list of files")
        for name in names:
            path = (base / os.path.expanduser(name)).resolve()
            if path in seen:
                raise InvalidInput(f"$include of {path} is circular")
            sub = _includes(read_json5(path), path.parent, depth + 1, (*seen, path))
            if not isinstance(sub, dict):
                raise InvalidInput(f"$include of {path}: not a JSON object")
            out = _merge(out, sub)
    for k, v in data.items():
        if k != "$include":
            v = _includes(v, base, depth, seen)
            out[k] = _merge(out[k], v) if k in out else v
    return out


_ENV_REF = re.compile(r"^\$\{([A-Z_][A-Z0-9_]*)\}$")


def env_reference(value: Any) -> str | None:
    """`VAR` when `value` is exactly `${VAR}` (a reference Klaw can keep as is)."""
    if isinstance(value, str):
        m = _ENV_REF.match(value.strip())
        if m:
            return m.group(1)
    return None


def _dig(data: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(k)
    return data


@dataclass
class Home:
    """What an OpenClaw state directory holds, as read (nothing is written)."""

    root: Path
    config_path: Path | None = None
    config: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, root: Path | None = None) -> Home:
        if root is None:
            env = os.environ.get("OPENCLAW_STATE_DIR") or os.environ.get("CLAWDBOT_STATE_DIR")
            root = Path(os.path.expanduser(env)) if env else Path.home() / ".openclaw"
        root = root.expanduser()
        if not root.is_dir():
            raise InvalidInput(
                f"{root}: no OpenClaw home here (expected a directory with openclaw.json)"
            )
        home = cls(root.resolve())
        home._load_config()
        return home

    def _load_config(self) -> None:
        env = os.environ.get("OPENCLAW_CONFIG_PATH")
        candidates = [Path(env).expanduser()] if env else [self.root / n for n in CONFIG_NAMES]
        for path in candidates:
            if path.is_file():
                self.config_path = path
                break
        else:
            self.problems.append(f"{self.root}: no openclaw.json; config not imported")
            return
        try:
            data = _includes(read_json5(self.config_path), self.config_path.parent, 0, ())
        except InvalidInput as exc:
            self.problems.append(f"{exc}; config not imported")
            return
        if not isinstance(data, dict):
            self.problems.append(f"{self.config_path}: not a JSON object; config not imported")
            return
        # Keys older versions kept elsewhere (OpenClaw's doctor migrates them the same way).
        if "agent" in data and "agents" not in data:
            data["agents"] = {"defaults": data.pop("agent")}
        if not isinstance(data.get("channels"), dict):
            data["channels"] = {}
        if "telegram" in data and "telegram" not in data["channels"]:
            data["channels"]["telegram"] = data.pop("telegram")
        self.config = data

    def get(self, *keys: str) -> Any:
        return _dig(self.config, *keys)

    # --- agents --------------------------------------------------------

    @property
    def agent_id(self) -> str:
        agents = self.get("agents", "list")
        if isinstance(agents, list) and agents:
            marked = [a for a in agents if isinstance(a, dict) and a.get("default")]
            first = (marked or [a for a in agents if isinstance(a, dict)] or [{}])[0]
            if isinstance(first.get("id"), str) and first["id"]:
                return str(first["id"])
        return "main"

    def _agent(self) -> dict[str, Any]:
        agents = self.get("agents", "list")
        if isinstance(agents, list):
            for a in agents:
                if isinstance(a, dict) and a.get("id") == self.agent_id:
                    return a
        return {}

    def agent_setting(self, key: str) -> Any:
        """The default agent's `key`, else `agents.defaults.<key>`."""
        value = self._agent().get(key)
        return value if value is not None else self.get("agents", "defaults", key)

    @property
    def other_agents(self) -> list[str]:
        agents = self.get("agents", "list")
        if not isinstance(agents, list):
            return []
        return [
            str(a["id"])
            for a in agents
            if isinstance(a, dict) and a.get("id") and a.get("id") != self.agent_id
        ]

    # --- places --------------------------------------------------------

    @property
    def workspace(self) -> Path:
        value = self.agent_setting("workspace")
        if isinstance(value, str) and value.strip():
            return Path(os.path.expanduser(os.path.expandvars(value.strip())))
        profile = os.environ.get("OPENCLAW_PROFILE")
        if profile and profile != "default":
            return self.root / f"workspace-{profile}"
        return self.root / "workspace"

    @property
    def workspace_source(self) -> str:
        """Where `workspace` comes from, in the words the owner would look for it."""
        name = self.config_path.name if self.config_path else "openclaw.json"
        value = self.agent_setting("workspace")
        if isinstance(value, str) and value.strip():
            if self._agent().get("workspace") is not None:
                return f"{name} agents.list[{self.agent_id}].workspace"
            return f"{name} agents.defaults.workspace"
        if os.environ.get("OPENCLAW_PROFILE") not in (None, "", "default"):
            return "OPENCLAW_PROFILE"
        return "the OpenClaw home's workspace"

    @property
    def sessions_dir(self) -> Path:
        return self.root / "agents" / self.agent_id / "sessions"

    @property
    def cron_store(self) -> Path:
        value = self.get("cron", "store")
        if isinstance(value, str) and value.strip():
            return Path(os.path.expanduser(value.strip()))
        return self.root / "cron" / "jobs.json"

    @property
    def credentials_dir(self) -> Path:
        env = os.environ.get("OPENCLAW_OAUTH_DIR")
        return Path(env).expanduser() if env else self.root / "credentials"

    @property
    def auth_profiles(self) -> Path:
        return self.root / "agents" / self.agent_id / "agent" / "auth-profiles.json"

    @property
    def managed_skills(self) -> Path:
        return self.root / "skills"

    def sqlite_era(self) -> list[Path]:
        """Databases of newer OpenClaw versions, whose JSON files may be stale."""
        found = [self.root / "state" / "openclaw.sqlite"]
        found += sorted((self.root / "agents").glob("*/agent/openclaw-agent.sqlite"))
        return [p for p in found if p.is_file()]

    def read(self, path: Path, what: str) -> Any:
        """A JSON5 file, or None with the reason added to `problems` (absent: None, quiet)."""
        if not path.exists():
            return None
        try:
            return read_json5(path)
        except InvalidInput as exc:
            self.problems.append(f"{exc}; {what} not imported")
            return None

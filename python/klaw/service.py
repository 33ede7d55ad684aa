"""`klaw service`: systemd units for the engine and the gateway (docs/operations.md).

Both are `Type=notify` (the daemons send READY=1 once they serve, and ping the
watchdog from their event loop: a hung loop is restarted, not only a dead process),
restart on failure with a start limit (systemd 252, Raspberry Pi OS bookworm's, has no
RestartSteps back-off: 5 s between tries, at most 5 tries in 5 minutes), stop within
the engine's shutdown budget (replies in flight get 60 s; TimeoutStopSec 90), and run
hardened as far as Klaw still works: no new privileges, a private /tmp, the system
read-only, the home read-only except Klaw's own directories and the workspace, and
the Docker socket reachable for the sandbox. The gateway starts after the engine.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from klaw.paths import KlawPaths

__all__ = ["UNITS", "Unit", "render_units", "systemd_running", "unit_dir"]

UNITS = ("klaw-engine.service", "klaw-gateway.service")
DOCKER_SOCKET = "/run/docker.sock"


@dataclass(frozen=True, slots=True)
class Unit:
    name: str
    text: str


def systemd_running() -> bool:
    """systemd is PID 1 here (what `sd_booted` checks)."""
    return Path("/run/systemd/system").is_dir()


def unit_dir(user: bool, env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    if not user:
        return Path("/etc/systemd/system")
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "systemd" / "user"


def klaw_command() -> list[str]:
    """How the units start Klaw: the `klaw` script of this installation."""
    exe = Path(sys.executable).with_name("klaw")
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("klaw")
    return [found] if found else [sys.executable, "-m", "klaw.cli.app"]


def _quote(path: Path) -> str:
    # systemd's own quoting: spaces are allowed inside double quotes.
    return f'"{path}"' if " " in str(path) else str(path)


def render_units(
    paths: KlawPaths,
    workspace: Path,
    *,
    user: bool,
    engine_memory: str = "700M",
    gateway_memory: str = "200M",
    command: list[str] | None = None,
) -> list[Unit]:
    cmd = " ".join(shlex.quote(c) for c in (command or klaw_command()))
    # "-": a directory not made yet (the workspace before `klaw init`) is no start failure.
    writable = " ".join(
        "-" + _quote(p)
        for p in (paths.config_dir, paths.data_dir, paths.state_dir, paths.cache_dir, workspace)
    )
    target = "default.target" if user else "multi-user.target"
    env_dir = paths.config_dir
    hardening = [
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "ProtectSystem=strict",
        # Read-only home except what Klaw writes; the sandbox's Docker socket stays usable.
        "ProtectHome=read-only",
        f"ReadWritePaths={writable}",
        f"ReadWritePaths=-{DOCKER_SOCKET}",
        "ProtectKernelTunables=yes",
        "ProtectControlGroups=no",  # bubblewrap's per-run cgroups
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
    ]
    common = [
        "Type=notify",
        "NotifyAccess=main",
        "Restart=on-failure",
        "RestartSec=5",
        "WatchdogSec=60",
    ]

    def unit(desc: str, after: list[str], args: str, env_file: str, stop: int, memory: str) -> str:
        lines = [
            "[Unit]",
            f"Description={desc}",
            *(f"After={a}" for a in after),
            *(f"Wants={a}" for a in after),
            "StartLimitIntervalSec=300",
            "StartLimitBurst=5",
            "",
            "[Service]",
            f"ExecStart={cmd} {args}",
            f"EnvironmentFile=-{_quote(env_dir / env_file)}",
            *common,
            f"TimeoutStopSec={stop}",
            "KillMode=mixed",
            f"MemoryMax={memory}",
            *hardening,
            "",
            "[Install]",
            f"WantedBy={target}",
            "",
        ]
        return "\n".join(lines)

    network = [] if user else ["network-online.target"]
    return [
        Unit(
            "klaw-engine.service",
            unit(
                "Klaw engine (models, memory, tools, scheduler)",
                network,
                "engine",
                "engine.env",
                90,
                engine_memory,
            ),
        ),
        Unit(
            "klaw-gateway.service",
            unit(
                "Klaw gateway (Telegram, console)",
                [*network, "klaw-engine.service"],
                "gateway",
                "gateway.env",
                45,
                gateway_memory,
            ),
        ),
    ]

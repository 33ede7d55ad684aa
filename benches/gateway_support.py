"""Pieces of the gateway benchmarks: `gateway_fakes.py` (fake Bot API + fake engine)
as a process driven from the benchmark and gateway.yaml for a home (a process's RSS:
proc_status.py)."""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from proc_status import stop

HERE = Path(__file__).parent
TOKEN = "123456:TEST-fake-token_for-klaw"  # the fake Bot API's token
DISCORD_TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAx.GkLaWw.fake-klaw-token_for-the-tests-only"
OWNER = 100  # the one chat, in allowedChatIds
T = 30.0  # upper bound of any single wait


class FakesProcess:
    """`gateway_fakes.py` in a process of its own; `call` sends it a control line.

    The control connection belongs to the event loop of the first `call`.
    """

    def __init__(self, workdir: Path, engine_socket: Path) -> None:
        self.control_path = workdir / "control.sock"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "gateway_fakes.py"),
                str(engine_socket),
                str(self.control_path),
            ],
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        assert line.startswith("url "), f"the fakes did not start: {line!r}"
        words = line.split()
        self.url = words[1]
        self.discord_url = words[3]  # the fake Discord (REST; its gateway is named there)
        self.discord_dm = int(words[5])  # the owner's DM channel on it
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def call(self, op: str, **kw: Any) -> dict[str, Any]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_unix_connection(str(self.control_path))
        assert self._reader is not None
        self._writer.write(json.dumps({"op": op, **kw}).encode() + b"\n")
        await self._writer.drain()
        res: dict[str, Any] = json.loads(await asyncio.wait_for(self._reader.readline(), 2 * T))
        if "error" in res:
            raise AssertionError(f"fakes: {res['error']}")
        return res

    async def aclose(self) -> None:
        if self._writer is not None:
            self._writer.close()
            await self._writer.wait_closed()
            self._writer = None

    def close(self) -> None:
        stop(self.proc)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def gateway_data(
    api_server: str, *, console: bool = False, discord: tuple[str, int] | None = None
) -> dict[str, Any]:
    """gateway.yaml's content: Telegram at `api_server`, the owner's chat allowed; with
    `discord` (the fake's URL, the owner's DM channel) Discord too."""
    data: dict[str, Any] = {
        "channels": {
            "telegram": {
                "enabled": True,
                "token": TOKEN,
                "apiServer": api_server,
                "allowedChatIds": [str(OWNER)],
            },
            "console": {"enabled": console},
        }
    }
    if discord is not None:
        data["channels"]["discord"] = {
            "enabled": True,
            "token": DISCORD_TOKEN,
            "apiServer": discord[0],
            "allowedChatIds": [str(discord[1])],
        }
    return data


def write_gateway_yaml(
    config_dir: Path,
    api_server: str,
    *,
    console: bool = True,
    discord: tuple[str, int] | None = None,
) -> Path:
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / "gateway.yaml"
    data = gateway_data(api_server, console=console, discord=discord)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def pct(values: list[float], q: int) -> float:
    """The q-th percentile (1 ≤ q ≤ 99)."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]

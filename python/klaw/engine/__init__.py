"""The engine process: its Unix socket, protocol and life cycle (design §2.1–2.4).

Entry points for the CLI (`klaw engine`, `klaw status`, `klaw sessions`,
`klaw memory search` when delegated to a running engine):

    klaw.engine.daemon.main(paths: KlawPaths | None = None, *, with_memory: bool = True) -> int
        Blocking; configures logging to stderr, opens Memory once the lock is held,
        serves until SIGTERM/SIGINT. Exit code 1 when another engine runs or the
        socket or memory cannot be set up.

    async klaw.engine.daemon.run(
        paths: KlawPaths,
        memory_factory: Callable[[], Memory] | None = None,
        handler: InboundHandler | None = None,
        stop: asyncio.Event | None = None,
        shutdown_timeout: float = 60.0,
        *,
        ready: asyncio.Event | None = None,
    ) -> int
        Signal handlers are installed only when `stop` is None.

    async klaw.engine.client.request(paths, msg: Request, timeout=30.0) -> Message
    async klaw.engine.client.status(paths, timeout=30.0) -> StatusResult
    async klaw.engine.client.sessions(paths, timeout=30.0) -> SessionsResult
    async klaw.engine.client.memory_search(paths, query, top_k=None, timeout=30.0)
        -> MemorySearchResult
    klaw.engine.client.call(paths, msg: Request, timeout=30.0) -> Message   (blocking)

Exceptions (all under klaw.errors.KlawError):

    KlawError
    ├── ProtocolError               a line that is not a valid message (`code`, `ref`)
    │   ├── InvalidJson             not UTF-8 JSON
    │   ├── UnknownType             `type` missing from the protocol
    │   ├── InvalidMessage          fields missing or of the wrong kind
    │   └── LineTooLong             over MAX_LINE_BYTES (1 MiB)
    ├── EngineSocketError           the socket path is taken or cannot be bound
    ├── GatewayNotConnected         `reply` with no gateway: not delivered
    ├── EngineNotRunning (ConnectionError)  "start it with `klaw engine`"
    ├── EngineTimeout (TimeoutError)
    └── EngineRequestError          the engine answered with an `error` (`code`)

The message pipeline plugs in as an `InboundHandler`
(`async def handle(msg: Inbound | Command, reply: Reply) -> None`); until it
exists, `NotImplementedHandler` answers every message with a `not_implemented`
error so the gateway knows nothing was processed or stored.
"""

from __future__ import annotations

from klaw.engine.server import (
    EngineServer,
    EngineSocketError,
    GatewayNotConnected,
    InboundHandler,
    NotImplementedHandler,
    Reply,
)

__all__ = [
    "EngineServer",
    "EngineSocketError",
    "GatewayNotConnected",
    "InboundHandler",
    "NotImplementedHandler",
    "Reply",
]

"""HTTP/1.1 for the model providers: keep-alive connections on asyncio streams, under
httpx's client (its requests, responses, content decoding and errors stay as they are).

httpx's own transport (httpcore on anyio, h11) cost ~1.5 ms of CPU per model call, about
as much as the rest of a message's path in the engine (docs/decisions.md, the engine's
per-message overhead); this one ~0.1 ms. It speaks what the providers' endpoints need:
requests with a body known in advance, answers with a length, chunked (streams) or ended
by the close, 1xx interim answers skipped, TLS with httpx's certificates
(`SSL_CERT_FILE`/`SSL_CERT_DIR` as httpx reads them) and HTTP/1.1 offered by ALPN.

Connections are kept for `KEEPALIVE_S` after an answer was read to its end (httpx's
default too): a connection the server closed meanwhile is seen closed and dropped, and a
request that finds its kept connection closed under it (nothing answered) is sent once
more on a new one. With a proxy in the environment `klaw.llm._http.make_client` leaves
httpx's transport in place, which speaks to proxies.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Coroutine
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, Final, TypeVar

import httpx

__all__ = ["KEEPALIVE_S", "Answer", "Http11Transport", "request_head"]

#: Idle connections older than this are closed rather than used (httpx's keepalive_expiry).
KEEPALIVE_S: Final = 5.0
_IDLE_PER_ORIGIN: Final = 8
_READ: Final = 64 * 1024  # the most read at a time (a chunk of any size is read in pieces)
_LIMIT: Final = 64 * 1024  # the longest response head or chunk-size line
_NO_BODY: Final = frozenset({204, 304})
#: The largest whole answer `post` reads (a model's answer is kilobytes; the engine's
#: unit allows 700 MB): a longer one is an error before it is held.
MAX_ANSWER: Final = 64 * 1024 * 1024

_Origin = tuple[str, str, int]
_T = TypeVar("_T")


class _Stale(Exception):
    """A kept connection was found closed before any byte of the answer."""


class _Conn:
    __slots__ = ("idle_since", "loop", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.loop = asyncio.get_running_loop()
        self.idle_since = 0.0

    def usable(self, now: float) -> bool:
        return (
            now - self.idle_since < KEEPALIVE_S
            and not self.writer.is_closing()
            and not self.reader.at_eof()
            and self.loop is asyncio.get_running_loop()
        )

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.writer.close()


def _timeout(seconds: float | None) -> AbstractAsyncContextManager[object]:
    return nullcontext() if seconds is None else asyncio.timeout(seconds)


class Answer:
    """A whole answer of `Http11Transport.post`: what a provider client reads of it."""

    __slots__ = ("_headers", "body", "raw_headers", "reason", "status_code")

    def __init__(
        self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        self.status_code = status
        self.reason = reason
        self.raw_headers = headers
        self.body = body
        self._headers: httpx.Headers | None = None

    @property
    def reason_phrase(self) -> str:
        return self.reason.decode("latin-1")

    @property
    def headers(self) -> httpx.Headers:
        if self._headers is None:  # only an error's Retry-After is ever read
            self._headers = httpx.Headers(self.raw_headers)
        return self._headers


class Http11Transport(httpx.AsyncBaseTransport):
    """See the module docstring. One per httpx client; connections by origin."""

    def __init__(self) -> None:
        self._idle: dict[_Origin, list[_Conn]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(
                f"unsupported URL scheme {url.scheme!r}", request=request
            )
        origin = _origin(url)
        timeouts = request.extensions.get("timeout", {})
        data = request_head(request) + b"\r\n" + await _body(request)
        while True:
            conn = self._take(origin)
            kept = conn is not None
            if conn is None:
                conn = await self._connect(origin, timeouts.get("connect"), request)
            try:
                await _write(conn, data, timeouts.get("write"), request, kept)
                status, reason, headers, version = await _answer_head(
                    conn, timeouts.get("read"), request, kept
                )
            except _Stale:
                conn.close()
                continue  # once per kept connection, then a new one (which is never stale)
            except BaseException:
                conn.close()
                raise
            close = "close" in request.headers.get("connection", "").lower()
            length, keep = _framing(request.method, close, status, headers, version)
            stream = _Body(self, origin, conn, length, keep, timeouts.get("read"), request)
            return httpx.Response(
                status,
                headers=headers,
                stream=stream,
                extensions={"http_version": version, "reason_phrase": reason},
            )

    async def post(self, url: httpx.URL, head: bytes, body: bytes) -> Answer:
        """POST `body` to `url` and read the whole answer, without httpx's request and
        response objects (a provider's plain call: half its remaining CPU). `head` is
        `request_head` of a bodiless POST without Content-Length. No timeout of its
        own: the caller bounds the whole call. Errors are httpx's, as through httpx."""
        origin = _origin(url)
        data = b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body)
        while True:
            conn = self._take(origin)
            kept = conn is not None
            if conn is None:
                conn = await self._connect(origin, None, None)
            try:
                await _write(conn, data, None, None, kept)
                status, reason, headers, version = await _answer_head(conn, None, None, kept)
                length, keep = _framing("POST", False, status, headers, version)
                raw = await _whole(conn.reader, length)
            except _Stale:
                conn.close()
                continue  # once per kept connection, as in handle_async_request
            except BaseException:
                conn.close()
                raise
            if keep and conn.loop is asyncio.get_running_loop():
                self._put(origin, conn)
            else:
                conn.close()
            return Answer(status, reason, headers, _decoded(headers, raw))

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    def _take(self, origin: _Origin) -> _Conn | None:
        conns = self._idle.get(origin)
        now = time.monotonic()
        while conns:
            conn = conns.pop()
            if conn.usable(now):
                return conn
            conn.close()
        return None

    def _put(self, origin: _Origin, conn: _Conn) -> None:
        conns = self._idle.setdefault(origin, [])
        if self._closed or len(conns) >= _IDLE_PER_ORIGIN:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        conns.append(conn)

    async def _connect(
        self, origin: _Origin, seconds: float | None, request: httpx.Request | None
    ) -> _Conn:
        scheme, host, port = origin
        context = self._context() if scheme == "https" else None
        try:
            async with _timeout(seconds):
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                    limit=_LIMIT,
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(
                f"connecting to {host}:{port} took over {seconds:g} s", request=request
            ) from exc
        except OSError as exc:  # ssl.SSLError included
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        return _Conn(reader, writer)

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context()
            self._ssl.set_alpn_protocols(["http/1.1"])
        return self._ssl


def _origin(url: httpx.URL) -> _Origin:
    return (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))


def request_head(request: httpx.Request, *, skip: frozenset[bytes] = frozenset()) -> bytes:
    """The request line and headers (those named in `skip`, lower case, left out), each
    line ended by CRLF; the blank line that ends the head is the caller's."""
    lines = [request.method.encode("ascii") + b" " + request.url.raw_path + b" HTTP/1.1"]
    for name, value in request.headers.raw:
        if any(c in name or c in value for c in (b"\r", b"\n", b"\0")):
            raise httpx.LocalProtocolError(
                f"header {name.decode('latin-1')!r} holds a line break", request=request
            )
        if name.lower() not in skip:
            lines.append(name + b": " + value)
    lines.append(b"")
    return b"\r\n".join(lines)


async def _body(request: httpx.Request) -> bytes:
    """The request body as sent (framed when httpx chose chunked for it)."""
    try:
        data = request.content
    except httpx.RequestNotRead:
        data = await request.aread()
    if "chunked" not in request.headers.get("transfer-encoding", "").lower():
        return data
    return (b"%x\r\n%s\r\n" % (len(data), data) if data else b"") + b"0\r\n\r\n"


async def _write(
    conn: _Conn, data: bytes, seconds: float | None, request: httpx.Request | None, kept: bool
) -> None:
    try:
        conn.writer.write(data)
        async with _timeout(seconds):
            await conn.writer.drain()
    except TimeoutError as exc:
        raise httpx.WriteTimeout(f"sending took over {seconds:g} s", request=request) from exc
    except OSError as exc:
        if kept:
            raise _Stale from exc
        raise httpx.WriteError(str(exc) or type(exc).__name__, request=request) from exc


async def _answer_head(
    conn: _Conn, seconds: float | None, request: httpx.Request | None, kept: bool
) -> tuple[int, bytes, list[tuple[bytes, bytes]], bytes]:
    """(status, reason, headers, version) of the final answer (1xx ones are skipped)."""
    first = True
    while True:
        try:
            async with _timeout(seconds):
                raw = await conn.reader.readuntil(b"\r\n\r\n")
        except TimeoutError as exc:
            raise httpx.ReadTimeout(f"no answer within {seconds:g} s", request=request) from exc
        except asyncio.IncompleteReadError as exc:
            if kept and first and not exc.partial:
                raise _Stale from exc
            raise httpx.RemoteProtocolError(
                "the server closed the connection without a complete answer", request=request
            ) from exc
        except asyncio.LimitOverrunError as exc:
            raise httpx.RemoteProtocolError(
                f"the answer's head is over {_LIMIT // 1024} KiB", request=request
            ) from exc
        except OSError as exc:
            if kept and first:
                raise _Stale from exc
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc
        first = False
        lines = raw[:-4].split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        code, _, reason = rest.partition(b" ")
        if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise httpx.RemoteProtocolError(
                f"not an HTTP/1.x status line: {lines[0][:80]!r}", request=request
            )
        headers: list[tuple[bytes, bytes]] = []
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise httpx.RemoteProtocolError(
                    f"malformed header line: {line[:80]!r}", request=request
                )
            headers.append((name, value.strip(b" \t")))
        status = int(code)
        if 100 <= status < 200 and status != 101:
            continue  # an interim answer (100 Continue, 103 Early Hints)
        return status, reason, headers, version


def _framing(
    method: str, close: bool, status: int, headers: list[tuple[bytes, bytes]], version: bytes
) -> tuple[int | None, bool]:
    """(body length: -1 chunked, None until the close; whether the connection is kept);
    `close`: the request asked for the connection to be closed."""
    fields: dict[bytes, list[bytes]] = {}
    for name, value in headers:
        fields.setdefault(name.lower(), []).append(value)
    tokens = b",".join(fields.get(b"connection", [])).lower()
    keep = version == b"HTTP/1.1" and b"close" not in tokens and not close
    if method == "HEAD" or status in _NO_BODY or 100 <= status < 200:
        return 0, keep
    coding = b",".join(fields.get(b"transfer-encoding", [])).lower()
    if coding:
        if coding.rsplit(b",", 1)[-1].strip() == b"chunked":
            return -1, keep
        return None, False  # another coding last: the body ends with the connection
    lengths = {v.strip() for v in fields.get(b"content-length", [])}
    if not lengths:
        return None, False
    if len(lengths) != 1 or not next(iter(lengths)).isdigit():
        raise httpx.RemoteProtocolError(f"bad Content-Length: {sorted(lengths)!r}")
    return int(next(iter(lengths))), keep


async def _whole(reader: asyncio.StreamReader, length: int | None) -> bytes:
    """An answer's whole body, framed as `_framing` says, up to MAX_ANSWER bytes."""
    try:
        if length is not None and length >= 0:
            return await reader.readexactly(_within(length, length)) if length else b""
        parts: list[bytes] = []
        held = 0
        if length is None:  # ended by the close
            while data := await reader.read(_READ):
                held = _within(held + len(data), held + len(data))
                parts.append(data)
            return b"".join(parts)
        while True:
            line = await reader.readuntil(b"\r\n")
            size = int(line.split(b";", 1)[0].strip(), 16)  # ValueError: malformed
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailers
                return b"".join(parts)
            held = _within(held + size, held + size)
            parts.append(await reader.readexactly(size))
            if await reader.readexactly(2) != b"\r\n":
                raise ValueError("chunk not ended by CRLF")
    except asyncio.IncompleteReadError as exc:
        raise httpx.RemoteProtocolError(
            f"the answer ended {exc.expected - len(exc.partial)} bytes short"
            if exc.expected is not None
            else "the answer ended before its last chunk"
        ) from exc
    except (asyncio.LimitOverrunError, ValueError) as exc:
        raise httpx.RemoteProtocolError(f"malformed answer body ({type(exc).__name__})") from exc
    except OSError as exc:
        raise httpx.ReadError(str(exc) or type(exc).__name__) from exc


def _decoded(headers: list[tuple[bytes, bytes]], raw: bytes) -> bytes:
    """The body without its content coding. `post`'s head asks for none (identity), but
    a server may apply one anyway (any is allowed when none is refused): gzip and
    deflate are undone, within MAX_ANSWER; another is an error, not bytes to parse."""
    codings = [
        c.strip().lower()
        for name, value in headers
        if name.lower() == b"content-encoding"
        for c in value.split(b",")
        if c.strip() and c.strip().lower() != b"identity"
    ]
    for coding in reversed(codings):
        if coding in (b"gzip", b"x-gzip"):
            unzip = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == b"deflate":
            unzip = zlib.decompressobj()
        else:
            raise httpx.RemoteProtocolError(f"an answer in the {coding.decode('latin-1')!r} coding")
        try:
            raw = unzip.decompress(raw, MAX_ANSWER + 1)
        except zlib.error as exc:
            raise httpx.RemoteProtocolError(f"a broken {coding.decode('latin-1')} answer") from exc
        _within(len(raw), raw)
    return raw


def _within(size: int, value: _T) -> _T:
    """`value`, when an answer of `size` bytes is within MAX_ANSWER."""
    if size > MAX_ANSWER:
        raise httpx.RemoteProtocolError(f"an answer over {MAX_ANSWER // 2**20} MiB; not read")
    return value


class _Body(httpx.AsyncByteStream):
    """The answer's body, read as it comes; its connection is kept once it was read to
    its end, closed otherwise."""

    def __init__(
        self,
        transport: Http11Transport,
        origin: _Origin,
        conn: _Conn,
        length: int | None,
        keep: bool,
        seconds: float | None,
        request: httpx.Request,
    ) -> None:
        self._transport = transport
        self._origin = origin
        self._conn: _Conn | None = conn
        self._length = length
        self._keep = keep
        self._seconds = seconds
        self._request = request
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            raise httpx.StreamClosed()
        try:
            if self._length == -1:
                async for piece in self._chunked(conn.reader):
                    yield piece
            elif self._length is None:
                while data := await self._read(conn.reader.read(_READ)):
                    yield data
            else:
                left = self._length
                while left:
                    data = await self._read(conn.reader.read(min(left, _READ)))
                    if not data:
                        raise httpx.RemoteProtocolError(
                            f"the answer ended {left} bytes short of its length",
                            request=self._request,
                        )
                    left -= len(data)
                    yield data
            self._done = True
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            raise httpx.RemoteProtocolError(
                f"malformed answer body ({type(exc).__name__})", request=self._request
            ) from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=self._request) from exc

    async def _chunked(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        while True:
            line = await self._read(reader.readuntil(b"\r\n"))
            size = int(line.split(b";", 1)[0].strip(), 16)  # ValueError: malformed
            if size == 0:
                while await self._read(reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                return
            while size:
                data = await self._read(reader.read(min(size, _READ)))
                if not data:
                    raise asyncio.IncompleteReadError(b"", size)
                size -= len(data)
                yield data
            if await self._read(reader.readexactly(2)) != b"\r\n":
                raise ValueError("chunk not ended by CRLF")

    async def _read(self, read: Coroutine[Any, Any, bytes]) -> bytes:
        try:
            async with _timeout(self._seconds):
                data: bytes = await read
                return data
        except TimeoutError as exc:
            raise httpx.ReadTimeout(
                f"the answer stopped for {self._seconds:g} s", request=self._request
            ) from exc

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and self._keep and conn.loop is asyncio.get_running_loop():
            self._transport._put(self._origin, conn)
        else:
            conn.close()

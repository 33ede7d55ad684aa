"""`Http11Transport` (klaw.llm.transport) against scripted HTTP servers on 127.0.0.1:
each server reads a request and writes the bytes a test gives it, so framing, kept
connections and broken answers are exactly what the test says."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from klaw.llm._http import HttpClient, _json_request, make_client
from klaw.llm.errors import ProviderConnectionError
from klaw.llm.transport import MAX_ANSWER, Http11Transport


def answer(body: bytes, *head: bytes) -> bytes:
    lines = [b"HTTP/1.1 200 OK", b"Content-Length: %d" % len(body), *head]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


# A server's script: for the n-th request on the k-th connection, the bytes to answer
# (None: close the connection without answering).
Script = Callable[[int, int, bytes], bytes | None]


class Scripted:
    def __init__(self, script: Script, context: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.context = context
        self.connections = 0
        self.requests: list[bytes] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Scripted:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        scheme = "https" if self.context else "http"
        host = "localhost" if self.context else "127.0.0.1"
        return f"{scheme}://{host}:{port}/v1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        k = self.connections
        self.connections += 1
        try:
            n = 0
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                out = self.script(k, n, request)
                n += 1
                if out is None:
                    return
                writer.write(out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            return  # the client left, or the test ended with a connection still kept
        finally:
            writer.close()


@pytest.fixture
async def client() -> AsyncIterator[Callable[[str], httpx.AsyncClient]]:
    made: list[httpx.AsyncClient] = []

    def make(url: str) -> httpx.AsyncClient:
        c = make_client(url, {"Authorization": "Bearer k"}, 5.0)
        made.append(c)
        return c

    yield make
    for c in made:
        await c.aclose()


async def test_answers_are_read_and_the_connection_is_kept(
    client: Callable[[str], httpx.AsyncClient],
) -> None:
    async with Scripted(lambda k, n, r: answer(b'{"n": %d}' % n)) as server:
        http = client(server.url)
        for i in range(3):
            r = await http.post("chat/completions", json={"i": i})
            assert r.status_code == 200 and r.json() == {"n": i}
        assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer k\r\n" in first
    assert first.endswith(b'{"i":0}')


async def test_a_kept_connection_closed_before_answering_is_replaced_once(
    client: Callable[[str], httpx.AsyncClient],
) -> None:
    # The server keeps the first connection after its answer, then drops it when the
    # second request comes (as a server whose idle timer fired at that moment does).
    def script(k: int, n: int, _: bytes) -> bytes | None:
        return None if (k, n) == (0, 1) else answer(b"{}")

    async with Scripted(script) as server:
        http = client(server.url)
        assert (await http.post("x", json={})).status_code == 200
        assert (await http.post("x", json={})).status_code == 200
        assert server.connections == 2


async def test_a_new_connection_closed_before_answering_is_an_error(
    client: Callable[[str], httpx.AsyncClient],
) -> None:
    async with Scripted(lambda k, n, r: None) as server:
        with pytest.raises(httpx.RemoteProtocolError):
            await client(server.url).post("x", json={})
        assert server.connections == 1  # not tried again: the request may have been seen


async def test_chunked_answers_with_extensions_and_trailers(
    client: Callable[[str], httpx.AsyncClient],
) -> None:
    body = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    async with Scripted(lambda k, n, r: body) as server:
        http = client(server.url)
        assert (await http.post("x", json={})).content == b"hello world"
        assert (await http.post("x", json={})).content == b"hello world"
        assert server.connections == 1


async def test_interim_answers_are_skipped_and_close_ends_reuse(
    client: Callable[[str], httpx.AsyncClient],
) -> None:
    def script(k: int, n: int, _: bytes) -> bytes:
        return b"HTTP/1.1 100 Continue\r\n\r\n" + answer(b"{}", b"Connection: close")

    async with Scripted(script) as server:
        http = client(server.url)
        for _ in range(2):
            assert (await http.post("x", json={})).status_code == 200
        assert server.connections == 2


async def test_a_body_ended_by_the_close_is_read_whole(
    client: Callable[[str], httpx.AsyncClient],
) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 200_000)
        await writer.drain()
        writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        port = srv.sockets[0].getsockname()[1]
        r = await client(f"http://127.0.0.1:{port}").get("x")
        assert r.content == b"x" * 200_000
    finally:
        srv.close()
        await srv.wait_closed()


async def test_a_huge_chunk_is_read_in_pieces_and_a_short_one_is_an_error(
    client: Callable[[str], httpx.AsyncClient],
) -> None:
    # 256 MiB announced, 2 MiB sent, then the close: never held whole, never taken
    # for a complete answer.
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000\r\n")
        for _ in range(32):
            writer.write(b"y" * 65536)
            await writer.drain()
        writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    pieces: list[int] = []
    try:
        port = srv.sockets[0].getsockname()[1]
        async with client(f"http://127.0.0.1:{port}").stream("GET", "x") as r:
            with pytest.raises(httpx.RemoteProtocolError):
                async for piece in r.aiter_raw():
                    pieces.append(len(piece))
    finally:
        srv.close()
        await srv.wait_closed()
    assert sum(pieces) == 32 * 65536 and max(pieces) <= 65536


async def test_a_header_with_a_line_break_is_refused_before_sending(
    client: Callable[[str], httpx.AsyncClient],
) -> None:
    async with Scripted(lambda k, n, r: answer(b"{}")) as server:
        http = client(server.url)
        with pytest.raises(httpx.LocalProtocolError):
            await http.post("x", json={}, headers={"X-A": "a\r\nX-Injected: 1"})
        assert server.requests == []


async def test_an_unanswered_request_times_out(
    client: Callable[[str], httpx.AsyncClient],
) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()  # reads, never answers
        finally:
            writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        port = srv.sockets[0].getsockname()[1]
        http = make_client(f"http://127.0.0.1:{port}", {}, 0.3)
        with pytest.raises(httpx.ReadTimeout):
            await http.post("x", json={})
        await http.aclose()
    finally:
        srv.close()
        await srv.wait_closed()


async def test_a_proxy_in_the_environment_gets_the_requests(
    monkeypatch: pytest.MonkeyPatch, client: Callable[[str], httpx.AsyncClient]
) -> None:
    """httpx's own transport speaks to proxies: with one named, it stays in place."""
    async with Scripted(lambda k, n, r: answer(b"{}")) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url.removesuffix("/v1"))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        r = await client("http://provider.invalid/v1").post("chat/completions", json={})
        assert r.status_code == 200
    assert proxy.requests[0].startswith(b"POST http://provider.invalid/v1/chat/completions ")


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"),
            *("-addext", "subjectAltName=DNS:localhost"),
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


async def test_https_verifies_the_server_with_httpx_certificates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        key, cert = _self_signed(tmp_path)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no openssl to make a certificate")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    async with Scripted(lambda k, n, r: answer(b"{}"), context) as server:
        # Not trusted: refused.
        untrusted = make_client(server.url, {}, 5.0)
        with pytest.raises(httpx.ConnectError):
            await untrusted.post("x", json={})
        await untrusted.aclose()
        # Trusted as httpx trusts a file named by SSL_CERT_FILE: answered.
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        trusted = make_client(server.url, {}, 5.0)
        try:
            assert (await trusted.post("x", json={})).status_code == 200
            assert (await trusted.post("x", json={})).status_code == 200
        finally:
            await trusted.aclose()
        assert server.connections == 1  # the refused handshake never reached it; one kept


async def test_a_closed_transport_keeps_nothing() -> None:
    transport = Http11Transport()
    async with Scripted(lambda k, n, r: answer(b"{}")) as server:
        async with httpx.AsyncClient(transport=transport) as http:
            await http.post(server.url + "/x", json={})
        # The client closed its transport: a later answer's connection is not kept.
        async with httpx.AsyncClient(transport=transport) as http:
            await http.post(server.url + "/x", json={})
            await http.post(server.url + "/x", json={})
        assert server.connections == 3


async def test_a_provider_post_sends_what_the_httpx_client_would() -> None:
    """`HttpClient._post` hands its request straight to the transport: same request line,
    headers and body as through the client."""
    async with Scripted(lambda k, n, r: answer(b"{}")) as server:
        client = HttpClient("p", server.url, "key", timeout_s=5.0)
        try:
            response, raw = await client._post("chat/completions", b'{"a":1}')
            assert response.status_code == 200 and raw == b"{}"
            await client._http.post("chat/completions", **_json_request(b'{"a":1}'))
        finally:
            await client.aclose()
        assert server.connections == 1
    direct, through = (r.split(b"\r\n") for r in server.requests)
    assert direct[0] == through[0] == b"POST /v1/chat/completions HTTP/1.1"

    def others(lines: list[bytes]) -> list[bytes]:
        return sorted(x for x in lines[1:] if not x.lower().startswith(b"accept-encoding:"))

    # The same but for the coding asked: identity, the whole answer read as it comes.
    assert others(direct) == others(through)
    assert b"Accept-Encoding: identity" in direct
    assert b"Authorization: Bearer key" in direct and direct[-1] == b'{"a":1}'


# ---------------------------------------------------------------- a provider's whole answer
# `HttpClient._post` reads a whole answer through `Http11Transport.post` (no httpx
# request or response objects): the same framing, kept connections and errors.


class Closing(Scripted):
    """Answers each connection's first request with `data`, then closes it."""

    def __init__(self, data: bytes) -> None:
        super().__init__(lambda k, n, r: data)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(self.script(0, 0, b"") or b"")
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


async def _posted(url: str, times: int = 1) -> list[tuple[int, bytes]]:
    client = HttpClient("p", url, "key", timeout_s=5.0)
    out: list[tuple[int, bytes]] = []
    try:
        for _ in range(times):
            async with client._guard("m"):
                response, raw = await client._post("chat/completions", b"{}")
            out.append((response.status_code, raw))
    finally:
        await client.aclose()
    return out


async def test_a_post_keeps_its_connection_and_replaces_a_stale_one_once() -> None:
    def script(k: int, n: int, _: bytes) -> bytes | None:
        return None if (k, n) == (0, 2) else answer(b'{"n": %d}' % n)

    async with Scripted(script) as server:
        got = await _posted(server.url, 3)
        assert got == [(200, b'{"n": 0}'), (200, b'{"n": 1}'), (200, b'{"n": 0}')]
        assert server.connections == 2
    async with Scripted(lambda k, n, r: None) as server:
        with pytest.raises(ProviderConnectionError):
            await _posted(server.url)
        assert server.connections == 1  # a new connection's silence is not retried


async def test_a_post_reads_chunks_interim_answers_and_a_body_ended_by_the_close() -> None:
    chunked = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    async with Scripted(lambda k, n, r: chunked) as server:
        assert await _posted(server.url, 2) == [(200, b"hello world")] * 2
        assert server.connections == 1
    closing = b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 200_000
    async with Closing(closing) as server:
        assert await _posted(server.url, 2) == [(200, b"x" * 200_000)] * 2
        assert server.connections == 2  # ended by the close: never kept


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (MAX_ANSWER + 1),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % (MAX_ANSWER + 1),
    ],
    ids=["short", "short-chunk", "bad-chunk-size", "over-cap", "chunk-over-cap"],
)
async def test_a_broken_or_oversized_answer_is_an_error_not_an_answer(head: bytes) -> None:
    async with Closing(head) as server:
        with pytest.raises(ProviderConnectionError):
            await _posted(server.url)


async def test_a_post_error_status_keeps_its_reason_and_retry_after() -> None:
    busy = answer(b'{"error": {"message": "slow down"}}', b"Retry-After: 7").replace(
        b"200 OK", b"429 Too Many Requests"
    )
    async with Scripted(lambda k, n, r: busy) as server:
        client = HttpClient("p", server.url, "key", timeout_s=5.0)
        try:
            response, raw = await client._post("chat/completions", b"{}")
            error = client._error(response, raw, "m")
        finally:
            await client.aclose()
    assert (error.status, error.retry_after) == (429, 7.0)
    assert "slow down" in str(error)


async def test_a_post_asks_for_no_coding_and_undoes_one_applied_anyway() -> None:
    """A provider's plain answer is read whole: the request asks for identity, and a
    gzip or deflate body a server sends anyway is undone (another coding, a broken
    one or one inflating past the cap is an error, never bytes taken for JSON)."""
    import gzip
    import zlib

    body = b'{"choices": []}'
    coded = {
        b"gzip": gzip.compress(body),
        b"deflate": zlib.compress(body),
        b"br": b"\x0b\x02\x80{}\x03",
        b"gzip ": b"not gzip at all",  # broken
    }

    def reply(coding: bytes, data: bytes) -> bytes:
        return answer(data, b"Content-Encoding: " + coding.strip())

    for coding in (b"gzip", b"deflate"):
        async with Scripted(lambda k, n, r, c=coding: reply(c, coded[c])) as server:
            assert await _posted(server.url) == [(200, body)]
        assert b"\r\nAccept-Encoding: identity\r\n" in server.requests[0]
        assert server.requests[0].lower().count(b"accept-encoding") == 1
    bomb = gzip.compress(b"\0" * (MAX_ANSWER + 1))
    for bad in (reply(b"br", coded[b"br"]), reply(b"gzip", coded[b"gzip "]), reply(b"gzip", bomb)):
        async with Scripted(lambda k, n, r, b=bad: b) as server:
            with pytest.raises(ProviderConnectionError):
                await _posted(server.url)

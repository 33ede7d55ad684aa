"""The HTTP client of the streamable HTTP transport, with the stdio transport's limit.

The SDK reads a JSON answer whole and an SSE line to its end: a server that sends
400 MB took 1.4 GB of memory here before failing. Each answer to a request (POST) is
read up to `MAX_MESSAGE_BYTES`; on the long-lived notification stream (GET), each line.
Past it the read fails (`ReadError`), the request with it; the server is not trusted
further for that answer. Timeouts are the SDK's (30 s; 300 s for a stream's read).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

from klaw.mcp.limits import MAX_MESSAGE_BYTES

__all__ = ["capped_client"]


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, per_line: bool, url: str) -> None:
        self._inner = inner
        self._per_line = per_line
        self._url = url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._inner:
            newline = chunk.rfind(b"\n") if self._per_line else -1
            size = len(chunk) - newline - 1 if newline >= 0 else size + len(chunk)
            if size > MAX_MESSAGE_BYTES:
                what = "a line" if self._per_line else "an answer"
                raise httpx2.ReadError(
                    f"{self._url} sent {what} over {MAX_MESSAGE_BYTES >> 20} MB: not read further"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedTransport(httpx2.AsyncBaseTransport):
    def __init__(self) -> None:
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        response.stream = _Capped(stream, request.method == "GET", str(request.url)[:200])
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def capped_client(headers: dict[str, str]) -> httpx2.AsyncClient:
    """What `mcp.shared._httpx_utils.create_mcp_http_client` makes, size-capped."""
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    return httpx2.AsyncClient(headers=headers, timeout=timeout, transport=_CappedTransport())

"""An httpx client for the event loop that is running, made on first use.

The web tools live as long as the engine's config while tests run one event loop per
test; a client (and its connections) belongs to the loop that made it, so a new loop
gets a new client. No idle connection is kept: a kept one would outlive its loop, and
for `web_fetch` it would carry one name's TLS session to another name on the same
address (klaw.web.fetch).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

__all__ = ["LoopClient"]


class LoopClient:
    def __init__(self, **options: Any) -> None:
        self._options = options
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._loop = loop
            self._client = httpx.AsyncClient(
                limits=httpx.Limits(max_keepalive_connections=0), **self._options
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

"""The baseline of the gateway benchmarks: the relay a Python user could write
instead of Klaw's gateway. One aiohttp session long-polls getUpdates and forwards
each text message as a JSON line over the engine's Unix socket; each line read back
is posted as a plain-text sendMessage. No log, no buffer, no fsync, no access
control, no Markdown conversion, no typing, no retries.

Usage (the idle RSS baseline): python gateway_relay.py API_SERVER TOKEN SOCKET
"""

from __future__ import annotations

import asyncio
import json
import sys

import aiohttp


class Relay:
    def __init__(self, api_server: str, token: str, socket: str, poll_timeout: int = 30) -> None:
        self.base = f"{api_server.rstrip('/')}/bot{token}/"
        self.socket = socket
        self.poll_timeout = poll_timeout
        self.sent = 0  # sendMessage calls answered so far
        self.changed = asyncio.Event()

    async def run(self) -> None:
        async with aiohttp.ClientSession() as http:
            reader, writer = await asyncio.open_unix_connection(self.socket)
            try:
                await asyncio.gather(self._poll(http, writer), self._reply(http, reader))
            finally:
                writer.close()

    async def _poll(self, http: aiohttp.ClientSession, writer: asyncio.StreamWriter) -> None:
        offset: int | None = None
        while True:
            params = {"timeout": self.poll_timeout}
            if offset is not None:
                params["offset"] = offset
            async with http.post(self.base + "getUpdates", json=params) as r:
                updates = (await r.json())["result"]
            for update in updates:
                offset = update["update_id"] + 1
                msg = update.get("message") or {}
                if "text" not in msg:
                    continue
                chat = msg["chat"]["id"]
                line = {
                    "type": "inbound",
                    "id": f"telegram_{chat}_{msg['message_id']}",
                    "chatId": f"telegram_{chat}",
                    "content": msg["text"],
                }
                writer.write(json.dumps(line).encode() + b"\n")
                await writer.drain()

    async def _reply(self, http: aiohttp.ClientSession, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            out = json.loads(line)
            if out.get("type") != "outbound":
                continue
            chat = int(out["chatId"].removeprefix("telegram_"))
            params = {"chat_id": chat, "text": out["content"]}
            async with http.post(self.base + "sendMessage", json=params) as r:
                await r.read()
            self.sent += 1
            self.changed.set()


if __name__ == "__main__":
    asyncio.run(Relay(sys.argv[1], sys.argv[2], sys.argv[3]).run())

"""One file sent to a Bot API server, in a process of its own; prints the time the
upload took and how far it raised the process's peak RSS. Run as:

    python upload_probe.py klaw|memory API_SERVER TOKEN CHAT FILE

* klaw: the gateway's Telegram channel sending the file as an `OutFile` (streamed from
  its descriptor, as `send_file` does);
* memory: the same aiohttp multipart request with the file read into memory first, as a
  client that takes bytes does.

Prints ``seconds peak_rise_kb``: VmHWM after the upload minus VmRSS before it (after
the imports and a warm-up request, so neither counts what both load).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path


def _kb(field: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split(f"{field}:")[1].split()[0])


async def klaw(api: str, token: str, chat: str, file: str) -> float:
    from klaw.config import GatewayConfig
    from klaw.gateway.channels.base import OutFile
    from klaw.gateway.channels.telegram.channel import TelegramChannel

    cfg = GatewayConfig.model_validate(
        {"channels": {"telegram": {"token": token, "apiServer": api}}}
    )
    channel = TelegramChannel(cfg.channels.telegram, Path(file).parent / "inbox")
    await channel.send(f"telegram_{chat}", "warm-up")
    fd = os.open(file, os.O_RDONLY)
    f = OutFile(Path(file).name, "application/octet-stream", os.fstat(fd).st_size, fd, file)
    global BEFORE
    BEFORE = _kb("VmRSS")
    start = time.perf_counter()
    await channel.send(f"telegram_{chat}", "", files=[f])
    took = time.perf_counter() - start
    os.close(fd)
    await channel.close()
    return took


async def memory(api: str, token: str, chat: str, file: str) -> float:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        url = f"{api}/bot{token}/"
        async with session.post(url + "sendMessage", json={"chat_id": chat, "text": "warm-up"}):
            pass
        global BEFORE
        BEFORE = _kb("VmRSS")
        start = time.perf_counter()
        data = Path(file).read_bytes()
        form = aiohttp.FormData()
        form.add_field("chat_id", chat)
        form.add_field("document", data, filename=Path(file).name)
        async with session.post(url + "sendDocument", data=form) as resp:
            assert resp.status == 200, await resp.text()
        return time.perf_counter() - start


BEFORE = 0

if __name__ == "__main__":
    how, api, token, chat, file = sys.argv[1:6]
    took = asyncio.run({"klaw": klaw, "memory": memory}[how](api, token, chat, file))
    print(f"{took:.4f} {_kb('VmHWM') - BEFORE}")

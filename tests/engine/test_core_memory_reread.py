"""The pipeline keeps core_memory.json parsed between turns and reads it again when the
file changes, however it was changed."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path

from klaw.engine.pipeline import Pipeline
from klaw.llm.router import Router
from klaw.memory import Memory
from klaw.memory.core import CoreMemory
from klaw.paths import KlawPaths
from klaw.wire.protocol import Error, Inbound, Outbound
from scripted_llm import FakeLLM, engine_config

T = 10.0


async def test_each_turn_sees_core_memory_as_the_file_is_now(
    tmp_path: Path, klaw_home: KlawPaths, memory: Memory, llm: FakeLLM
) -> None:
    config = engine_config(tmp_path, llm.url, debounceMs=0)
    router = Router(config)
    pipeline = Pipeline(config, klaw_home, memory, router)
    sent: list[Outbound | Error] = []

    async def reply(out: Outbound | Error) -> None:
        sent.append(out)

    async def turn(n: int) -> str:
        llm.answer("ok")
        msg = Inbound(
            id=f"m{n}", channel="telegram", chat_id="telegram_1", ts=datetime.now(UTC), content="hi"
        )
        await asyncio.wait_for(pipeline.handle(msg, reply), T)
        return str(llm.requests[-1]["messages"][0]["content"])

    def write_in_place(old: str, new: str) -> None:
        # Same size, same inode, the mtime put back: only the ctime tells.
        path = klaw_home.core_memory
        st = path.stat()
        text = path.read_bytes().replace(old.encode(), new.encode())
        with path.open("r+b") as fh:
            fh.write(text)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert (path.stat().st_size, path.stat().st_ino) == (st.st_size, st.st_ino)

    try:
        CoreMemory(klaw_home.core_memory).update("user", "name", "Ann")  # as the tool writes it
        assert "Ann" in await turn(1)
        CoreMemory(klaw_home.core_memory).update("user", "name", "Bea")
        assert "Bea" in await turn(2)
        write_in_place("Bea", "Cid")
        assert "Cid" in await turn(3)
    finally:
        await pipeline.aclose()
        await router.aclose()

"""Past conversations through the real engine: a reply's round is indexed in the
background, the model's `conversation_search` finds it in a later turn (with its
citation), and another chat never does (scripted model server, real klaw.db)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sched_support import engine_running, engine_yaml, until

from klaw.paths import KlawPaths
from klaw.wire.protocol import Inbound, Outbound, new_id
from scripted_llm import FakeLLM, call, offered

CHAT = "telegram_100"
OTHER = "telegram_200"


async def say(server: Any, text: str, chat: str = CHAT) -> Outbound:
    got: list[Any] = []

    async def reply(msg: Any) -> None:
        got.append(msg)

    msg = Inbound(id=new_id(), ts=datetime.now(UTC), channel="telegram", chat_id=chat, content=text)
    await server.handler.handle(msg, reply)
    (out,) = [m for m in got if isinstance(m, Outbound)]
    return out


def tool_result(request: dict[str, Any]) -> str:
    (result,) = [m["content"] for m in request["messages"] if m["role"] == "tool"]
    return str(result)


async def test_the_model_finds_an_earlier_round_of_its_own_chat_only(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    engine_yaml(klaw_home.engine_config, llm.url)
    for chat in (CHAT, OTHER):
        (klaw_home.conversations / chat).mkdir(parents=True)
    llm.answer("Noted: the spare key is under the blue flowerpot.")
    search = json.dumps({"query": "где запасной ключ?"})  # asked in Russian
    llm.answer(None, [call("c1", "conversation_search", search)])
    llm.answer("Under the blue flowerpot.")
    llm.answer(None, [call("c2", "conversation_search", search)])
    llm.answer("I don't know.")
    async with engine_running(klaw_home, backend) as server:
        await say(server, "Remember: I left the spare key under the blue flowerpot")
        mem = server.memory

        def indexed() -> bool:
            return bool(mem.search_conversation(CHAT, "spare key"))

        await until(indexed)
        out = await say(server, "Where did I put the key?")
        assert out.content == "Under the blue flowerpot."
        assert "conversation_search" in offered(llm.requests[1])
        found = tool_result(llm.requests[2])
        assert "blue flowerpot" in found
        assert f"chat:{CHAT} " in found and " msg " in found  # cited: chat, date, message ids
        # The same question in another chat finds nothing: its own past is empty.
        await say(server, "Where is the key?", chat=OTHER)
        assert "No earlier messages found" in tool_result(llm.requests[4])

"""`code_execute` as the model's tool call in the real engine (scripted model server on
127.0.0.1), on both backends: what the model reads back, a storm of 20 calls in one
tool round run in order, other chats answered meanwhile, the tool offered only where
it can run and never to a group chat."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from sandbox_support import (
    URL,
    bwrap_or_skip,
    docker_engine,
    say,
    start_dockerd,
    stop_dockerd,
    with_sandbox,
)

from klaw.paths import KlawPaths
from scripted_llm import FakeLLM, call
from scripted_llm import offered as tool_names  # schemas sent and tools_load's lines

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
from sched_support import T, engine_running, until

__all__ = ["docker_engine"]

CHAT = "telegram_100"


@pytest.fixture(params=["bwrap", "docker"])
def sandbox_keys(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "docker":
        request.getfixturevalue("docker_engine")
        return {"backend": "docker", "dockerHost": URL}
    bwrap_or_skip()
    return {"backend": "bwrap"}


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_the_model_runs_code_reads_errors_and_gets_its_files(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, sandbox_keys: dict[str, Any]
) -> None:
    with_sandbox(klaw_home, llm.url, sandbox_keys, maxToolCallRounds=5)
    bad = {"language": "python", "code": "import csv\nprint(undefined_name)"}
    good = {
        "language": "python",
        "code": "open('/output/usage.csv','w').write('day,kwh\\n1,3.5\\n')\nprint('total', 3.5)",
    }
    llm.answer(None, [call("c1", "code_execute", json.dumps(bad))])
    llm.answer(None, [call("c2", "code_execute", json.dumps(good))])
    llm.answer(None, [call("c3", "code_execute", '{"language": "ruby", "code": "p 1"}')])
    llm.answer(None, [call("c4", "code_execute", '{"language": "python", "code": ')])
    llm.answer("You used 3.5 kWh; the CSV is in outputs.")
    async with engine_running(klaw_home, backend) as server:
        assert await say(server, "Sum my electricity use") == [
            "You used 3.5 kWh; the CSV is in outputs."
        ]
    assert "code_execute" in tool_names(llm.requests[0])
    failed, ran, bad_lang, torn = (tool_results(r)[-1] for r in llm.requests[1:5])
    assert failed.startswith("exit code: 1, wall time") and "NameError" in failed
    assert ran.startswith("exit code: 0") and "total 3.5" in ran
    assert "usage.csv (14 bytes)" in ran and "kept in outputs/telegram_100" in ran
    assert "Invalid arguments for code_execute" in bad_lang and "ruby" in bad_lang
    assert "were not a JSON object" in torn
    kept = klaw_home.workspace / "outputs" / CHAT / "usage.csv"
    assert kept.read_text() == "day,kwh\n1,3.5\n"


async def test_a_storm_of_20_calls_runs_in_order_while_other_chats_are_answered(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, sandbox_keys: dict[str, Any]
) -> None:
    with_sandbox(klaw_home, llm.url, sandbox_keys, maxToolCallRounds=3)
    gate = klaw_home.workspace / "skills" / "gate"
    gate.mkdir(parents=True)
    # The first call waits until the test opens the gate (a file it can see at /skills),
    # so the storm is certainly running while the other chat is answered.
    first = (
        "import os, time\n"
        "while not os.path.exists('/skills/gate/open'):\n"
        "    time.sleep(0.02)\n"
        "print('call 0')"
    )
    calls = [call("s0", "code_execute", json.dumps({"language": "python", "code": first}))]
    for i in range(1, 20):
        code = {"language": "bash", "code": f"echo call {i}"}
        calls.append(call(f"s{i}", "code_execute", json.dumps(code)))
    llm.answer(None, calls)
    llm.answer("Other chat: answered.")
    llm.answer("Storm: all 20 ran.")
    async with engine_running(klaw_home, backend) as server:
        storm = asyncio.create_task(say(server, "Run twenty scripts"))
        await until(lambda: server.sandbox.queued == 1)  # the first call is running
        other = await asyncio.wait_for(say(server, "Are you there?", chat="telegram_200"), T)
        assert other == ["Other chat: answered."]
        assert not storm.done()
        (gate / "open").write_text("")
        assert await asyncio.wait_for(storm, 120) == ["Storm: all 20 ran."]
        status = server.sandbox.status()
    results = tool_results(llm.requests[2])
    assert len(results) == 20
    assert [r.split("--- stdout ---\n")[1].strip() for r in results] == [
        f"call {i}" for i in range(20)
    ]
    assert status["queued"] == 0 and status["runs"] >= 20


async def test_no_code_execute_where_it_cannot_run_nor_in_groups(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any
) -> None:
    bwrap_or_skip()
    for keys in ({"backend": "off"}, {"backend": "docker", "dockerHost": "unix:///none.sock"}):
        with_sandbox(klaw_home, llm.url, keys)
        llm.answer("no sandbox")
        async with engine_running(klaw_home, backend) as server:
            assert server.sandbox is None
            assert await say(server, "hi") == ["no sandbox"]
        assert "code_execute" not in tool_names(llm.requests[0])
        llm.requests.clear()
    with_sandbox(klaw_home, llm.url, {"backend": "bwrap"})
    llm.answer("private")
    llm.answer("group")
    async with engine_running(klaw_home, backend) as server:
        assert await say(server, "hi") == ["private"]
        assert await say(server, "hi all", chat="telegram_-100500", group=True) == ["group"]
    assert "code_execute" in tool_names(llm.requests[0])
    assert "code_execute" not in tool_names(llm.requests[1])


async def test_a_docker_engine_that_stops_is_a_tool_error_and_its_return_is_used(
    klaw_home: KlawPaths, llm: FakeLLM, backend: Any, docker_engine: str
) -> None:
    with_sandbox(klaw_home, llm.url, {"backend": "docker", "dockerHost": URL})
    run = {"language": "bash", "code": "echo hi"}
    for i in range(3):
        llm.answer(None, [call(f"d{i}", "code_execute", json.dumps(run))])
        llm.answer(f"answer {i}")
    async with engine_running(klaw_home, backend) as server:
        assert await say(server, "run it") == ["answer 0"]
        before = server.sandbox.status()
        stop_dockerd(force=True)  # the Docker engine goes down under a running Klaw
        assert await say(server, "run it again") == ["answer 1"]
        start_dockerd()  # and comes back: the dead keep-alive container is replaced
        assert await say(server, "and again") == ["answer 2"]
        after = server.sandbox.status()
    first, down, back = (tool_results(llm.requests[i])[-1] for i in (1, 3, 5))
    assert first.startswith("exit code: 0") and "hi" in first
    assert down.startswith("The sandbox could not run the code:")
    assert "is not running (its socket is gone)" in down
    assert back.startswith("exit code: 0") and "hi" in back
    assert before["container_runs"] == 1 and after["container_runs"] == 1

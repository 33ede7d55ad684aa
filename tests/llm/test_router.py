"""Router: chain resolution, retries with backoff, Retry-After, timeouts, fallback."""

from __future__ import annotations

import email.utils
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from fake_llm import FakeLLM, Reply

from klaw.config import EngineConfig
from klaw.llm import (
    USER_MESSAGE,
    AllProvidersFailed,
    LlmConfigError,
    LlmRequest,
    LlmResponse,
    MalformedResponse,
    Message,
    ProviderTimeout,
    Router,
    TruncatedStream,
)
from klaw.llm._http import parse_retry_after

SECRET_A = "sk-primary-aaaaaaaaaaaa"
SECRET_B = "sk-backup-bbbbbbbbbbbb"
MakeServer = Callable[[], Awaitable[FakeLLM]]


def config(a: str, b: str, **llm: Any) -> EngineConfig:
    return EngineConfig.model_validate(
        {
            "providers": {
                "glm": {"endpoint": a + "/v1", "apiKey": SECRET_A},
                "deepseek": {"endpoint": b + "/v1", "apiKey": SECRET_B},
                "gem": {"type": "gemini", "endpoint": "http://127.0.0.1:9"},
            },
            "models": {
                "glm/glm-5": {"maxTokens": 8192, "temperature": 0.3},
                "glm/glm-4-plus": {},
                "deepseek/deepseek-chat": {},
                "gem/gemini-flash": {},
            },
            "routing": {
                "default": "glm/glm-5",
                "fallback": ["deepseek/deepseek-chat", "glm/glm-5"],
                "tasks": {"summarization": "deepseek/deepseek-chat", "subagent": "glm/glm-4-plus"},
            },
            "llm": {
                "maxRetries": 2,
                "requestTimeoutMs": 5000,
                "initialBackoffMs": 1000,
                "backoffMultiplier": 2.0,
                **llm,
            },
        }
    )


class Sleeps:
    """Records the waits instead of waiting."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
async def servers(make_server: MakeServer) -> tuple[FakeLLM, FakeLLM]:
    return await make_server(), await make_server()


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def router(servers: tuple[FakeLLM, FakeLLM], sleeps: Sleeps) -> AsyncIterator[Router]:
    async with Router(config(servers[0].url, servers[1].url), sleep=sleeps) as r:
        yield r


def ask() -> LlmRequest:
    return LlmRequest([Message.user("hi")])


def rate_limited(retry_after: str | None = None) -> Reply:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Reply(429, {"error": {"message": "rate limited"}}, headers=headers)


async def test_default_model_and_its_parameters(
    router: Router, servers: tuple[FakeLLM, FakeLLM]
) -> None:
    a, _ = servers
    a.ok("hi there", model="glm-5")
    response = await router.complete(ask())
    assert response.content == "hi there"
    sent = a.requests[0]
    assert sent.json["model"] == "glm-5"
    assert sent.json["max_tokens"] == 8192 and sent.json["temperature"] == 0.3
    assert sent.headers["Authorization"] == f"Bearer {SECRET_A}"


async def test_429_retry_after_then_success(
    router: Router, servers: tuple[FakeLLM, FakeLLM], sleeps: Sleeps
) -> None:
    a, b = servers
    a.queue(rate_limited("3"), rate_limited()).ok("done")
    assert (await router.complete(ask())).content == "done"
    # Retry-After wins over the backoff; without it the second backoff step applies.
    assert sleeps.calls == [3.0, 2.0]
    assert len(a.requests) == 3 and not b.requests


async def test_retry_after_too_long_falls_back_at_once(
    router: Router, servers: tuple[FakeLLM, FakeLLM], sleeps: Sleeps
) -> None:
    a, b = servers
    a.queue(rate_limited("3600"))
    b.ok("backup")
    assert (await router.complete(ask())).content == "backup"
    assert sleeps.calls == [] and len(a.requests) == 1


async def test_5xx_retried_then_fallback(
    router: Router, servers: tuple[FakeLLM, FakeLLM], sleeps: Sleeps
) -> None:
    a, b = servers
    a.queue(*[Reply(503, {"error": {"message": "overloaded"}})] * 3)
    b.ok("from deepseek", model="deepseek-chat")
    response = await router.complete(ask())
    assert response.content == "from deepseek"
    assert sleeps.calls == [1.0, 2.0]  # maxRetries=2: three attempts on glm
    assert len(a.requests) == 3
    assert b.requests[0].json["model"] == "deepseek-chat"
    assert b.requests[0].headers["Authorization"] == f"Bearer {SECRET_B}"
    assert "max_tokens" not in b.requests[0].json  # deepseek-chat sets none


async def test_4xx_not_retried_but_falls_back(
    router: Router, servers: tuple[FakeLLM, FakeLLM], sleeps: Sleeps
) -> None:
    a, b = servers
    a.queue(Reply(401, {"error": {"message": "invalid api key"}}))
    b.ok("backup")
    assert (await router.complete(ask())).content == "backup"
    assert sleeps.calls == [] and len(a.requests) == 1


async def test_timeout_then_fallback(make_server: MakeServer, sleeps: Sleeps) -> None:
    a, b = await make_server(), await make_server()
    a.queue(Reply(delay=30), Reply(delay=30))
    b.ok("backup")
    cfg = config(a.url, b.url, requestTimeoutMs=200, maxRetries=1, initialBackoffMs=500)
    async with Router(cfg, sleep=sleeps) as router:
        assert (await router.complete(ask())).content == "backup"
    assert sleeps.calls == [0.5]
    assert len(a.requests) == 2


async def test_all_fail(router: Router, servers: tuple[FakeLLM, FakeLLM], sleeps: Sleeps) -> None:
    a, b = servers
    a.queue(Reply(500, {"error": {"message": f"internal, key {SECRET_A}"}}), Reply(400, {}))
    b.queue(Reply(body="not json at all"))
    with pytest.raises(AllProvidersFailed) as info:
        await router.complete(ask())
    err = info.value
    assert err.user_message == USER_MESSAGE
    assert "unavailable" in err.user_message and "saved" in err.user_message
    # glm/glm-5 appears once although it is also in the fallback list.
    assert list(err.failures) == ["glm/glm-5", "deepseek/deepseek-chat"]
    assert err.failures["glm/glm-5"].status == 400
    assert isinstance(err.failures["deepseek/deepseek-chat"], MalformedResponse)
    text = str(err) + "".join(str(e) for e in err.failures.values())
    assert SECRET_A not in text and SECRET_B not in text
    assert sleeps.calls == [1.0]


async def test_explicit_model_and_task(router: Router, servers: tuple[FakeLLM, FakeLLM]) -> None:
    a, b = servers
    b.ok("summary")
    assert (await router.complete(ask(), task="summarization")).content == "summary"
    a.ok("sub")
    assert (await router.complete(ask(), model="glm/glm-4-plus")).content == "sub"
    assert a.requests[0].json["model"] == "glm-4-plus"
    assert [m.ref for m in router.chain(task="subagent")] == [
        "glm/glm-4-plus",
        "deepseek/deepseek-chat",
        "glm/glm-5",
    ]


async def test_unknown_references(router: Router) -> None:
    with pytest.raises(LlmConfigError, match="unknown model 'glm/glm-9'"):
        await router.complete(ask(), model="glm/glm-9")
    with pytest.raises(LlmConfigError, match="'openai/gpt-4o': unknown provider 'openai'"):
        await router.complete(ask(), model="openai/gpt-4o")
    with pytest.raises(LlmConfigError, match="provider/model-id"):
        await router.complete(ask(), model="glm-5")
    with pytest.raises(LlmConfigError, match="routing task 'poetry'"):
        await router.complete(ask(), task="poetry")


async def test_check_reports_routing_problems(servers: tuple[FakeLLM, FakeLLM]) -> None:
    cfg = config(servers[0].url, servers[1].url)
    cfg.routing.fallback = ["deepseek/deepseek-chat", "nope/x"]
    async with Router(cfg) as router:
        problems = router.check()
    assert len(problems) == 1 and "'nope'" in problems[0]


async def with_resets(router: Router) -> tuple[LlmResponse, list[str]]:
    """A streamed "hi" whose shown half answers the caller can take back (the engine's
    drafts): the response, and the deltas and resets in the order they came."""
    seen: list[str] = []

    async def on_delta(text: str) -> None:
        seen.append(text)

    async def on_reset() -> None:
        seen.append("<reset>")

    request = LlmRequest([Message.user("hi")], stream=True)
    response = await router.complete(request, on_delta=on_delta, on_reset=on_reset)
    return response, seen


async def test_streaming_through_the_router(
    router: Router, servers: tuple[FakeLLM, FakeLLM], sleeps: Sleeps
) -> None:
    a, _ = servers
    a.queue(Reply(503, {}))
    delta = {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}
    a.queue(Reply(sse=[delta, "[DONE]"]))
    seen: list[str] = []

    async def on_delta(text: str) -> None:
        seen.append(text)

    request = LlmRequest([Message.user("hi")], stream=True)
    response = await router.complete(request, on_delta=on_delta)
    assert (response.content, seen, sleeps.calls) == ("ok", ["ok"], [1.0])


async def test_failure_after_streamed_text_is_final(
    router: Router, servers: tuple[FakeLLM, FakeLLM], sleeps: Sleeps
) -> None:
    a, b = servers
    delta = {"choices": [{"index": 0, "delta": {"content": "par"}, "finish_reason": None}]}
    a.queue(Reply(sse=[delta, "{broken"]))
    b.ok("never used")

    async def on_delta(text: str) -> None:
        pass

    with pytest.raises(AllProvidersFailed) as info:
        await router.complete(LlmRequest([Message.user("hi")], stream=True), on_delta=on_delta)
    assert list(info.value.failures) == ["glm/glm-5"] and not b.requests


async def test_a_stream_cut_mid_answer_falls_back_and_replaces_the_half_answer(
    router: Router, servers: tuple[FakeLLM, FakeLLM], sleeps: Sleeps
) -> None:
    """With `on_reset` (the engine's drafts can take the half answer back) a failure
    after streamed text goes on to the next model, and the caller hears of it before
    that model's first delta: the user sees one answer, not half of one then another."""
    a, b = servers

    def delta(text: str, finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}

    a.queue(Reply(sse=[delta("Half an"), "{broken"]))
    b.queue(Reply(sse=[delta("The whole"), delta(" answer.", "stop"), "[DONE]"]))
    response, seen = await with_resets(router)
    assert response.content == "The whole answer." and response.model == "deepseek/deepseek-chat"
    assert seen == ["Half an", "<reset>", "The whole", " answer."]


async def test_a_retry_after_streamed_text_resets_first(
    router: Router, servers: tuple[FakeLLM, FakeLLM], sleeps: Sleeps
) -> None:
    a, _ = servers
    cut = {"choices": [{"index": 0, "delta": {"content": "Par"}, "finish_reason": None}]}
    whole = {"choices": [{"index": 0, "delta": {"content": "Whole"}, "finish_reason": "stop"}]}
    # The connection drops mid-stream (a transient error: retried on the same model).
    a.queue(Reply(sse=[cut], drop=True), Reply(sse=[whole, "[DONE]"]))
    response, seen = await with_resets(router)
    assert (response.content, response.model) == ("Whole", "glm/glm-5")
    assert seen == ["Par", "<reset>", "Whole"] and len(a.requests) == 2


async def test_timeout_error_type(make_server: MakeServer, sleeps: Sleeps) -> None:
    a, b = await make_server(), await make_server()
    a.queue(Reply(delay=30))
    b.queue(Reply(delay=30))
    cfg = config(a.url, b.url, requestTimeoutMs=100, maxRetries=0)
    async with Router(cfg, sleep=sleeps) as router:
        with pytest.raises(AllProvidersFailed) as info:
            await router.complete(ask())
    assert all(isinstance(e, ProviderTimeout) for e in info.value.failures.values())


def streamed(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


async def test_a_stream_of_keep_alives_is_retried_then_falls_back(
    make_server: MakeServer, sleeps: Sleeps
) -> None:
    """Hostile 3 through the router: each stalled attempt ends at the idle timeout, is
    retried, and the next model answers; the chat is not held for ever."""
    a, b = await make_server(), await make_server()
    stalled = Reply(sse=[streamed("")], forever=": keep-alive")
    a.queue(stalled, stalled)
    b.queue(Reply(sse=[streamed("Answer", "stop"), "[DONE]"]))
    cfg = config(a.url, b.url, streamIdleTimeoutMs=300, maxRetries=1)
    async with Router(cfg, sleep=sleeps) as router:
        response = await router.complete(LlmRequest([Message.user("hi")], stream=True))
    assert (response.content, response.model) == ("Answer", "deepseek/deepseek-chat")
    assert len(a.requests) == 2 and sleeps.calls == [1.0]


async def test_a_stream_without_its_end_is_retried(
    router: Router, servers: tuple[FakeLLM, FakeLLM], sleeps: Sleeps
) -> None:
    """Hostile 9 through the router: a stream that stops with no finish_reason and no
    [DONE] is retried on the same model (the half answer is reset), never delivered."""
    a, _ = servers
    a.queue(Reply(sse=[streamed("Half an")]), Reply(sse=[streamed("Whole", "stop"), "[DONE]"]))
    response, seen = await with_resets(router)
    assert (response.content, response.model) == ("Whole", "glm/glm-5")
    assert seen == ["Half an", "<reset>", "Whole"] and len(a.requests) == 2


async def test_a_stream_that_stops_short_every_time_fails_the_chain(
    make_server: MakeServer, sleeps: Sleeps
) -> None:
    a, b = await make_server(), await make_server()
    a.queue(Reply(sse=[streamed("")]))
    b.queue(Reply(sse=[streamed("")]))
    cfg = config(a.url, b.url, maxRetries=0)
    async with Router(cfg, sleep=sleeps) as router:
        with pytest.raises(AllProvidersFailed) as info:
            await router.complete(LlmRequest([Message.user("hi")], stream=True))
    assert all(isinstance(e, TruncatedStream) for e in info.value.failures.values())


async def test_a_line_that_never_ends_falls_back(
    router: Router, servers: tuple[FakeLLM, FakeLLM]
) -> None:
    """Hostile 10 through the router: the endless line is refused (the same provider
    would send it again: not retried) and the next model answers."""
    a, b = servers
    a.queue(Reply(sse=[streamed("")], flood=200 * 2**20))
    b.queue(Reply(sse=[streamed("Answer", "stop"), "[DONE]"]))
    response = await router.complete(LlmRequest([Message.user("hi")], stream=True))
    assert (response.content, response.model) == ("Answer", "deepseek/deepseek-chat")
    assert len(a.requests) == 1


def test_parse_retry_after() -> None:
    now = time.time()
    assert parse_retry_after("5") == 5.0
    assert parse_retry_after("1.5") == 1.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    date = email.utils.formatdate(now + 10, usegmt=True)
    wait = parse_retry_after(date, now=now)
    assert wait is not None and 8.5 <= wait <= 10.0


async def test_a_bad_fallback_entry_is_skipped_and_the_default_comes_last(
    servers: tuple[FakeLLM, FakeLLM],
) -> None:
    a, b = servers
    cfg = config(a.url, b.url)
    cfg.routing.fallback = ["nope/x", "deepseek/deepseek-chat"]
    async with Router(cfg) as router:
        assert [m.ref for m in router.chain()] == ["glm/glm-5", "deepseek/deepseek-chat"]
        # A chat on another model still ends at the owner's default.
        assert [m.ref for m in router.chain("glm/glm-4-plus")] == [
            "glm/glm-4-plus",
            "deepseek/deepseek-chat",
            "glm/glm-5",
        ]
        a.ok("from the default")
        assert (await router.complete(ask())).content == "from the default"

"""GeminiClient against the fake server holding Gemini's own request rules (fake_rules.py),
replaying responses shaped like the real API's (fixtures/gemini/)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from fake_llm import FakeLLM, Recorded, Reply
from fake_rules import GeminiRules, function_call, gemini_reply

from klaw.config import EngineConfig
from klaw.llm import (
    AllProvidersFailed,
    ContentBlocked,
    GeminiClient,
    LlmRequest,
    Message,
    OpenAICompatClient,
    ProviderError,
    Router,
    ToolCall,
    ToolSchema,
    TruncatedStream,
)
from klaw.llm.gemini import SKIP_SIGNATURE, build_payload, retry_delay

FIXTURES = Path(__file__).parent / "fixtures" / "gemini"
KEY = "AIzaSyTest-0123456789abcdefghijklmnop"
MODEL = "gemini-3-flash-preview"


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return data


def names_with(key: str) -> list[str]:
    return sorted(p.stem for p in FIXTURES.glob("*.json") if key in fixture(p.stem))


@pytest.fixture
def rules(server: FakeLLM) -> GeminiRules:
    rules = GeminiRules(KEY)
    server.rules.append(rules)
    return rules


@pytest.fixture
async def client(server: FakeLLM, rules: GeminiRules) -> AsyncIterator[GeminiClient]:
    c = GeminiClient("gemini", server.url + "/v1beta", KEY, timeout_s=5)
    yield c
    await c.aclose()


WEATHER = ToolSchema(
    "get_weather",
    "Weather by city",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "units": {"type": ["string", "null"], "enum": ["c", "f"]},
            "kind": {"const": "now"},
        },
        "required": ["city", "missing"],
        "additionalProperties": False,
        "$schema": "http://json-schema.org/draft-07/schema#",
    },
)
CLOCK = ToolSchema("current_time", "The time", {"type": "object", "properties": {}})


def ask(*messages: Message, **kw: Any) -> LlmRequest:
    return LlmRequest([Message.system("be brief"), *messages], model=MODEL, **kw)


# --------------------------------------------------------------------- shapes


@pytest.mark.parametrize("name", names_with("expect"))
async def test_response_shapes(
    name: str, server: FakeLLM, rules: GeminiRules, client: GeminiClient
) -> None:
    data = fixture(name)
    server.queue(Reply(json=rules.remember(data["response"])))
    response = await client.complete(ask(Message.user("hi")))
    expect = data["expect"]
    assert response.content == expect["content"]
    assert response.reasoning_content == expect["reasoning_content"]
    assert response.finish_reason == expect["finish_reason"]
    assert [response.usage.tokens_in, response.usage.tokens_out] == expect["usage"]
    assert response.model == expect["model"]
    assert len(response.tool_calls) == len(expect["tool_calls"])
    for got, want in zip(response.tool_calls, expect["tool_calls"], strict=True):
        assert (got.name, got.arguments, got.signature) == (
            want["name"],
            want["arguments"],
            want["signature"],
        )
        assert got.malformed is want["malformed"]
        if "id" in want:
            assert got.id == want["id"]
    ids = [c.id for c in response.tool_calls]
    assert all(ids) and len(set(ids)) == len(ids)


@pytest.mark.parametrize("name", names_with("error"))
async def test_refusals_and_failures_are_clear_errors(
    name: str, server: FakeLLM, client: GeminiClient
) -> None:
    data = fixture(name)
    server.queue(Reply(status=data.get("status", 200), json=data["response"]))
    want = data["error"]
    with pytest.raises(ProviderError) as info:
        await client.complete(ask(Message.user("hi")))
    exc = info.value
    assert type(exc).__name__ == want["type"]
    assert want["says"] in str(exc)
    if isinstance(exc, ContentBlocked):
        assert exc.reason == want["reason"] and exc.status is None
        assert "Rephrase the message" in exc.message
    if "status" in want:
        assert (exc.status, exc.retry_after) == (want["status"], want["retry_after"])


async def test_ids_made_up_for_calls_without_them_are_stable(
    server: FakeLLM, client: GeminiClient
) -> None:
    body = fixture("calls_without_ids")["response"]
    server.queue(Reply(json=body), Reply(json=body))
    first = await client.complete(ask(Message.user("hi")))
    second = await client.complete(ask(Message.user("hi")))
    assert [c.id for c in first.tool_calls] == [c.id for c in second.tool_calls]


# --------------------------------------------------------------------- the request


async def test_request_shape(server: FakeLLM, rules: GeminiRules, client: GeminiClient) -> None:
    server.queue(Reply(json=gemini_reply([{"text": "Sunny."}])))
    request = ask(
        Message.system("second system part"),
        Message.user("weather?"),
        Message.user("in Oslo"),
        tools=[WEATHER, CLOCK],
        max_tokens=256,
        temperature=0.2,
    )
    assert (await client.complete(request)).content == "Sunny."
    [req] = server.requests
    assert req.path == f"/v1beta/models/{MODEL}:generateContent"
    assert req.headers["x-goog-api-key"] == KEY and "Authorization" not in req.headers
    assert req.json == {
        "systemInstruction": {"parts": [{"text": "be brief\n\nsecond system part"}]},
        "contents": [{"role": "user", "parts": [{"text": "weather?"}, {"text": "in Oslo"}]}],
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "description": "Weather by city",
                        # The OpenAPI subset: JSON Schema's extras gone, a nullable
                        # type, a const as a one-value enum, only known required names.
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "city": {"type": "string", "description": "City name"},
                                "units": {"type": "string", "nullable": True, "enum": ["c", "f"]},
                                "kind": {"enum": ["now"]},
                            },
                            "required": ["city"],
                        },
                    },
                    # No parameters at all: Gemini refuses an object without properties.
                    {"name": "current_time", "description": "The time"},
                ]
            }
        ],
        "generationConfig": {"maxOutputTokens": 256, "temperature": 0.2},
    }


async def test_every_builtin_tool_schema_passes_geminis_checks(
    server: FakeLLM, client: GeminiClient
) -> None:
    """The schemas Klaw really sends, through the fake's copy of Gemini's schema checks."""
    import importlib
    import pkgutil

    import klaw.tools
    from klaw.tools.base import Tool

    for info in pkgutil.iter_modules(klaw.tools.__path__):
        importlib.import_module(f"klaw.tools.{info.name}")
    found: dict[str, ToolSchema] = {}
    todo = list(Tool.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if isinstance(getattr(cls, "name", None), str):
            found[cls.name] = ToolSchema(cls.name, cls.description, cls.parameters)
    assert {"memory_search", "file_read", "code_execute", "current_time"} <= set(found)
    server.queue(Reply(json=gemini_reply([{"text": "ok"}])))
    await client.complete(ask(Message.user("hi"), tools=list(found.values())))
    assert not server.rejected


# --------------------------------------------------------------------- tool rounds


async def test_a_tool_round_sends_the_signatures_back(
    server: FakeLLM, rules: GeminiRules, client: GeminiClient
) -> None:
    first = rules.remember(fixture("parallel_calls")["response"])
    server.queue(Reply(json=first), Reply(json=gemini_reply([{"text": "Both sunny."}])))
    history = [Message.user("Oslo and Bergen?")]
    answer = await client.complete(ask(*history, tools=[WEATHER]))
    history.append(answer.to_message())
    history += [
        Message.tool_result("call_a1", "sunny"),
        Message.tool_result("call_a2", "no data", is_error=True),
    ]
    final = await client.complete(ask(*history, tools=[WEATHER]))
    assert final.content == "Both sunny." and not server.rejected
    sent = server.requests[1].json["contents"]
    model_parts = first["candidates"][0]["content"]["parts"]
    # The model's turn goes back as it came, signature in the same part...
    assert sent[1] == {"role": "model", "parts": model_parts}
    # ...and both results in one content, matched by id and named.
    assert sent[2] == {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "id": "call_a1",
                    "name": "get_weather",
                    "response": {"result": "sunny"},
                }
            },
            {
                "functionResponse": {
                    "id": "call_a2",
                    "name": "get_weather",
                    "response": {"error": "no data"},
                }
            },
        ],
    }


async def test_a_dropped_signature_is_what_gemini_refuses(
    server: FakeLLM, rules: GeminiRules, client: GeminiClient
) -> None:
    """The fake enforces the rule: a call of the current turn with a signature the model
    never issued fails like the real API. Klaw never sends one (next test)."""
    history = [
        Message.user("weather?"),
        Message("assistant", None, tool_calls=[ToolCall("c1", "get_weather", {}, signature="x")]),
        Message.tool_result("c1", "sunny"),
    ]
    with pytest.raises(ProviderError, match="Corrupted thought signature") as info:
        await client.complete(ask(*history))
    assert info.value.status == 400


async def test_calls_without_a_signature_get_googles_placeholder(
    server: FakeLLM, rules: GeminiRules, client: GeminiClient
) -> None:
    """History read back from klaw.db, or calls another model made before a fallback,
    have no signature: the first call of each step gets the documented placeholder."""
    server.queue(Reply(json=gemini_reply([{"text": "Done."}])))
    history = [
        Message.user("weather?"),
        Message(
            "assistant",
            "Let me look.",
            tool_calls=[ToolCall("c1", "get_weather", {"city": "Oslo"}), ToolCall("c2", "x", {})],
        ),
        Message.tool_result("c1", "sunny"),
        Message.tool_result("c2", "ok"),
        Message("assistant", None, tool_calls=[ToolCall("c3", "current_time", {})]),
        Message.tool_result("c3", "noon"),
    ]
    assert (await client.complete(ask(*history))).content == "Done."
    contents = server.requests[0].json["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user", "model", "user"]
    assert contents[1]["parts"] == [
        {"text": "Let me look."},
        {
            "functionCall": {"id": "c1", "name": "get_weather", "args": {"city": "Oslo"}},
            "thoughtSignature": SKIP_SIGNATURE,
        },
        {"functionCall": {"id": "c2", "name": "x", "args": {}}},
    ]
    assert contents[3]["parts"][0]["thoughtSignature"] == SKIP_SIGNATURE


def test_signatures_stay_out_of_the_log() -> None:
    from klaw.engine.context import message_meta

    call = ToolCall("c1", "get_weather", {"city": "Oslo"}, signature="CiQB-secret-blob")
    meta = message_meta(Message("assistant", None, tool_calls=[call]))
    assert "CiQB-secret-blob" not in json.dumps(meta)


def test_the_fake_refuses_a_turn_without_signatures() -> None:
    """Without the placeholder the request breaks Gemini 3's rule, as the real API says."""
    rules = GeminiRules(KEY)
    history = [
        Message.user("weather?"),
        Message("assistant", None, tool_calls=[ToolCall("c1", "get_weather", {})]),
        Message.tool_result("c1", "sunny"),
    ]
    body = build_payload(ask(*history))
    del body["contents"][1]["parts"][0]["thoughtSignature"]
    path = f"/v1beta/models/{MODEL}:generateContent"
    rejection = rules(Recorded("POST", path, {"x-goog-api-key": KEY}, body))
    assert rejection is not None and rejection.status == 400
    assert "missing a thought_signature" in rejection.json["error"]["message"]


# --------------------------------------------------------------------- streaming


async def test_streaming_text_calls_usage(
    server: FakeLLM, rules: GeminiRules, client: GeminiClient
) -> None:
    sig = "CiQB0e2Kb-stream-signature-AAAA"
    chunks = rules.remember(
        [
            gemini_reply([{"text": "Let me "}], None, usage=(30, 2, 0)),
            gemini_reply([{"text": "check."}], None, usage=(30, 4, 0)),
            gemini_reply(
                [function_call("get_weather", {"city": "Oslo"}, "call_s1", sig)],
                None,
                usage=(30, 20, 0),
            ),
            gemini_reply(
                [function_call("get_weather", {"city": "Bergen"}, "call_s2")],
                "STOP",
                usage=(30, 36, 12),
            ),
        ]
    )
    server.queue(Reply(sse=chunks))
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    response = await client.complete(
        ask(Message.user("weather?"), tools=[WEATHER], stream=True), on_delta
    )
    assert deltas == ["Let me ", "check."]
    assert response.content == "Let me check." and response.finish_reason == "tool_calls"
    assert [(c.id, c.arguments, c.signature) for c in response.tool_calls] == [
        ("call_s1", {"city": "Oslo"}, sig),
        ("call_s2", {"city": "Bergen"}, None),
    ]
    assert (response.usage.tokens_in, response.usage.tokens_out) == (30, 48)
    [req] = server.requests
    assert req.path == f"/v1beta/models/{MODEL}:streamGenerateContent"
    assert req.query == {"alt": "sse"}


async def test_a_stream_blocked_after_text_keeps_the_text(
    server: FakeLLM, client: GeminiClient
) -> None:
    server.queue(
        Reply(
            sse=[
                gemini_reply([{"text": "Here is"}], None),
                {"candidates": [{"finishReason": "SAFETY", "index": 0}], "modelVersion": MODEL},
            ]
        )
    )
    response = await client.complete(ask(Message.user("hi"), stream=True))
    assert (response.content, response.finish_reason) == ("Here is", "content_filter")


async def test_an_error_inside_the_stream(server: FakeLLM, client: GeminiClient) -> None:
    error = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    server.queue(Reply(sse=[error]))
    with pytest.raises(ProviderError, match="overloaded") as info:
        await client.complete(ask(Message.user("hi"), stream=True))
    assert info.value.status == 503


async def test_a_stream_without_a_finish_reason_is_not_an_answer(
    server: FakeLLM, client: GeminiClient
) -> None:
    """Gemini's last chunk carries `finishReason`: a stream that ends before it has lost
    the rest of the answer (retried by the router, never delivered as it is)."""
    server.queue(Reply(sse=[gemini_reply([{"text": "Half an"}], None)]))
    with pytest.raises(TruncatedStream, match="before a finishReason"):
        await client.complete(ask(Message.user("hi"), stream=True))


# --------------------------------------------------------------------- errors


async def test_errors_never_echo_the_key(server: FakeLLM, client: GeminiClient) -> None:
    body = [{"error": {"code": 400, "message": f"API key {KEY} not valid", "status": "X"}}]
    server.queue(Reply(status=400, json=body))  # Google sometimes wraps errors in a list
    with pytest.raises(ProviderError) as info:
        await client.complete(ask(Message.user("hi")))
    assert KEY not in str(info.value) and "API key *** not valid" in str(info.value)


def test_retry_delay_forms() -> None:
    def body(delay: Any) -> bytes:
        detail = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}
        return json.dumps({"error": {"code": 429, "details": [detail]}}).encode()

    assert retry_delay(body("43s")) == 43.0
    assert retry_delay(body("0.250s")) == 0.25
    assert retry_delay(body({"seconds": 2, "nanos": 500_000_000})) == 2.5
    assert retry_delay(body("soon")) is None
    assert retry_delay(b"not json") is None


# --------------------------------------------------------------------- in the router

MakeServer = Callable[[], Awaitable[FakeLLM]]


def router_config(gemini_url: str, backup_url: str) -> EngineConfig:
    return EngineConfig.model_validate(
        {
            "providers": {
                "gemini": {"type": "gemini", "endpoint": gemini_url + "/v1beta", "apiKey": KEY},
                "backup": {"endpoint": backup_url + "/v1", "apiKey": "sk-backup"},
            },
            "models": {f"gemini/{MODEL}": {"maxTokens": 100}, "backup/m": {}},
            "routing": {"default": f"gemini/{MODEL}", "fallback": ["backup/m"]},
            "llm": {"maxRetries": 2, "initialBackoffMs": 1000, "local": {"enabled": False}},
        }
    )


async def test_the_router_waits_the_retry_delay_gemini_asks_for(
    make_server: MakeServer,
) -> None:
    gemini, backup = await make_server(), await make_server()
    rate_limited = fixture("rate_limited")
    gemini.queue(Reply(status=429, json=rate_limited["response"]))
    gemini.queue(Reply(json=gemini_reply([{"text": "Hi."}])))
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with Router(router_config(gemini.url, backup.url), sleep=sleep) as router:
        response = await router.complete(LlmRequest([Message.user("hi")]))
    assert (response.content, response.model) == ("Hi.", f"gemini/{MODEL}")
    assert sleeps == [7.0]  # RetryInfo's 7 s, not the 1 s backoff
    assert gemini.requests[0].json["generationConfig"] == {"maxOutputTokens": 100}
    assert not backup.requests


async def test_a_blocked_prompt_goes_to_the_next_model_at_once(
    make_server: MakeServer,
) -> None:
    gemini, backup = await make_server(), await make_server()
    gemini.queue(Reply(json=fixture("prompt_blocked")["response"]))
    backup.ok("answered by the backup")
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with Router(router_config(gemini.url, backup.url), sleep=sleep) as router:
        response = await router.complete(LlmRequest([Message.user("hi")]))
        assert response.content == "answered by the backup" and sleeps == []
        gemini.queue(Reply(json=fixture("finish_safety")["response"]))
        backup.queue(Reply(status=500, json={"error": {"message": "down"}}))
        backup.queue(Reply(status=500, json={"error": {"message": "down"}}))
        backup.queue(Reply(status=500, json={"error": {"message": "down"}}))
        with pytest.raises(AllProvidersFailed) as info:
            await router.complete(LlmRequest([Message.user("hi")]))
    failure = info.value.failures[f"gemini/{MODEL}"]
    assert isinstance(failure, ContentBlocked) and failure.reason == "SAFETY"
    assert len(gemini.requests) == 2  # a block is not retried


# --------------------------------------------------------------------- the choice of API


async def test_why_not_the_openai_compatible_endpoint(server: FakeLLM) -> None:
    """What the OpenAI-compatible client makes of Google's OpenAI-compatible endpoint
    (docs/decisions.md, "Gemini over its native API"): the thought signature sits in a
    field the OpenAI shape does not have and is not sent back, so Gemini 3 refuses the
    next tool round; parallel calls streamed under one index run together into one
    malformed call. The native client keeps both (the tests above)."""
    data = fixture("openai_compat_endpoint")
    server.queue(Reply(json=data["response"]), Reply(json=data["response"]))
    compat = OpenAICompatClient("gemini-compat", server.url + "/v1beta/openai", KEY, timeout_s=5)
    try:
        first = await compat.complete(LlmRequest([Message.user("weather?")], model=MODEL))
        [call] = first.tool_calls
        assert call.signature is None  # the signature was not kept...
        history = [Message.user("weather?"), first.to_message(), Message.tool_result(call.id, "ok")]
        await compat.complete(LlmRequest(history, model=MODEL))
        sent = server.requests[1].json["messages"][1]["tool_calls"][0]
        assert "extra_content" not in sent  # ...so it cannot go back
        server.queue(Reply(sse=data["stream"]))
        streamed = await compat.complete(LlmRequest([Message.user("x")], model=MODEL, stream=True))
        [merged] = streamed.tool_calls  # two calls in, one out
        assert merged.malformed and merged.raw_arguments == '{"city":"Oslo"}{"city":"Bergen"}'
    finally:
        await compat.aclose()

"""Images in each provider's wire format, checked by the fake servers' copies of the
real APIs' image rules; only models with `vision: true` get them."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fake_llm import FakeLLM, Reply, completion
from fake_rules import GeminiRules, anthropic_images, gemini_reply, openai_images

from klaw.config import EngineConfig
from klaw.llm import (
    AnthropicClient,
    GeminiClient,
    ImagePart,
    LlmRequest,
    Message,
    OpenAICompatClient,
    ProviderError,
    Router,
)
from pictures import png, sample

MakeServer = Callable[[], Awaitable[FakeLLM]]
KEY = "test-key-0123456789"
PHOTO = sample("photo_1280x960.jpg")
SHOT = png(40, 30)


def with_images(text: str | None = "What is on these?") -> Message:
    return Message(
        "user",
        text,
        images=[
            ImagePart("inbox/telegram_1_7_photo.jpg", "image/jpeg", PHOTO),
            ImagePart("inbox/telegram_1_8_shot.png", "image/png", SHOT),
        ],
    )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_openai_compatible_image_url_parts(server: FakeLLM) -> None:
    server.rules.append(openai_images)
    server.ok("a cat")
    client = OpenAICompatClient("glm", server.url + "/v1", KEY, timeout_s=5)
    try:
        request = LlmRequest([Message.system("sys"), with_images(), Message.user("plain")])
        assert (await client.complete(request)).content == "a cat"
    finally:
        await client.aclose()
    assert not server.rejected
    messages = server.requests[0].json["messages"]
    assert messages[1]["content"] == [
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{b64(PHOTO)}"}},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(SHOT)}"}},
        {"type": "text", "text": "What is on these?"},
    ]
    assert messages[2] == {"role": "user", "content": "plain"}  # text stays a string


async def test_anthropic_image_blocks(server: FakeLLM) -> None:
    server.rules.append(anthropic_images)
    reply = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [{"type": "text", "text": "a cat"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1600, "output_tokens": 3},
    }
    server.queue(Reply(json=reply))
    client = AnthropicClient("anthropic", server.url + "/v1", KEY, timeout_s=5)
    try:
        assert (await client.complete(LlmRequest([with_images()]))).content == "a cat"
        # The fake holds Anthropic's 5 MB limit (Klaw's own limit keeps below it).
        huge = ImagePart("inbox/huge.png", "image/png", b"\0" * (4 * 1024 * 1024))
        with pytest.raises(ProviderError, match="image exceeds 5 MB maximum") as info:
            await client.complete(LlmRequest([Message("user", "x", images=[huge])]))
        assert info.value.status == 400
    finally:
        await client.aclose()
    assert server.requests[0].json["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/jpeg", "data": b64(PHOTO)},
                },
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": b64(SHOT)},
                },
                {"type": "text", "text": "What is on these?"},
            ],
        }
    ]


async def test_gemini_inline_data_parts(server: FakeLLM) -> None:
    server.rules.append(GeminiRules(KEY))
    server.queue(Reply(json=gemini_reply([{"text": "a cat"}])))
    client = GeminiClient("gemini", server.url + "/v1beta", KEY, timeout_s=5)
    try:
        request = LlmRequest([with_images(None)], model="gemini-2.5-flash")
        assert (await client.complete(request)).content == "a cat"
    finally:
        await client.aclose()
    assert not server.rejected
    assert server.requests[0].json["contents"] == [
        {
            "role": "user",
            "parts": [
                {"inlineData": {"mimeType": "image/jpeg", "data": b64(PHOTO)}},
                {"inlineData": {"mimeType": "image/png", "data": b64(SHOT)}},
            ],
        }
    ]


# --------------------------------------------------------------------- the router


def config(vision_url: str, text_url: str) -> EngineConfig:
    return EngineConfig.model_validate(
        {
            "providers": {
                "seeing": {"endpoint": vision_url + "/v1", "apiKey": KEY},
                "blind": {"endpoint": text_url + "/v1", "apiKey": KEY},
            },
            "models": {"seeing/vl": {"vision": True}, "blind/text": {}},
            "routing": {"default": "seeing/vl", "fallback": ["blind/text"]},
            "llm": {"maxRetries": 0, "local": {"enabled": False}},
        }
    )


def sent_text(request_json: Any) -> str:
    return json.dumps(request_json)


async def test_only_vision_models_get_the_images(make_server: MakeServer) -> None:
    seeing, blind = await make_server(), await make_server()
    seeing.rules.append(openai_images)
    seeing.queue(Reply(status=503, json={"error": {"message": "busy"}}))
    blind.queue(Reply(json=completion("I cannot see it, but the file is named photo.")))
    async with Router(config(seeing.url, blind.url)) as router:
        response = await router.complete(LlmRequest([with_images()]))
    assert response.model == "blind/text"
    # The vision model got the images...
    assert b64(PHOTO) in sent_text(seeing.requests[0].json)
    # ...the fallback without vision a note naming each file, and no bytes at all.
    [user] = blind.requests[0].json["messages"]
    assert user == {
        "role": "user",
        "content": "What is on these?\n"
        "[image inbox/telegram_1_7_photo.jpg not shown: this model does not take images]\n"
        "[image inbox/telegram_1_8_shot.png not shown: this model does not take images]",
    }
    assert "base64" not in sent_text(blind.requests[0].json)


async def test_an_image_never_loaded_becomes_a_note(make_server: MakeServer) -> None:
    seeing, blind = await make_server(), await make_server()
    seeing.rules.append(openai_images)
    seeing.ok("fine")
    placeholder = ImagePart("inbox/gone.jpg", "image/jpeg", b"")
    async with Router(config(seeing.url, blind.url)) as router:
        await router.complete(LlmRequest([Message("user", "look", images=[placeholder])]))
    assert seeing.requests[0].json["messages"] == [
        {"role": "user", "content": "look\n[image inbox/gone.jpg not shown: it was not loaded]"}
    ]

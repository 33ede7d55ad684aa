"""BotApi, the Bot API client under the Telegram channel, against the fake Bot API server
(and, for answers the fake never gives, a few lines of aiohttp on 127.0.0.1)."""

from __future__ import annotations

import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from fake_telegram import BOT_USERNAME, TOKEN, FakeTelegram

from klaw.gateway.channels.telegram.botapi import (
    BotApi,
    BotApiBadRequest,
    BotApiConflict,
    BotApiError,
    BotApiException,
    BotApiForbidden,
    BotApiNetworkError,
    BotApiRetryAfter,
    BotApiServerError,
    BotApiTooLarge,
    BotApiUnauthorized,
    InvalidToken,
    validate_token,
)

SECRET = TOKEN.split(":")[1]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def api(fake_telegram: FakeTelegram) -> AsyncIterator[BotApi]:
    client = BotApi(TOKEN, fake_telegram.url + "/", timeout=5)
    yield client
    await client.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    """Starts a one-route server (any path) on 127.0.0.1; returns its base URL."""
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for runner in runners:
        await runner.cleanup()


def no_token_in(exc: BaseException) -> None:
    """Neither the message nor anything a traceback would print holds the token."""
    text = "".join(traceback.format_exception(exc))
    assert TOKEN not in text
    assert SECRET not in text


# ---------------------------------------------------------------------------- calls


async def test_call_returns_the_result(fake_telegram: FakeTelegram, api: BotApi) -> None:
    me = await api.call("getMe")
    assert me["username"] == BOT_USERNAME
    assert await api.call("getUpdates", {"offset": None, "timeout": 0}) == []
    (call,) = fake_telegram.calls_of("getUpdates")
    assert call.params == {"timeout": 0}  # None values are left out


async def test_params_go_as_json(fake_telegram: FakeTelegram, api: BotApi) -> None:
    fake_telegram.add_chat(5)
    reply = {"message_id": 77, "allow_sending_without_reply": True}
    sent = await api.call(
        "sendMessage",
        {"chat_id": 5, "text": "<b>hi</b>", "parse_mode": "HTML", "reply_parameters": reply},
    )
    assert sent["text"] == "hi"
    (call,) = fake_telegram.calls_of("sendMessage")
    assert call.params["chat_id"] == 5
    assert call.params["reply_parameters"] == reply
    assert fake_telegram.sent[0].reply_to == 77


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, BotApiBadRequest),
        (401, BotApiUnauthorized),
        (403, BotApiForbidden),
        (404, BotApiUnauthorized),
        (409, BotApiConflict),
        (413, BotApiTooLarge),
        (500, BotApiServerError),
        (502, BotApiServerError),
        (418, BotApiError),
    ],
)
async def test_errors_map_by_status(
    fake_telegram: FakeTelegram, api: BotApi, status: int, expected: type[BotApiError]
) -> None:
    fake_telegram.fail("getMe", status=status, description=f"Scripted: {status}")
    with pytest.raises(BotApiError) as info:
        await api.call("getMe")
    assert type(info.value) is expected
    assert info.value.status == status
    assert info.value.description == f"Scripted: {status}"
    assert info.value.retry_after is None
    assert info.value.method == "getMe"
    assert str(info.value) == f"getMe: Scripted: {status}"


async def test_real_refusals(fake_telegram: FakeTelegram, api: BotApi) -> None:
    with pytest.raises(BotApiBadRequest, match="chat not found"):
        await api.call("sendMessage", {"chat_id": 999, "text": "x"})
    fake_telegram.add_chat(7)
    fake_telegram.block(7)
    with pytest.raises(BotApiForbidden, match="blocked"):
        await api.call("sendChatAction", {"chat_id": 7, "action": "typing"})
    with pytest.raises(BotApiUnauthorized):  # the fake answers 404 for unknown methods
        await api.call("noSuchMethod")


async def test_retry_after_is_parsed(fake_telegram: FakeTelegram, api: BotApi) -> None:
    fake_telegram.fail("sendMessage", retry_after=7)
    with pytest.raises(BotApiRetryAfter) as info:
        await api.call("sendMessage", {"chat_id": 1, "text": "x"})
    assert info.value.status == 429
    assert info.value.retry_after == 7.0
    assert "retry after 7" in info.value.description
    # any status carrying parameters.retry_after is a flood wait, as aiogram had it
    fake_telegram.fail("getMe", status=400, description="Bad Request: slow down", retry_after=3)
    with pytest.raises(BotApiRetryAfter) as info:
        await api.call("getMe")
    assert (info.value.status, info.value.retry_after) == (400, 3.0)


async def test_migrate_to_chat_id_and_odd_answers(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    answers: list[web.Response] = [
        web.json_response(
            {
                "ok": False,
                "error_code": 400,
                "description": "Bad Request: group chat was upgraded to a supergroup chat",
                "parameters": {"migrate_to_chat_id": -1001234},
            },
            status=400,
        ),
        web.Response(status=502, text="<html>502 Bad Gateway</html>", content_type="text/html"),
        web.Response(status=200, text="not json"),
        web.json_response({"ok": False, "error_code": 429, "description": "Too Many"}, status=429),
    ]

    async def handler(request: web.Request) -> web.Response:
        return answers.pop(0)

    client = BotApi(TOKEN, await serve(handler), timeout=5)
    try:
        with pytest.raises(BotApiBadRequest) as info:
            await client.call("sendMessage", {"chat_id": -5, "text": "x"})
        assert info.value.migrate_to_chat_id == -1001234
        with pytest.raises(BotApiServerError, match="HTTP 502") as server:
            await client.call("getMe")
        assert server.value.status == 502
        with pytest.raises(BotApiError, match="not Bot API JSON") as odd:
            await client.call("getMe")
        assert type(odd.value) is BotApiError
        with pytest.raises(BotApiRetryAfter) as limited:  # 429 without parameters
            await client.call("getMe")
        assert limited.value.retry_after == 1.0
    finally:
        await client.close()


# ---------------------------------------------------------------------------- the token


async def test_the_token_never_shows_in_errors(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    async def echo(request: web.Request) -> web.Response:
        # a (misbehaving) server that quotes the whole request path back
        return web.json_response(
            {"ok": False, "error_code": 400, "description": f"Bad Request: {request.path}"},
            status=400,
        )

    client = BotApi(TOKEN, await serve(echo), timeout=5)
    try:
        with pytest.raises(BotApiBadRequest) as info:
            await client.call("getMe")
        assert "<token>" in info.value.description
        no_token_in(info.value)
    finally:
        await client.close()

    # network failures: nothing listens there; a URL aiohttp cannot even parse
    for server in ["http://127.0.0.1:9", "http://[::1"]:
        client = BotApi(TOKEN, server, timeout=5)
        try:
            with pytest.raises(BotApiNetworkError) as net:
                await client.call("getMe")
            no_token_in(net.value)
            with pytest.raises(BotApiNetworkError) as net:
                await client.download("documents/a.txt", Path("unused"), 10)
            no_token_in(net.value)
        finally:
            await client.close()


async def test_wrong_token_is_unauthorized(fake_telegram: FakeTelegram) -> None:
    client = BotApi("999:WRONG-token", fake_telegram.url, timeout=5)
    try:
        with pytest.raises(BotApiUnauthorized) as info:
            await client.call("getMe")
        assert info.value.status == 401
        assert "WRONG" not in str(info.value)
    finally:
        await client.close()


@pytest.mark.parametrize(
    "token", [TOKEN, "1:a", "999:WRONG-token", "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"]
)
def test_tokens_accepted(token: str) -> None:
    assert validate_token(token) == token
    BotApi(token)  # no session yet: building a client needs no event loop


@pytest.mark.parametrize(
    "token", ["", "not a token", "abc:def", "123:", ":abc", "123 :abc", "123:ab c", "123:abc\n"]
)
def test_tokens_refused(token: str) -> None:
    with pytest.raises(InvalidToken) as info:
        BotApi(token)
    assert isinstance(info.value, ValueError)
    if token:
        assert token not in str(info.value)


# ---------------------------------------------------------------------------- time and closing


async def test_timeout_is_a_network_error(fake_telegram: FakeTelegram, api: BotApi) -> None:
    with pytest.raises(BotApiNetworkError, match="getUpdates: timed out"):
        await api.call("getUpdates", {"timeout": 5}, timeout=0.2)  # the server holds 5 s
    assert await api.call("getUpdates", {"timeout": 0}) == []  # the client still works


async def test_closed_client_refuses_calls(fake_telegram: FakeTelegram) -> None:
    client = BotApi(TOKEN, fake_telegram.url)
    await client.call("getMe")
    await client.close()
    await client.close()  # twice is fine
    assert client.closed
    with pytest.raises(BotApiNetworkError, match="closed"):
        await client.call("getMe")
    assert isinstance(BotApiNetworkError("x"), BotApiException)


# ---------------------------------------------------------------------------- downloads


async def _file_path(api: BotApi, file_id: str) -> str:
    info = await api.call("getFile", {"file_id": file_id})
    return str(info["file_path"])


async def test_download_within_the_cap(
    fake_telegram: FakeTelegram, api: BotApi, tmp_path: Path
) -> None:
    data = bytes(range(256)) * 1000  # 256 kB: several chunks
    path = await _file_path(api, fake_telegram.add_file(data))
    dest = tmp_path / "out.bin"
    assert await api.download(path, dest, len(data)) == len(data)
    assert dest.read_bytes() == data


async def test_download_over_the_cap(
    fake_telegram: FakeTelegram, api: BotApi, tmp_path: Path
) -> None:
    data = b"x" * 300_000
    path = await _file_path(api, fake_telegram.add_file(data, declared_size=10))
    dest = tmp_path / "out.bin"
    assert await api.download(path, dest, 100_000) is None
    assert not dest.exists()
    assert await api.download(path, dest, len(data) - 1) is None
    assert not dest.exists()


async def test_download_stops_at_the_cap_without_content_length(
    serve: Callable[[Handler], Awaitable[str]], tmp_path: Path
) -> None:
    sent: list[int] = []

    async def endless(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()  # chunked: no Content-Length to check up front
        await resp.prepare(request)
        for _ in range(1000):
            await resp.write(b"y" * 65536)
            sent.append(65536)
        return resp

    client = BotApi(TOKEN, await serve(endless), timeout=5)
    dest = tmp_path / "big.part"
    try:
        assert await client.download("documents/big", dest, 200_000) is None
    finally:
        await client.close()
    assert not dest.exists()
    assert sum(sent) < 1000 * 65536  # the client hung up early


async def test_download_errors(fake_telegram: FakeTelegram, api: BotApi, tmp_path: Path) -> None:
    dest = tmp_path / "out.bin"
    with pytest.raises(BotApiError) as info:
        await api.download("documents/gone.bin", dest, 1000)
    assert type(info.value) is BotApiError  # a missing file, not a wrong token
    assert info.value.status == 404
    assert not dest.exists()

    path = await _file_path(api, fake_telegram.add_file(b"data"))
    wrong = BotApi("999:WRONG-token", fake_telegram.url)
    try:
        with pytest.raises(BotApiUnauthorized) as unauthorized:
            await wrong.download(path, dest, 1000)
        no_token_in(unauthorized.value)
        assert not dest.exists()
    finally:
        await wrong.close()

"""A minimal Telegram Bot API client: one aiohttp session, JSON in and out, no models.

Requests are ``POST {api_server}/bot{token}/{method}`` with a JSON body (`upload`: one
file as multipart/form-data); results come back as plain JSON values (updates and
messages are dicts: read them with the small typed helpers in `channel`).
Files are streamed from ``GET {api_server}/file/bot{token}/{file_path}`` with a size cap.
Nothing here retries: the caller decides, from the exception's type, whether another try can help.

Exceptions (the token never appears in their text):

    KlawError
    ├── InvalidToken (ValueError)    the string cannot be a bot token (raised by the constructor)
    └── BotApiException              a Bot API call failed
        ├── BotApiNetworkError       no usable answer: connection refused, TLS, DNS, timeout,
        │                            or the client is closed
        └── BotApiError              Telegram answered ``ok: false`` (or an HTTP error):
            │                        .status, .description, .retry_after, .migrate_to_chat_id
            ├── BotApiBadRequest     400: the request itself is wrong (retrying cannot help);
            │                        .migrate_to_chat_id is set when a group became a supergroup
            ├── BotApiUnauthorized   401 or 404: the token (or api_server) is wrong
            ├── BotApiForbidden      403: blocked by the user, removed from the chat
            ├── BotApiConflict       409: another getUpdates is running, or a webhook is set
            ├── BotApiTooLarge       413: the request is too big
            ├── BotApiRetryAfter     429 (any answer with ``parameters.retry_after``): wait
            │                        .retry_after seconds
            └── BotApiServerError    5xx: Telegram's side; worth retrying

A download answered 404 raises the base `BotApiError` (the file path expired), not
`BotApiUnauthorized`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import ssl
from pathlib import Path
from typing import Any, BinaryIO, Final
from urllib.parse import quote

import aiohttp

from klaw.errors import KlawError
from klaw.redaction import redact

__all__ = [
    "BotApi",
    "BotApiBadRequest",
    "BotApiConflict",
    "BotApiError",
    "BotApiException",
    "BotApiForbidden",
    "BotApiNetworkError",
    "BotApiRetryAfter",
    "BotApiServerError",
    "BotApiTooLarge",
    "BotApiUnauthorized",
    "InvalidToken",
    "validate_token",
]

log = logging.getLogger("klaw.gateway.botapi")

DEFAULT_TIMEOUT: Final = 60.0
_CHUNK: Final = 64 * 1024
_ERROR_BODY: Final = 64 * 1024  # how much of a failed download's body is read for its reason
# The rule aiogram applied: "<digits>:<something>", no whitespace anywhere.
_TOKEN = re.compile(r"[0-9]+:\S+")


class InvalidToken(KlawError, ValueError):
    """The string cannot be a bot token (expected ``123456:ABC...`` from @BotFather)."""


class BotApiException(KlawError):
    """A Bot API call failed; the root of the client's errors."""


class BotApiNetworkError(BotApiException):
    """No usable answer from the server: connection, TLS or DNS failure, or a timeout."""


class BotApiError(BotApiException):
    """Telegram answered with an error.

    `status` is the HTTP status (Telegram's ``error_code`` when the body has one),
    `description` Telegram's reason, `retry_after` the seconds to wait (429),
    `migrate_to_chat_id` the new id of a group that became a supergroup.
    """

    def __init__(
        self,
        status: int,
        description: str,
        retry_after: float | None = None,
        *,
        migrate_to_chat_id: int | None = None,
        method: str = "",
    ) -> None:
        super().__init__(f"{method}: {description}" if method else description)
        self.status = status
        self.description = description
        self.retry_after = retry_after
        self.migrate_to_chat_id = migrate_to_chat_id
        self.method = method


class BotApiBadRequest(BotApiError):
    """400: the request is wrong (unknown chat, unparsable HTML, file too big to fetch...)."""


class BotApiUnauthorized(BotApiError):
    """401 or 404: Telegram does not know this token (or api_server is not a Bot API)."""


class BotApiForbidden(BotApiError):
    """403: the bot was blocked by the user or removed from the chat."""


class BotApiConflict(BotApiError):
    """409: another instance polls this bot, or a webhook is set."""


class BotApiTooLarge(BotApiError):
    """413: the request is too large."""


class BotApiRetryAfter(BotApiError):
    """429: flood control; `retry_after` says how long to wait."""

    retry_after: float


class BotApiServerError(BotApiError):
    """5xx: a failure on Telegram's side (or a proxy in between)."""


_BY_STATUS: Final[dict[int, type[BotApiError]]] = {
    400: BotApiBadRequest,
    401: BotApiUnauthorized,
    403: BotApiForbidden,
    404: BotApiUnauthorized,
    409: BotApiConflict,
    413: BotApiTooLarge,
    429: BotApiRetryAfter,
}


def validate_token(token: str) -> str:
    """Returns `token` if it has the shape of a bot token, else raises `InvalidToken`."""
    if not _TOKEN.fullmatch(token):
        raise InvalidToken("not a bot token: expected the 123456:ABC... string from @BotFather")
    return token


class BotApi:
    """One bot's connection to a Bot API server.

    `timeout` bounds each call (seconds, from connecting to the last byte); `call` takes a
    longer one for long polling. The HTTP session opens on the first call, so the client
    can be built outside a running event loop; `close` it when done.
    """

    def __init__(
        self,
        token: str,
        api_server: str = "https://api.telegram.org",
        *,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self._token = validate_token(token)
        self._quoted = quote(token, safe=":")
        base = api_server.rstrip("/")
        self._api_base = f"{base}/bot{self._quoted}/"
        self._file_base = f"{base}/file/bot{self._quoted}/"
        self._tls = base.lower().startswith("https:")
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def call(
        self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> Any:
        """Calls `method` with `params` (None values are left out); returns its ``result``.

        Raises a `BotApiError` subclass when Telegram refuses, `BotApiNetworkError` when
        there is no answer within `timeout` (default: the client's).
        """
        payload = {k: v for k, v in (params or {}).items() if v is not None}
        return await self._post(method, {"json": payload}, timeout)

    async def upload(
        self,
        method: str,
        params: dict[str, Any],
        field: str,
        file: tuple[str, str, BinaryIO],
        *,
        timeout: float | None = None,
    ) -> Any:
        """`call` with one file, as multipart/form-data (sendDocument, sendPhoto...).

        `file` is (name, mime type, reader): streamed from the reader's position, not
        held in memory. Dict and list params go as JSON text, as the Bot API wants.
        """
        # quote_fields=False: the file name goes as UTF-8 (RFC 7578), which Telegram
        # shows as is; aiohttp's default would percent-encode it.
        form = aiohttp.FormData(quote_fields=False)
        for key, value in params.items():
            if value is not None:
                form.add_field(key, value if isinstance(value, str) else json.dumps(value))
        name, mime, reader = file
        form.add_field(field, reader, filename=name, content_type=mime)
        return await self._post(method, {"data": form}, timeout)

    async def _post(self, method: str, body: dict[str, Any], timeout: float | None) -> Any:
        session = self._open()
        limit = aiohttp.ClientTimeout(total=self.timeout if timeout is None else timeout)
        try:
            async with session.post(self._api_base + method, timeout=limit, **body) as resp:
                status = resp.status
                body_bytes = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._network_error(method, exc) from None
        data = _json(body_bytes)
        if data is not None and 200 <= status < 300 and data.get("ok") is True:
            log.debug("botapi: %s ok", method)
            return data.get("result")
        raise self._api_error(method, status, data)

    async def download(self, file_path: str, dest: Path, max_bytes: int) -> int | None:
        """Streams the file at `file_path` (from ``getFile``) into `dest`; returns its size.

        None when it is bigger than `max_bytes`: the download stops there and `dest` is
        removed. On any error `dest` is removed too. Each read may take up to the client's
        timeout, so a slow but steady download is not cut off.
        """
        session = self._open()
        limit = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=self.timeout)
        size = 0
        what = "download"
        try:
            async with session.get(self._file_base + file_path, timeout=limit) as resp:
                if resp.status != 200:
                    body = await resp.content.read(_ERROR_BODY)
                    error = self._api_error(what, resp.status, _json(body))
                    if resp.status == 404:  # here: the file_path expired or never was
                        error = BotApiError(404, error.description, method=what)
                    raise error
                if resp.content_length is not None and resp.content_length > max_bytes:
                    return None
                with dest.open("wb") as out:
                    async for chunk in resp.content.iter_chunked(_CHUNK):
                        size += len(chunk)
                        if size > max_bytes:
                            break
                        out.write(chunk)
        except (aiohttp.ClientError, TimeoutError) as exc:
            dest.unlink(missing_ok=True)
            raise self._network_error(what, exc) from None
        except BaseException:
            dest.unlink(missing_ok=True)
            raise
        if size > max_bytes:
            dest.unlink(missing_ok=True)
            return None
        return size

    async def close(self) -> None:
        """Closes the HTTP session; later calls raise `BotApiNetworkError`. Idempotent."""
        if self._closed:
            return
        self._closed = True
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()
            if self._tls:
                # aiohttp's advice: give TLS connections a moment to shut down cleanly
                await asyncio.sleep(0.25)

    # ------------------------------------------------------------------ internals

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise BotApiNetworkError("the Bot API client is closed")
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=_tls_context(), ttl_dns_cache=3600)
            self._session = aiohttp.ClientSession(
                connector=connector, headers={"User-Agent": "klaw"}
            )
        return self._session

    def _redact(self, text: str) -> str:
        return redact(text, self._token, "<token>")

    def _network_error(self, method: str, exc: BaseException) -> BotApiNetworkError:
        if isinstance(exc, TimeoutError):
            reason = "timed out"
        else:
            # aiohttp's text may hold the URL, and the URL holds the token
            reason = f"{type(exc).__name__}: {self._redact(str(exc))}".rstrip(": ")
        return BotApiNetworkError(f"{method}: {reason}")

    def _api_error(self, method: str, status: int, data: dict[str, Any] | None) -> BotApiError:
        if data is None:
            description = f"HTTP {status} (the answer is not Bot API JSON)"
            code = status
            params: dict[str, Any] = {}
        else:
            description = self._redact(str(data.get("description") or f"HTTP {status}"))
            code = _int(data.get("error_code")) or status
            raw = data.get("parameters")
            params = raw if isinstance(raw, dict) else {}
        retry_after = _number(params.get("retry_after"))
        migrate = _int(params.get("migrate_to_chat_id"))
        cls: type[BotApiError]
        if retry_after is not None:
            cls = BotApiRetryAfter
        elif code >= 500:
            cls = BotApiServerError
        else:
            cls = _BY_STATUS.get(code, BotApiError)
        if cls is BotApiRetryAfter and retry_after is None:
            retry_after = 1.0  # a 429 without parameters: wait a little anyway
        return cls(code, description, retry_after, migrate_to_chat_id=migrate, method=method)


def _tls_context() -> ssl.SSLContext:
    """certifi's CA bundle when installed (as aiogram and httpx use), else the system's."""
    try:
        import certifi
    except ImportError:  # pragma: no cover - certifi comes with httpx
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def _json(body: bytes) -> dict[str, Any] | None:
    """The answer as a dict with a boolean ``ok``, or None if it is not one."""
    with contextlib.suppress(ValueError):
        data = json.loads(body)
        if isinstance(data, dict) and isinstance(data.get("ok"), bool):
            return data
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)

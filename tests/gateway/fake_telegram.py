"""A local Telegram Bot API server for tests, speaking the real HTTP protocol.

The channel talks to it exactly as to api.telegram.org: ``POST /bot{token}/{method}`` with
form (or JSON) bodies, answers ``{"ok": true, "result": ...}`` or ``{"ok": false,
"error_code": ..., "description": ..., "parameters": {...}}``, files under
``GET /file/bot{token}/{file_path}``. Runs on 127.0.0.1 on a random port.

What it models, because the channel depends on it:
- getUpdates long polling: a request is held until an update is queued or its timeout
  passes; ``offset`` acknowledges (forgets) every update below it.
- sendMessage validates ``parse_mode=HTML`` like Telegram (allowed tags only, balanced,
  entity nesting rules; stricter than Telegram where its docs are ambiguous: no code
  inside bold) and the 4096 limit on the visible text, counted in UTF-16 units.
- Chats exist only once they wrote to the bot (or `add_chat`): else "chat not found".
- sendPhoto and sendDocument take one multipart/form-data file, like the real API: the
  upload limits (10 MB photo, 50 MB else), a caption of at most 1,024 characters, and a
  photo must be an image it can read (PNG or JPEG here) or it is refused.

Tests push updates with the helpers (`text`, `command`, `photo`, `document`, `media`...),
script failures with `fail`, break the network with `fault` (a request held forever,
dropped, or answered with HTML, invalid or truncated JSON; each one or every n-th) until
`heal`, and await effects with `wait_sent` / `wait_calls` (asyncio
events, no sleeping). Every call is recorded with a monotonic timestamp.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

TOKEN = "123456:TEST-fake-token_for-klaw"
BOT_ID = 123456
BOT_USERNAME = "klaw_test_bot"
USER_ID = 42
MAX_TEXT = 4096
MAX_CAPTION = 1024
PHOTO_MAX = 10 * 1024 * 1024
UPLOAD_MAX = 50 * 1024 * 1024

# --------------------------------------------------------------------------- HTML


class HtmlError(ValueError):
    """Telegram's "can't parse entities" reason."""


@dataclass(frozen=True)
class Entity:
    type: str  # bold, italic, underline, strikethrough, spoiler, text_link, code, pre...
    text: str
    url: str | None = None
    language: str | None = None


_ENTITY_OF = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
    "a": "text_link",
    "code": "code",
    "pre": "pre",
    "blockquote": "blockquote",
    "tg-emoji": "custom_emoji",
}
_ATTRS = {"a": {"href"}, "code": {"class"}, "span": {"class"}, "tg-emoji": {"emoji-id"}}
_ATTRS["blockquote"] = {"expandable"}
_FORMATTING = {"bold", "italic", "underline", "strikethrough", "spoiler"}
_ATTR_RE = re.compile(r"""\s*([a-zA-Z-]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+)))?""")
_CHAR_REF = re.compile(r"&(?:#(\d{1,7})|#[xX]([0-9a-fA-F]{1,6})|(lt|gt|amp|quot));")
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def parse_html(text: str) -> tuple[str, list[Entity]]:
    """Visible text and entities of a ``parse_mode=HTML`` text; HtmlError like Telegram."""
    out: list[str] = []  # visible characters, one per item
    stack: list[tuple[str, str, int, dict[str, str]]] = []  # (tag, entity, start, attrs)
    entities: list[Entity] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "&":
            m = _CHAR_REF.match(text, i)
            if m is None:
                out.append("&")  # a lone ampersand is kept, as Telegram does
                i += 1
                continue
            if m[3]:
                out.append(_NAMED[m[3]])
            else:
                code = int(m[1]) if m[1] else int(m[2], 16)
                if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                    raise HtmlError(f"Invalid character reference at byte offset {_at(text, i)}")
                out.append(chr(code))
            i = m.end()
            continue
        if ch != "<":
            out.append(ch)
            i += 1
            continue
        offset = _at(text, i)
        end = text.find(">", i)
        if end < 0:
            raise HtmlError(f"Unclosed start tag at byte offset {offset}")
        inside = text[i + 1 : end]
        i = end + 1
        if inside.startswith("/"):
            name = inside[1:].strip().lower()
            if not stack:
                raise HtmlError(f'Unexpected end tag "{name}" at byte offset {offset}')
            tag, kind, start, attrs = stack.pop()
            if name != tag:
                raise HtmlError(
                    f"Unmatched end tag at byte offset {offset}, "
                    f'expected "</{tag}>", found "</{name}>"'
                )
            body = "".join(out[start:])
            if kind == "pre" and entities and entities[-1].type == "code_in_pre":
                lang = entities.pop().language
                entities.append(Entity("pre", body, language=lang))
            elif kind == "code" and stack and stack[-1][1] == "pre":
                cls = attrs.get("class", "")
                lang = cls[len("language-") :] if cls.startswith("language-") else None
                entities.append(Entity("code_in_pre", body, language=lang))
            else:
                entities.append(Entity(kind, body, url=attrs.get("href")))
            continue
        m = re.match(r"([a-zA-Z][a-zA-Z0-9-]*)", inside)
        name = m[1].lower() if m else ""
        if name not in _ENTITY_OF:
            raise HtmlError(f'Unsupported start tag "{name}" at byte offset {offset}')
        attrs = _parse_attrs(inside[len(name) :], name, offset)
        kind = _ENTITY_OF[name]
        _check_nesting(kind, [s[1] for s in stack], offset)
        if name == "a" and not attrs.get("href"):
            raise HtmlError(f'Tag "a" must have attribute "href" at byte offset {offset}')
        if name == "span" and attrs.get("class") != "tg-spoiler":
            raise HtmlError(f'Tag "span" must have class "tg-spoiler" at byte offset {offset}')
        stack.append((name, kind, len(out), attrs))
    if stack:
        raise HtmlError(f'Can\'t find end tag corresponding to start tag "{stack[-1][0]}"')
    return "".join(out), entities


def _at(text: str, i: int) -> int:
    """Telegram reports positions as UTF-8 byte offsets."""
    return len(text[:i].encode())


def _parse_attrs(rest: str, tag: str, offset: int) -> dict[str, str]:
    attrs: dict[str, str] = {}
    rest = rest.rstrip()
    pos = 0
    while pos < len(rest):
        m = _ATTR_RE.match(rest, pos)
        if m is None or m.end() == pos:
            raise HtmlError(f'Can\'t parse attributes of tag "{tag}" at byte offset {offset}')
        name = m[1].lower()
        if name not in _ATTRS.get(tag, set()):
            raise HtmlError(f'Unsupported attribute "{name}" of tag "{tag}"')
        value = m[2] if m[2] is not None else m[3] if m[3] is not None else m[4] or ""
        attrs[name] = _CHAR_REF.sub(lambda r: _NAMED.get(r[3] or "", r[0]), value)
        pos = m.end()
    return attrs


def _check_nesting(kind: str, outer: list[str], offset: int) -> None:
    if not outer:
        return
    if outer == ["pre"] and kind == "code":
        return  # <pre><code class="language-x"> is how a language is given
    if "code" in outer or "pre" in outer:
        raise HtmlError(f"Entities can't be nested in code at byte offset {offset}")
    if kind in {"code", "pre"}:
        raise HtmlError(f"Code can't be nested in other entities at byte offset {offset}")
    if kind == "text_link" and "text_link" in outer:
        raise HtmlError(f"Links can't be nested at byte offset {offset}")
    if kind == "blockquote" and "blockquote" in outer:
        raise HtmlError(f"Blockquotes can't be nested at byte offset {offset}")
    if kind not in _FORMATTING and any(o not in _FORMATTING | {"blockquote"} for o in outer):
        raise HtmlError(f"Entities can't be nested at byte offset {offset}")


# --------------------------------------------------------------------------- records


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    at: float  # time.monotonic() when the request arrived
    status: int = 200


@dataclass
class Sent:
    chat_id: int
    message_id: int
    text: str  # as received
    parse_mode: str | None
    visible: str  # what the user sees
    entities: list[Entity]
    reply_to: int | None
    at: float


@dataclass
class Upload:
    chat_id: int
    message_id: int
    method: str  # "sendPhoto", "sendDocument"
    filename: str
    content_type: str
    data: bytes
    caption: str  # as received
    parse_mode: str | None
    reply_to: int | None


@dataclass
class DraftCall:
    chat_id: int
    draft_id: int
    text: str
    at: float = field(default_factory=time.monotonic)


@dataclass
class _Failure:
    status: int
    description: str
    retry_after: int | None
    times: int


@dataclass
class _Fault:
    kind: str  # see FakeTelegram.fault
    every: int
    seen: int = 0


#: What a broken network or proxy answers instead of the Bot API (`FakeTelegram.fault`).
FAULTS = ("hang", "drop", "html", "invalid_json", "truncated")


@dataclass
class _File:
    path: str
    data: bytes
    declared_size: int | None = None


@dataclass
class _Chat:
    obj: dict[str, Any]
    next_message_id: int = 1
    message_ids: set[int] = field(default_factory=set)
    blocked: bool = False


_JSON_FIELDS = {
    "reply_parameters",
    "commands",
    "allowed_updates",
    "entities",
    "link_preview_options",
    "reply_markup",
    "scope",
}
_INT_FIELDS = {
    "offset",
    "limit",
    "timeout",
    "reply_to_message_id",
    "message_thread_id",
    "draft_id",
    "message_id",
}
_ACTIONS = {
    "typing",
    "upload_photo",
    "record_video",
    "upload_video",
    "record_voice",
    "upload_voice",
    "upload_document",
    "choose_sticker",
    "find_location",
    "record_video_note",
    "upload_video_note",
}
_COMMAND_RE = re.compile(r"[a-z0-9_]{1,32}")


class FakeTelegram:
    def __init__(self, token: str = TOKEN, *, username: str = BOT_USERNAME) -> None:
        self.token = token
        self.username = username
        self.url = ""
        self.calls: list[Call] = []
        self.sent: list[Sent] = []
        self.commands: list[dict[str, Any]] = []
        self.drafts: list[DraftCall] = []  # sendMessageDraft calls (previews, not messages)
        self.edits: list[Sent] = []  # editMessageText calls that changed a message
        self.uploads: list[Upload] = []  # files received by sendPhoto / sendDocument
        self.drafts_supported = True  # False: sendMessageDraft is an unknown method (404)
        self.get_file_limit = 20 * 1024 * 1024  # the Bot API refuses bigger getFile
        self._updates: list[dict[str, Any]] = []
        self._next_update_id = 1000
        self._chats: dict[int, _Chat] = {}
        self._files: dict[str, _File] = {}
        self._failures: dict[str, deque[_Failure]] = defaultdict(deque)
        self._faults: dict[str, _Fault] = {}
        self.hanging = 0  # requests being held by a "hang" fault
        self._changed = asyncio.Event()
        self._closing = False
        self._runner: web.AppRunner | None = None

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> str:
        app = web.Application(client_max_size=UPLOAD_MAX + 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self.url

    async def close(self) -> None:
        self._closing = True
        self._bump()  # releases held long polls
        if self._runner is not None:
            await self._runner.cleanup()

    # ---------------------------------------------------------------- scripting

    def fail(
        self,
        method: str,
        *,
        times: int = 1,
        status: int = 429,
        description: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        """The next `times` calls of `method` fail; 429 gets ``retry_after`` (default 1)."""
        if status == 429 and retry_after is None:
            retry_after = 1
        if description is None:
            description = (
                f"Too Many Requests: retry after {retry_after}"
                if status == 429
                else "Bad Request: scripted failure"
            )
        self._failures[method.lower()].append(_Failure(status, description, retry_after, times))

    def clear_failures(self) -> None:
        self._failures.clear()

    def fault(self, method: str, kind: str, *, every: int = 1) -> None:
        """Every `every`-th call of `method` (1: each) from now on, until `heal`, is met
        with `kind` instead of an answer: "hang" (the request is taken and never
        answered), "drop" (the connection is closed without an answer), "html" (200 with
        a proxy's HTML page), "invalid_json" (200, JSON content type, not JSON),
        "truncated" (200 whose body stops short of its Content-Length). The call is
        recorded, its effect (an update acknowledged by its offset) does not happen."""
        assert kind in FAULTS, kind
        self._faults[method.lower()] = _Fault(kind, every)
        self._bump()

    def heal(self, method: str | None = None) -> None:
        """Ends the faults of `method` (all: None); held requests are let go, unanswered."""
        if method is None:
            self._faults.clear()
        else:
            self._faults.pop(method.lower(), None)
        self._bump()

    def add_chat(self, chat_id: int, *, chat_type: str = "private", title: str = "") -> None:
        self._chat(chat_id, chat_type, title)

    def block(self, chat_id: int) -> None:
        """The user blocked the bot: sends get 403."""
        self._chat(chat_id).blocked = True

    def add_file(self, data: bytes, *, suffix: str = "", declared_size: int | None = None) -> str:
        """Stores a file the bot can getFile and download; returns its file_id."""
        n = len(self._files) + 1
        file_id = f"FILE{n:04d}"
        folder = "photos" if suffix == ".jpg" else "documents"
        self._files[file_id] = _File(f"{folder}/file_{n}{suffix}", data, declared_size)
        return file_id

    # ---------------------------------------------------------------- updates

    @property
    def pending(self) -> list[int]:
        """Update ids queued and not yet acknowledged."""
        return [u["update_id"] for u in self._updates]

    def push(self, message: dict[str, Any]) -> int:
        """Queues a "message" update; returns its update_id."""
        update_id = self._next_update_id
        self._next_update_id += 1
        self._updates.append({"update_id": update_id, "message": message})
        self._bump()
        return update_id

    def message(
        self,
        chat_id: int,
        *,
        chat_type: str = "private",
        title: str = "Test group",
        user_id: int = USER_ID,
        first_name: str = "Ann",
        last_name: str | None = "Lee",
        username: str | None = "ann",
        date: int | None = None,
        reply_to: dict[str, Any] | None = None,
        quote: str | None = None,
        **content: Any,
    ) -> dict[str, Any]:
        """A message dict from a user (not queued), with a fresh message_id."""
        chat = self._chat(chat_id, chat_type, title)
        message_id = chat.next_message_id
        chat.next_message_id += 1
        chat.message_ids.add(message_id)
        user: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
        if last_name:
            user["last_name"] = last_name
        if username:
            user["username"] = username
        msg: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()) if date is None else date,
            "chat": chat.obj,
            "from": user,
            **content,
        }
        if reply_to is not None:
            msg["reply_to_message"] = reply_to
        if quote is not None:
            msg["quote"] = {"text": quote, "position": 0}
        return msg

    def text(self, chat_id: int, text: str, **kw: Any) -> dict[str, Any]:
        msg = self.message(chat_id, text=text, **kw)
        self.push(msg)
        return msg

    def command(
        self, chat_id: int, command: str, args: str = "", *, mention: str | None = None, **kw: Any
    ) -> dict[str, Any]:
        """``/command[@mention] args`` with the bot_command entity Telegram adds."""
        head = f"/{command}" + (f"@{mention}" if mention else "")
        text = f"{head} {args}" if args else head
        entities = [{"type": "bot_command", "offset": 0, "length": utf16_len(head)}]
        msg = self.message(chat_id, text=text, entities=entities, **kw)
        self.push(msg)
        return msg

    def photo(
        self, chat_id: int, data: bytes, *, caption: str | None = None, **kw: Any
    ) -> dict[str, Any]:
        """A photo in three sizes; only the largest holds `data`."""
        sizes = []
        for width, blob in [(90, b"thumb"), (320, b"medium-size"), (1280, data)]:
            file_id = self.add_file(blob, suffix=".jpg")
            sizes.append(
                {
                    "file_id": file_id,
                    "file_unique_id": f"U{file_id}",
                    "width": width,
                    "height": width * 3 // 4,
                    "file_size": len(blob),
                }
            )
        content: dict[str, Any] = {"photo": sizes}
        if caption is not None:
            content["caption"] = caption
        msg = self.message(chat_id, **content, **kw)
        self.push(msg)
        return msg

    def document(
        self,
        chat_id: int,
        data: bytes,
        file_name: str | None,
        *,
        mime_type: str = "application/octet-stream",
        caption: str | None = None,
        declared_size: int | None = None,
        **kw: Any,
    ) -> dict[str, Any]:
        file_id = self.add_file(data, declared_size=declared_size)
        doc: dict[str, Any] = {
            "file_id": file_id,
            "file_unique_id": f"U{file_id}",
            "mime_type": mime_type,
            "file_size": len(data) if declared_size is None else declared_size,
        }
        if file_name is not None:
            doc["file_name"] = file_name
        content: dict[str, Any] = {"document": doc}
        if caption is not None:
            content["caption"] = caption
        msg = self.message(chat_id, **content, **kw)
        self.push(msg)
        return msg

    def media(self, chat_id: int, kind: str, **kw: Any) -> dict[str, Any]:
        """A voice, sticker, video, location... message with a minimal valid payload."""
        file_id = self.add_file(b"media")
        payloads: dict[str, Any] = {
            "voice": {"file_id": file_id, "file_unique_id": "Uv", "duration": 3},
            "audio": {"file_id": file_id, "file_unique_id": "Ua", "duration": 3},
            "video": {
                "file_id": file_id,
                "file_unique_id": "Uvid",
                "width": 1,
                "height": 1,
                "duration": 1,
            },
            "video_note": {
                "file_id": file_id,
                "file_unique_id": "Uvn",
                "length": 1,
                "duration": 1,
            },
            "sticker": {
                "file_id": file_id,
                "file_unique_id": "Us",
                "type": "regular",
                "width": 512,
                "height": 512,
                "is_animated": False,
                "is_video": False,
            },
            "location": {"latitude": 52.5, "longitude": 13.4},
            "contact": {"phone_number": "+100", "first_name": "Bob"},
            "dice": {"emoji": "🎲", "value": 3},
            "new_chat_members": [{"id": 7, "is_bot": False, "first_name": "New"}],
        }
        msg = self.message(chat_id, **{kind: payloads[kind]}, **kw)
        self.push(msg)
        return msg

    # ---------------------------------------------------------------- waiting

    async def wait_sent(self, chat_id: int, count: int = 1, timeout: float = 10) -> list[Sent]:
        """Waits until `count` messages were sent to `chat_id`; returns them."""
        await self.wait_for(lambda: len(self.sent_to(chat_id)) >= count, timeout)
        return self.sent_to(chat_id)

    async def wait_calls(
        self,
        method: str,
        count: int = 1,
        timeout: float = 10,
        where: Callable[[Call], bool] | None = None,
    ) -> list[Call]:
        """Waits until `count` calls of `method` (matching `where`) arrived; returns them."""

        def calls() -> list[Call]:
            return [
                c
                for c in self.calls
                if c.method.lower() == method.lower() and (where is None or where(c))
            ]

        await self.wait_for(lambda: len(calls()) >= count, timeout)
        return calls()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10) -> None:
        """Waits until `predicate` holds; it is re-checked whenever the server's state changes,
        so it must depend on that state only."""
        async with asyncio.timeout(timeout):
            while True:
                changed = self._changed
                if predicate():
                    return
                await changed.wait()

    def sent_to(self, chat_id: int) -> list[Sent]:
        return [s for s in self.sent if s.chat_id == chat_id]

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method.lower() == method.lower()]

    # ---------------------------------------------------------------- internals

    def _bump(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _chat(self, chat_id: int, chat_type: str = "private", title: str = "") -> _Chat:
        chat = self._chats.get(chat_id)
        if chat is None:
            obj: dict[str, Any] = {"id": chat_id, "type": chat_type}
            if chat_type == "private":
                obj["first_name"] = "Ann"
            else:
                obj["title"] = title or "Test group"
            chat = self._chats[chat_id] = _Chat(obj)
        return chat

    async def _params(self, request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            body = await request.json()
            return dict(body) if isinstance(body, dict) else {}
        if request.method == "GET":
            raw: dict[str, Any] = dict(request.query)
        else:
            raw = dict(await request.post())
        params: dict[str, Any] = {}
        for key, value in raw.items():
            if isinstance(value, web.FileField):
                params[key] = value  # an upload: sendPhoto/sendDocument read it
                continue
            if not isinstance(value, str):
                continue
            if key in _JSON_FIELDS:
                params[key] = json.loads(value)
            elif key in _INT_FIELDS:
                params[key] = int(value)
            else:
                params[key] = value
        return params

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        params = await self._params(request)
        call = Call(method, params, time.monotonic())
        self.calls.append(call)
        self._bump()
        fault = self._faults.get(method.lower())
        if fault is not None:
            fault.seen += 1
            if fault.seen % fault.every == 0:
                call.status = 0
                return await self._broken(request, method, fault.kind)
        failures = self._failures.get(method.lower())
        if failures:
            failure = failures[0]
            failure.times -= 1
            if failure.times <= 0:
                failures.popleft()
            call.status = failure.status
            return _error(failure.status, failure.description, failure.retry_after)
        handler = getattr(self, f"_m_{method.lower()}", None)
        if handler is None:
            call.status = 404
            return _error(404, "Not Found")
        try:
            result = await handler(params)
        except _ApiError as exc:
            call.status = exc.status
            return _error(exc.status, exc.description)
        return web.json_response({"ok": True, "result": result})

    async def _broken(self, request: web.Request, method: str, kind: str) -> web.StreamResponse:
        if kind == "hang":
            self.hanging += 1
            try:
                await self.wait_for(
                    lambda: self._closing or method.lower() not in self._faults, 3600
                )
            finally:
                self.hanging -= 1
            kind = "drop"
        if kind == "drop":
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)  # never reaches the client
        if kind == "html":
            html = "<html><body><h1>502 Bad Gateway</h1></body></html>"
            return web.Response(text=html, content_type="text/html")
        if kind == "invalid_json":
            return web.Response(text='{"ok": true, "result": [', content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.content_length = 4096
        await resp.prepare(request)
        await resp.write(b'{"ok": true, "result": [{"update_id"')
        if request.transport is not None:
            request.transport.abort()
        return resp

    async def _download(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        path = request.match_info["path"]
        for f in self._files.values():
            if f.path == path:
                return web.Response(body=f.data, content_type="application/octet-stream")
        return _error(404, "Not Found")

    async def _m_getme(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": BOT_ID,
            "is_bot": True,
            "first_name": "Klaw",
            "username": self.username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    async def _m_getupdates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = params.get("offset")
        if offset:
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
        limit = params.get("limit") or 100
        deadline = asyncio.get_running_loop().time() + float(params.get("timeout") or 0)
        while True:
            changed = self._changed
            pending = [u for u in self._updates if not offset or u["update_id"] >= offset]
            if pending or self._closing:
                return pending[:limit]
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return []
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                return []

    def _target(self, params: dict[str, Any]) -> _Chat:
        try:
            chat_id = int(params.get("chat_id", ""))
        except ValueError:
            raise _ApiError(400, "Bad Request: chat not found") from None
        chat = self._chats.get(chat_id)
        if chat is None:
            raise _ApiError(400, "Bad Request: chat not found")
        if chat.blocked:
            raise _ApiError(403, "Forbidden: bot was blocked by the user")
        return chat

    async def _m_sendmessage(self, params: dict[str, Any]) -> dict[str, Any]:
        chat = self._target(params)
        text, visible, parse_mode, entities = self._visible(params)
        if not visible:
            raise _ApiError(400, "Bad Request: message text is empty")
        reply_to = self._reply_to(chat, params)
        message_id = self._new_message_id(chat)
        self.sent.append(
            Sent(
                chat_id=chat.obj["id"],
                message_id=message_id,
                text=text,
                parse_mode=parse_mode,
                visible=visible,
                entities=entities,
                reply_to=reply_to,
                at=time.monotonic(),
            )
        )
        self._bump()
        return self._bot_message(chat, message_id, text=visible)

    def _reply_to(self, chat: _Chat, params: dict[str, Any]) -> int | None:
        if "reply_parameters" not in params:
            return None
        reply = params["reply_parameters"]
        reply_to = int(reply["message_id"])
        if reply_to not in chat.message_ids and not reply.get("allow_sending_without_reply"):
            raise _ApiError(400, "Bad Request: message to be replied not found")
        return reply_to

    @staticmethod
    def _new_message_id(chat: _Chat) -> int:
        message_id = chat.next_message_id
        chat.next_message_id += 1
        chat.message_ids.add(message_id)
        return message_id

    @staticmethod
    def _bot_message(chat: _Chat, message_id: int, **fields: Any) -> dict[str, Any]:
        return {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": chat.obj,
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "Klaw"},
            **fields,
        }

    async def _m_sendphoto(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._upload("sendPhoto", "photo", params)

    async def _m_senddocument(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._upload("sendDocument", "document", params)

    def _upload(self, method: str, field_name: str, params: dict[str, Any]) -> dict[str, Any]:
        chat = self._target(params)
        upload = params.get(field_name)
        if not isinstance(upload, web.FileField):
            raise _ApiError(400, f"Bad Request: there is no {field_name} in the request")
        data = upload.file.read()
        if len(data) > UPLOAD_MAX:
            raise _ApiError(413, "Request Entity Too Large")
        if not data:
            raise _ApiError(400, "Bad Request: file must be non-empty")
        if method == "sendPhoto":
            if len(data) > PHOTO_MAX:
                raise _ApiError(400, "Bad Request: PHOTO_TOO_BIG")
            if not data.startswith((b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")):
                raise _ApiError(400, "Bad Request: IMAGE_PROCESS_FAILED")
        caption = str(params.get("caption", ""))
        parse_mode = params.get("parse_mode")
        visible = caption
        if caption and parse_mode is not None:
            try:
                visible, _ = parse_html(caption)
            except HtmlError as exc:
                raise _ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        if utf16_len(visible) > MAX_CAPTION:
            raise _ApiError(400, "Bad Request: message caption is too long")
        reply_to = self._reply_to(chat, params)
        message_id = self._new_message_id(chat)
        self.uploads.append(
            Upload(
                chat_id=chat.obj["id"],
                message_id=message_id,
                method=method,
                filename=upload.filename,
                content_type=upload.content_type,
                data=data,
                caption=caption,
                parse_mode=parse_mode,
                reply_to=reply_to,
            )
        )
        self._bump()
        media: dict[str, Any] = {"file_id": f"up{message_id}", "file_size": len(data)}
        return self._bot_message(
            chat,
            message_id,
            **{field_name: [media] if method == "sendPhoto" else media},
            **({"caption": visible} if visible else {}),
        )

    def uploads_to(self, chat_id: int) -> list[Upload]:
        return [u for u in self.uploads if u.chat_id == chat_id]

    def _visible(self, params: dict[str, Any]) -> tuple[str, str, str | None, list[Entity]]:
        text = str(params.get("text", ""))
        parse_mode = params.get("parse_mode")
        entities: list[Entity] = []
        if parse_mode is None:
            visible = text
        elif str(parse_mode).lower() == "html":
            try:
                visible, entities = parse_html(text)
            except HtmlError as exc:
                raise _ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        else:
            raise _ApiError(400, f"Bad Request: unsupported parse_mode {parse_mode!r} (fake)")
        visible = visible.strip()
        if utf16_len(visible) > MAX_TEXT:
            raise _ApiError(400, "Bad Request: message is too long")
        return text, visible, parse_mode, entities

    async def _m_sendmessagedraft(self, params: dict[str, Any]) -> bool:
        if not self.drafts_supported:
            raise _ApiError(404, "Not Found")
        chat = self._target(params)
        if chat.obj.get("type") != "private":
            raise _ApiError(400, "Bad Request: drafts can be sent only to private chats")
        draft_id = int(params.get("draft_id", 0))
        if draft_id == 0:
            raise _ApiError(400, "Bad Request: draft_id must be non-zero")
        _, visible, _, _ = self._visible(params)
        self.drafts.append(DraftCall(chat.obj["id"], draft_id, visible))
        self._bump()
        return True

    async def _m_editmessagetext(self, params: dict[str, Any]) -> dict[str, Any]:
        chat = self._target(params)
        message_id = int(params.get("message_id", 0))
        index = next(
            (
                i
                for i, m in enumerate(self.sent)
                if m.chat_id == chat.obj["id"] and m.message_id == message_id
            ),
            None,
        )
        if index is None:
            raise _ApiError(400, "Bad Request: message to edit not found")
        text, visible, parse_mode, entities = self._visible(params)
        if not visible:
            raise _ApiError(400, "Bad Request: message text is empty")
        old = self.sent[index]
        if old.visible == visible and old.entities == entities:
            raise _ApiError(
                400,
                "Bad Request: message is not modified: specified new message content and "
                "reply markup are exactly the same as a current content and reply markup "
                "of the message",
            )
        new = dataclasses.replace(
            old,
            text=text,
            parse_mode=parse_mode,
            visible=visible,
            entities=entities,
            at=time.monotonic(),
        )
        self.sent[index] = new
        self.edits.append(new)
        self._bump()
        return {
            "message_id": message_id,
            "date": int(time.time()),
            "edit_date": int(time.time()),
            "chat": chat.obj,
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "Klaw"},
            "text": visible,
        }

    async def _m_sendchataction(self, params: dict[str, Any]) -> bool:
        self._target(params)
        if params.get("action") not in _ACTIONS:
            raise _ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _m_setmycommands(self, params: dict[str, Any]) -> bool:
        commands = params.get("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            raise _ApiError(400, "Bad Request: commands must be an array")
        for cmd in commands:
            if not _COMMAND_RE.fullmatch(str(cmd.get("command", ""))):
                raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not 1 <= len(str(cmd.get("description", ""))) <= 256:
                raise _ApiError(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
        self.commands = commands
        return True

    async def _m_getfile(self, params: dict[str, Any]) -> dict[str, Any]:
        f = self._files.get(str(params.get("file_id", "")))
        if f is None:
            raise _ApiError(400, "Bad Request: invalid file_id")
        size = len(f.data) if f.declared_size is None else f.declared_size
        if size > self.get_file_limit:
            raise _ApiError(400, "Bad Request: file is too big")
        return {
            "file_id": params["file_id"],
            "file_unique_id": f"U{params['file_id']}",
            "file_size": size,
            "file_path": f.path,
        }


class _ApiError(Exception):
    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.description = description


def _error(status: int, description: str, retry_after: int | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    return web.json_response(body, status=status)

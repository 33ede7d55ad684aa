"""A local Discord for tests: the REST API and the gateway websocket, on 127.0.0.1.

The real discord.py talks to it as to discord.com: REST under ``/api/v10`` with
``Authorization: Bot <token>`` (JSON or multipart bodies, Discord's error bodies, its
rate-limit headers and 429s), and the gateway at the URL ``GET /gateway/bot`` names:
JSON frames (zlib-stream compressed when asked, as discord.py does), HELLO (10) →
IDENTIFY (2) → READY and GUILD_CREATE dispatches, HEARTBEAT (1) / ACK (11), dispatches
with sequence numbers, RESUME (6) → the missed events then RESUMED, INVALID_SESSION (9),
RECONNECT (7), and the close codes 4004 (bad token) and 4014 (disallowed intents).

What it models, because the channel depends on it:
- A session keeps every dispatch it sent; a RESUME replays those after the client's
  sequence number. Events of a time without any session (the bot was off) are not
  replayed, only kept in the channels' history (``GET /channels/{id}/messages``).
- Messages, channels and users are snowflakes with Discord's epoch, so ids grow with
  time and say when a message was sent.
- Sending a message checks the 2,000-character limit, an empty message, unknown
  channels (404), users who block the bot (403); a per-channel bucket answers with the
  X-RateLimit headers, and a request past an exhausted bucket gets a 429 (counted in
  `violations`).
- Slash commands: bulk overwrite and listing; an invocation is INTERACTION_CREATE, its
  callback (once only) and the edit of the original response are recorded.
- Message content is empty for a server message that does not mention the bot when the
  client did not ask for the Message Content intent (Discord's rule).

Tests script it with `dm`, `channel`, `message`, `slash`, `fail`, `drop`, `drop_after`,
`invalidate` and `reconnect`, and break it with `acks = False` (heartbeats unanswered),
`silent = True` (the connection stays open, nothing comes), `garbage` (a frame that is
not the gateway's) and `cut_every` (every n-th connection cut at once), and wait for
effects with `wait_for` / `wait_sent` (asyncio events, no sleeping). Every request is
recorded with a monotonic timestamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import time
import uuid
import zlib
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from aiohttp import web

TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAx.GkLaWw.fake-klaw-token_for-the-tests-only"
EPOCH_MS = 1_420_070_400_000  # Discord's epoch: 2015-01-01
BOT_ID = 100_000_000_000_000_001
APP_ID = BOT_ID  # a bot's application id is its user id
BOT_NAME = "Klaw"
USER_ID = 200_000_000_000_000_042
OTHER_ID = 200_000_000_000_000_077
MAX_CONTENT = 2000
INTENT_GUILDS = 1 << 0
INTENT_GUILD_MESSAGES = 1 << 9
INTENT_DM_MESSAGES = 1 << 12
INTENT_MESSAGE_CONTENT = 1 << 15
VOICE_FLAG = 1 << 13
_COMMAND_NAME = re.compile(r"[-_a-z0-9]{1,32}")


def snowflake_time(snowflake: int) -> datetime:
    return datetime.fromtimestamp(((snowflake >> 22) + EPOCH_MS) / 1000, UTC)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


# --------------------------------------------------------------------------- records


@dataclass
class Call:
    method: str
    route: str  # "POST /channels/{channel}/messages"
    params: dict[str, Any]  # the JSON body (payload_json of a multipart one) or the query
    at: float
    status: int = 200


@dataclass
class Sent:
    channel_id: int
    message_id: int
    content: str
    reference: int | None
    allowed_mentions: dict[str, Any] | None
    files: list[tuple[str, bytes]]
    at: float


@dataclass
class Interaction:
    id: int
    token: str
    channel_id: int
    name: str
    at: float  # when it was dispatched
    callback: dict[str, Any] | None = None
    callback_at: float | None = None
    edits: list[str] = field(default_factory=list)
    expired: bool = False


@dataclass
class _Failure:
    status: int
    retry_after: float | None
    times: int
    code: int
    message: str


@dataclass
class _Channel:
    id: int
    type: int  # 0 a server text channel, 1 a DM
    name: str
    guild_id: int | None = None
    recipient: dict[str, Any] | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)  # oldest first
    blocked: bool = False
    bucket_start: float = 0.0
    bucket_used: int = 0


@dataclass
class _Session:
    id: str
    intents: int
    seq: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Conn:
    ws: web.WebSocketResponse
    request: web.Request
    compressor: Any  # zlib compressobj, or None for plain text frames
    session: _Session | None = None
    sent: int = 0  # the highest sequence number sent on this connection
    ready: bool = False  # READY or RESUMED done: the writer may send dispatches
    messages_sent: int = 0
    closed: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class FakeDiscord:
    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.url = ""
        self.ws_url = ""
        self.heartbeat_ms = 41_250
        self.content_intent_allowed = True  # the Developer Portal toggle
        self.resumable = True  # False: a RESUME gets INVALID_SESSION
        self.replay_overlap = 0  # >0: a RESUME also replays that many already-sent events
        self.bucket = (50, 1.0)  # messages per channel per window (s)
        self.calls: list[Call] = []
        self.sent: list[Sent] = []
        self.edits: list[Sent] = []  # PATCHed bot messages (streamed previews)
        self.gateway_ops: list[dict[str, Any]] = []  # what clients sent on the websocket
        self.identifies = 0
        self.resumes = 0
        self.violations = 0  # requests made while their bucket was exhausted
        self.commands: list[dict[str, Any]] = []
        self.command_puts = 0
        self.interactions: dict[int, Interaction] = {}
        self.users: dict[int, dict[str, Any]] = {}
        self.channels: dict[int, _Channel] = {}
        self.guilds: dict[int, dict[str, Any]] = {}
        self.files: dict[str, bytes] = {}
        self._last_id = 0
        self._session: _Session | None = None
        self._conns: list[_Conn] = []
        self._drop_after: int | None = None
        self.acks = True  # False: HEARTBEATs go unacknowledged (a zombie connection)
        self.silent = False  # True: nothing at all is sent on any connection (not even HELLO)
        self.cut_every = 0  # n > 0: every n-th websocket connection is cut once accepted
        self.connections = 0  # websocket connections accepted so far
        self._failures: dict[str, deque[_Failure]] = defaultdict(deque)
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.user(BOT_ID, BOT_NAME, bot=True)
        self.user(USER_ID, "ann", global_name="Ann Lee")
        self.user(OTHER_ID, "bo", global_name="Bo")

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> str:
        app = web.Application()
        api = "/api/v10"
        r = app.router
        r.add_get(f"{api}/users/@me", self._rest(self._me))
        r.add_get(f"{api}/oauth2/applications/@me", self._rest(self._application))
        r.add_get(f"{api}/gateway", self._rest(self._gateway_url, auth=False))
        r.add_get(f"{api}/gateway/bot", self._rest(self._gateway_url))
        r.add_get(f"{api}/channels/{{channel}}/messages", self._rest(self._history))
        r.add_post(f"{api}/channels/{{channel}}/messages", self._rest(self._create_message))
        r.add_patch(
            f"{api}/channels/{{channel}}/messages/{{message}}", self._rest(self._edit_message)
        )
        r.add_post(f"{api}/channels/{{channel}}/typing", self._rest(self._typing))
        r.add_get(f"{api}/applications/{{app}}/commands", self._rest(self._get_commands))
        r.add_put(f"{api}/applications/{{app}}/commands", self._rest(self._put_commands))
        r.add_post(
            f"{api}/interactions/{{id}}/{{token}}/callback", self._rest(self._callback, auth=False)
        )
        r.add_patch(
            f"{api}/webhooks/{{app}}/{{token}}/messages/@original",
            self._rest(self._edit_original, auth=False),
        )
        r.add_get("/cdn/{path:.+}", self._cdn)
        r.add_get("/gateway", self._gateway)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self.ws_url = f"ws://127.0.0.1:{port}/gateway"
        return self.url

    async def close(self) -> None:
        for conn in list(self._conns):
            await self._close_conn(conn, 1001)
        if self._runner is not None:
            await self._runner.cleanup()

    # ---------------------------------------------------------------- the world

    def snowflake(self) -> int:
        value = (int(time.time() * 1000) - EPOCH_MS) << 22
        self._last_id = max(value, self._last_id + 1)
        return self._last_id

    def user(
        self, user_id: int, username: str, *, global_name: str | None = None, bot: bool = False
    ) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": str(user_id),
            "username": username,
            "discriminator": "0",
            "global_name": global_name,
            "avatar": None,
        }
        if bot:
            obj["bot"] = True
        self.users[user_id] = obj
        return obj

    def dm(self, user_id: int = USER_ID) -> int:
        """The DM channel between the bot and `user_id` (created on first use)."""
        for ch in self.channels.values():
            if ch.type == 1 and ch.recipient and int(ch.recipient["id"]) == user_id:
                return ch.id
        cid = self.snowflake()
        self.channels[cid] = _Channel(cid, 1, "", recipient=self.users[user_id])
        return cid

    def guild(self, name: str = "Test server") -> int:
        gid = self.snowflake()
        self.guilds[gid] = {"id": str(gid), "name": name}
        return gid

    def channel(self, guild_id: int, name: str = "general") -> int:
        """A text channel of the server `guild_id`."""
        cid = self.snowflake()
        self.channels[cid] = _Channel(cid, 0, name, guild_id=guild_id)
        return cid

    def block(self, channel_id: int) -> None:
        """The user of this DM blocked the bot: sends get 403 (code 50007)."""
        self.channels[channel_id].blocked = True

    def message(
        self,
        channel_id: int,
        content: str = "",
        *,
        author: int = USER_ID,
        mention: bool = False,
        reply_to: dict[str, Any] | None = None,
        attachments: Sequence[tuple[str, bytes, str]] = (),
        declared_size: int | None = None,
        flags: int = 0,
        stickers: bool = False,
        poll: bool = False,
        kind: int = 0,
        dispatch: bool = True,
    ) -> dict[str, Any]:
        """A user's message: kept in the channel's history and, if a session is open,
        dispatched as MESSAGE_CREATE. `mention` starts it with ``<@bot>``."""
        ch = self.channels[channel_id]
        mid = self.snowflake()
        if mention:
            content = f"<@{BOT_ID}> {content}"
        mentions = [self.users[BOT_ID]] if mention else []
        atts = []
        for name, data, ctype in attachments:
            aid = self.snowflake()
            path = f"attachments/{channel_id}/{aid}/{quote(name, safe='')}"
            self.files[str(aid)] = data
            atts.append(
                {
                    "id": str(aid),
                    "filename": name,
                    "size": len(data) if declared_size is None else declared_size,
                    "url": f"{self.url}/cdn/{path}?ex=1&is=2&hm=3",
                    "proxy_url": f"{self.url}/cdn/{path}",
                    "content_type": ctype,
                    # A voice message's attachment carries its length and waveform.
                    **({"duration_secs": 3.5, "waveform": "AAAA"} if flags & VOICE_FLAG else {}),
                }
            )
        msg: dict[str, Any] = {
            "id": str(mid),
            "channel_id": str(channel_id),
            "type": 19 if reply_to is not None and kind == 0 else kind,
            "content": content,
            "author": self.users[author],
            "attachments": atts,
            "embeds": [],
            "mentions": mentions,
            "mention_roles": [],
            "mention_everyone": False,
            "pinned": False,
            "tts": False,
            "timestamp": snowflake_time(mid).isoformat(),
            "edited_timestamp": None,
            "flags": flags,
            "components": [],
        }
        if ch.guild_id is not None:
            msg["guild_id"] = str(ch.guild_id)
            msg["member"] = {"roles": [], "joined_at": "2026-01-01T00:00:00+00:00", "flags": 0}
        if reply_to is not None:
            msg["message_reference"] = {
                "type": 0,
                "message_id": reply_to["id"],
                "channel_id": str(channel_id),
            }
            msg["referenced_message"] = reply_to
            if int(reply_to["author"]["id"]) == BOT_ID:
                msg["mentions"] = [*mentions, self.users[BOT_ID]]  # a reply pings its author
        if stickers:
            msg["sticker_items"] = [{"id": str(self.snowflake()), "name": "wave", "format_type": 1}]
        if poll:
            msg["poll"] = {
                "question": {"text": "Lunch?"},
                "answers": [{"answer_id": 1, "poll_media": {"text": "yes"}}],
                "expiry": "2027-01-01T00:00:00+00:00",
                "allow_multiselect": False,
                "layout_type": 1,
            }
        ch.messages.append(msg)
        if dispatch:
            self.dispatch("MESSAGE_CREATE", msg)
        self._bump()
        return msg

    def slash(
        self, channel_id: int, name: str, args: str | None = None, *, user_id: int = USER_ID
    ) -> Interaction:
        """A user runs /name [args]: INTERACTION_CREATE (application command)."""
        ch = self.channels[channel_id]
        iid = self.snowflake()
        token = f"itoken-{uuid.uuid4().hex}"
        options = [{"type": 3, "name": "args", "value": args}] if args is not None else []
        channel_obj: dict[str, Any] = {"id": str(channel_id), "type": ch.type}
        data: dict[str, Any] = {
            "id": str(iid),
            "application_id": str(APP_ID),
            "type": 2,
            "token": token,
            "version": 1,
            "channel_id": str(channel_id),
            "data": {"id": str(self.snowflake()), "name": name, "type": 1, "options": options},
            "locale": "en-US",
            "app_permissions": "2048",
            "entitlements": [],
            "attachment_size_limit": 10 * 1024 * 1024,
            "authorizing_integration_owners": {"0": str(ch.guild_id or USER_ID)},
        }
        if ch.guild_id is not None:
            channel_obj.update(name=ch.name, guild_id=str(ch.guild_id), position=0)
            data["guild_id"] = str(ch.guild_id)
            data["context"] = 0
            data["member"] = {
                "user": self.users[user_id],
                "roles": [],
                "joined_at": "2026-01-01T00:00:00+00:00",
                "permissions": "2048",
                "deaf": False,
                "mute": False,
                "flags": 0,
            }
        else:
            channel_obj["recipients"] = [self.users[user_id]]
            data["context"] = 1
            data["user"] = self.users[user_id]
        data["channel"] = channel_obj
        record = Interaction(iid, token, channel_id, name, time.monotonic())
        self.interactions[iid] = record
        self.dispatch("INTERACTION_CREATE", data)
        return record

    # ---------------------------------------------------------------- scripting

    def fail(
        self,
        route: str,
        *,
        times: int = 1,
        status: int = 429,
        retry_after: float | None = None,
        code: int = 0,
        message: str | None = None,
    ) -> None:
        """The next `times` requests of `route` ("POST /channels/{channel}/messages")
        fail; a 429 carries `retry_after` (default 1 s)."""
        if status == 429 and retry_after is None:
            retry_after = 1.0
        text = message or ("You are being rate limited." if status == 429 else "scripted")
        self._failures[route].append(_Failure(status, retry_after, times, code, text))

    def drop(self) -> None:
        """The network drops: every open gateway connection is cut without a close frame."""
        for conn in list(self._conns):
            self._abort(conn)

    def drop_after(self, count: int) -> None:
        """Cut the connection right after it has sent `count` more MESSAGE_CREATEs."""
        for conn in self._conns:
            conn.messages_sent = 0
        self._drop_after = count

    async def garbage(self, kind: str = "text") -> None:
        """Sends every open connection a frame no gateway would: "text" (an HTML page
        instead of JSON) or "binary" (bytes that break the zlib stream)."""
        for conn in list(self._conns):
            if conn.closed or conn.ws.closed:
                continue
            with contextlib.suppress(ConnectionError):
                if kind == "text":
                    await conn.ws.send_str("<html><body>502 Bad Gateway</body></html>")
                else:
                    await conn.ws.send_bytes(b"\x00\xffnot a zlib stream\x13\x37" * 4)

    def invalidate(self) -> None:
        """Discord forgets the session: the next RESUME gets INVALID_SESSION."""
        self._session = None

    async def reconnect(self) -> None:
        """Discord asks the client to reconnect (op 7), as before a server restart."""
        for conn in list(self._conns):
            await self._send(conn, {"op": 7, "d": None})

    def expire(self, interaction: Interaction) -> None:
        """The interaction's token is no longer valid (15 minutes passed)."""
        interaction.expired = True

    # ---------------------------------------------------------------- waiting

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10) -> None:
        """Waits until `predicate` holds; re-checked whenever the fake's state changes."""
        async with asyncio.timeout(timeout):
            while True:
                changed = self._changed
                if predicate():
                    return
                await changed.wait()

    async def wait_sent(self, channel_id: int, count: int = 1, timeout: float = 10) -> list[Sent]:
        await self.wait_for(lambda: len(self.sent_to(channel_id)) >= count, timeout)
        return self.sent_to(channel_id)

    def sent_to(self, channel_id: int) -> list[Sent]:
        return [s for s in self.sent if s.channel_id == channel_id]

    def calls_of(self, route: str) -> list[Call]:
        return [c for c in self.calls if c.route == route]

    @property
    def connected(self) -> bool:
        return any(c.ready and not c.closed for c in self._conns)

    # ---------------------------------------------------------------- gateway

    def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """A dispatch of the current session (none: nobody hears it)."""
        session = self._session
        if session is None:
            return
        session.seq += 1
        session.events.append({"op": 0, "t": event, "s": session.seq, "d": data})
        self._bump()

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        compress = request.query.get("compress")
        if compress not in (None, "zlib-stream"):
            raise web.HTTPBadRequest(text=f"the fake speaks zlib-stream only, not {compress}")
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        compressor = zlib.compressobj() if compress else None
        conn = _Conn(ws, request, compressor)
        self._conns.append(conn)
        self.connections += 1
        if self.cut_every and self.connections % self.cut_every == 0:
            self._abort(conn)
            return ws
        writer = asyncio.create_task(self._writer(conn))
        try:
            await self._send(conn, {"op": 10, "d": {"heartbeat_interval": self.heartbeat_ms}})
            async for frame in ws:
                if frame.type is not web.WSMsgType.TEXT:
                    continue
                payload = json.loads(frame.data)
                self.gateway_ops.append(payload)
                self._bump()
                op = payload.get("op")
                if op == 1:
                    if self.acks:
                        await self._send(conn, {"op": 11})
                elif op == 2:
                    await self._identify(conn, payload.get("d") or {})
                elif op == 6:
                    await self._resume(conn, payload.get("d") or {})
        finally:
            conn.closed = True
            writer.cancel()
            if conn in self._conns:
                self._conns.remove(conn)
            self._bump()
        return ws

    async def _identify(self, conn: _Conn, d: dict[str, Any]) -> None:
        self.identifies += 1
        if d.get("token") != self.token:
            await self._close_conn(conn, 4004, "Authentication failed.")
            return
        intents = int(d.get("intents") or 0)
        if intents & INTENT_MESSAGE_CONTENT and not self.content_intent_allowed:
            await self._close_conn(conn, 4014, "Disallowed intent(s).")
            return
        session = _Session(uuid.uuid4().hex, intents)
        self._session = session
        conn.session = session
        async with conn.lock:
            guilds = [{"id": str(g), "unavailable": True} for g in self.guilds]
            self.dispatch(
                "READY",
                {
                    "v": 10,
                    "user": self.users[BOT_ID],
                    "guilds": guilds,
                    "session_id": session.id,
                    "resume_gateway_url": self.ws_url,
                    "application": {"id": str(APP_ID), "flags": 0},
                },
            )
            for gid in self.guilds:
                self.dispatch("GUILD_CREATE", self._guild_payload(gid))
            conn.sent = 0
            conn.ready = True
        self._bump()

    async def _resume(self, conn: _Conn, d: dict[str, Any]) -> None:
        self.resumes += 1
        session = self._session
        if (
            d.get("token") != self.token
            or session is None
            or d.get("session_id") != session.id
            or not self.resumable
        ):
            await self._send(conn, {"op": 9, "d": False})
            return
        conn.session = session
        async with conn.lock:
            seq = max(0, int(d.get("seq") or 0) - self.replay_overlap)
            for event in session.events:
                if event["s"] > seq:
                    await self._send_locked(conn, event)
            conn.sent = session.seq
            await self._send_locked(conn, {"op": 0, "t": "RESUMED", "s": None, "d": {}})
            conn.ready = True
        self._bump()

    async def _writer(self, conn: _Conn) -> None:
        """Sends the session's new dispatches on this connection, in order."""
        while not conn.closed:
            changed = self._changed
            session = conn.session
            if conn.ready and session is not None and session is self._session:
                async with conn.lock:
                    for event in [e for e in session.events if e["s"] > conn.sent]:
                        if conn.closed:
                            return
                        await self._send_locked(conn, event)
                        conn.sent = event["s"]
                        if event["t"] == "MESSAGE_CREATE":
                            conn.messages_sent += 1
                            if self._drop_after is not None and (
                                conn.messages_sent >= self._drop_after
                            ):
                                self._drop_after = None
                                self._abort(conn)
                                return
            await changed.wait()

    async def _send(self, conn: _Conn, payload: dict[str, Any]) -> None:
        async with conn.lock:
            await self._send_locked(conn, payload)

    async def _send_locked(self, conn: _Conn, payload: dict[str, Any]) -> None:
        if conn.closed or conn.ws.closed or self.silent:
            return
        data = json.dumps(payload)
        try:
            if conn.compressor is None:
                await conn.ws.send_str(data)
            else:
                raw = conn.compressor.compress(data.encode()) + conn.compressor.flush(
                    zlib.Z_SYNC_FLUSH
                )
                await conn.ws.send_bytes(raw)
        except ConnectionError:
            conn.closed = True

    def _abort(self, conn: _Conn) -> None:
        conn.closed = True
        transport = conn.request.transport
        if transport is not None:
            transport.abort()
        self._bump()

    async def _close_conn(self, conn: _Conn, code: int, message: str = "") -> None:
        conn.closed = True
        if not conn.ws.closed:
            await conn.ws.close(code=code, message=message.encode())
        self._bump()

    def _guild_payload(self, gid: int) -> dict[str, Any]:
        channels = [
            {
                "id": str(c.id),
                "type": 0,
                "name": c.name,
                "position": n,
                "permission_overwrites": [],
                "nsfw": False,
                "parent_id": None,
            }
            for n, c in enumerate(ch for ch in self.channels.values() if ch.guild_id == gid)
        ]
        return {
            **self.guilds[gid],
            "unavailable": False,
            "channels": channels,
            "threads": [],
            "roles": [],
            "emojis": [],
            "stickers": [],
            "features": [],
            "members": [],
            "voice_states": [],
            "presences": [],
            "member_count": 2,
            "large": False,
            "joined_at": "2026-01-01T00:00:00+00:00",
        }

    # ---------------------------------------------------------------- REST

    def _rest(
        self, handler: Callable[..., Any], *, auth: bool = True
    ) -> Callable[[web.Request], Any]:
        async def serve(request: web.Request) -> web.StreamResponse:
            resource = request.match_info.route.resource
            path = resource.canonical if resource is not None else request.path
            route = f"{request.method} {path.removeprefix('/api/v10')}"
            params, files = await _body(request)
            call = Call(request.method, route, params, time.monotonic())
            self.calls.append(call)
            self._bump()
            if auth and request.headers.get("Authorization") != f"Bot {self.token}":
                call.status = 401
                return _error(401, 0, "401: Unauthorized")
            failures = self._failures.get(route)
            if failures:
                failure = failures[0]
                failure.times -= 1
                if failure.times <= 0:
                    failures.popleft()
                call.status = failure.status
                if failure.status == 429:
                    return _limited(failure.retry_after or 1.0, global_=False)
                return _error(failure.status, failure.code, failure.message)
            try:
                result = await handler(request, params, files)
            except _ApiError as exc:
                call.status = exc.status
                if exc.status == 429:
                    return _limited(exc.retry_after, global_=False)
                return _error(exc.status, exc.code, exc.message)
            if isinstance(result, web.StreamResponse):
                call.status = result.status
                return result
            return _json(result)

        return serve

    async def _me(self, *_: Any) -> dict[str, Any]:
        return {**self.users[BOT_ID], "verified": True, "mfa_enabled": False, "flags": 0}

    async def _application(self, *_: Any) -> dict[str, Any]:
        return {
            "id": str(APP_ID),
            "name": BOT_NAME,
            "description": "",
            "icon": None,
            "bot_public": False,
            "bot_require_code_grant": False,
            "owner": self.users[USER_ID],
            "verify_key": "0" * 64,
            "flags": 0,
        }

    async def _gateway_url(self, *_: Any) -> dict[str, Any]:
        return {
            "url": self.ws_url,
            "shards": 1,
            "session_start_limit": {
                "total": 1000,
                "remaining": 999,
                "reset_after": 0,
                "max_concurrency": 1,
            },
        }

    def _target(self, request: web.Request) -> _Channel:
        try:
            ch = self.channels.get(int(request.match_info["channel"]))
        except ValueError:
            ch = None
        if ch is None:
            raise _ApiError(404, 10003, "Unknown Channel")
        return ch

    async def _history(self, request: web.Request, params: dict[str, Any], _: Any) -> Any:
        ch = self._target(request)
        limit = min(int(params.get("limit", 50)), 100)
        msgs = ch.messages
        if "after" in params:
            after = int(params["after"])
            picked = [m for m in msgs if int(m["id"]) > after][:limit]
        elif "before" in params:
            before = int(params["before"])
            picked = [m for m in msgs if int(m["id"]) < before][-limit:]
        else:
            picked = msgs[-limit:]
        return list(reversed(picked))  # newest first, as Discord answers

    async def _create_message(
        self, request: web.Request, body: dict[str, Any], files: list[tuple[str, bytes]]
    ) -> web.StreamResponse:
        ch = self._target(request)
        if ch.blocked:
            raise _ApiError(403, 50007, "Cannot send messages to this user")
        now = time.monotonic()
        limit, window = self.bucket
        if now - ch.bucket_start >= window:
            ch.bucket_start, ch.bucket_used = now, 0
        if ch.bucket_used >= limit:
            self.violations += 1
            raise _ApiError(429, 20028, "rate limited", window - (now - ch.bucket_start))
        content = str(body.get("content") or "")
        if utf16_len(content) > MAX_CONTENT:
            raise _ApiError(400, 50035, "Invalid Form Body: content: Must be 2000 or fewer")
        if not content.strip() and not files:
            raise _ApiError(400, 50006, "Cannot send an empty message")
        ref = body.get("message_reference")
        reference: int | None = None
        if isinstance(ref, dict) and ref.get("message_id") is not None:
            reference = int(ref["message_id"])
            known = any(int(m["id"]) == reference for m in ch.messages)
            if not known and ref.get("fail_if_not_exists", True):
                raise _ApiError(400, 50035, "Invalid Form Body: Unknown message")
        ch.bucket_used += 1
        mid = self.snowflake()
        msg = {
            "id": str(mid),
            "channel_id": str(ch.id),
            "type": 19 if reference else 0,
            "content": content,
            "author": self.users[BOT_ID],
            "attachments": [
                {
                    "id": str(self.snowflake()),
                    "filename": n,
                    "size": len(d),
                    "url": "",
                    "proxy_url": "",
                }
                for n, d in files
            ],
            "embeds": [],
            "mentions": [],
            "mention_roles": [],
            "mention_everyone": False,
            "pinned": False,
            "tts": False,
            "timestamp": snowflake_time(mid).isoformat(),
            "edited_timestamp": None,
            "flags": 0,
            "components": [],
        }
        if ch.guild_id is not None:
            msg["guild_id"] = str(ch.guild_id)
        ch.messages.append(msg)
        self.sent.append(
            Sent(ch.id, mid, content, reference, body.get("allowed_mentions"), files, now)
        )
        self.dispatch("MESSAGE_CREATE", msg)  # Discord tells the bot about its own messages too
        self._bump()
        remaining = max(limit - ch.bucket_used, 0)
        reset_after = max(window - (now - ch.bucket_start), 0.001)
        return _json(msg, headers=_bucket_headers(limit, remaining, reset_after))

    async def _edit_message(
        self, request: web.Request, body: dict[str, Any], _: Any
    ) -> web.StreamResponse:
        """PATCH a message of the bot's: its content changes in place (`edits` records it)."""
        ch = self._target(request)
        mid = int(request.match_info["message"])
        msg = next((m for m in ch.messages if int(m["id"]) == mid), None)
        if msg is None:
            raise _ApiError(404, 10008, "Unknown Message")
        if int(msg["author"]["id"]) != BOT_ID:
            raise _ApiError(403, 50005, "Cannot edit a message authored by another user")
        content = str(body.get("content") or "")
        if utf16_len(content) > MAX_CONTENT:
            raise _ApiError(400, 50035, "Invalid Form Body: content: Must be 2000 or fewer")
        msg["content"] = content
        msg["edited_timestamp"] = snowflake_time(self.snowflake()).isoformat()
        for i, sent in enumerate(self.sent):
            if sent.message_id == mid:
                self.sent[i] = dataclasses.replace(sent, content=content, at=time.monotonic())
                self.edits.append(self.sent[i])
        self._bump()
        return _json(msg)

    async def _typing(self, request: web.Request, *_: Any) -> web.StreamResponse:
        ch = self._target(request)
        if ch.blocked:
            raise _ApiError(403, 50007, "Cannot send messages to this user")
        return web.Response(status=204)

    async def _get_commands(self, request: web.Request, *_: Any) -> Any:
        if request.match_info["app"] != str(APP_ID):
            raise _ApiError(404, 10002, "Unknown Application")
        return self.commands

    async def _put_commands(self, request: web.Request, body: Any, _: Any) -> Any:
        if request.match_info["app"] != str(APP_ID):
            raise _ApiError(404, 10002, "Unknown Application")
        commands = body.get("_list") if isinstance(body, dict) else None
        if not isinstance(commands, list) or len(commands) > 100:
            raise _ApiError(400, 50035, "Invalid Form Body: expected a list of <= 100 commands")
        stored = []
        for c in commands:
            name, desc = str(c.get("name", "")), str(c.get("description", ""))
            if not _COMMAND_NAME.fullmatch(name) or not 1 <= len(desc) <= 100:
                raise _ApiError(400, 50035, f"Invalid Form Body: command {name!r}")
            for opt in c.get("options") or []:
                if not _COMMAND_NAME.fullmatch(str(opt.get("name", ""))):
                    raise _ApiError(400, 50035, "Invalid Form Body: option name")
            stored.append(
                {
                    **c,
                    "id": str(self.snowflake()),
                    "application_id": str(APP_ID),
                    "version": str(self.snowflake()),
                    "default_member_permissions": None,
                    "nsfw": False,
                }
            )
        self.commands = stored
        self.command_puts += 1
        self._bump()
        return stored

    def _interaction(self, request: web.Request) -> Interaction:
        """The interaction of a callback (by id and token) or a webhook route (by token)."""
        token = request.match_info["token"]
        record = next((i for i in self.interactions.values() if i.token == token), None)
        if "id" in request.match_info and record is not None:
            if str(record.id) != request.match_info["id"]:
                record = None
        if record is None or record.expired:
            raise _ApiError(404, 10062, "Unknown interaction")
        return record

    async def _callback(self, request: web.Request, body: Any, _: Any) -> Any:
        record = self._interaction(request)
        if record.callback is not None:
            raise _ApiError(400, 40060, "Interaction has already been acknowledged.")
        record.callback = body
        record.callback_at = time.monotonic()
        self._bump()
        data = body.get("data") or {}
        kind = int(body.get("type", 0))
        return {
            "interaction": {
                "id": str(record.id),
                "type": 2,
                "response_message_loading": kind == 5,
                "response_message_ephemeral": bool(int(data.get("flags", 0)) & 64),
            },
            "resource": {"type": kind},
        }

    async def _edit_original(self, request: web.Request, body: Any, _: Any) -> Any:
        record = self._interaction(request)
        if record.callback is None:
            raise _ApiError(404, 10008, "Unknown Message")
        content = str(body.get("content") or "")
        if utf16_len(content) > MAX_CONTENT:
            raise _ApiError(400, 50035, "Invalid Form Body: content: Must be 2000 or fewer")
        record.edits.append(content)
        self._bump()
        mid = self.snowflake()
        return {
            "id": str(mid),
            "channel_id": str(record.channel_id),
            "type": 20,
            "content": content,
            "author": self.users[BOT_ID],
            "attachments": [],
            "embeds": [],
            "mentions": [],
            "mention_roles": [],
            "mention_everyone": False,
            "pinned": False,
            "tts": False,
            "timestamp": snowflake_time(mid).isoformat(),
            "edited_timestamp": None,
            "flags": 0,
            "components": [],
            "webhook_id": str(APP_ID),
        }

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        parts = request.match_info["path"].split("/")
        data = self.files.get(parts[2]) if len(parts) > 3 and parts[0] == "attachments" else None
        if data is None:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=data, content_type="application/octet-stream")

    # ---------------------------------------------------------------- internals

    def _bump(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


class _ApiError(Exception):
    def __init__(self, status: int, code: int, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.retry_after = retry_after


async def _body(request: web.Request) -> tuple[Any, list[tuple[str, bytes]]]:
    """The JSON body (a list is wrapped as ``{"_list": ...}``), the multipart one's
    payload_json and files, or the query of a GET."""
    files: list[tuple[str, bytes]] = []
    if request.method == "GET":
        return dict(request.query), files
    if request.content_type.startswith("multipart/"):
        payload: Any = {}
        reader = await request.multipart()
        async for part in reader:
            if part.name == "payload_json":  # type: ignore[union-attr]
                payload = json.loads(await part.text())  # type: ignore[union-attr]
            elif part.filename:  # type: ignore[union-attr]
                files.append((part.filename, bytes(await part.read())))  # type: ignore[union-attr]
        return payload, files
    raw = await request.read()
    if not raw:
        return {}, files
    body = json.loads(raw)
    return ({"_list": body} if isinstance(body, list) else body), files


def _bucket_headers(limit: int, remaining: int, reset_after: float) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": str(limit),
        "X-RateLimit-Remaining": str(remaining),
        "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
        "X-RateLimit-Reset-After": f"{reset_after:.3f}",
        "X-RateLimit-Bucket": "fake-messages-bucket",
    }


def _json(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # Exactly "application/json", as Discord sends it: discord.py decodes nothing else.
    return web.Response(
        body=json.dumps(body).encode(),
        status=status,
        headers={**(headers or {}), "Content-Type": "application/json"},
    )


def _error(status: int, code: int, message: str) -> web.Response:
    return _json({"message": message, "code": code}, status=status)


def _limited(retry_after: float, *, global_: bool) -> web.Response:
    headers = {
        **_bucket_headers(1, 0, retry_after),
        "Retry-After": str(max(1, round(retry_after))),
        "Via": "1.1 google",  # discord.py takes a 429 without it for a Cloudflare ban
        "X-RateLimit-Scope": "user",
    }
    body = {"message": "You are being rate limited.", "retry_after": retry_after, "global": global_}
    return _json(body, status=429, headers=headers)

"""Fetching one URL for `web_fetch`, safely: http(s) only, public addresses only
(klaw.web.addresses), each redirect checked again, the body read up to a cap, the whole
fetch under one deadline.

DNS rebinding: the host is resolved here, its addresses checked, and the request sent
to the checked address itself (the URL's host replaced by it), with the Host header
and TLS's SNI and certificate check still naming the host (httpcore's `sni_hostname`).
The connection is not kept for another request: a pooled connection to an address is
tied to the name its certificate was checked for.

Limits: `maxBytes` of the decompressed body (gzip and deflate are inflated here in
bounded steps, so a small compressed bomb cannot grow past the cap), after which the
body is cut and the page marked `truncated`; `timeoutSeconds` for everything, so a
server that sends a byte a second (a slow drip) is cut off at the deadline; no
cookies are kept, no proxy from the environment is used.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import TYPE_CHECKING

import httpx

from klaw.config.loader import parse_size
from klaw.errors import KlawError
from klaw.web.addresses import AddressPolicy, IPAddress, Refused
from klaw.web.client import LoopClient

if TYPE_CHECKING:
    from klaw.config.engine import WebFetchConfig

__all__ = ["FetchError", "Fetched", "Fetcher", "Refused", "Resolver", "readable", "system_resolve"]

USER_AGENT = "Mozilla/5.0 (compatible; Klaw/0.1; personal assistant)"
ACCEPT = (
    "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,"
    "application/pdf;q=0.8,*/*;q=0.5"
)
_REDIRECTS = (301, 302, 303, 307, 308)
_CHUNK = 65536
_BARE_HOST = re.compile(r"[a-z0-9-]+(\.[a-z0-9-]+)+(:\d+)?([/?#]|$)", re.IGNORECASE)

#: host, port -> the addresses it resolves to.
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]


class FetchError(KlawError):
    """The page could not be fetched or read; the message says why, for the model."""


def readable(media_type: str) -> bool:
    """Whether web_fetch reads a body of this type (the empty type is sniffed)."""
    return (
        media_type in ("", "application/pdf", "application/json", "application/xhtml+xml")
        or media_type.startswith("text/")
        or media_type.endswith(("+json", "+xml", "/xml"))
    )


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str  # after redirects
    status: int
    media_type: str  # lowercase, without parameters; "" when the server sent none
    charset: str | None
    body: bytes
    truncated: bool  # cut at maxBytes
    redirects: list[str] = field(default_factory=list)  # the URLs that redirected


async def system_resolve(host: str, port: int) -> list[IPAddress]:
    """The addresses getaddrinfo gives for `host`, in its order, without repeats."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise FetchError(f"{host} could not be resolved ({exc.strerror})") from None
    out: list[IPAddress] = []
    for *_, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).partition("%")[0])
        if ip not in out:
            out.append(ip)
    return out


class _Inflater:
    """Content-Encoding gzip/deflate inflated in steps of at most `room` bytes."""

    def __init__(self, encoding: str) -> None:
        encoding = encoding.strip().lower()
        if encoding in ("", "identity"):
            self._z = None
        elif encoding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._z = zlib.decompressobj()
        else:
            raise FetchError(f"the server sent {encoding}-encoded content, which was not asked for")
        self._raw_deflate = encoding == "deflate"

    def feed(self, data: bytes, room: int) -> bytes:
        if self._z is None:
            return data[:room]
        try:
            return self._z.decompress(data, room)
        except zlib.error:
            if self._raw_deflate:  # some servers send deflate without the zlib header
                self._raw_deflate = False
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                return self._z.decompress(data, room)
            raise FetchError("the server sent a corrupt compressed body") from None

    def more(self, room: int) -> bytes:
        """Output still held back by the step limit."""
        if self._z is None or not self._z.unconsumed_tail:
            return b""
        return self._z.decompress(self._z.unconsumed_tail, room)


class Fetcher:
    """GETs URLs under `web.fetch`'s rules; one per engine (it holds an HTTP client)."""

    def __init__(
        self,
        cfg: WebFetchConfig,
        resolve: Resolver = system_resolve,
        verify: ssl.SSLContext | bool = True,  # the CA store; a test's own CA
    ) -> None:
        self.cfg = cfg
        self.max_bytes = parse_size(cfg.max_bytes)
        self.policy = AddressPolicy(cfg.allow_hosts)
        self._resolve = resolve
        self._http = LoopClient(
            follow_redirects=False,
            trust_env=False,  # an environment proxy would resolve the name itself
            cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])),  # keeps none
            timeout=httpx.Timeout(cfg.timeout_seconds, connect=10.0),
            verify=verify,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def fetch(self, url: str) -> Fetched:
        """The page at `url`; raises Refused or FetchError with a message for the model."""
        start = time.monotonic()
        received = [0]
        try:
            async with asyncio.timeout(self.cfg.timeout_seconds):
                return await self._follow(url, received)
        except TimeoutError:
            spent = time.monotonic() - start
            raise FetchError(
                f"{url} did not finish within {self.cfg.timeout_seconds} s "
                f"(web.fetch.timeoutSeconds; {received[0]} bytes had arrived after {spent:.0f} s)"
            ) from None

    async def _follow(self, url: str, received: list[int]) -> Fetched:
        redirects: list[str] = []
        current = url
        while True:
            target, host, port = self._parse(current)
            addresses = await self._addresses(host, port)
            response = await self._send(target, host, port, addresses)
            try:
                location = response.headers.get("location")
                if response.status_code in _REDIRECTS and location:
                    if len(redirects) >= self.cfg.max_redirects:
                        raise FetchError(
                            f"{url} redirected more than {self.cfg.max_redirects} times "
                            "(web.fetch.maxRedirects)"
                        )
                    redirects.append(current)
                    try:
                        current = str(target.join(location))
                    except httpx.InvalidURL:
                        bad = location[:200]
                        raise FetchError(f"{current} redirected to a bad URL: {bad}") from None
                    continue
                return await self._read(current, response, redirects, received)
            finally:
                await response.aclose()

    def _parse(self, url: str) -> tuple[httpx.URL, str, int]:
        url = url.strip()
        if _BARE_HOST.match(url):
            url = "https://" + url  # "example.org/page", as people (and models) write it
        try:
            target = httpx.URL(url)
        except (httpx.InvalidURL, TypeError):
            raise FetchError(f"{url[:200]!r} is not a URL") from None
        if target.scheme not in ("http", "https"):
            raise Refused(f"Refused {url[:200]!r}: web_fetch reads only http and https URLs")
        if not target.host:
            raise FetchError(f"{url[:200]!r} names no host")
        if target.userinfo:
            raise Refused(f"Refused {url[:200]!r}: URLs carrying a user name or password")
        host = target.raw_host.decode("ascii").lower()
        port = target.port or (443 if target.scheme == "https" else 80)
        return target, host, port

    async def _addresses(self, host: str, port: int) -> list[IPAddress]:
        try:
            addresses = [ipaddress.ip_address(host.strip("[]"))]
        except ValueError:
            addresses = await self._resolve(host, port)
        return self.policy.check(host, port, addresses)

    async def _send(
        self, target: httpx.URL, host: str, port: int, addresses: list[IPAddress]
    ) -> httpx.Response:
        default = 443 if target.scheme == "https" else 80
        shown = f"[{host.strip('[]')}]" if ":" in host else host
        headers = {
            "Host": shown if port == default else f"{shown}:{port}",
            "User-Agent": USER_AGENT,
            "Accept": ACCEPT,
            "Accept-Encoding": "gzip, deflate",
            "Accept-Language": "en;q=0.9, *;q=0.5",
            "Connection": "close",  # the connection is never reused (module docstring)
        }
        extensions = {"sni_hostname": host.strip("[]")} if target.scheme == "https" else {}
        last: Exception | None = None
        for ip in addresses[:3]:  # each of them checked; the first that answers
            request = self._http.get().build_request(
                "GET", target.copy_with(host=str(ip)), headers=headers, extensions=extensions
            )
            try:
                return await self._http.get().send(request, stream=True)
            except httpx.ConnectError as exc:
                last = exc
            except httpx.TimeoutException:
                raise FetchError(f"{host} did not answer in time") from None
            except httpx.HTTPError as exc:
                raise FetchError(f"{host}: {type(exc).__name__}: {exc}"[:300]) from None
        raise FetchError(f"could not connect to {host} ({last})"[:300])

    async def _read(
        self, url: str, response: httpx.Response, redirects: list[str], received: list[int]
    ) -> Fetched:
        ctype = response.headers.get("content-type", "")
        media, _, params = ctype.partition(";")
        charset = None
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.lower() == "charset" and value:
                charset = value.strip().strip("\"'").lower()
        media = media.strip().lower()
        if not readable(media):
            size = response.headers.get("content-length")
            raise FetchError(
                f"{url} is {media}"
                + (f" ({size} bytes)" if size else "")
                + "; web_fetch reads HTML, text, JSON and PDF"
            )
        inflater = _Inflater(response.headers.get("content-encoding", ""))
        body = bytearray()
        truncated = False
        try:
            async for raw in response.aiter_raw(_CHUNK):
                received[0] += len(raw)
                piece = inflater.feed(raw, self.max_bytes + 1 - len(body))
                while piece:
                    body += piece
                    if len(body) > self.max_bytes:
                        break
                    piece = inflater.more(self.max_bytes + 1 - len(body))
                if len(body) > self.max_bytes:
                    del body[self.max_bytes :]
                    truncated = True
                    break
        except httpx.TimeoutException:
            raise FetchError(
                f"{url}: the server stopped sending ({len(body)} bytes read)"
            ) from None
        except httpx.HTTPError as exc:
            if not body:
                why = str(exc).strip()[:200] or type(exc).__name__
                raise FetchError(
                    f"{url}: the connection ended before the whole page arrived ({why})"
                ) from None
            truncated = True  # a connection dropped mid-body: what arrived is kept
        return Fetched(
            url=url,
            status=response.status_code,
            media_type=media,
            charset=charset,
            body=bytes(body),
            truncated=truncated,
            redirects=redirects,
        )

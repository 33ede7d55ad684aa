"""`web_search`'s providers behind one result shape (title, url, snippet, date).

- searxng: your SearXNG instance's JSON API, `GET {endpoint}/search?q=…&format=json`
  (the instance must list `json` under `search.formats` in its settings.yml, or it
  answers 403). Results: `results[]` of {url, title, content, publishedDate}.
- brave: Brave Search API, `GET https://api.search.brave.com/res/v1/web/search?q=…&count=N`
  with the key in `X-Subscription-Token`. Results: `web.results[]` of {title, url,
  description, page_age, age}.
- tavily: Tavily, `POST https://api.tavily.com/search` {query, max_results, …} with
  `Authorization: Bearer KEY`. Results: `results[]` of {title, url, content,
  published_date (news only)}.
- bocha: Bocha (博查), `POST https://api.bochaai.com/v1/web-search` {query, count, …}
  with `Authorization: Bearer KEY`, answered in a Bing-compatible envelope:
  `{code, msg, data: {webPages: {value[]: {name, url, snippet, summary,
  datePublished | dateLastCrawled}}}}`.
- zhipu: Zhipu's (BigModel, GLM's maker) search API, `POST
  https://open.bigmodel.cn/api/paas/v4/web_search` {search_query, search_engine:
  search_std, count} with `Authorization: Bearer KEY` (the GLM key). Results:
  `search_result[]` of {title, link, content, media, publish_date}.

Searches go to the provider the owner configured (not through web_fetch's address
check: a SearXNG on the same machine is the usual case). An answer is read up to
MAX_ANSWER bytes (a provider or a proxy sending without end costs no more memory).
Snippets are plain text: SearXNG and Brave mark matches with HTML tags, which are
removed, as are control and bidi characters (a terminal escape, a reversed line); a
hit whose URL is not a plain http(s) URL of at most MAX_URL characters is dropped.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from klaw.errors import KlawError
from klaw.web.client import LoopClient

if TYPE_CHECKING:
    from klaw.config.engine import WebSearchConfig

__all__ = ["DEFAULT_ENDPOINTS", "SearchError", "SearchResult", "Searcher", "why_off"]

DEFAULT_ENDPOINTS = {
    "brave": "https://api.search.brave.com/res/v1/web/search",
    "tavily": "https://api.tavily.com/search",
    "bocha": "https://api.bochaai.com/v1/web-search",
    "zhipu": "https://open.bigmodel.cn/api/paas/v4/web_search",
}
KEY_VARIABLES = {
    "brave": "BRAVE_API_KEY",
    "tavily": "TAVILY_API_KEY",
    "bocha": "BOCHA_API_KEY",
    "zhipu": "GLM_API_KEY",  # the key of Klaw's glm provider serves
}
MAX_SNIPPET = 400
MAX_URL = 2000
#: A search answer is a few kB to ~100 kB (50 hits with summaries): 4 MB is damage.
MAX_ANSWER = 4 * 1024 * 1024
_TAGS = re.compile(r"<[^>]{0,200}>")
#: C0/C1 controls (a terminal's escape), bidi overrides and isolates.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class SearchError(KlawError):
    """The search failed; the message says why, for the model."""


@dataclass(frozen=True, slots=True)
class SearchResult:
    title: str
    url: str
    snippet: str
    date: str | None = None


def why_off(cfg: WebSearchConfig) -> str | None:
    """None when web_search can be offered, else why not and how to turn it on."""
    if cfg.provider is None:
        return (
            "no provider: set web.search.provider in engine.yaml to searxng (with "
            "web.search.endpoint), brave, tavily, bocha or zhipu (with web.search.apiKey)"
        )
    if cfg.provider == "searxng":
        if not cfg.endpoint:
            return "web.search.provider is searxng but web.search.endpoint is not set"
        return None
    if not cfg.api_key:
        var = KEY_VARIABLES[cfg.provider]
        return (
            f"web.search.provider is {cfg.provider} but it has no key: set "
            f'web.search.apiKey: "${{{var}}}" and export {var}'
        )
    return None


def _plain(value: Any, limit: int = MAX_SNIPPET) -> str:
    if not isinstance(value, str):
        return ""
    text = " ".join(_CONTROLS.sub(" ", html.unescape(_TAGS.sub("", value))).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _date(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    return " ".join(_CONTROLS.sub(" ", value).split())[:40] or None


def _list(data: Any, *path: str) -> list[dict[str, Any]]:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []


def _result(title: Any, url: Any, snippet: Any, date: Any) -> SearchResult | None:
    if (
        not isinstance(url, str)
        or not url.startswith(("http://", "https://"))
        or len(url) > MAX_URL
        or any(c.isspace() for c in url)
        or _CONTROLS.search(url)
    ):
        return None
    return SearchResult(_plain(title, 200) or url, url, _plain(snippet), _date(date))


class Searcher:
    """Runs queries against the configured provider; one per engine."""

    def __init__(self, cfg: WebSearchConfig) -> None:
        if why_off(cfg):
            raise ValueError(why_off(cfg))
        self.cfg = cfg
        self.provider: str = cfg.provider or ""
        self.endpoint = cfg.endpoint or DEFAULT_ENDPOINTS.get(self.provider, "")
        self._http = LoopClient(timeout=cfg.timeout_seconds)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def search(self, query: str, count: int) -> list[SearchResult]:
        http = self._http.get()
        try:
            response = await http.send(self._request(http, query, count), stream=True)
            try:
                if response.status_code != 200:
                    raise SearchError(self._status_message(response))
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER:
                        raise SearchError(
                            f"{self.provider} answered with over {MAX_ANSWER >> 20} MB: "
                            "not a search result (is web.search.endpoint right?)"
                        )
            finally:
                await response.aclose()
        except httpx.TimeoutException:
            raise SearchError(f"{self.provider} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise SearchError(
                f"{self.provider} could not be reached ({type(exc).__name__})"
            ) from None
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nested thousands deep
            raise SearchError(f"{self.provider} answered with something that is not JSON") from None
        results = [r for r in self._parse(data) if r is not None]
        unique = {r.url: r for r in reversed(results)}  # the first of each URL
        return [r for r in results if unique[r.url] is r][:count]

    def _request(self, http: httpx.AsyncClient, query: str, count: int) -> httpx.Request:
        key = self.cfg.api_key or ""
        if self.provider == "searxng":
            url = self.endpoint.rstrip("/")
            url = url if url.endswith("/search") else url + "/search"
            params = {"q": query, "format": "json", "safesearch": "1"}
            return http.build_request(
                "GET", url, params=params, headers={"Accept": "application/json"}
            )
        if self.provider == "brave":
            return http.build_request(
                "GET",
                self.endpoint,
                params={"q": query, "count": min(count, 20)},
                headers={"Accept": "application/json", "X-Subscription-Token": key},
            )
        if self.provider == "tavily":
            body = {
                "query": query,
                "max_results": min(count, 20),
                "search_depth": "basic",
                "topic": "general",
                "include_answer": False,
            }
            return http.build_request(
                "POST", self.endpoint, json=body, headers={"Authorization": f"Bearer {key}"}
            )
        if self.provider == "zhipu":
            body = {"search_query": query, "search_engine": "search_std", "count": min(count, 50)}
            return http.build_request(
                "POST", self.endpoint, json=body, headers={"Authorization": f"Bearer {key}"}
            )
        body = {"query": query, "count": min(count, 50), "freshness": "noLimit", "summary": False}
        return http.build_request(
            "POST", self.endpoint, json=body, headers={"Authorization": f"Bearer {key}"}
        )

    def _parse(self, data: Any) -> list[SearchResult | None]:
        if self.provider == "searxng":
            return [
                _result(r.get("title"), r.get("url"), r.get("content"), r.get("publishedDate"))
                for r in _list(data, "results")
            ]
        if self.provider == "brave":
            return [
                _result(
                    r.get("title"),
                    r.get("url"),
                    r.get("description"),
                    r.get("page_age") or r.get("age"),
                )
                for r in _list(data, "web", "results")
            ]
        if self.provider == "tavily":
            return [
                _result(r.get("title"), r.get("url"), r.get("content"), r.get("published_date"))
                for r in _list(data, "results")
            ]
        if self.provider == "zhipu":
            return [
                _result(r.get("title"), r.get("link"), r.get("content"), r.get("publish_date"))
                for r in _list(data, "search_result")
            ]
        if isinstance(data, dict) and data.get("code") not in (None, 200):
            raise SearchError(
                f"bocha refused the search: {_plain(data.get('msg'), 200) or data.get('code')}"
            )
        return [
            _result(
                r.get("name"),
                r.get("url"),
                r.get("summary") or r.get("snippet"),
                r.get("datePublished") or r.get("dateLastCrawled"),
            )
            for r in _list(data, "data", "webPages", "value")
        ]

    def _status_message(self, response: httpx.Response) -> str:
        status = response.status_code
        name = self.provider
        if status in (401, 403) and name == "searxng":
            return (
                f"searxng answered {status}: the instance must allow the JSON format "
                "(search.formats: [html, json] in its settings.yml)"
            )
        if status in (401, 403):
            return f"{name} refused the API key ({status}); check web.search.apiKey"
        if status == 429:
            return f"{name} says too many searches (429): the plan's rate or quota is used up"
        return f"{name} answered HTTP {status}"

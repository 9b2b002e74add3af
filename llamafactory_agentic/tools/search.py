# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

r"""`<search>query</search>`: one search tool with pluggable backends.

Formatting (docs/algorithms.md §7.3; `ARPO/verl_arpo_entropy/verl/workers/rollout/tools/search_tool.py:432-477`):
query = call content with `"` removed (we also collapse whitespace, see `cache.normalize_search_query`); take the
snippets in rank order, skip empty and duplicate ones, keep the first `topk`, cut each to `snippet_chars` and join
them as `Page 1: …\nPage 2: …`; no snippet -> `No search results found.`. Cached and replayed results go through the
same `format_snippets` (`SearchTool.limit_observation`), so they obey `topk` and `snippet_chars` as live ones do.

Backends:
* `local` (default, no keys): BM25 over a JSONL corpus (`index.BM25Index`), e.g. the one `index build` makes from
  the reference's `search_cache.json`;
* `replay`: answers from the tool cache only; a miss is the observation `No search results found.` with status
  "cache_miss" (never an exception);
* `web`: HTTP search APIs with the key from the environment: `serper` (Serper-compatible `POST /search`), `bing`
  (Bing Web Search v7-compatible `GET ?q=`) and `brightdata` (Bright Data SERP API fetching Bing with `brd_json=1`,
  the reference's backend); timeouts, a shared rate limiter, HTTP 429/5xx and malformed JSON raised as transient
  errors that the tool retries with exponential backoff (tenacity);
* `retriever`: a Search-R1-style retrieval server (`POST /retrieve` with `{"queries", "topk", "return_scores"}`).
"""

import re
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from ..common import outbound
from ..common.log import get_logger
from ..hparams import SEARCH_BACKEND, SEARCH_SNIPPET_CHARS, SEARCH_TOPK
from .base import (
    NO_SEARCH_RESULTS_TEXT,
    STATUS_CACHE_MISS,
    STATUS_EMPTY,
    STATUS_OK,
    BaseTool,
    ToolError,
    ToolOutput,
    TransientToolError,
    call_time_left_s,
    check_number,
    redact,
    truncate_middle,
)
from .cache import CacheUnavailable, ToolCache, normalize_search_query, open_cache
from .index import _PAGE_SPLIT
from .registry import register_tool


logger = get_logger(__name__)

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def format_snippets(
    snippets: Iterable[str], topk: int = SEARCH_TOPK, snippet_chars: int = SEARCH_SNIPPET_CHARS
) -> str:
    r"""Format ranked snippets as `Page 1: …\nPage 2: …`.

    Empty and duplicate snippets are skipped, the first `topk` kept, each cut to `snippet_chars`;
    `No search results found.` when none is left. `snippets` is read only up to the `topk`-th kept snippet.
    """
    pages: list[str] = []
    seen: set[str] = set()
    for snippet in snippets:
        if not isinstance(snippet, str):
            continue
        snippet = snippet.strip()
        if not snippet or snippet in seen:
            continue
        seen.add(snippet)
        pages.append(snippet[:snippet_chars])
        if len(pages) >= topk:
            break
    if not pages:
        return NO_SEARCH_RESULTS_TEXT
    return "\n".join(f"Page {i}: {text}" for i, text in enumerate(pages, 1))


def iter_pages(text: str) -> Iterator[str]:
    r"""The snippets of a formatted result `Page 1: …\nPage 2: …`, lazily (split as `index.split_pages` does).

    Text before the first `Page N: ` marker is one snippet too. Each page is found only when asked for, so taking the
    first `topk` pages of a 10 MB result scans only as far as they go.
    """
    start = 0
    for match in _PAGE_SPLIT.finditer(text):
        if match.start() > start:
            yield text[start : match.start()]
        start = match.end()
    if start < len(text):
        yield text[start:]


def market_for(query: str) -> str:
    r"""`zh-CN` for queries with CJK characters, else `en-US` (docs/algorithms.md §7.3)."""
    return "zh-CN" if _CJK.search(query) else "en-US"


class CacheMiss(ToolError):
    r"""The replay backend has no entry for the query."""


class RateLimiter:
    r"""Token bucket shared by the threads of one backend: at most `rate` requests per second (None: unlimited)."""

    def __init__(self, rate: float | None, burst: int | None = None) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        self.rate = float(rate) if rate else None
        self.capacity = float(burst or max(1, int(self.rate or 1)))
        self._tokens = self.capacity
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        r"""Block until a request may be sent."""
        if not self.rate:
            return
        while True:
            with self._lock:
                now = time.monotonic()
                self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
                self._last = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                wait = (1 - self._tokens) / self.rate
            time.sleep(wait)


class SearchBackend:
    r"""A source of ranked snippets. `search` returns raw snippets (best first) or raises."""

    name = "backend"
    retry_on_empty = False

    def search(self, query: str, topk: int) -> list[str]:
        r"""See the base class."""
        raise NotImplementedError

    def close(self) -> None:
        r"""Release clients."""


class LocalBackend(SearchBackend):
    r"""BM25 over a local JSONL corpus (`index_dir`: a folder with `corpus.jsonl`, or a `.jsonl` file)."""

    name = "local"

    def __init__(self, index_dir: str | None = None) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        import os

        from .index import BM25Index

        index_dir = index_dir or os.environ.get("AGENTIC_SEARCH_INDEX")
        if not index_dir:
            index_dir = os.path.join(os.path.expanduser("~"), ".cache", "llamafactory_agentic", "search_index")
        self.index = BM25Index(index_dir)

    def search(self, query: str, topk: int) -> list[str]:
        r"""See the base class."""
        return self.index.search(query, topk)

    def search_results(self, query: str, topk: int) -> list[dict]:
        r"""The corpus rows of the `topk` documents (`url`, `title`, `text`), for the `browse` mode."""
        return self.index.search_results(query, topk)


class ReplayBackend(SearchBackend):
    r"""Answers from a tool cache only (raises `CacheMiss` on a miss)."""

    name = "replay"

    def __init__(self, cache: ToolCache | str | None = None) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        self.cache = open_cache(cache, mode="read_only") if isinstance(cache, str) else cache

    def lookup(self, query: str) -> str:
        r"""Formatted observation stored for `query` (already normalised)."""
        if self.cache is None:
            raise CacheMiss("the replay backend has no cache")
        try:
            entry = self.cache.lookup("search", query)  # bounded: a locked or unreachable cache does not hang
        except CacheUnavailable as exc:
            raise ToolError(f"the replay cache cannot be read now ({exc})") from exc
        if entry is None:
            raise CacheMiss(f"query not in the replay cache: {query[:200]}")
        return entry.result

    def search(self, query: str, topk: int) -> list[str]:
        r"""See the base class."""
        raise CacheMiss("the replay backend only answers through lookup()")

    def search_results(self, query: str, topk: int) -> list[dict]:
        r"""No results: in the `browse` mode a replayed query is answered from the browse caches alone."""
        return []


class HTTPBackend(SearchBackend):
    r"""Common part of the HTTP backends: one thread-safe client, limits, rate limit, error mapping.

    Outbound limits (`common/outbound.py`, docs/tools.md "Outbound limits"): a request ends within `timeout_s`
    (and within what is left of the tool call's `timeout_s`; connection, headers and body: a trickling API is cut
    off), reads `MAX_RESPONSE_BYTES` (8 MiB) at most, and
    follows redirects only within the endpoint's origin (the API key never reaches another server).

    Raises (from `_request`):
        TransientToolError: timeouts, connection errors, HTTP 429/5xx, malformed JSON.
        ToolError: other HTTP 4xx answers, an answer over the byte bound, a redirect to another origin.
    """

    MAX_RESPONSE_BYTES = 8 << 20

    def __init__(self, timeout_s: float = 20.0, rate_limit: float | None = None, secrets: tuple = ()) -> None:
        self.timeout_s = float(timeout_s)
        self._client = outbound.outbound_client()
        self._limiter = RateLimiter(rate_limit)
        self._secrets = [s for s in secrets if s]

    def _request(self, method: str, url: str, **kwargs: Any) -> Any:
        import httpx

        self._limiter.acquire()
        left = min(self.timeout_s, call_time_left_s(self.timeout_s))  # never past the tool call's own budget
        if left <= 0:
            raise TransientToolError(f"request timed out after {self.timeout_s:g} s")
        try:
            response = outbound.fetch(self._client, method, url, deadline_s=left,
                                      max_bytes=self.MAX_RESPONSE_BYTES, redirects="same_origin", **kwargs)  # fmt: skip
        except outbound.OutboundError as exc:
            raise ToolError(redact(f"{self.name} search API: {exc}", self._secrets)) from exc
        except httpx.TimeoutException as exc:
            raise TransientToolError(redact(f"request timed out after {self.timeout_s:g} s", self._secrets)) from exc
        except httpx.HTTPError as exc:
            raise TransientToolError(redact(f"request failed: {type(exc).__name__}: {exc}", self._secrets)) from exc
        if response.status_code == 429 or response.status_code >= 500:
            raise TransientToolError(f"HTTP {response.status_code} from {self.name} search API")
        if response.status_code >= 400:
            raise ToolError(f"HTTP {response.status_code} from {self.name} search API")
        try:
            return response.json()
        except ValueError as exc:
            raise TransientToolError(f"malformed JSON from {self.name} search API") from exc

    def close(self) -> None:
        self._client.close()


class WebBackend(HTTPBackend):
    r"""Web search APIs.

    Keys come from the environment (`api_key` param, usually `${SERPER_API_KEY}` /
    `${BING_API_KEY}` / `${BRIGHTDATA_API_KEY}` in the tool config, else those variables directly).

    Args:
        provider: "serper", "bing" or "brightdata".
        api_key: the key (a secret: redacted from observations and logs, never cached).
        endpoint: API URL (defaults: `https://google.serper.dev/search`, `https://api.bing.microsoft.com/v7.0/search`,
            `https://api.brightdata.com/request`); tests point it at a local server.
        zone: Bright Data zone name.
        timeout_s, rate_limit: request timeout (s) and requests per second.
    """

    name = "web"
    retry_on_empty = True  # docs/algorithms.md §7.3: an empty web result is retried and never cached
    _DEFAULTS = {
        "serper": ("https://google.serper.dev/search", "SERPER_API_KEY"),
        "bing": ("https://api.bing.microsoft.com/v7.0/search", "BING_API_KEY"),
        "brightdata": ("https://api.brightdata.com/request", "BRIGHTDATA_API_KEY"),
    }

    def __init__(
        self,
        provider: str = "serper",
        api_key: str | None = None,
        endpoint: str | None = None,
        zone: str | None = None,
        timeout_s: float = 20.0,
        rate_limit: float | None = 10.0,
        blocklist: Any = None,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring).

        `blocklist`: URL patterns whose results are dropped before their snippets reach the model (None: the
        benchmark pages of `tools/blocklist.py:DEFAULT_BLOCKLIST`; "none": no filter; docs/plan.md §3).
        """
        import os

        from .blocklist import Blocklist

        self.blocklist = Blocklist(blocklist)
        self.blocked_results = 0

        if provider not in self._DEFAULTS:
            raise ValueError(f"unknown web search provider {provider!r}; use one of {sorted(self._DEFAULTS)}")
        default_endpoint, env_var = self._DEFAULTS[provider]
        self.provider = provider
        self.endpoint = endpoint or default_endpoint
        self.zone = zone or os.environ.get("BRIGHTDATA_ZONE", "serp_api1")
        api_key = api_key or os.environ.get(env_var)
        if not api_key:
            raise ValueError(f"the {provider} web search backend needs an API key (set {env_var})")
        self._api_key = api_key
        super().__init__(timeout_s=timeout_s, rate_limit=rate_limit, secrets=(api_key,))
        self.name = f"web:{provider}"

    def __repr__(self) -> str:  # never show the key
        r"""Standard `__repr__`."""
        return f"WebBackend(provider={self.provider!r}, endpoint={self.endpoint!r})"

    def search(self, query: str, topk: int) -> list[str]:
        r"""See the base class."""
        keys = ("description", "snippet") if self.provider == "brightdata" else ("snippet",)
        return [str(next((r[k] for k in keys if r.get(k)), "")) for r in self.search_results(query, topk)]

    def search_results(self, query: str, topk: int) -> list[dict]:
        r"""The API's result objects (with `link`/`url`, title and snippet), blocklisted ones dropped."""
        market = market_for(query)
        if self.provider == "serper":
            gl, hl = ("cn", "zh-cn") if market == "zh-CN" else ("us", "en")
            data = self._request(
                "POST", self.endpoint, json={"q": query, "num": topk, "gl": gl, "hl": hl},
                headers={"X-API-KEY": self._api_key},
            )  # fmt: skip
            return [r for r in self._unblocked(_get(data, "organic")) if isinstance(r, dict)]
        if self.provider == "bing":
            data = self._request(
                "GET", self.endpoint, params={"q": query, "mkt": market, "count": topk},
                headers={"Ocp-Apim-Subscription-Key": self._api_key},
            )  # fmt: skip
            return [r for r in self._unblocked(_get(_get(data, "webPages"), "value")) if isinstance(r, dict)]
        from urllib.parse import quote_plus

        bing_url = f"https://www.bing.com/search?q={quote_plus(query)}&mkt={market}&count={topk}&brd_json=1"
        data = self._request(
            "POST", self.endpoint, json={"zone": self.zone, "url": bing_url, "format": "json"},
            headers={"Authorization": f"Bearer {self._api_key}"},
        )  # fmt: skip
        if isinstance(data, dict) and isinstance(data.get("body"), str):  # format=json wraps the page body
            import json

            try:
                data = json.loads(data["body"])
            except ValueError as exc:
                raise TransientToolError("malformed JSON body from the brightdata search API") from exc
        return [r for r in self._unblocked(_get(data, "organic")) if isinstance(r, dict)]

    def _unblocked(self, results: Any) -> list:
        kept, dropped = self.blocklist.filter(_as_list(results))
        self.blocked_results += dropped
        return kept


class RetrieverBackend(HTTPBackend):
    r"""Search-R1-style retrieval server.

    Request `POST {url}/retrieve` with `{"queries": [q], "topk": k, "return_scores": true}`; answer `{"result": [[{"document": {"contents": ...}, "score": s}, ...]]}` (documents may
    also be plain strings or carry `text`).
    """

    name = "retriever"

    def __init__(self, url: str = "http://127.0.0.1:8000", timeout_s: float = 20.0, rate_limit: float | None = None):
        r"""Create the object (the arguments are described in the class docstring)."""
        super().__init__(timeout_s=timeout_s, rate_limit=rate_limit)
        self.url = url.rstrip("/")
        self.endpoint = self.url if self.url.endswith("/retrieve") else self.url + "/retrieve"

    def search(self, query: str, topk: int) -> list[str]:
        r"""See the base class."""
        data = self._request("POST", self.endpoint, json={"queries": [query], "topk": topk, "return_scores": True})
        results = _as_list(_get(data, "result"))
        hits = _as_list(results[0]) if results else []
        snippets = []
        for hit in hits:
            doc = hit.get("document", hit) if isinstance(hit, dict) else hit
            if isinstance(doc, dict):
                doc = doc.get("contents") or doc.get("text") or ""
            snippets.append(" ".join(str(doc).split()))
        return snippets


def _get(data: Any, key: str) -> Any:
    if not isinstance(data, dict):
        raise TransientToolError(f"malformed search API answer: expected an object with {key!r}")
    return data.get(key) or []


def _as_list(value: Any) -> list:
    if not isinstance(value, list):
        raise TransientToolError("malformed search API answer: expected a list")
    return value


def build_backend(backend: str, cache: ToolCache | None = None, **params: Any) -> SearchBackend:
    r"""Backend by name: "local", "replay", "web" or "retriever" (`params` go to its constructor).

    Raises:
        ValueError: unknown backend or bad parameters.
    """
    if backend == "local":
        return LocalBackend(**params)
    if backend == "replay":
        return ReplayBackend(params.get("cache_path") or cache)
    if backend == "web":
        return WebBackend(**params)
    if backend == "retriever":
        return RetrieverBackend(**params)
    raise ValueError(f"unknown search backend {backend!r}; use local, replay, web or retriever")


@register_tool("search")
class SearchTool(BaseTool):
    r"""`<search>query</search>`: top-k snippets formatted as `Page 1: …` (see the module docstring).

    Args:
        backend: "local", "replay", "web" or "retriever" (default `agentic_search_backend`'s).
        topk: snippets per query (default `agentic_search_topk`'s).
        snippet_chars: characters kept per snippet (default `agentic_search_snippet_chars`'s).
        max_query_chars: queries are cut to this many characters after normalisation (protects the backends).
        cache: the tool cache (used by the replay backend; the executor does the ordinary caching).
        backend_params: constructor arguments of the backend (e.g. `index_dir`, `provider`, `api_key`, `url`).
        **kwargs: `BaseTool` arguments (tag, timeout_s, retries, call_limit, dedup); unknown keys are passed to the
            backend, so a flat tool config `params: {backend: web, provider: serper}` works.
    """

    name = "search"
    default_tag = "search"

    _BASE_KEYS = ("tag", "timeout_s", "retries", "call_limit", "dedup", "backoff_s")

    def __init__(
        self,
        backend: str = SEARCH_BACKEND,
        topk: int = SEARCH_TOPK,
        snippet_chars: int = SEARCH_SNIPPET_CHARS,
        max_query_chars: int = 4096,
        cache: ToolCache | None = None,
        backend_params: dict | None = None,
        **kwargs: Any,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        base = {k: kwargs.pop(k) for k in list(kwargs) if k in self._BASE_KEYS}
        base.setdefault("timeout_s", 60.0)
        super().__init__(**base)
        params = dict(backend_params or {})
        params.update(kwargs)
        self.topk = check_number("topk", topk, integer=True)
        self.snippet_chars = check_number("snippet_chars", snippet_chars, integer=True)
        self.max_query_chars = check_number("max_query_chars", max_query_chars, integer=True)
        self.backend = build_backend(backend, cache=cache, **params)
        self.retry_on_empty = self.backend.retry_on_empty
        if params.get("api_key"):
            self.add_secrets(params["api_key"])

    @classmethod
    def accepted_params(cls, params: dict[str, Any]) -> set[str]:
        r"""Arguments a tool config may give: this class's, `BaseTool`'s and those of the backend in `params`.

        Without a `backend` in `params` (the recipe's `agentic_search_backend` decides) every backend's are allowed.
        """
        import inspect

        names = set(cls._BASE_KEYS) | set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs"}
        backends = {"local": LocalBackend, "web": WebBackend, "retriever": RetrieverBackend}
        chosen = params.get("backend")
        for name, backend in backends.items():
            if chosen in (None, name):
                names |= set(inspect.signature(backend.__init__).parameters) - {"self"}
        if chosen in (None, "replay"):
            names.add("cache_path")
        return names

    def parse(self, content: str) -> str:
        r"""Normalised query (`normalize_search_query`), cut to `max_query_chars`.

        Raises:
            ToolError: nothing is left after normalisation.
        """
        query = normalize_search_query(content)[: self.max_query_chars].strip()
        if not query:
            raise ToolError("empty search query")
        return query

    def cache_key(self, args: str) -> str:
        r"""See the base class."""
        return args

    def backend_name(self) -> str:
        r"""See the base class."""
        return self.backend.name

    def limit_observation(self, text: str) -> str:
        r"""A cached or replayed result cut like a live one: its pages through `format_snippets(topk, snippet_chars)`.

        A text that is not a `Page 1: …` result (a cached error message) is kept when it has at most
        `topk * snippet_chars` characters, else cut around an omission line to that size; `No search results found.`
        stays as it is.
        """
        body = text.strip()
        if body == NO_SEARCH_RESULTS_TEXT:
            return body
        if body.startswith("Page 1: "):
            return format_snippets(iter_pages(body), self.topk, self.snippet_chars)
        limit = self.topk * self.snippet_chars
        return body if len(body) <= limit else truncate_middle(body, limit)

    def run(self, args: str) -> ToolOutput:
        r"""See the base class."""
        if isinstance(self.backend, ReplayBackend):
            try:
                return ToolOutput(self.limit_observation(self.backend.lookup(args)), STATUS_OK)
            except CacheMiss:
                return ToolOutput(NO_SEARCH_RESULTS_TEXT, STATUS_CACHE_MISS)
        snippets = self.backend.search(args, self.topk)
        text = format_snippets(snippets, self.topk, self.snippet_chars)
        return ToolOutput(text, STATUS_EMPTY if text == NO_SEARCH_RESULTS_TEXT else STATUS_OK)

    def close(self) -> None:
        r"""See the base class."""
        self.backend.close()


__all__ = [
    "LocalBackend",
    "RateLimiter",
    "ReplayBackend",
    "RetrieverBackend",
    "SearchBackend",
    "SearchTool",
    "WebBackend",
    "build_backend",
    "format_snippets",
    "iter_pages",
    "market_for",
]

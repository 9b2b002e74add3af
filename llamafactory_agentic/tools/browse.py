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

r"""The `browse` search mode: the deep-search protocol of the papers (ARPO arXiv 2507.19849, App. C.3).

For a query the search backend's top results (with their links) are taken, each page is downloaded, turned into text
(`html_to_text`, BeautifulSoup), cut to the passage that best matches the result's snippet and the query
(`best_passage`), and condensed by a summariser model at an OpenAI-compatible chat endpoint
(`rewards.judge.ChatClient`). The observation lists the summaries as `Page 1: …\nPage 2: …`, like the snippet mode.

Everything is cached in the tool cache (`tools/cache.py`) like every tool result, under its own tool names:
`browse_results` (query -> the ranked results as JSON), `browse_fetch` (URL -> page text) and `browse_summary`
(SHA-256 of summariser model and prompt -> summary); the whole observation is cached by the executor under `search`
with a `browse|` key. A run whose cache holds these entries replays without the search API, the web or the summariser.

Failures never end a trajectory: a page that cannot be fetched (HTTP error, timeout, not text) is summarised from its
snippet, a summariser call that fails after its retries leaves the passage itself (cut to `summary_chars`); neither is
cached, so a later run tries again.

Outbound limits (`common/outbound.py`, docs/tools.md "Outbound limits"): a page download, redirects included, ends
within `fetch_timeout_s` and reads `max_page_bytes` at most; a link whose host resolves to a loopback, private,
link-local (cloud metadata), shared or reserved address is refused after DNS resolution, at every redirect and when the
socket connects, unless the host is in `allow_hosts` (`eval_browse_allow_hosts`). A refused page is treated as one
that cannot be fetched: nothing of it reaches the summariser, the observation, the records or the cache, and a page
cached for that link by an earlier run is not used (`stats["refused"]` counts them).
"""

import hashlib
import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..common import outbound
from ..common.log import get_logger
from .base import NO_SEARCH_RESULTS_TEXT, STATUS_EMPTY, STATUS_OK, BaseTool, ToolOutput, check_number
from .cache import CacheUnavailable, ToolCache


logger = get_logger(__name__)

FETCH_TOOL, SUMMARY_TOOL, RESULTS_TOOL = "browse_fetch", "browse_summary", "browse_results"
SUMMARY_PROMPT = (
    "You are helping a research assistant who searched the web for: {query}\n"
    "Below is text from one of the result pages ({title}, {url}). Extract every piece of information on the page "
    "that helps answer the search query: facts, names, numbers and dates, quoted as on the page. Write at most "
    "{words} words, no preamble. If the page holds nothing relevant, reply exactly: No relevant information.\n\n"
    "Page text:\n{text}\n"
)
_WORD = re.compile(r"\w+", re.UNICODE)
_SKIP_TAGS = ("script", "style", "noscript", "template", "svg", "head", "iframe", "form", "nav", "footer")


def html_to_text(html: str) -> str:
    r"""Readable text of an HTML page: scripts, styles, navigation and footers removed, one block per line.

    Uses BeautifulSoup (`beautifulsoup4`, the `browse` extra) with the standard library's parser.

    Raises:
        ImportError: beautifulsoup4 is not installed (with the install hint).
    """
    try:
        from bs4 import BeautifulSoup
    except ImportError as exc:  # pragma: no cover - the extra is part of the dev install
        raise ImportError(
            "the browse search mode needs beautifulsoup4: pip install -c constraints.txt -e '.[browse]'"
        ) from exc
    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(list(_SKIP_TAGS)):
        tag.decompose()
    lines = (" ".join(line.split()) for line in soup.get_text("\n").splitlines())
    return "\n".join(line for line in lines if line)


def best_passage(text: str, hints: str, max_chars: int) -> str:
    r"""The `max_chars` window of `text` (whole lines) around the line sharing the most words with `hints`.

    The paper trims each page around the passage that best matches the search snippet before summarising it.
    Ties go to the earliest line; a text no longer than `max_chars` is returned whole.
    """
    if len(text) <= max_chars:
        return text
    lines = text.split("\n")
    wanted = {w.lower() for w in _WORD.findall(hints)}
    scores = [len(wanted & {w.lower() for w in _WORD.findall(line)}) for line in lines]
    best = max(range(len(lines)), key=lambda i: (scores[i], -i))
    lo = hi = best
    size = len(lines[best])
    while True:  # grow the window one line at a time, alternately before and after, while it fits
        grown = False
        for j in (lo - 1, hi + 1):
            if 0 <= j < len(lines) and size + 1 + len(lines[j]) <= max_chars:
                lo, hi = min(lo, j), max(hi, j)
                size += 1 + len(lines[j])
                grown = True
        if not grown:
            break
    return "\n".join(lines[lo : hi + 1])[:max_chars]


def result_links(results: list[dict[str, Any]]) -> list[dict[str, str]]:
    r"""`[{"url", "title", "snippet"}]` from a search API's result objects.

    Serper `link`/`snippet`, Bing `url`/`name`/`snippet`, Bright Data `link`/`description`, a local corpus row
    `url`/`title`/`text`.
    """
    out = []
    for r in results:
        if not isinstance(r, dict):
            continue
        url = r.get("link") or r.get("url") or ""
        snippet = r.get("snippet") or r.get("description") or r.get("text") or r.get("contents") or ""
        out.append({"url": str(url), "title": str(r.get("title") or r.get("name") or ""), "snippet": str(snippet)})
    return out


class Browser:
    r"""Fetch and summarise the pages behind search results, every step cached (see the module docstring).

    Args:
        summariser: The summariser (`rewards.judge.ChatClient` or anything with `model` and `ask(prompt)`);
            None: the trimmed passage itself is the page's text (no model).
        cache: The tool cache (None: nothing cached). In a read-only cache nothing is written.
        pages: Results browsed per query (the paper: 10).
        page_chars: Characters of page text around the best passage given to the summariser.
        summary_words: Length asked of the summariser.
        summary_chars: Characters kept per page in the observation.
        fetch_timeout_s: Seconds per page download, whole (redirects and a trickling server included).
        max_page_bytes: Bytes read per page at most.
        workers: Pages fetched and summarised at once.
        allow_hosts: Internal hosts that may be fetched (`common.outbound.AddressPolicy`: names or addresses as
            written in links, or networks; comma-separated string or list). None: no internal address is reached.

    Raises:
        ValueError: an `allow_hosts` entry that is neither a host name, an address nor a network.
    """

    def __init__(
        self,
        summariser: Any = None,
        cache: ToolCache | None = None,
        pages: int = 10,
        page_chars: int = 8000,
        summary_words: int = 200,
        summary_chars: int = 3000,
        fetch_timeout_s: float = 20.0,
        max_page_bytes: int = 2_000_000,
        workers: int = 5,
        allow_hosts: str | list[str] | None = None,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        self.summariser = summariser
        self.cache = cache
        self.pages = check_number("pages", pages, integer=True)
        self.page_chars = check_number("page_chars", page_chars, integer=True)
        self.summary_words = check_number("summary_words", summary_words, integer=True)
        self.summary_chars = check_number("summary_chars", summary_chars, integer=True)
        self.max_page_bytes = int(max_page_bytes)
        self.fetch_timeout_s = check_number("fetch_timeout_s", fetch_timeout_s)
        self.policy = outbound.AddressPolicy(allow_hosts)
        self._client = outbound.outbound_client(
            headers={"User-Agent": "Mozilla/5.0 (compatible; llamafactory-agentic browse)"}, policy=self.policy
        )
        self._pool = ThreadPoolExecutor(max_workers=max(1, int(workers)), thread_name_prefix="agentic-browse")
        self._lock = threading.Lock()
        self.stats = {"fetches": 0, "fetch_errors": 0, "summaries": 0, "summary_errors": 0, "cache_hits": 0,
                      "refused": 0}  # fmt: skip

    # ------------------------------------------------------------------ cache
    def _get(self, tool: str, key: str) -> str | None:
        if self.cache is None:
            return None
        try:
            entry = self.cache.lookup(tool, key)
        except CacheUnavailable:
            return None
        if entry is None:
            return None
        with self._lock:
            self.stats["cache_hits"] += 1
        return entry.result

    def _put(self, tool: str, key: str, value: str) -> None:
        if self.cache is None or not getattr(self.cache, "writable", True):
            return
        try:
            self.cache.put(tool, key, value)
        except Exception as exc:  # a slow or broken cache never costs the result
            logger.debug("[agentic-tools] browse cache write failed for %s: %s", tool, exc)

    def _count(self, name: str) -> None:
        with self._lock:
            self.stats[name] += 1

    # ------------------------------------------------------------------ steps
    def results(self, query: str, search: Any) -> list[dict[str, str]]:
        r"""The ranked results of `query` (cached; `search(query) -> [{"url", "title", "snippet"}]` on a miss)."""
        cached = self._get(RESULTS_TOOL, query)
        if cached is not None:
            return json.loads(cached)
        found = search(query)
        if found:  # an empty answer is never cached (as for snippet search)
            self._put(RESULTS_TOOL, query, json.dumps(found, ensure_ascii=False))
        return found

    def fetch(self, url: str) -> str | None:
        r"""The text of the page at `url` (cached), or None when it cannot be fetched or is refused (not cached)."""
        import httpx

        if not url.startswith(("http://", "https://")):
            return None
        try:  # before the cache: a page an earlier run cached for an internal link is not used either
            self.policy.check_url(url, resolve_errors=False)
        except (outbound.AddressRefused, ValueError, httpx.InvalidURL) as exc:  # a link httpx cannot parse: refused
            self._refused(url, exc)
            return None
        cached = self._get(FETCH_TOOL, url)
        if cached is not None:
            return cached
        self._count("fetches")

        def text_only(status: int, headers: Any) -> None:
            if status >= 400:
                raise ValueError(f"HTTP {status}")
            kind = headers.get("content-type", "text/html").lower()
            if not kind.startswith(("text/", "application/xhtml")):
                raise ValueError(f"not a text page ({kind})")

        try:
            page = outbound.fetch(self._client, "GET", url, deadline_s=self.fetch_timeout_s,
                                  max_bytes=self.max_page_bytes, redirects="follow", policy=self.policy,
                                  truncate=True, check_headers=text_only)  # fmt: skip
            kind = page.headers.get("content-type", "text/html").lower()
            raw = page.text
            text = html_to_text(raw) if "html" in kind else "\n".join(" ".join(x.split()) for x in raw.splitlines())
        except outbound.AddressRefused as exc:  # the link or a redirect: nothing of the page is kept
            self._refused(url, exc)
            return None
        except Exception as exc:
            self._count("fetch_errors")
            logger.debug("[agentic-tools] browse: %s not fetched: %s", url, exc)
            return None
        self._put(FETCH_TOOL, url, text)
        return text

    def _refused(self, url: str, exc: Exception) -> None:
        self._count("refused")
        logger.warning("[agentic-tools] browse: %s refused: %s (eval_browse_allow_hosts)", url, exc)

    def summarise(self, query: str, result: dict[str, str], passage: str) -> str:
        r"""The summariser's digest of `passage` for `query` (cached); the passage itself when it fails."""
        if self.summariser is None:
            return passage
        prompt = SUMMARY_PROMPT.format(
            query=query, title=result.get("title") or "untitled", url=result.get("url") or "no link",
            words=self.summary_words, text=passage,
        )  # fmt: skip
        key = hashlib.sha256(f"{self.summariser.model}\n{prompt}".encode()).hexdigest()
        cached = self._get(SUMMARY_TOOL, key)
        if cached is not None:
            return cached
        self._count("summaries")
        try:
            summary = " ".join(self.summariser.ask(prompt).split())
        except Exception as exc:
            self._count("summary_errors")
            logger.warning("[agentic-tools] browse: the summariser failed (%s); the page passage is used", exc)
            return passage
        if summary:
            self._put(SUMMARY_TOOL, key, summary)
        return summary or passage

    def page(self, query: str, result: dict[str, str]) -> str:
        r"""One page's text for the observation: fetched, trimmed around the snippet, summarised."""
        text = self.fetch(result.get("url") or "")
        passage = best_passage(text, f"{result.get('snippet', '')} {query}", self.page_chars) if text else ""
        passage = passage or result.get("snippet") or ""
        if not passage.strip():
            return ""
        return self.summarise(query, result, passage)[: self.summary_chars]

    def browse(self, query: str, search: Any) -> str:
        r"""The observation for `query`: `Page 1: …` summaries of the top `pages` results (see the module doc)."""
        found = self.results(query, search)[: self.pages]
        texts = list(self._pool.map(lambda r: self.page(query, r), found))
        kept = [" ".join(t.split()) for t in texts if t and t.strip()]
        if not kept:
            return NO_SEARCH_RESULTS_TEXT
        return "\n".join(f"Page {i}: {t}" for i, t in enumerate(kept, 1))

    def close(self) -> None:
        r"""Close the HTTP client and the worker threads."""
        self._pool.shutdown(wait=False)
        self._client.close()


class BrowseSearchTool(BaseTool):
    r"""`<search>query</search>` in the `browse` mode: a `SearchTool`'s results, browsed by a `Browser`.

    The tool answers to the same tag and name (`search`) as the snippet tool it wraps; its cache key starts with
    `browse|` and names the summariser, so browse and snippet observations of one query never mix in the cache.

    Args:
        search: The snippet search tool whose backend gives the ranked results (it must return links: `web`,
            `local` with a corpus that has `url` fields, or `replay` from a cache written by an earlier browse run).
        browser: The browser.
    """

    name = "search"
    default_tag = "search"

    def __init__(self, search: Any, browser: Browser) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        super().__init__(tag=search.tag, timeout_s=max(search.timeout_s, 300.0), retries=1,
                         call_limit=search.call_limit, dedup=search.dedup)  # fmt: skip
        self.search = search
        self.browser = browser
        self.retry_on_empty = False

    def parse(self, content: str) -> str:
        r"""See `SearchTool.parse`."""
        return self.search.parse(content)

    def cache_key(self, args: str) -> str:
        r"""`browse|<summariser model>|<pages>|<query>`."""
        model = getattr(self.browser.summariser, "model", None) or "none"
        return f"browse|{model}|{self.browser.pages}|{args}"

    def backend_name(self) -> str:
        r"""See the base class."""
        return f"browse:{self.search.backend_name()}"

    def limit_observation(self, text: str) -> str:
        r"""A cached observation as it is (its pages were cut to `summary_chars` when made)."""
        return text

    def _results(self, query: str) -> list[dict[str, str]]:
        backend = self.search.backend
        if not hasattr(backend, "search_results"):
            raise ValueError(
                f"the {backend.name} search backend gives no links to browse; use web, local (a corpus with url "
                "fields) or replay (a cache of an earlier browse run)"
            )
        return result_links(backend.search_results(query, self.browser.pages))

    def run(self, args: str) -> ToolOutput:
        r"""See the base class."""
        text = self.browser.browse(args, self._results)
        return ToolOutput(text, STATUS_EMPTY if text == NO_SEARCH_RESULTS_TEXT else STATUS_OK)

    def close(self) -> None:
        r"""See the base class."""
        self.browser.close()
        self.search.close()


__all__ = ["Browser", "BrowseSearchTool", "best_passage", "html_to_text", "result_links", "SUMMARY_PROMPT"]

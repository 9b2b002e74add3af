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

"""Browse mode never fetches internal addresses (issue 34, high 5; docs/tools.md "Outbound limits").

A real `Browser` (httpx), a real summariser client (`judge.ChatClient`) and a real SQLite tool cache, with an
"internal" admin page served on 127.0.0.1. Before: links to `127.0.0.1`, `localhost`, `2130706433` and redirects to
them were fetched and the page's text went to the summariser, the observation and the cache. The tests' own public
pages are on 127.0.0.1 too, so they are reached through `allow_hosts`, the intranet key; the refusals are tested
with the default (nothing allowed) and with `127.0.0.1` allowed by name only.
"""

import json
import sqlite3
import time

import pytest

from llamafactory_agentic.rewards.judge import ChatClient
from llamafactory_agentic.tools.browse import Browser
from llamafactory_agentic.tools.cache import open_cache


SECRET = "ADMIN-SECRET-TOKEN-42"


@pytest.fixture()
def site(local_http):
    """`(pages, summariser)`: an internal admin page plus public pages and redirects; a chat server that records."""

    def pages_route(handler, method, body):
        port = pages.port
        targets = {
            "/to-localhost": f"http://localhost:{port}/admin",
            "/to-decimal": f"http://2130706433:{port}/admin",
            "/to-metadata": "http://169.254.169.254/latest/meta-data/",
        }
        if handler.path == "/admin":
            pages.send(handler, 200, f"<html><body><p>Paris capital {SECRET}</p></body></html>", "text/html")
        elif handler.path in targets:
            handler.send_response(302)
            handler.send_header("Location", targets[handler.path])
            handler.send_header("Content-Length", "0")
            handler.end_headers()
        else:
            pages.send(handler, 200, "<html><body><p>The capital of France is Paris.</p></body></html>", "text/html")

    def chat_route(handler, method, body):
        prompt = json.loads(body)["messages"][-1]["content"]
        text = prompt.split("Page text:\n", 1)[1].strip().splitlines()[0]
        summariser.send(handler, 200, json.dumps({"choices": [{"message": {"content": f"SUMMARY {text}"}}]}))

    pages = local_http(pages_route)
    summariser = local_http(chat_route)
    return pages, summariser


def _browser(tmp_path, summariser, allow_hosts=None):
    cache = open_cache(str(tmp_path / "tool_cache.sqlite"), mode="read_write")
    chat = ChatClient(summariser.url, "summariser", timeout_s=5, retries=1)
    allow = {} if allow_hosts is None else {"allow_hosts": allow_hosts}  # the default: the key left out
    return Browser(chat, cache=cache, pages=10, fetch_timeout_s=1.0, **allow), cache


def _cached_text(tmp_path) -> str:
    with sqlite3.connect(tmp_path / "tool_cache.sqlite") as db:
        return json.dumps(db.execute("SELECT * FROM entries").fetchall())


def _leaked(site, browser, observation, tmp_path) -> list[str]:
    pages, summariser = site
    prompts = " ".join(r[3].decode() for r in summariser.requests)
    where = {"summariser": prompts, "observation": observation, "cache": _cached_text(tmp_path)}
    return [name for name, text in where.items() if SECRET in text]


def test_browse_refuses_internal_links_by_default(site, tmp_path):
    pages, summariser = site
    port = pages.port
    links = [
        f"http://127.0.0.1:{port}/admin",
        f"http://localhost:{port}/admin",
        f"http://2130706433:{port}/admin",
        f"http://[::1]:{port}/admin",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/admin",
        "http://172.16.0.1/admin",
        "http://192.168.1.1/admin",
    ]
    results = [{"url": u, "title": f"r{i}", "snippet": f"snippet {i} capital"} for i, u in enumerate(links)]
    browser, cache = _browser(tmp_path, summariser)
    start = time.perf_counter()
    observation = browser.browse("capital of France", lambda q: results)
    seconds = time.perf_counter() - start
    assert cache.flush(10)
    print(f"{len(links)} internal links: {browser.stats}; {seconds:.2f} s")
    leaked = _leaked(site, browser, observation, tmp_path)
    assert leaked == [], f"the internal page reached the {leaked} ({len(pages.requests)} requests to it)"
    assert pages.requests == []
    assert browser.stats["refused"] == len(links) and browser.stats["fetches"] == 0
    assert observation.count("Page ") == len(links) and "SUMMARY snippet 0 capital" in observation  # from snippets
    assert seconds < 5.0  # refused before connecting: no 1 s timeouts on unroutable addresses
    browser.close()
    cache.close()


def test_browse_refuses_redirects_to_internal_hosts_and_stale_cache(site, tmp_path):
    """`127.0.0.1` allowed by name: its public page is browsed; redirects to localhost, 2130706433 and the metadata
    address are refused, and an internal page cached by an earlier run is not used."""
    pages, summariser = site
    port = pages.port
    browser, cache = _browser(tmp_path, summariser, allow_hosts="127.0.0.1")
    cache.put("browse_fetch", f"http://localhost:{port}/admin", f"Paris capital {SECRET}")  # an earlier run's entry
    links = [f"http://127.0.0.1:{port}/{p}" for p in ("public", "to-localhost", "to-decimal", "to-metadata")]
    links.append(f"http://localhost:{port}/admin")
    results = [{"url": u, "title": f"r{i}", "snippet": f"snippet {i}"} for i, u in enumerate(links)]
    observation = browser.browse("capital of France", lambda q: results)
    assert cache.flush(10)
    print(observation)
    assert sorted(r[1] for r in pages.requests) == ["/public", "/to-decimal", "/to-localhost", "/to-metadata"]
    assert "SUMMARY The capital of France is Paris." in observation  # the allowed public page, summarised
    assert SECRET not in observation and SECRET not in " ".join(r[3].decode() for r in summariser.requests)
    assert browser.stats["refused"] == 4
    with sqlite3.connect(tmp_path / "tool_cache.sqlite") as db:
        fetched = sorted(k for (k,) in db.execute("SELECT key FROM entries WHERE tool = 'browse_fetch'"))
    assert fetched == [f"http://127.0.0.1:{port}/public", f"http://localhost:{port}/admin"]  # no refused page stored
    browser.close()
    cache.close()


def test_allow_hosts_entries_are_checked():
    with pytest.raises(ValueError, match="not a host name"):
        Browser(None, allow_hosts="intranet.example, bad host!")
    browser = Browser(None, allow_hosts="wiki.corp, 10.0.0.0/8, ::1")
    assert browser.policy.names == {"wiki.corp", "::1"} and [str(n) for n in browser.policy.networks] == ["10.0.0.0/8"]
    browser.close()

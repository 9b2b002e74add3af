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

"""Search tool tests. The real web APIs (Serper, Bing, Bright Data) and a Search-R1 retrieval server cannot be
reached from the test machines: they are replaced by local fake HTTP servers on 127.0.0.1 speaking their formats."""

import json
import os
import time
from urllib.parse import parse_qs, urlparse

import pytest

from llamafactory_agentic.tools.cache import SQLiteCache
from llamafactory_agentic.tools.index import split_pages
from llamafactory_agentic.tools.search import RateLimiter, SearchTool, format_snippets, market_for


def test_format_snippets_like_the_reference():
    snippets = ["first", "", "  ", "second", "first", "x" * 50, "third"]
    assert format_snippets(snippets, topk=3, snippet_chars=10) == "Page 1: first\nPage 2: second\nPage 3: xxxxxxxxxx"
    assert format_snippets([], 10, 100) == "No search results found."
    assert format_snippets(["", None], 10, 100) == "No search results found."


def test_split_pages():
    assert split_pages("Page 1: a b\nPage 2: c\nPage 10: d") == ["a b", "c", "d"]
    assert split_pages("No search results found.") == []


def test_market():
    assert market_for("北京 天气") == "zh-CN" and market_for("Paris weather") == "en-US"


def test_local_backend_answers_reference_queries_with_real_text(shared_data, tmp_path_factory):
    from llamafactory_agentic.tools.index import build_corpus_from_cache_json

    source = shared_data / "arpo" / "search_cache.json"
    index = tmp_path_factory.mktemp("search-index")
    assert build_corpus_from_cache_json(source, index)["documents"] > shared_data.facts["search_min_documents"]
    reference = json.loads(source.read_text())
    tool = SearchTool(backend="local", index_dir=str(index), topk=10, snippet_chars=1000)
    hits = 0
    for query, recorded in list(reference.items())[:40]:
        result = tool.execute(query)
        assert result.status in ("ok", "empty")
        recorded_pages = set(split_pages(recorded))
        got = split_pages(result.text)
        assert len(got) <= 10 and all(len(p) <= 1000 for p in got)
        hits += bool(recorded_pages & set(got))
    assert hits >= 35, hits  # the recorded snippets of a query come back for (almost) every query
    assert tool.execute("zzqqxxyy").text == "No search results found."


def test_local_backend_hostile_queries(local_index):
    tool = SearchTool(backend="local", index_dir=str(local_index), topk=3, timeout_s=10)
    for query in ["'; DROP TABLE entries; --", '"""', "x" * 100_000, "bad \udcff byte", "</search> <search>",
                  "\x00\x01\x02", "中文 查询 Amy Smart"]:  # fmt: skip
        result = tool.execute(query)
        assert result.status in ("ok", "empty", "error"), query
        assert isinstance(result.text, str) and result.text
    assert tool.execute('""').text == "Error: Tool(search) execution failed with message: empty search query"


def test_missing_local_index_is_an_observation(tmp_path):
    tool = SearchTool(backend="local", index_dir=str(tmp_path / "nowhere"), retries=1)
    result = tool.execute("anything")
    assert result.status == "error" and "index build" in result.text


def test_replay_backend(tmp_path):
    cache = SQLiteCache(tmp_path / "c.sqlite")
    cache.put("search", "known query", "Page 1: recorded")
    tool = SearchTool(backend="replay", cache=cache)
    assert tool.execute(' "known"   query ').text == "Page 1: recorded"
    miss = tool.execute("unknown query")
    assert (miss.status, miss.text) == ("cache_miss", "No search results found.")
    cache.close()


def _serper_handler(state):
    def handler(method, path, headers, body):
        state["n"] += 1
        req = json.loads(body)
        assert headers["X-API-KEY"] == "sk-secret-serper"
        mode = state.get("mode")
        if mode == "429-then-ok" and state["n"] == 1:
            return 429, {"message": "slow down"}
        if mode == "500":
            return 500, {"message": "boom"}
        if mode == "malformed":
            return 200, b"{not json"
        if mode == "wrong-shape":
            return 200, {"organic": "nope"}
        if mode == "hang":
            return "sleep", 3
        if mode == "empty":
            return 200, {"organic": []}
        return 200, {"organic": [{"title": "t", "link": "l", "snippet": f"{req['q']} snippet {i}"} for i in range(12)]
                     + [{"snippet": ""}, {"snippet": f"{req['q']} snippet 0"}]}  # fmt: skip

    return handler


def _web_tool(server, **kwargs):
    params = dict(backend="web", provider="serper", api_key="sk-secret-serper", endpoint=server.url + "/search",
                  topk=10, snippet_chars=1000, retries=3, backoff_s=0.01, timeout_s=10)  # fmt: skip
    params.update(kwargs)
    return SearchTool(**params)


def test_web_serper_format_and_retries(fake_server):
    state = {"n": 0, "mode": "429-then-ok"}
    server = fake_server(_serper_handler(state))
    tool = _web_tool(server)
    result = tool.execute('who is "Amy Smart"')
    assert result.status == "ok"
    assert result.text.startswith("Page 1: who is Amy Smart snippet 0\nPage 2:")
    assert result.text.count("\nPage ") == 9  # 10 pages
    assert state["n"] == 2  # 429 retried once
    body = json.loads(server.requests[-1]["body"])
    assert body["q"] == "who is Amy Smart" and body["gl"] == "us"


@pytest.mark.parametrize("mode,fragment", [("500", "HTTP 500"), ("malformed", "malformed JSON"),
                                           ("wrong-shape", "malformed search API answer")])  # fmt: skip
def test_web_failures_become_observations(fake_server, mode, fragment):
    state = {"n": 0, "mode": mode}
    server = fake_server(_serper_handler(state))
    result = _web_tool(server).execute("query")
    assert result.status == "error"
    assert result.text.startswith("Error: Tool(search) execution failed with message:") and fragment in result.text
    assert state["n"] == 3  # every attempt used
    assert "sk-secret-serper" not in result.text


def test_web_timeout(fake_server):
    state = {"n": 0, "mode": "hang"}
    server = fake_server(_serper_handler(state))
    tool = SearchTool(backend="web", provider="serper", api_key="sk-secret-serper", endpoint=server.url,
                      backend_params={"timeout_s": 0.5}, retries=2, backoff_s=0.01, timeout_s=10)  # fmt: skip
    start = time.time()
    result = tool.execute("query")
    assert result.status == "error" and "timed out" in result.text
    assert time.time() - start < 3


def test_web_empty_results_are_retried(fake_server):
    state = {"n": 0, "mode": "empty"}
    server = fake_server(_serper_handler(state))
    result = _web_tool(server).execute("query")
    assert (result.status, result.text) == ("empty", "No search results found.")
    assert state["n"] == 3


def test_web_bing_and_brightdata(fake_server):
    def bing(method, path, headers, body):
        q = parse_qs(urlparse(path).query)
        assert method == "GET" and headers["Ocp-Apim-Subscription-Key"] == "bing-key"
        return 200, {"webPages": {"value": [{"name": "n", "url": "u", "snippet": f"{q['q'][0]} {q['mkt'][0]}"}]}}

    def brightdata(method, path, headers, body):
        req = json.loads(body)
        assert headers["Authorization"] == "Bearer bd-key" and req["zone"] == "zone1"
        assert "bing.com/search" in req["url"] and "brd_json=1" in req["url"]
        return 200, {"organic": [{"title": "t", "link": "l", "description": "from bright data"}]}

    s1, s2 = fake_server(bing), fake_server(brightdata)
    t1 = SearchTool(backend="web", provider="bing", api_key="bing-key", endpoint=s1.url, retries=1)
    assert t1.execute("北京").text == "Page 1: 北京 zh-CN"
    t2 = SearchTool(backend="web", provider="brightdata", api_key="bd-key", zone="zone1", endpoint=s2.url)
    assert t2.execute("q").text == "Page 1: from bright data"


def test_web_needs_a_key(monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    with pytest.raises(ValueError, match="SERPER_API_KEY"):
        SearchTool(backend="web", provider="serper")


def test_retriever_backend(fake_server):
    def handler(method, path, headers, body):
        req = json.loads(body)
        assert path == "/retrieve" and req["topk"] == 2 and req["return_scores"] is True
        docs = [{"document": {"id": "1", "contents": '"Title"\nText one'}, "score": 3.0},
                {"document": {"id": "2", "contents": "Text two"}, "score": 2.0}]  # fmt: skip
        return 200, {"result": [docs[: req["topk"]]]}

    server = fake_server(handler)
    tool = SearchTool(backend="retriever", url=server.url, topk=2)
    assert tool.execute("q").text == 'Page 1: "Title" Text one\nPage 2: Text two'


def test_rate_limiter():
    limiter = RateLimiter(rate=20, burst=1)
    start = time.monotonic()
    for _ in range(11):
        limiter.acquire()
    assert time.monotonic() - start >= 0.45


def test_local_backend_keeps_jax_off_the_gpu(tmp_path):
    """When JAX is installed (the GPU machine has it), `import bm25s` imports `jax.lax` and runs a top-k at import
    time; JAX then preallocates 75% of the GPU in the trainer's process (an H200 run failed allocating 104.85 GiB).
    JAX cannot reach a GPU here, so a stand-in `jax` package records the environment JAX would read at that moment;
    the search itself runs through the real bm25s in a real subprocess."""
    import subprocess
    import sys

    fake = tmp_path / "fake_jax" / "jax"
    fake.mkdir(parents=True)
    record = tmp_path / "jax_env.json"
    (fake / "__init__.py").write_text("")
    (fake / "lax.py").write_text(  # records the environment at every call, answers like jax.lax.top_k
        "import json, os\n"
        "import numpy as np\n"
        "def top_k(x, k):\n"
        f"    with open({str(record)!r}, 'a') as f:\n"
        "        f.write(json.dumps({v: os.environ.get(v) for v in ('JAX_PLATFORMS', 'XLA_PYTHON_CLIENT_PREALLOCATE')})"
        " + '\\n')\n"
        "    idx = np.argsort(-np.asarray(x), kind='stable')[:k]\n"
        "    return np.asarray(x)[idx], idx\n"
    )
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rows = [{"id": i, "text": t, "query": ""} for i, t in enumerate(["Amy Smart works in Vipuford", "Bob is 42"])]
    (corpus / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    script = (
        "from llamafactory_agentic.tools.search import SearchTool\n"
        f"r = SearchTool(backend='local', index_dir={str(corpus)!r}, topk=1).execute('Where does Amy work?')\n"
        "print(r.status, r.text)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "fake_jax"), *sys.path]))
    env.pop("JAX_PLATFORMS", None)
    env.pop("XLA_PYTHON_CLIENT_PREALLOCATE", None)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok") and "Vipuford" in proc.stdout, proc.stdout
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert calls == [{"JAX_PLATFORMS": "cpu", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}]  # bm25s' import-time call
    # (retrieval itself used numpy's selection: one call only)

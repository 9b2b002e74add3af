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

"""The `browse` search mode (the papers' deep-search protocol, docs/algorithms.md 9.2), offline: a local HTTP server
started here serves the result pages; the summariser is the local fake OpenAI-compatible server of these tests (the
hosted summariser model the paper used cannot run here), and so is the policy; the search results come from a test
BM25 index whose rows carry the pages' links. A second run with the page server and the summariser stopped, with
the `replay` search backend, answers every search from the cached result lists, fetches and summaries and writes the
same trajectories."""

import json
import sqlite3
from http.server import BaseHTTPRequestHandler

import pytest

from llamafactory_agentic.evaluation import evaluate
from llamafactory_agentic.evaluation.config import EvalConfigError
from llamafactory_agentic.evaluation.records import load_all_records
from llamafactory_agentic.evaluation.runner import parse_eval_config
from llamafactory_agentic.testing import LoopbackServer
from llamafactory_agentic.tools.browse import Browser, best_passage, html_to_text

from .fake_openai import FakeOpenAIServer
from .helpers import scripted_policy, write_jsonl


FILLER = "\n".join(f"<p>Unrelated paragraph {i} about gardening and weather.</p>" for i in range(300))
PAGES = {
    "/france.html": (
        "<html><head><title>France</title><style>p {color: red}</style><script>var x = 'SCRIPT TEXT';</script>"
        f"</head><body><nav>Home | About</nav>{FILLER}<p>The capital of France is Paris, on the Seine.</p>"
        f"{FILLER}<footer>Copyright</footer></body></html>"
    ),
    "/italy.html": "<html><body><h1>Italy</h1><p>Rome is the capital of Italy.</p></body></html>",
}
SCRIPTS = {
    "Which city is the capital of France?": [
        "<think> look </think> <search> capital of France </search>",
        "<think> done </think> <answer> \\boxed{Paris} </answer>",
    ],
}


class PageServer(LoopbackServer):
    """Serves `PAGES` on 127.0.0.1 and counts the requests; `/missing.html` is a 404."""

    def __init__(self):
        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.requests.append(self.path)
                body = PAGES.get(self.path)
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.end_headers()
                self.wfile.write((body or "not found").encode())

        super().__init__(Handler)
        self.url = self.root


def summarise(prompt):
    """The fake summariser: the page's line that mentions a capital, marked, or the no-information reply."""
    text = prompt.split("Page text:\n", 1)[1]
    hits = [line for line in text.splitlines() if "capital" in line]
    return f"SUMMARY: {hits[0]}" if hits else "No relevant information."


def corpus(tmp_path, base):
    rows = [
        {"id": "1", "text": "The capital of France is Paris.", "url": f"{base}/france.html", "title": "France"},
        {"id": "2", "text": "Rome is the capital of Italy.", "url": f"{base}/italy.html", "title": "Italy"},
        {"id": "3", "text": "France capital page that is gone.", "url": f"{base}/missing.html", "title": "Gone"},
    ]
    return write_jsonl(tmp_path / "index" / "corpus.jsonl", rows)


def config(tmp_path, model_dir, policy_url, out, **extra):
    data = write_jsonl(tmp_path / "q.jsonl", [{"question": q, "answer": "Paris"} for q in SCRIPTS])
    return {
        "model_name_or_path": str(model_dir),
        "template": "qwen",
        "agentic_cache_path": str(tmp_path / "tool_cache.sqlite"),
        "agentic_search_topk": 3,
        "eval_preset": "paper",
        "eval_benchmarks": [
            {"name": "deep", "path": str(data), "task": "qa", "metric": "em", "search_mode": "browse"},
            {"name": "plain", "path": str(data), "task": "qa", "metric": "em"},
        ],
        "eval_runs": 1,
        "eval_progress": False,
        "eval_base_url": policy_url,
        "eval_output_dir": str(out),
        **extra,
    }


def test_browse_mode_fetches_summarises_and_replays_from_the_cache(tmp_path, tiny_model_dir, tiny_tokenizer):
    with FakeOpenAIServer(tiny_tokenizer, scripted_policy(SCRIPTS)) as policy:
        with PageServer() as pages, FakeOpenAIServer(tiny_tokenizer, judge=summarise, model="summariser") as summ:
            browse_keys = {
                "eval_search_mode": "browse",
                "eval_browse_base_url": summ.url,
                "eval_browse_model": "summariser",
                "eval_browse_page_chars": 400,
                "eval_browse_allow_hosts": "127.0.0.1",  # the test's page server (internal hosts are refused)
            }
            index = corpus(tmp_path, pages.url)
            first = evaluate(config(tmp_path, tiny_model_dir, policy.url, tmp_path / "live", agentic_search_backend="local",
                                   agentic_search_index=str(index), **browse_keys))  # fmt: skip
            fetched, summaries = list(pages.requests), [c["messages"][-1]["content"] for c in summ.chats]
        assert first["complete"]
        live = {r["benchmark"]: r for r in load_all_records(tmp_path / "live")}
        deep_obs = "".join(t for kind, t in live["deep"]["segments"] if kind == "obs")
        plain_obs = "".join(t for kind, t in live["plain"]["segments"] if kind == "obs")
        # the browsing set: three pages asked for (one is a 404), two summarised
        assert sorted(fetched) == ["/france.html", "/italy.html", "/missing.html"]
        assert "Page 1: SUMMARY: The capital of France is Paris, on the Seine." in deep_obs
        assert "SUMMARY: Rome is the capital of Italy." in deep_obs
        assert "SUMMARY: France capital page that is gone." in deep_obs  # the 404 page: summarised from its snippet
        assert deep_obs.count("Page ") == 3
        assert live["deep"]["prediction"] == "Paris" and live["deep"]["scores"]["em"] == 1.0
        # the page reached the summariser as text around the best passage: no script, no style, cut to 400 chars
        france = next(s for s in summaries if "France is Paris" in s)
        passage = france.split("Page text:\n", 1)[1]
        assert "SCRIPT TEXT" not in passage and "color: red" not in passage and len(passage.strip()) <= 400
        # the snippet set in the same run: snippets, no browsing
        assert "Page 1: The capital of France is Paris." in plain_obs and "SUMMARY" not in plain_obs
        meta = json.loads((tmp_path / "live" / "run.json").read_text(encoding="utf-8"))
        assert meta["benchmarks"]["deep"]["search_mode"] == "browse"
        assert meta["benchmarks"]["plain"]["search_mode"] == "snippets"
        assert meta["protocol"]["tools"]["browse_model"] == "summariser"

        # page server and summariser stopped; the search API is replaced by the replay backend. The whole-observation
        # entries are removed, so every result list, page and summary must come from its own cache entry
        with sqlite3.connect(tmp_path / "tool_cache.sqlite") as db:
            tools = dict(db.execute("SELECT tool, COUNT(*) FROM entries GROUP BY tool").fetchall())
            assert tools["browse_results"] == 1 and tools["browse_fetch"] == 2 and tools["browse_summary"] == 3
            db.execute("DELETE FROM entries WHERE tool = 'search' AND key LIKE 'browse|%'")
        replay = evaluate(config(tmp_path, tiny_model_dir, policy.url, tmp_path / "replay", agentic_search_backend="replay",
                                 agentic_cache_mode="read_only", **browse_keys))  # fmt: skip
    assert replay["complete"]
    again = {r["benchmark"]: r for r in load_all_records(tmp_path / "replay")}
    assert again["deep"]["segments"] == live["deep"]["segments"]
    assert again["deep"]["prediction"] == live["deep"]["prediction"]


def test_html_to_text_and_best_passage():
    text = html_to_text(PAGES["/france.html"])
    assert "SCRIPT TEXT" not in text and "Home | About" not in text and "Copyright" not in text
    assert "The capital of France is Paris, on the Seine." in text.splitlines()
    passage = best_passage(text, "capital France Paris", 200)
    assert "The capital of France is Paris" in passage and len(passage) <= 200
    assert best_passage("short", "x", 200) == "short"


def test_browser_without_cache_or_summariser_falls_back_to_snippets():
    """Nothing reachable and no summariser: each page becomes its snippet (never an exception)."""
    browser = Browser(None, cache=None, pages=2, fetch_timeout_s=0.5)
    results = [{"url": "http://127.0.0.1:9/none", "title": "", "snippet": "first"}, {"url": "", "snippet": "second"}]
    assert browser.browse("q", lambda q: results) == "Page 1: first\nPage 2: second"
    assert browser.browse("q", lambda q: []) == "No search results found."
    browser.close()


def test_browse_mode_needs_a_summariser(tmp_path, tiny_model_dir):
    with pytest.raises(EvalConfigError, match="eval_browse_base_url"):
        parse_eval_config(config(tmp_path, tiny_model_dir, "http://127.0.0.1:1/v1", tmp_path / "o",
                                 eval_search_mode="browse"))  # fmt: skip

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

"""The generic HTTP tool (tools/http_tool.py) against a real local HTTP server, through `ToolExecutor`.

Covers the request the tool sends, the answer formats, the tool cache (a repeated call never reaches the server),
the time limit, retries of 503 answers, final 4xx answers, a server that is gone, and secret headers.
"""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from llamafactory_agentic.tools import ToolCall, build_executor_from_args, load_tool_config
from llamafactory_agentic.tools.registry import ToolConfigError


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body: str, content_type: str = "application/json") -> None:
        data = body.encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # noqa: N802 - http.server's name
        state = self.server.state
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with state["lock"]:
            state["requests"].append((self.path, request, dict(self.headers)))
            hits = sum(1 for p, _, _ in state["requests"] if p == self.path)
        if self.path == "/calc":
            args = request["arguments"] or {}
            self._send(200, json.dumps({"observation": str(args.get("a", 0) + args.get("b", 0))}))
        elif self.path == "/echo":
            self._send(200, f"{request['tool']} got {request['content']}", "text/plain")
        elif self.path == "/slow":
            time.sleep(5)
            self._send(200, json.dumps({"observation": "late"}))
        elif self.path == "/flaky":  # 503 twice, then an answer
            if hits <= 2:
                self._send(503, "busy")
            else:
                self._send(200, json.dumps({"result": "third time lucky"}))
        elif self.path == "/bad":
            self._send(400, json.dumps({"detail": "field `q` is required"}))
        elif self.path == "/error":
            self._send(200, json.dumps({"error": "row 7 not found"}))
        elif self.path == "/token":
            self._send(200, json.dumps({"observation": "saw " + self.headers.get("Authorization", "none")}))
        elif self.path == "/malformed":
            self._send(200, "{not json")
        else:
            self._send(404, "no route")


@pytest.fixture()
def http_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.state = {"lock": threading.Lock(), "requests": []}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", server.state
    server.shutdown()
    server.server_close()


def _executor(tmp_path, entries: str, cache_tools: str = "[calc]"):
    config = tmp_path / "tools.yaml"
    config.write_text(f"http_tools:\n{entries}cache:\n  path: {tmp_path / 'cache.sqlite'}\n  tools: {cache_tools}\n")
    return build_executor_from_args(SimpleNamespace(agentic_tool_config=str(config)))


def _closed_port() -> int:
    with socket.socket() as s:  # bound, then released: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one(ex, tool: str, body: str):
    return ex.execute([ToolCall(tool, body, "traj-0")])[0]


def _count(state, path: str) -> int:
    return sum(1 for p, _, _ in state["requests"] if p == path)


def test_http_tool_request_answer_and_cache(tmp_path, http_server):
    url, state = http_server
    entries = f"  - {{name: calc, url: '{url}/calc', timeout: 10}}\n  - {{name: echo, url: '{url}/echo', tag: say}}\n"
    with _executor(tmp_path, entries) as ex:
        assert set(ex.tools) == {"calc", "say"}
        r = _one(ex, "calc", '{"a": 40, "b": 2}')
        assert (r.text, r.status, r.cached) == ("42", "ok", False)
        assert state["requests"][0][1] == {
            "tool": "calc",
            "content": '{"a": 40, "b": 2}',
            "arguments": {"a": 40, "b": 2},
        }
        r = _one(ex, "say", "  hello   world ")  # plain text answer; a body that is not JSON has no arguments
        assert (r.text, r.status) == ("echo got hello   world", "ok")
        assert state["requests"][1][1]["arguments"] is None
        assert ex.cache.flush(10)
        again = _one(ex, "calc", '{"b": 2, "a": 40}')  # same arguments: a cache hit, the server is not asked
        assert (again.text, again.cached) == ("42", True) and _count(state, "/calc") == 1
        entry = ex.cache.get("calc", '{"a":40,"b":2}')
        assert entry is not None and entry.backend == f"http:{url}/calc"


def test_http_tool_timeout_is_quick(tmp_path, http_server):
    url, _ = http_server
    with _executor(tmp_path, f"  - {{name: slow, url: '{url}/slow', timeout: 1, retries: 3}}\n") as ex:
        start = time.perf_counter()
        r = _one(ex, "slow", "anything")
        assert r.status == "timeout" and "within 1 seconds" in r.text
        assert time.perf_counter() - start < 3.0


def test_http_tool_retries_transient_answers(tmp_path, http_server):
    url, state = http_server
    with _executor(tmp_path, f"  - {{name: flaky, url: '{url}/flaky', timeout: 20, retries: 3}}\n") as ex:
        r = _one(ex, "flaky", "go")
        assert (r.text, r.status) == ("third time lucky", "ok") and _count(state, "/flaky") == 3


def test_http_tool_final_errors_are_observations(tmp_path, http_server):
    url, state = http_server
    entries = (
        f"  - {{name: bad, url: '{url}/bad', retries: 3}}\n  - {{name: err, url: '{url}/error', retries: 3}}\n"
        f"  - {{name: junk, url: '{url}/malformed', retries: 2, timeout: 20}}\n"
        f"  - {{name: gone, url: 'http://127.0.0.1:{_closed_port()}/nothing', retries: 1}}\n"
    )
    with _executor(tmp_path, entries, cache_tools="[bad, err]") as ex:
        r = _one(ex, "bad", "q?")
        assert r.status == "error" and "HTTP 400" in r.text and "field `q` is required" in r.text
        assert _count(state, "/bad") == 1  # a 4xx other than 429 is not retried
        r = _one(ex, "err", "7")
        assert (r.status, r.text) == ("error", "Error: Tool(err) execution failed with message: row 7 not found")
        r = _one(ex, "junk", "x")
        assert r.status == "error" and "malformed JSON" in r.text and _count(state, "/malformed") == 2
        r = _one(ex, "gone", "x")
        assert r.status == "error" and "request to http://127.0.0.1:" in r.text and "/nothing failed" in r.text
        assert ex.cache.flush(10) and ex.cache.count() == 0  # errors are not cached


def test_http_tool_secret_header_is_sent_and_redacted(tmp_path, http_server, monkeypatch):
    url, state = http_server
    monkeypatch.setenv("HTTP_TOOL_TOKEN", "Bearer tok-5678-secret")
    entries = f"  - {{name: token, url: '{url}/token', headers: {{Authorization: '${{HTTP_TOOL_TOKEN}}'}}}}\n"
    with _executor(tmp_path, entries, cache_tools="[]") as ex:
        r = _one(ex, "token", "who am I")
        assert state["requests"][0][2]["Authorization"] == "Bearer tok-5678-secret"
        assert r.text == "saw ***" and "tok-5678" not in repr(ex.tools["token"])


@pytest.mark.parametrize(
    "entry, message",
    [
        ("  - {name: x}\n", "`url` must be an http:// or https:// endpoint"),
        ("  - {name: x, url: 'ftp://host/x'}\n", "`url` must be an http:// or https:// endpoint"),
        ("  - {name: x, url: 'http://h/x', method: GET}\n", "1 unknown key (not named"),
        ("  - {name: 'a b', url: 'http://h/x'}\n", "not a usable tag"),
        ("  - {name: x, url: 'http://h/x', retries: 0}\n", "`retries` must be a whole number >= 1"),
        ("  - {name: x, url: 'http://h/x', headers: [a]}\n", "`headers` must be a mapping"),
        ("  - {url: 'http://h/x'}\n", "needs a `name`"),
    ],
)
def test_http_tool_config_errors_name_the_entry(tmp_path, entry, message):
    config = tmp_path / "tools.yaml"
    config.write_text(f"http_tools:\n{entry}")
    with pytest.raises(ToolConfigError) as info:
        load_tool_config(config)
    assert "http_tools[0]" in str(info.value) and message in str(info.value)


def test_unknown_top_level_key_lists_the_new_sections(tmp_path):
    config = tmp_path / "tools.yaml"
    config.write_text("mcp_server: []\n")
    with pytest.raises(ToolConfigError, match="allowed: tools, mcp_servers, http_tools, cache"):
        load_tool_config(config)

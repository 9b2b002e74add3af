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

"""Fixtures of the tools tests: a private redis-server, local fake HTTP servers, the local search index."""

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis_server():
    """A `redis-server --port <free> --save ''` on 127.0.0.1, answering PING: `(url, process)`."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server not installed: apt-get install -y redis-server (or set REDIS_URL)")
    port = _free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("redis-server did not start")
    client.close()
    return f"redis://127.0.0.1:{port}/0", proc


@pytest.fixture(scope="session")
def redis_url():
    """$REDIS_URL when set, else a private redis-server (stopped at the end)."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    url, proc = start_redis_server()
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture()
def private_redis():
    """A redis-server of the test's own, `(url, process)`, that the test may pause (SIGSTOP) or stop."""
    url, proc = start_redis_server()
    yield url, proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=10)


class FakeServer:
    """A local HTTP server on 127.0.0.1 whose answers are produced by `handler(method, path, headers, body)`.

    Used because the real search APIs and sandbox services cannot be reached from the test machines.
    `handler` returns `(status, body_bytes_or_obj)` or `("sleep", seconds)` to hang before answering 200 `{}`.
    """

    def __init__(self, handler):
        self.handler = handler
        self.requests = []
        outer = self

        class _Handler(BaseHTTPRequestHandler):
            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                       "body": body})  # fmt: skip
                status, payload = outer.handler(self.command, self.path, self.headers, body)
                if status == "sleep":
                    time.sleep(payload)
                    status, payload = 200, {}
                if not isinstance(payload, bytes):
                    payload = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = _serve
            do_POST = _serve

            def log_message(self, *args):
                pass

        class _Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256

        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def fake_server():
    servers = []

    def _make(handler):
        server = FakeServer(handler)
        servers.append(server)
        return server

    yield _make
    for server in servers:
        server.close()


@pytest.fixture(scope="session")
def local_index(synthetic_data, tmp_path_factory):
    """Local BM25 corpus + index built from the recorded search_cache.json snippets of the synthetic files.

    For the executor's and the cache's tests, which need an index that answers `Varnholm ...` queries and nothing of
    its content; test_tools_search checks the index on the release's snippets too.
    """
    from llamafactory_agentic.tools.index import build_corpus_from_cache_json

    out = tmp_path_factory.mktemp("search-index")
    counts = build_corpus_from_cache_json(synthetic_data / "arpo" / "search_cache.json", out)
    assert counts["documents"] > synthetic_data.facts["search_min_documents"]
    return out

# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Shared fixtures: ARPO-layout data (synthetic always, ARPO's released files where present) and a tiny local Qwen2.

Tests of ARPO's released files take `shared_data`, which runs each of them twice: on small files in the same layouts
that the suite writes itself (`arpo_files.write_synthetic_arpo`, so a fresh clone passes) and on the real files in
`AGENTIC_SHARED_DATA` (default `../shared/data`, as in CI), skipped with the reason where that folder is missing.
End-to-end runs of minutes take `arpo_data` instead: the real files where present, else the synthetic ones.
"""

import logging
import os
from pathlib import Path

import pytest
from arpo_files import REAL_FACTS, ArpoData, write_synthetic_arpo


REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("AGENTIC_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def real_data_present() -> bool:
    """True where ARPO's released files are at `AGENTIC_SHARED_DATA` (default `../shared/data`)."""
    return (SHARED_DATA / "arpo" / "rl").is_dir()


@pytest.fixture(scope="session")
def synthetic_data(tmp_path_factory) -> ArpoData:
    """Small files in the layouts of ARPO's release, written by the suite (`tests/arpo_files.py`)."""
    return write_synthetic_arpo(tmp_path_factory.mktemp("synthetic-shared-data"))


@pytest.fixture(scope="session")
def real_data() -> ArpoData:
    """ARPO's released files (`AGENTIC_SHARED_DATA`, default `../shared/data`); skipped where the folder is missing."""
    if not real_data_present():
        pytest.skip(
            f"real-file tier: ARPO's released files not found at {SHARED_DATA} (set AGENTIC_SHARED_DATA); the "
            "synthetic tier ran the same test"
        )
    return ArpoData(SHARED_DATA, "real", REAL_FACTS)


@pytest.fixture(scope="session", params=["synthetic", "real"])
def shared_data(request) -> ArpoData:
    """Each test runs on the synthetic files, and again on the real ones where they are present."""
    return request.getfixturevalue(f"{request.param}_data")


@pytest.fixture(scope="session")
def arpo_data(request) -> ArpoData:
    """One tier for runs of minutes: the real files where present (CI), else the synthetic ones (a fresh clone)."""
    return request.getfixturevalue("real_data" if real_data_present() else "synthetic_data")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer Qwen2 model with a byte-level BPE tokenizer trained in-process (no model hub)."""
    from llamafactory_agentic.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


@pytest.fixture()
def tiny_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))


@pytest.fixture()
def plugin_caplog(caplog):
    """`caplog` that also sees the plugin's records.

    The plugin logs through LLaMA-Factory's `llamafactory` logger (`common.log.get_logger`), which stops
    propagating to the root logger, where `caplog` listens, once LLaMA-Factory has set it up.
    """
    logger = logging.getLogger("llamafactory")
    logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)


class LocalHTTP:
    """A threading HTTP server on 127.0.0.1 whose requests are answered by `route(handler, method, body)`.

    `handler` is the `BaseHTTPRequestHandler`; `body` the request body (bytes). Every request is recorded in
    `requests` as `(method, path, headers, body)`. `trickle` sends an answer one byte per `interval` seconds (a
    bounded loop that also ends when the client hangs up or the server stops).
    """

    def __init__(self, route):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer = self
        self.route, self.requests, self.stopping = route, [], threading.Event()
        self.hangups = 0

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size else b""
                outer.requests.append((self.command, self.path, dict(self.headers), body))
                outer.route(self, self.command, body)

            do_GET = do_POST = _any  # noqa: N815 - http.server's names

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def send(handler, status: int, body: bytes | str, content_type: str = "application/json", headers=None):
        data = body.encode() if isinstance(body, str) else body
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)

    def trickle(self, handler, body: bytes = b"{}" + b" " * 118, interval: float = 1.0,
                content_type: str = "application/json"):  # fmt: skip
        """Answer 200 with `body`, one byte per `interval` seconds (a server that never trips a per-read timeout)."""
        import time

        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.flush()
        for i in range(len(body)):
            if self.stopping.is_set():
                return
            try:
                handler.wfile.write(body[i : i + 1])
                handler.wfile.flush()
            except OSError:
                self.hangups += 1
                return
            time.sleep(interval)

    def close(self):
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def local_http():
    """Factory of `LocalHTTP` servers on 127.0.0.1 (stopped at the end of the test)."""
    servers = []

    def _make(route):
        servers.append(LocalHTTP(route))
        return servers[-1]

    yield _make
    for server in servers:
        server.close()


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test`), the longest tests, then the `slow` and `browser` ones are scheduled first.

    The longest tests (a learning run of minutes) then overlap with the many short ones instead of starting last and
    leaving the other workers idle; without xdist the order is the files' order.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") or getattr(config.option, "numprocesses", None):
        items.sort(key=_schedule_rank)


# The longest tests (`--durations` of CI): the learning runs of `make test-learning` (4-6 minutes each on 2 cores) and,
# in `make test`, the tutorial's commands (about 4 minutes), started before every other one.
LONGEST = ("tests/tasks/test_learning.py", "tests/tasks/test_compare_smoke.py", "tests/docs/test_tutorial.py")


def _schedule_rank(item) -> int:
    r"""0 for the longest tests, 1 for the other `slow` and `browser` ones, 2 for the rest."""
    if item.nodeid.startswith(LONGEST):
        return 0
    return 1 if item.get_closest_marker("slow") or item.get_closest_marker("browser") else 2

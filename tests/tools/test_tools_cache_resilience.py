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

"""A locked, slow or unreachable cache never delays or fails a tool result (issue 8 item 2).

Real parts only: a real SQLite file locked by a real second process (`BEGIN EXCLUSIVE`, which blocks writers, or
`locking_mode=EXCLUSIVE`, which blocks readers too) and a real `redis-server` of the test's own that is paused with
SIGSTOP (slow: every command hangs) or stopped. Bounds are generous (the machine is shared) but far below the old
behaviour (30 s busy timeout per write, 5 s socket timeout per command).
"""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llamafactory_agentic.tools import BaseTool, ToolCall, ToolExecutor, ToolOutput
from llamafactory_agentic.tools.cache import RedisCache, SQLiteCache, open_cache


REPO = Path(__file__).resolve().parents[2]


class Upper(BaseTool):
    """A fast tool whose results are cached."""

    name = "upper"
    default_tag = "upper"

    def run(self, args):
        return ToolOutput(args.upper())


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
if sys.argv[2] == "all":
    conn.execute("PRAGMA locking_mode=EXCLUSIVE")  # readers are locked out too
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(120)
"""


class Holder:
    """A second process holding the SQLite write lock ("writes") or every lock ("all") until released."""

    def __init__(self, path, kind):
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), kind], stdout=subprocess.PIPE,
                                     text=True)  # fmt: skip
        assert self.proc.stdout.readline().strip() == "locked"

    def release(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture()
def seeded(tmp_path):
    path = tmp_path / "cache.sqlite"
    cache = SQLiteCache(path)
    cache.put("upper", "known", "FROM THE CACHE")
    cache.close()
    return path


@pytest.mark.parametrize("kind", ["writes", "all"])
def test_locked_sqlite_never_delays_a_result(seeded, kind):
    holder = Holder(seeded, kind)
    try:
        start = time.monotonic()
        cache = SQLiteCache(seeded, degrade=True)  # opening a fully locked file does not wait 30 s either
        ex = ToolExecutor([Upper(timeout_s=10, retries=1)], cache=cache, cache_tools=["upper"])
        results = ex.execute([ToolCall("upper", "known"), ToolCall("upper", "fresh answer")])
        first = time.monotonic() - start
        more = [ex.execute([ToolCall("upper", f"call {i}")])[0] for i in range(5)]
        elapsed = time.monotonic() - start
        metrics = ex.pop_metrics()
        close_start = time.monotonic()
        ex.close()
        closing = time.monotonic() - close_start
    finally:
        holder.release()
    if kind == "writes":  # WAL readers are not blocked: the hit is served, the new result is queued
        assert results[0].cached and results[0].text == "FROM THE CACHE"
    else:  # nothing can be read: a miss, answered by the tool
        assert not results[0].cached and results[0].text == "KNOWN"
        assert metrics["tools/upper/cache_errors"] + metrics["tools/upper/cache_unavailable"] >= 1
    assert results[1].status == "ok" and results[1].text == "FRESH ANSWER"
    assert [r.text for r in more] == [f"CALL {i}" for i in range(5)]
    assert first < 3.0, f"the first calls took {first:.1f}s"
    assert elapsed < 4.0, f"seven calls took {elapsed:.1f}s with a locked cache"
    assert closing < 4.0, f"close took {closing:.1f}s"


def test_entries_reach_other_processes_after_the_lock_is_released(seeded):
    holder = Holder(seeded, "writes")
    ex = ToolExecutor([Upper(timeout_s=10, retries=1)], cache=SQLiteCache(seeded, degrade=True, retry_after_s=1),
                      cache_tools=["upper"])  # fmt: skip
    try:
        assert ex.execute([ToolCall("upper", "queued while locked")])[0].text == "QUEUED WHILE LOCKED"
        errors, deadline = 0.0, time.monotonic() + 10
        while not errors and time.monotonic() < deadline:  # the writer tries within ~flush interval + write timeout
            time.sleep(0.2)
            errors = ex.pop_metrics().get("tools/cache/write_errors", 0.0)
        assert errors >= 1 and ex.cache.pop_health()["pending"] == 1  # tried, failed, kept for a retry
        holder.release()
        released = time.monotonic()
        reader = sqlite3.connect(f"file:{seeded}?mode=ro", uri=True)
        while time.monotonic() - released < 15:
            row = reader.execute("SELECT result FROM entries WHERE key = 'queued while locked'").fetchone()
            if row:
                break
            time.sleep(0.1)
        reader.close()
        assert row == ("QUEUED WHILE LOCKED",), "not visible to another connection within 15 s"
        print(f"visible {time.monotonic() - released:.2f}s after the lock was released")
    finally:
        holder.release()
        ex.close()


READER = """
import sqlite3, sys, time
conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
start = time.monotonic()
print("ready", flush=True)
while time.monotonic() - start < 30:
    if conn.execute("SELECT 1 FROM entries WHERE key = ?", (sys.argv[2],)).fetchone():
        print(f"{time.monotonic() - start:.3f}", flush=True)
        break
    time.sleep(0.05)
"""


def test_a_new_entry_is_visible_to_another_process_within_15_seconds(seeded):
    reader = subprocess.Popen([sys.executable, "-c", READER, str(seeded), "seen elsewhere"], stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    assert reader.stdout.readline().strip() == "ready"
    with ToolExecutor([Upper(timeout_s=10, retries=1)], cache=SQLiteCache(seeded), cache_tools=["upper"]) as ex:
        assert ex.execute([ToolCall("upper", "seen elsewhere")])[0].text == "SEEN ELSEWHERE"
        out, _ = reader.communicate(timeout=40)
    assert out.strip(), "the other process never saw the entry"
    assert float(out) < 15.0


@pytest.mark.parametrize("fault", ["paused", "stopped"])
def test_slow_or_stopped_redis_never_delays_a_result(private_redis, fault):
    url, server = private_redis
    cache = RedisCache(url, prefix="test:resilience:")
    cache.put("upper", "known", "FROM THE CACHE")
    ex = ToolExecutor([Upper(timeout_s=10, retries=1)], cache=cache, cache_tools=["upper"])
    assert ex.execute([ToolCall("upper", "known")])[0].cached
    if fault == "paused":
        server.send_signal(signal.SIGSTOP)  # the server accepts connections but never answers
    else:
        server.terminate()
        server.wait(timeout=10)
    try:
        start = time.monotonic()
        results = ex.execute([ToolCall("upper", "known"), ToolCall("upper", "fresh")])
        results += [ex.execute([ToolCall("upper", f"call {i}")])[0] for i in range(5)]
        elapsed = time.monotonic() - start
        metrics = ex.pop_metrics()
        close_start = time.monotonic()
        ex.close()
        closing = time.monotonic() - close_start
    finally:
        if fault == "paused":
            server.send_signal(signal.SIGCONT)
    assert [r.text for r in results] == ["KNOWN", "FRESH"] + [f"CALL {i}" for i in range(5)]
    assert all(r.status == "ok" and not r.cached for r in results)
    assert metrics["tools/upper/cache_errors"] == 1  # asked once, then left alone for retry_after_s
    assert metrics["tools/upper/cache_unavailable"] == 6 and metrics["tools/upper/cache_not_stored"] == 7
    assert elapsed < 3.0, f"seven calls took {elapsed:.1f}s with a {fault} Redis server"
    assert closing < 4.0, f"close took {closing:.1f}s"


def test_unreachable_redis_at_start(private_redis):
    url, server = private_redis
    server.terminate()
    server.wait(timeout=10)
    start = time.monotonic()
    cache = open_cache(url, degrade=True)  # the executor's way: warn and go on
    with ToolExecutor([Upper(timeout_s=10, retries=1)], cache=cache, cache_tools=["upper"]) as ex:
        assert ex.execute([ToolCall("upper", "x")])[0].text == "X"
    assert time.monotonic() - start < 3.0


def _cli(*argv, timeout=120):
    code = "import sys; from llamafactory_agentic.tools.cli import _standalone_main; sys.exit(_standalone_main())"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=_env(),
                          timeout=timeout)  # fmt: skip
    return proc, time.monotonic() - start


@pytest.mark.slow
def test_cli_search_exits_fast_with_a_locked_cache_or_a_paused_redis(local_index, tmp_path, private_redis):
    """The issue's case: `tool search` took 39 s to exit while another process held the SQLite write lock."""
    path = tmp_path / "cache.sqlite"
    SQLiteCache(path).close()
    argv = ["tool", "search", "--query", "Varnholm river town", "--backend", "local", "--index", str(local_index)]
    proc, baseline = _cli(*argv, "--cache", str(tmp_path / "free.sqlite"))
    assert proc.returncode == 0 and proc.stdout.startswith("Page 1:"), proc.stderr
    holder = Holder(path, "writes")
    try:
        locked, locked_s = _cli(*argv, "--cache", str(path))
    finally:
        holder.release()
    url, server = private_redis
    server.send_signal(signal.SIGSTOP)
    try:
        paused, paused_s = _cli(*argv, "--cache", url)
    finally:
        server.send_signal(signal.SIGCONT)
    for run, seconds in ((locked, locked_s), (paused, paused_s)):
        assert run.returncode == 0 and run.stdout == proc.stdout, run.stderr
        assert "status=ok" in run.stderr
        assert seconds < baseline + 5.0, f"{seconds:.1f}s against {baseline:.1f}s without the fault"


def test_replay_search_with_a_fully_locked_cache_answers_at_once(seeded):
    """The replay backend reads the cache itself: a locked file is an error observation, not a 30 s wait."""
    from llamafactory_agentic.tools import SearchTool

    holder = Holder(seeded, "all")
    try:
        cache = SQLiteCache(seeded, degrade=True)
        with ToolExecutor([SearchTool(backend="replay", cache=cache, retries=1)], cache=cache) as ex:
            start = time.monotonic()
            result = ex.execute([ToolCall("search", "anything")])[0]
            elapsed = time.monotonic() - start
    finally:
        holder.release()
    assert result.status == "error" and "cannot be read now" in result.text
    assert elapsed < 3.0, f"{elapsed:.1f}s"


def test_queued_entries_are_written_when_a_process_exits_without_closing(tmp_path):
    path = tmp_path / "cache.sqlite"
    code = (
        "import sys; from llamafactory_agentic.tools.cache import SQLiteCache\n"
        "SQLiteCache(sys.argv[1]).submit('upper', 'left behind', 'LEFT BEHIND')"  # no close(), no flush()
    )
    subprocess.run([sys.executable, "-c", code, str(path)], env=_env(), check=True, timeout=60)
    cache = SQLiteCache(path, mode="read_only")
    assert cache.get("upper", "left behind").result == "LEFT BEHIND"
    cache.close()

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

import logging
import threading
import time
from types import SimpleNamespace

import pytest

from llamafactory_agentic.tools import (
    BaseTool,
    PythonTool,
    SearchTool,
    SQLiteCache,
    ToolCall,
    ToolExecutor,
    ToolOutput,
    build_executor_from_args,
    load_tool_config,
    register_tool,
    resolve_tool_class,
)
from llamafactory_agentic.tools.registry import substitute_env


class SlowEcho(BaseTool):
    """Test tool: sleeps `delay` seconds and echoes; counts executions."""

    name = "echo"
    default_tag = "echo"

    def __init__(self, delay=0.2, fail_times=0, **kwargs):
        super().__init__(**kwargs)
        self.delay = delay
        self.fail_times = fail_times
        self.runs = 0
        self.lock = threading.Lock()

    def run(self, args):
        with self.lock:
            self.runs += 1
            n = self.runs
        time.sleep(self.delay)
        if n <= self.fail_times:
            raise ConnectionError(f"transient failure {n}")
        return ToolOutput(f"echo: {args}")


def test_order_concurrency_and_dedup():
    tool = SlowEcho(delay=0.3, timeout_s=5)
    with ToolExecutor([tool], workers=16) as ex:
        calls = [ToolCall("echo", f"q{i % 8}") for i in range(16)]
        start = time.time()
        results = ex.execute(calls)
        elapsed = time.time() - start
        assert [r.text for r in results] == [f"echo: q{i % 8}" for i in range(16)]
        assert tool.runs == 8  # identical calls in flight ran once
        assert elapsed < 1.0  # concurrent, not 16 * 0.3 s
        m = ex.pop_metrics()
        assert m["tools/echo/calls"] == 16 and m["tools/echo/dedup_hits"] == 8
        assert m["tools/echo/backend_calls"] == 8
        assert m["tools/echo/latency_p50_s"] >= 0.29 and m["tools/echo/latency_p95_s"] < 1.0
        assert ex.pop_metrics() == {}  # reset


def test_dedup_across_threads():
    tool = SlowEcho(delay=0.5, timeout_s=5)
    with ToolExecutor([tool], workers=8) as ex:
        out = []
        threads = [threading.Thread(target=lambda: out.extend(ex.execute([ToolCall("echo", "same")])))
                   for _ in range(4)]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r.text for r in out] == ["echo: same"] * 4 and tool.runs == 1


def test_retries_transient_failures():
    tool = SlowEcho(delay=0.0, fail_times=2, retries=3, backoff_s=0.01)
    with ToolExecutor([tool]) as ex:
        result = ex.execute([ToolCall("echo", "x")])[0]
    assert (result.text, result.status, tool.runs) == ("echo: x", "ok", 3)
    tool = SlowEcho(delay=0.0, fail_times=5, retries=2, backoff_s=0.01)
    with ToolExecutor([tool]) as ex:
        result = ex.execute([ToolCall("echo", "x")])[0]
        m = ex.pop_metrics()
    assert result.status == "error"
    assert result.text == "Error: Tool(echo) execution failed with message: transient failure 2"
    assert m["tools/echo/failures"] == 1


def test_executor_timeout_for_a_hanging_tool():
    tool = SlowEcho(delay=5, timeout_s=0.5, retries=1)
    with ToolExecutor([tool], grace_s=0.2) as ex:
        start = time.time()
        result = ex.execute([ToolCall("echo", "x"), ToolCall("nope", "x")])
        assert time.time() - start < 2
        assert result[0].status == "timeout" and "no answer within 0.5 seconds" in result[0].text
        assert result[1].status == "unknown_tool"
        assert result[1].text == "Error: unknown tool <nope>. Available tools: echo."
        assert ex.pop_metrics()["tools/echo/timeouts"] == 1


def test_empty_calls_and_limits():
    tool = SlowEcho(delay=0, call_limit=2)
    with ToolExecutor([tool]) as ex:
        r = ex.execute([ToolCall("echo", "", "t1"), ToolCall("echo", "a", "t1"), ToolCall("echo", "b", "t1"),
                        ToolCall("echo", "c", "t2")])  # fmt: skip
        assert r[0].text == "Error: empty <echo> call." and r[0].status == "error"
        assert r[1].status == "ok"
        assert (r[2].status, r[2].text) == ("limit", "Error: Tool(echo) call limit of 2 per trajectory reached.")
        assert r[3].status == "ok"
        ex.forget_trajectories(["t1"])
        assert ex.execute([ToolCall("echo", "d", "t1")])[0].status == "ok"


def test_search_cache_hits_and_policy(local_index, tmp_path):
    cache = SQLiteCache(tmp_path / "c.sqlite")
    search = SearchTool(backend="local", index_dir=str(local_index), topk=3)
    with ToolExecutor([search, PythonTool(timeout_s=5)], cache=cache) as ex:
        first = ex.execute([ToolCall("search", "Varnholm river town"), ToolCall("search", "zzqqxxyy"),
                            ToolCall("python", "print(1)")])  # fmt: skip
        assert [r.cached for r in first] == [False, False, False]
        second = ex.execute([ToolCall("search", ' "Varnholm  river" town'), ToolCall("search", "zzqqxxyy"),
                             ToolCall("python", "print(1)")])  # fmt: skip
        assert second[0].cached and second[0].text == first[0].text
        assert not second[1].cached  # empty results are never stored
        assert not second[2].cached  # python is not a cached tool by default
        m = ex.pop_metrics()
        assert m["tools/search/cache_hits"] == 1 and m["tools/search/cache_hit_rate"] == pytest.approx(0.25)
    reopened = SQLiteCache(tmp_path / "c.sqlite")
    assert reopened.count() == 1 and reopened.get("search", "Varnholm river town").backend == "local"
    reopened.close()


def test_offline_mode_and_broken_cache(tmp_path, local_index):
    cache = SQLiteCache(tmp_path / "c.sqlite")
    cache.put("search", "known", "Page 1: k")
    cache.close()
    offline = SQLiteCache(tmp_path / "c.sqlite", mode="offline")
    search = SearchTool(backend="local", index_dir=str(local_index))
    with ToolExecutor([search], cache=offline) as ex:
        r = ex.execute([ToolCall("search", "known"), ToolCall("search", "Varnholm")])
        assert r[0].text == "Page 1: k" and r[0].cached
        assert (r[1].status, r[1].text) == ("cache_miss", "No search results found.")

    class Broken(SQLiteCache):
        def _get(self, tool, key, timeout_s=None):
            raise RuntimeError("disk on fire")

        def _put_many(self, entries, overwrite, timeout_s=None):
            raise RuntimeError("disk on fire")

    broken = Broken(tmp_path / "b.sqlite")
    with ToolExecutor([SearchTool(backend="local", index_dir=str(local_index))], cache=broken) as ex:
        r = ex.execute([ToolCall("search", "Varnholm"), ToolCall("search", "Varnholm river")])
        assert [x.status for x in r] == ["ok", "ok"] and r[0].text.startswith("Page 1:")
        m = ex.pop_metrics()
        # the first lookup fails, the second is not even tried (the cache failed within retry_after_s); both are
        # misses whose results are not stored
        assert m["tools/search/cache_errors"] == 1 and m["tools/search/cache_unavailable"] == 1
        assert m["tools/search/cache_not_stored"] == 2
        assert m["tools/cache/lookup_errors"] == 1 and m["tools/cache/lookups_skipped"] == 1

    class WriteBroken(SQLiteCache):
        def _put_many(self, entries, overwrite, timeout_s=None):
            raise RuntimeError("disk full")

    with ToolExecutor([SearchTool(backend="local", index_dir=str(local_index))], cache=WriteBroken(
            tmp_path / "w.sqlite", flush_interval_s=0.05)) as ex:  # fmt: skip
        assert ex.execute([ToolCall("search", "Varnholm")])[0].status == "ok"
        assert not ex.cache.flush(timeout_s=0.5)  # the background write fails: counted, kept for a retry
        m = ex.pop_metrics()
        assert m["tools/cache/write_errors"] >= 1 and m["tools/cache/pending"] == 1


def test_python_bad_inputs_do_not_break_the_executor():
    with ToolExecutor([PythonTool(timeout_s=2)], workers=8) as ex:
        calls = [ToolCall("python", c) for c in [
            "while True:\n    pass", "import os\nos.kill(os.getppid(), 9)", "def f(:", "print('ok')",
            "import sys\nsys.stdout.write('x' * 10_000_000)", "</python> <python>", "",
        ]]  # fmt: skip
        results = ex.execute(calls)
        assert results[0].status == "timeout" and results[0].text == "Execution timed out after 2 seconds."
        assert results[2].status == "error" and "SyntaxError" in results[2].text
        assert results[3].text == "ok"
        assert len(results[4].text) < 4100 and "characters omitted" in results[4].text
        assert results[5].status == "error"
        assert results[6].text == "Error: empty <python> call."
        assert ex.execute([ToolCall("python", "print(2)")])[0].text == "2"


def test_tool_config_yaml(tmp_path, monkeypatch, plugin_caplog, local_index):
    module = tmp_path / "my_tools.py"
    module.write_text(
        "from llamafactory_agentic.tools import BaseTool, ToolOutput\n"
        "class Upper(BaseTool):\n"
        "    name = 'upper'\n"
        "    default_tag = 'upper'\n"
        "    def __init__(self, suffix='', token='', **kw):\n"
        "        super().__init__(**kw)\n"
        "        self.suffix = suffix\n"
        "        self.token = token\n"
        "    def run(self, args):\n"
        "        return ToolOutput(args.upper() + self.suffix + ' ' + self.token)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("MY_TOKEN", "tok-very-secret")
    config = tmp_path / "tools.yaml"
    config.write_text(
        "tools:\n"
        "  - name: my_tools:Upper\n"
        "    tag: shout\n"
        "    timeout: 3\n"
        "    retries: 1\n"
        "    call_limit: 1\n"
        "    params: {suffix: '!', token: '${MY_TOKEN}'}\n"
        "  - name: search\n"
        f"    params: {{backend: local, index_dir: '{local_index}', topk: 2}}\n"
        "  - name: python\n"
        "    timeout: 2\n"
        "cache:\n"
        f"  path: {tmp_path / 'cache.sqlite'}\n"
    )
    args = SimpleNamespace(agentic_tool_config=str(config), agentic_tool_retries=None, agentic_tool_workers=None,
                           agentic_python_timeout=120.0, agentic_python_max_output_chars=4000,
                           agentic_search_backend="web", agentic_search_topk=10, agentic_search_snippet_chars=1000,
                           agentic_cache_path=None, agentic_cache_mode="read_write", agentic_cache_tools="search")  # fmt: skip
    with plugin_caplog.at_level(logging.DEBUG, logger="llamafactory"):
        ex = build_executor_from_args(args)
    try:
        assert ex.workers == 64 and set(ex.tools) == {"shout", "search", "python"}
        assert ex.tools["search"].retries == 3 and ex.tools["search"].topk == 2
        assert ex.tools["python"].timeout_s == 2 and ex.tools["python"].max_output_chars == 4000
        r = ex.execute([ToolCall("shout", "hi", "t"), ToolCall("shout", "again", "t"), ToolCall("search", "Varnholm")])
        assert r[0].text == "HI! ***"  # secrets from ${VAR} are redacted from observations
        assert r[1].status == "limit"
        assert r[2].text.startswith("Page 1:") and r[2].text.count("Page ") == 2
        assert ex.cache is not None and ex.cache.count() == 1
    finally:
        ex.close()
    assert "tok-very-secret" not in plugin_caplog.text
    assert "tok-very-secret" not in (tmp_path / "cache.sqlite").read_bytes().decode("utf-8", "replace")


def test_build_executor_defaults(tmp_path):
    args = SimpleNamespace(agentic_tool_config=None, agentic_cache_path=str(tmp_path / "c.sqlite"),
                           agentic_search_backend="replay")  # fmt: skip
    with build_executor_from_args(args) as ex:
        assert set(ex.tools) == {"python", "search"} and ex.workers == 64
        assert ex.tools["python"].timeout_s == 120 and ex.tools["python"].retries == 3
        r = ex.execute([ToolCall("search", "never seen")])[0]
        assert (r.status, r.text) == ("cache_miss", "No search results found.")


def test_registry_and_env_substitution(monkeypatch):
    assert resolve_tool_class("python") is PythonTool and resolve_tool_class("search") is SearchTool
    with pytest.raises(ValueError):
        resolve_tool_class("no_such_tool")
    with pytest.raises(ValueError):
        resolve_tool_class("builtins:dict")

    @register_tool("echo_test")
    class _Echo(SlowEcho):
        pass

    assert resolve_tool_class("echo_test") is _Echo
    secrets = []
    monkeypatch.setenv("A_KEY", "value-a")
    assert substitute_env({"x": ["${A_KEY}", "${MISSING:-dflt}", 3]}, secrets) == {"x": ["value-a", "dflt", 3]}
    assert secrets == ["value-a"]
    with pytest.raises(KeyError, match="MISSING"):
        substitute_env("${MISSING}")


def test_bad_tool_config(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools:\n  - name: python\n    colour: red\n")
    with pytest.raises(ValueError, match="1 unknown key"):
        load_tool_config(bad)


def test_queued_calls_get_their_full_timeout_from_the_worker_start():
    # 6 calls of ~0.5 s on 2 workers: the last ones wait ~1 s in the queue; each runs well inside its 1 s budget
    tool = SlowEcho(delay=0.5, timeout_s=1.0, retries=1)
    with ToolExecutor([tool], workers=2, grace_s=0.1) as ex:
        start = time.time()
        results = ex.execute([ToolCall("echo", f"q{i}") for i in range(6)])
        elapsed = time.time() - start
        assert [r.status for r in results] == ["ok"] * 6
        assert [r.text for r in results] == [f"echo: q{i}" for i in range(6)]
        assert 1.4 < elapsed < 4.0  # three waves of two
        assert ex.pop_metrics()["tools/echo/timeouts"] == 0


def test_a_call_never_picked_up_times_out_at_the_queue_bound():
    # one worker slot; calls that overrun their budget are given up on and their slot passes on (issue 34), so the
    # second call starts at once; both threads (2 x workers) are then held by overrunning calls: the third call gives
    # up at the safety bound
    tool = SlowEcho(delay=2.0, timeout_s=0.3, retries=1)
    with ToolExecutor([tool], workers=1, grace_s=0.1) as ex:
        start = time.time()
        results = ex.execute([ToolCall("echo", "a"), ToolCall("echo", "b"), ToolCall("echo", "c")])
        assert time.time() - start < 1.5
        assert results[0].status == "timeout" and "no answer within 0.3 seconds" in results[0].text
        assert results[1].status == "timeout" and "no answer within 0.3 seconds" in results[1].text
        assert results[2].status == "timeout" and "not started within" in results[2].text

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

"""What one stored entry or the cache path can do to tool calls (issue 24: Medium 5, Medium 7 and a Low item).

Real parts: a real SQLite file whose rows are damaged with plain SQL, a real `redis-server` (tests/tools/conftest.py)
whose values are overwritten with a plain client, the real executor, search tool and command line.

* One bad entry (not JSON, not UTF-8 text, a field of the wrong type, a value of the wrong Redis type) made every
  lookup of the next 5 s answer `the replay cache cannot be read now`; now it is a miss of its own key only, logged
  once and counted (`tools/cache/bad_entries`).
* A cached or replayed search result went into the context whole (10.8 MB whatever `topk`/`snippet_chars` said); now
  it goes through the same `format_snippets` as a live result, and an entry over `max_entry_bytes` is not read.
* A cache path that is another application's SQLite file got the cache's tables and WAL mode; a directory trained
  without a cache after a warning. Both are now refused, naming the key and the fix.
"""

import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import pytest

from llamafactory_agentic.tools import BaseTool, SearchTool, ToolCall, ToolExecutor, ToolOutput
from llamafactory_agentic.tools.cache import BadCacheEntry, CacheError, RedisCache, SQLiteCache
from llamafactory_agentic.tools.cache.base import _glob_escape
from llamafactory_agentic.tools.executor import build_executor_from_args
from llamafactory_agentic.tools.search import format_snippets


REPO = Path(__file__).resolve().parents[2]


class Upper(BaseTool):
    """A fast tool whose results are cached."""

    name = "upper"
    default_tag = "upper"

    def run(self, args):
        return ToolOutput(args.upper())


# ways to damage one stored entry, per backend: what a crash, an old version or another program could leave behind
SQLITE_DAMAGE = {
    "text_not_utf8": "UPDATE entries SET result = CAST(X'fffe41' AS TEXT) WHERE tool = ? AND key = ?",
    "blob_result": "UPDATE entries SET result = X'00ff' WHERE tool = ? AND key = ?",
    "unknown_status": "UPDATE entries SET status = 'whatever' WHERE tool = ? AND key = ?",
    "created_not_a_number": "UPDATE entries SET created = 'yesterday' WHERE tool = ? AND key = ?",
}
REDIS_DAMAGE = {
    "not_json": b"not json {",
    "not_utf8": b"\xff\xfe{",
    "json_list": b"[1, 2]",
    "no_result_field": {"tool": "upper"},  # JSON objects get the entry's own "key"
    "result_a_number": {"tool": "upper", "result": 42},
    "wrong_redis_type": None,  # a hash where a string should be: GET answers WRONGTYPE
}


def _open(backend, tmp_path, redis_url, prefix, **kwargs):
    if backend == "sqlite":
        return SQLiteCache(tmp_path / "cache.sqlite", **kwargs)
    import redis

    client = redis.Redis.from_url(redis_url)
    for name in client.scan_iter(match=_glob_escape(prefix) + "*"):  # left over by an interrupted run
        client.delete(name)
    client.close()
    return RedisCache(redis_url, prefix=prefix, **kwargs)


def _damage(cache, tool, key, how):
    """Overwrite the stored entry (tool, key) behind the cache's back."""
    if isinstance(cache, SQLiteCache):
        conn = sqlite3.connect(cache.path, isolation_level=None)
        conn.execute(SQLITE_DAMAGE[how], (tool, key))
        conn.close()
        return
    import redis

    client = redis.Redis.from_url(cache.url)
    name = cache._name(tool, key)
    client.delete(name)
    value = REDIS_DAMAGE[how]
    if value is None:
        client.hset(name, "result", "x")
    elif isinstance(value, dict):
        client.set(name, json.dumps({**value, "key": key}))
    else:
        client.set(name, value)
    client.close()


def _store_raw(cache, tool, key, result):
    """Store an entry behind the cache's back, as an older version or another program could have."""
    if isinstance(cache, SQLiteCache):
        conn = sqlite3.connect(cache.path, isolation_level=None)
        conn.execute("INSERT INTO entries (tool, key, result, status, created) VALUES (?, ?, ?, 'ok', ?)",
                     (tool, key, result, time.time()))  # fmt: skip
        conn.close()
        return
    import redis

    client = redis.Redis.from_url(cache.url)
    client.set(cache._name(tool, key), json.dumps({"tool": tool, "key": key, "result": result, "status": "ok"}))
    client.close()


def _cleanup(cache):
    cache.close()
    if isinstance(cache, RedisCache):
        import redis

        client = redis.Redis.from_url(cache.url)
        for name in client.scan_iter(match=_glob_escape(cache.prefix) + "*"):
            client.delete(name)
        client.close()


def _cases():
    return [("sqlite", how) for how in SQLITE_DAMAGE] + [("redis", how) for how in REDIS_DAMAGE]


@pytest.mark.parametrize(("backend", "how"), _cases())
def test_one_bad_entry_never_fails_other_keys(backend, how, tmp_path, request, plugin_caplog):
    """Old code: `bad` failed the lookup and the cache was left alone 5 s, so `a`, `b`, `c` were not cached hits."""
    redis_url = request.getfixturevalue("redis_url") if backend == "redis" else None
    cache = _open(backend, tmp_path, redis_url, f"test:badentry:{how}:")
    try:
        for key in ("a", "b", "c", "bad", "bad2"):
            assert cache.put("upper", key, f"CACHED {key}")
        _damage(cache, "upper", "bad", how)
        _damage(cache, "upper", "bad2", how)
        reader = (
            SQLiteCache(cache.path, mode="read_only")
            if backend == "sqlite"
            else RedisCache(redis_url, prefix=cache.prefix, mode="read_only")
        )
        try:  # stats and export skip a bad entry instead of failing
            stats = reader.stats()
            assert (stats["entries_per_tool"], stats["bad_entries"]) == ({"upper": 3}, 2)
        finally:
            reader.close()
        plugin_caplog.clear()
        with ToolExecutor([Upper(timeout_s=10, retries=1)], cache=cache, cache_tools=["upper"]) as ex:
            with plugin_caplog.at_level(logging.WARNING):
                calls = [ToolCall("upper", k) for k in ("bad", "a", "b", "bad2", "c")]
                start = time.monotonic()
                results = ex.execute(calls)
                elapsed = time.monotonic() - start
            metrics = ex.pop_metrics()
            texts = [r.text for r in results]
            assert texts == ["BAD", "CACHED a", "CACHED b", "BAD2", "CACHED c"], texts  # bad ones: misses, run live
            assert [r.cached for r in results] == [False, True, True, False, True]
            assert elapsed < 3.0
            assert metrics["tools/cache/bad_entries"] == 2
            assert metrics["tools/cache/lookup_errors"] == 0 and metrics["tools/cache/lookups_skipped"] == 0
            assert metrics["tools/upper/cache_errors"] == 0 and metrics["tools/upper/cache_unavailable"] == 0
            records = {id(r): r for r in plugin_caplog.records}.values()  # a record may reach the handler twice
            logged = [(r.levelno, r.getMessage()) for r in records if "bad cache entry" in r.getMessage()]
            warnings = [message for level, message in logged if level >= logging.WARNING]
            assert len(warnings) == 1, logged  # warned about once, naming the entry and how to delete it
            assert "'bad'" in warnings[0]
            assert "DELETE FROM entries WHERE rowid" in warnings[0] or "`DEL " in warnings[0]
        # the results of the live calls were stored over the bad entries (the executor's close wrote them)
        assert cache.get("upper", "bad").result == "BAD" and cache.get("upper", "bad2").result == "BAD2"
        assert cache.get("upper", "a").result == "CACHED a" and cache.stats()["entries_per_tool"] == {"upper": 5}
        _damage(cache, "upper", "a", how)  # the direct API names a bad entry
        with pytest.raises(BadCacheEntry, match="'a'"):
            cache.get("upper", "a")
    finally:
        _cleanup(cache)


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_replay_answers_good_keys_beside_a_bad_one(backend, tmp_path, request):
    """The issue's observation: with a non-JSON entry, valid replay lookups answered `cannot be read now` for 5 s."""
    redis_url = request.getfixturevalue("redis_url") if backend == "redis" else None
    cache = _open(backend, tmp_path, redis_url, "test:badreplay:")
    try:
        cache.put("search", "known query", "Page 1: recorded")
        cache.put("search", "broken query", "Page 1: fine until damaged")
        _damage(cache, "search", "broken query", "text_not_utf8" if backend == "sqlite" else "not_json")
        with ToolExecutor([SearchTool(backend="replay", cache=cache, retries=1)]) as ex:
            results = ex.execute([ToolCall("search", "broken query"), ToolCall("search", "known query")])
        assert [(r.status, r.text) for r in results] == [
            ("cache_miss", "No search results found."),
            ("ok", "Page 1: recorded"),
        ]
        out = tmp_path / "export.json"
        assert cache.export_json(out) == 1 and json.loads(out.read_text()) == {"known query": "Page 1: recorded"}
    finally:
        _cleanup(cache)


def _pages(n, chars):
    return [f"snippet {i} " + "w" * chars for i in range(1, n + 1)]


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_cached_and_replayed_search_results_obey_topk_and_snippet_chars(backend, tmp_path, request):
    """Old code: both observations were the stored 250 KB text whatever `topk` and `snippet_chars` said."""
    redis_url = request.getfixturevalue("redis_url") if backend == "redis" else None
    cache = _open(backend, tmp_path, redis_url, "test:limits:")
    try:
        pages = _pages(50, 5000)
        stored = "\n".join(f"Page {i}: {p}" for i, p in enumerate(pages, 1))
        assert len(stored) > 250_000
        cache.put("search", "big query", stored)
        live_format = format_snippets(pages, 3, 100)  # what a live backend answering these snippets gives
        assert len(live_format) < 400
        replay = SearchTool(backend="replay", cache=cache, topk=3, snippet_chars=100, retries=1)
        # a local backend without an index: it would answer an error if it were called, so `ok` is the cache's
        cached = SearchTool(backend="local", index_dir=str(tmp_path / "no-index"), topk=3, snippet_chars=100)
        with ToolExecutor([replay]) as ex:
            replayed = ex.execute([ToolCall("search", "big query")])[0]
        with ToolExecutor([cached], cache=cache) as ex:
            hit = ex.execute([ToolCall("search", "big query")])[0]
        assert (replayed.status, replayed.text) == ("ok", live_format)
        assert (hit.status, hit.cached, hit.text) == ("ok", True, live_format)
        # a result within the limits is given back unchanged (a recorded run replays exactly)
        cache.put("search", "small query", "Page 1: alpha\nPage 2: beta")
        with ToolExecutor([replay]) as ex:
            assert ex.execute([ToolCall("search", "small query")])[0].text == "Page 1: alpha\nPage 2: beta"
    finally:
        _cleanup(cache)


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_huge_cached_entry_is_not_read_whole(backend, tmp_path, request):
    """The issue's 10.8 MB entry. Old code: a 10.8 MB observation, the whole value held in memory (and decoded)."""
    redis_url = request.getfixturevalue("redis_url") if backend == "redis" else None
    cache = _open(backend, tmp_path, redis_url, "test:huge:")
    try:
        stored = "\n".join(f"Page {i}: {p}" for i, p in enumerate(_pages(54, 200_000), 1))
        assert len(stored) > 10_000_000
        assert not cache.put("search", "huge query", stored)  # the cache does not write what it would not read
        _store_raw(cache, "search", "huge query", stored)  # an older version or another program did
        cache.put("search", "other query", "Page 1: fine")
        replay = SearchTool(backend="replay", cache=cache, topk=3, snippet_chars=100, retries=1)
        with ToolExecutor([replay]) as ex:
            tracemalloc.start()
            try:
                start = time.monotonic()
                results = ex.execute([ToolCall("search", "huge query"), ToolCall("search", "other query")])
                elapsed = time.monotonic() - start
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        assert [(r.status, r.text) for r in results] == [
            ("cache_miss", "No search results found."),
            ("ok", "Page 1: fine"),
        ]
        assert elapsed < 1.0, f"{elapsed:.2f}s"
        assert peak < 6_000_000, f"{peak} bytes traced while answering"  # old code: 10.8 MB (SQLite), 33.6 MB (Redis)
        assert cache.pop_health()["bad_entries"] == 1
        # what is larger than the bound is neither queued for writing nor imported
        assert not cache.submit("search", "new huge query", stored)
        assert cache.pop_health()["not_stored"] == 1
        source = tmp_path / "search_cache.json"
        source.write_text(json.dumps({"imported huge": stored, "imported small": "Page 1: small"}))
        counts = cache.import_json(source)
        assert (counts["imported"], counts["skipped_large"]) == (1, 1)
        assert cache.get("search", "imported huge") is None
    finally:
        _cleanup(cache)


def _other_application_db(path):
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('alice')")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("mode", ["read_write", "read_only", "offline"])
def test_a_cache_path_to_another_applications_database_is_refused_and_left_unchanged(tmp_path, mode):
    """Old code (read_write): `entries` and `stats` were added to the app's file and it was switched to WAL."""
    app = tmp_path / "app.db"
    _other_application_db(app)
    before = app.read_bytes()
    link = tmp_path / "tool_cache.sqlite"
    link.symlink_to(app)
    args = SimpleNamespace(agentic_cache_path=str(link), agentic_cache_mode=mode)
    with pytest.raises(CacheError, match=r"agentic_cache_path.*not a tool cache.*tables: users.*new file"):
        build_executor_from_args(args)
    assert app.read_bytes() == before
    assert not Path(f"{app}-wal").exists() and not Path(f"{link}-wal").exists()
    conn = sqlite3.connect(app)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["users"]
    conn.close()
    # an `entries` table of another layout is not a tool cache either
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE entries (id INTEGER, body TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(CacheError, match="another layout"):
        SQLiteCache(other, mode=mode)
    # a new file and an existing tool cache still open
    SQLiteCache(tmp_path / "new.sqlite").close()
    SQLiteCache(tmp_path / "new.sqlite", mode=mode).close()


def test_a_cache_path_that_is_a_directory_is_refused(tmp_path):
    """Old code: a warning (`unable to open database file`), then a run without a cache."""
    folder = tmp_path / "caches"
    folder.mkdir()
    with pytest.raises(CacheError, match=r"recipe key `agentic_cache_path`.*is a directory.*caches/tool_cache.sqlite"):
        build_executor_from_args(SimpleNamespace(agentic_cache_path=str(folder)))
    config = tmp_path / "tools.yaml"
    config.write_text(f"tools:\n  - name: search\ncache: {{path: {folder}}}\n")
    with pytest.raises(CacheError, match=r"`cache.path` of the tool config .*tools.yaml.*is a directory"):
        build_executor_from_args(SimpleNamespace(agentic_tool_config=str(config)))
    # the command line says the same and exits 1
    code = "import sys; from llamafactory_agentic.tools.cli import _standalone_main; sys.exit(_standalone_main())"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-c", code, "tool", "search", "--query", "x", "--backend", "replay", "--cache", str(folder)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "is a directory" in proc.stderr and "tool_cache.sqlite" in proc.stderr and "--cache" in proc.stderr


@pytest.mark.parametrize("kind", ["directory", "other_application"])
def test_training_stops_before_the_model_loads_on_a_bad_cache_path(kind, tmp_path, tiny_model_dir, monkeypatch):
    """`stage: arpo` through LLaMA-Factory's `run_exp` (in-process, tiny model, CPU): the run stops at the executor.

    Old code: a directory gave a warning and the run went on without a cache (here: to the model loading, replaced
    by a sentinel); another application's database got the cache's tables and WAL mode.
    """
    import llamafactory.model
    from llamafactory.train.tuner import run_exp

    import llamafactory_agentic

    llamafactory_agentic.register()

    def refuse(*args, **kwargs):
        raise AssertionError("the policy was loaded")

    monkeypatch.setattr(llamafactory.model, "load_model", refuse)
    if kind == "directory":
        cache_path = tmp_path / "caches"
        cache_path.mkdir()
        expected = "is a directory"
    else:
        cache_path = tmp_path / "app.db"
        _other_application_db(cache_path)
        expected = "not a tool cache"
    data = tmp_path / "data"
    data.mkdir()
    (data / "dataset_info.json").write_text(json.dumps({"rl": {"file_name": "rl.jsonl", "formatting": "arpo_rl"}}))
    row = {"prompt": [{"role": "user", "content": "What is 1 + 2?"}], "reward_model": {"ground_truth": "3"}}
    (data / "rl.jsonl").write_text(json.dumps(row) + "\n")
    args = {
        "model_name_or_path": str(tiny_model_dir), "stage": "arpo", "do_train": True, "finetuning_type": "full",
        "dataset": "rl", "dataset_dir": str(data), "template": "qwen", "cutoff_len": 1024, "overwrite_cache": True,
        "output_dir": str(tmp_path / "out"), "per_device_train_batch_size": 4, "arpo_rollout_n": 4,
        "arpo_initial_rollouts": 2, "arpo_rollout_batch_size": 1, "max_steps": 1, "report_to": "none",
        "use_cpu": True, "cache_dir": str(tmp_path / "hf-cache"), "temperature": 1.0, "top_p": 1.0, "top_k": 0,
        "agentic_cache_path": str(cache_path),
    }  # fmt: skip
    with pytest.raises(CacheError, match=rf"recipe key `agentic_cache_path`.*{expected}"):
        run_exp(args=args)

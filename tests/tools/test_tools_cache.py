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

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llamafactory_agentic.tools.cache import (
    CacheError,
    RedisCache,
    SQLiteCache,
    normalize_args,
    normalize_search_query,
    open_cache,
)
from llamafactory_agentic.tools.cache.base import _glob_escape


REPO = Path(__file__).resolve().parents[2]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_normalisation_rules():
    assert normalize_search_query('  "Amy  Smart"\t film\n\ndebut  ') == "Amy Smart film debut"
    assert normalize_search_query("Keep CASE, punctuation!") == "Keep CASE, punctuation!"
    assert normalize_search_query("a\u3000b\u00a0c") == "a b c"  # Unicode spaces collapse too
    assert normalize_search_query('""') == ""
    assert normalize_search_query("bad \udcff byte") == "bad \\udcff byte"  # lone surrogate escaped
    assert normalize_args("python", "  x = 1\n  ") == "x = 1"


@pytest.fixture(params=["sqlite", "redis"])
def cache_factory(request, tmp_path):
    opened = []
    counter = [0]

    def _open(mode="read_write", ttl_s=None, path=None):
        if request.param == "sqlite":
            cache = SQLiteCache(path or tmp_path / "cache.sqlite", mode=mode, ttl_s=ttl_s)
        else:
            url = request.getfixturevalue("redis_url")
            counter[0] += 1
            prefix = f"test:{request.node.name}:{path or ''}:"
            if counter[0] == 1:
                _delete_prefix(url, prefix)  # left over by an interrupted run
            cache = RedisCache(url, mode=mode, ttl_s=ttl_s, prefix=prefix)
        opened.append(cache)
        return cache

    yield _open
    for cache in opened:  # closed first: closing flushes the hit/miss counters into the server
        cache.close()
        if isinstance(cache, RedisCache):
            _delete_prefix(cache.url, cache.prefix)


def _delete_prefix(url, prefix):
    import redis

    client = redis.Redis.from_url(url)
    for name in client.scan_iter(match=_glob_escape(prefix) + "*"):
        client.delete(name)
    client.close()


def test_put_get_first_writer_wins(cache_factory):
    cache = cache_factory()
    assert cache.get("search", "q") is None
    assert cache.put("search", "q", "Page 1: a", latency_s=0.5, backend="web:serper")
    assert not cache.put("search", "q", "Page 1: b")
    entry = cache.get("search", "q")
    assert (entry.result, entry.status, entry.latency_s, entry.backend) == ("Page 1: a", "ok", 0.5, "web:serper")
    assert entry.created > time.time() - 60
    assert cache.get("python", "q") is None  # keyed by tool too
    assert cache.put("search", "q", "Page 1: c", overwrite=True)
    assert cache.get("search", "q").result == "Page 1: c"
    stats = cache.stats()
    assert stats["entries"] == 1 and stats["hits"] == 2 and stats["misses"] == 2
    assert stats["hit_rate"] == pytest.approx(0.5)


def test_awkward_keys(cache_factory):
    cache = cache_factory()
    keys = [
        "'; DROP TABLE entries; --",
        'Robert"); DELETE FROM entries WHERE ("1"="1',
        "x" * 200_000,
        "nul\x00byte",
        normalize_search_query("bad \udcff byte"),
        "中文 查询",
    ]
    for i, key in enumerate(keys):
        assert cache.put("search", key, f"Page 1: {i}")
    for i, key in enumerate(keys):
        assert cache.get("search", key).result == f"Page 1: {i}"
    assert cache.count() == len(keys)


def test_ttl_expiry(cache_factory):
    cache = cache_factory(ttl_s=1)
    cache.put("search", "q", "Page 1: a")
    assert cache.get("search", "q") is not None
    time.sleep(2.1)
    assert cache.get("search", "q") is None
    assert cache.put("search", "q", "Page 1: new")  # an expired entry may be replaced
    assert cache.get("search", "q").result == "Page 1: new"


def test_modes(cache_factory):
    rw = cache_factory()
    rw.put("search", "q", "Page 1: a")
    for mode in ("read_only", "offline"):
        ro = cache_factory(mode=mode)
        assert ro.get("search", "q").result == "Page 1: a"
        assert not ro.put("search", "other", "Page 1: b")
        with pytest.raises(CacheError):
            ro.import_json(os.devnull)
    with pytest.raises(CacheError):
        open_cache("x.sqlite", mode="sometimes")


def test_import_export_reference_json(cache_factory, shared_data, tmp_path):
    cache = cache_factory()
    source = shared_data / "arpo" / "search_cache.json"
    counts = cache.import_json(source)
    reference = json.loads(source.read_text())
    empty = sum(1 for v in reference.values() if v.strip() in ("", "No search results found."))
    total = shared_data.facts["search_total"]  # the release: 1000
    assert counts == {"total": total, "imported": total - empty, "duplicates": 0, "skipped_empty": empty,
                      "skipped_large": 0, "existing": 0}  # fmt: skip
    again = cache.import_json(source)
    assert again["imported"] == 0 and again["existing"] == total - empty
    key, value = next((k, v) for k, v in reference.items() if v.startswith("Page 1"))
    assert cache.get("search", normalize_search_query(key)).result == value
    out = tmp_path / "export.json"
    assert cache.export_json(out) == total - empty
    exported = json.loads(out.read_text())
    assert exported == {normalize_search_query(k): v for k, v in reference.items() if k in reference
                        and v.strip() not in ("", "No search results found.")}  # fmt: skip


def test_import_duplicates_after_normalisation(tmp_path, plugin_caplog):
    source = tmp_path / "ref.json"
    source.write_text(json.dumps({'"a b"': "Page 1: first", "a  b": "Page 1: second", " a b ": "Page 1: third",
                                  "c": "", "d": "No search results found.", "e": "Page 1: e"}))  # fmt: skip
    cache = SQLiteCache(tmp_path / "c.sqlite")
    with plugin_caplog.at_level("WARNING"):
        counts = cache.import_json(source)
    assert counts == {"total": 6, "imported": 2, "duplicates": 2, "skipped_empty": 2, "skipped_large": 0,
                      "existing": 0}  # fmt: skip
    assert cache.get("search", "a b").result == "Page 1: first"
    assert "2 keys" in plugin_caplog.text
    cache.close()


def test_sqlite_is_wal_and_shared_between_threads(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = SQLiteCache(path)
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    errors = []

    def worker(t):
        try:
            for i in range(200):
                cache.put("search", f"t{t}-{i}", f"Page 1: {t} {i}")
                assert cache.get("search", f"t{t}-{i}") is not None
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and cache.count() == 16 * 200
    cache.close()


WRITER = """
import sys
from llamafactory_agentic.tools.cache import SQLiteCache
cache = SQLiteCache(sys.argv[1])
tag = sys.argv[2]
for i in range(int(sys.argv[3])):
    cache.put("search", f"{tag}-{i}", f"Page 1: {tag} {i}")
    print(i, flush=True)
"""


def test_sqlite_many_processes_no_lost_update(tmp_path):
    path = tmp_path / "c.sqlite"
    SQLiteCache(path).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), f"p{p}", "300"], env=_env(), stdout=subprocess.DEVNULL
        )  # fmt: skip
        for p in range(4)
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    cache = SQLiteCache(path)
    assert cache.count() == 1200
    assert cache.integrity_check() == "ok"
    cache.close()


def test_sigkill_mid_insert_loses_no_committed_entry(tmp_path):
    path = tmp_path / "c.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "k", "1000000"], env=_env(),
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    last = -1
    deadline = time.time() + 60
    while last < 300 and time.time() < deadline:
        last = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)  # in the middle of the insert loop
    proc.wait()
    cache = SQLiteCache(path, mode="read_only")
    assert cache.integrity_check() == "ok"
    for i in range(last + 1):  # every entry whose commit was reported survived
        assert cache.get("search", f"k-{i}") is not None, i
    assert cache.count() >= last + 1
    cache.close()


def test_corrupt_file_is_moved_aside(tmp_path, plugin_caplog):
    path = tmp_path / "c.sqlite"
    path.write_bytes(os.urandom(8192))
    with plugin_caplog.at_level("ERROR"):
        cache = SQLiteCache(path)
    assert "corrupt" in plugin_caplog.text
    assert cache.put("search", "q", "Page 1: a") and cache.get("search", "q").result == "Page 1: a"
    assert list(tmp_path.glob("c.sqlite.corrupt-*"))
    cache.close()
    path2 = tmp_path / "d.sqlite"
    path2.write_bytes(b"garbage" * 1000)
    ro = SQLiteCache(path2, mode="read_only")  # read-only: leave the file alone, answer misses
    assert ro.get("search", "q") is None and path2.read_bytes() == b"garbage" * 1000
    with pytest.raises(CacheError):
        SQLiteCache(path2, on_corrupt="raise")


def test_locked_file_fails_cleanly(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = SQLiteCache(path, busy_timeout_s=0.2)
    cache.put("search", "a", "Page 1: a")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert cache.get("search", "a").result == "Page 1: a"  # WAL readers are not blocked
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            cache.put("search", "b", "Page 1: b")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert cache.put("search", "b", "Page 1: b")
    cache.close()


IMPORTER = """
import sys
from llamafactory_agentic.tools.cache import open_cache
cache = open_cache(sys.argv[1])
print(cache.import_json(sys.argv[2])["imported"])
cache.close()
"""


def test_two_processes_import_at_once(tmp_path, shared_data):
    path = tmp_path / "c.sqlite"
    source = shared_data / "arpo" / "search_cache.json"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", IMPORTER, str(path), str(source)], env=_env(), stdout=subprocess.PIPE, text=True
        )  # fmt: skip
        for _ in range(2)
    ]
    imported = [int(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    expected = shared_data.facts["search_imported"]  # the release: 996
    assert sum(imported) == expected  # each entry written exactly once
    cache = SQLiteCache(path)
    assert cache.count() == expected and cache.integrity_check() == "ok"
    cache.close()


WRITE_LOCK_HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO stats (tool, hits, misses) VALUES ('search', 0, 0)")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


def test_opening_waits_while_another_process_holds_the_write_lock(tmp_path):
    """Switching a database to WAL needs an exclusive lock, and SQLite refuses at once (no busy timeout) while another
    process holds the write lock: two trainers opening one new cache file at once made one fail with "database is
    locked". The opening waits for the lock instead."""
    path = tmp_path / "c.sqlite"
    conn = sqlite3.connect(path)  # a tool cache not yet in WAL mode (another application's file is refused)
    for statement in SQLiteCache._SCHEMA:
        conn.execute(statement)
    conn.commit()
    conn.close()
    holder = subprocess.Popen([sys.executable, "-c", WRITE_LOCK_HOLDER, str(path), "1.0"], stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        start = time.monotonic()
        cache = SQLiteCache(path)
        assert time.monotonic() - start >= 0.5  # it waited for the lock
        cache.put("search", "q", "Page 1: x")
        assert cache.get("search", "q").result == "Page 1: x"
        assert cache._connect().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        cache.close()
    finally:
        holder.wait(timeout=60)
    assert holder.returncode == 0


def test_redis_shared_between_clients(redis_url):
    _delete_prefix(redis_url, "test:shared:")
    a = RedisCache(redis_url, prefix="test:shared:")
    b = RedisCache(redis_url, prefix="test:shared:")
    try:
        a.put("search", "q", "Page 1: from a")
        assert b.get("search", "q").result == "Page 1: from a"
        assert not b.put("search", "q", "Page 1: from b")
        a.flush_stats()
        b.flush_stats()
        assert b.stats()["hits"] == 1
    finally:
        a.close()
        b.close()
        _delete_prefix(redis_url, "test:shared:")


def test_open_cache_dispatch(tmp_path, redis_url):
    assert open_cache(None) is None
    assert isinstance(open_cache(tmp_path / "x.sqlite"), SQLiteCache)
    cache = open_cache(redis_url, prefix="test:dispatch:")
    assert isinstance(cache, RedisCache)
    cache.close()

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

"""Tool cache throughput: SQLite (WAL) cache vs a baseline that behaves like the reference JSON cache.

Baseline (written here after RUC-NLPIR/ARPO search_tool.py:30-323, docs/algorithms.md §7.4): the cache is a
dict in memory; every insert takes an exclusive lock on `<file>.lock`, reads and merges the JSON file on disk,
writes the whole file to a temporary file and renames it. Lookups are plain dict lookups.

The baseline's insert cost grows with the file, so inserting all entries is quadratic; by default it inserts only
the first `--baseline-entries` (its measured rate is therefore an upper bound for 10k entries, and the printed
ratio a lower bound). Run: `python benchmarks/bench_tools_cache.py [--entries 10000 --baseline-entries 2000]`.
"""

import argparse
import fcntl
import json
import os
import random
import sqlite3
import tempfile
import threading
import time

from llamafactory_agentic.tools.cache import SQLiteCache


class ReferenceLikeJSONCache:
    def __init__(self, path):
        self.path = path
        self.data = {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                self.data = json.load(f)

    def get(self, key):
        return self.data.get(key)

    def put(self, key, value):
        self.data[key] = value
        with open(self.path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                on_disk = {}
                if os.path.exists(self.path):
                    with open(self.path, encoding="utf-8") as f:
                        on_disk = json.load(f)
                on_disk.update(self.data)  # memory wins
                tmp = f"{self.path}.tmp"
                with open(tmp, "w", encoding="utf-8") as f:
                    json.dump(on_disk, f, ensure_ascii=False)
                os.replace(tmp, self.path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def make_entries(n, value_chars, seed=0):
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "film", "debut", "river", "capital", "born", "year", "Amy", "Smart"]
    entries = []
    for i in range(n):
        query = " ".join(rng.choice(words) for _ in range(6)) + f" {i}"
        value = "\n".join(f"Page {p}: " + "x" * (value_chars // 10) for p in range(1, 11))
        entries.append((query, value))
    return entries


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--baseline-entries", type=int, default=2_000)
    parser.add_argument("--value-chars", type=int, default=1_600, help="mean size of a reference cache value")
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    entries = make_entries(args.entries, args.value_chars)
    keys = [k for k, _ in entries]
    rng = random.Random(1)
    lookups = [rng.choice(keys) for _ in range(args.entries)]
    tmp = tempfile.mkdtemp(prefix="bench-cache-")

    cache = SQLiteCache(os.path.join(tmp, "cache.sqlite"))
    t = time.perf_counter()
    for k, v in entries:
        cache.put("search", k, v)
    ours_insert = args.entries / (time.perf_counter() - t)
    t = time.perf_counter()
    for k in lookups:
        assert cache.get("search", k) is not None
    ours_lookup = args.entries / (time.perf_counter() - t)

    def reader(chunk):
        for k in chunk:
            cache.get("search", k)

    chunks = [lookups[i :: args.threads] for i in range(args.threads)]
    threads = [threading.Thread(target=reader, args=(c,)) for c in chunks]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    ours_lookup_mt = args.entries / (time.perf_counter() - t)
    cache.close()

    base = ReferenceLikeJSONCache(os.path.join(tmp, "cache.json"))
    n_base = min(args.baseline_entries, args.entries)
    t = time.perf_counter()
    for k, v in entries[:n_base]:
        base.put(k, v)
    base_insert = n_base / (time.perf_counter() - t)
    base_full = ReferenceLikeJSONCache(os.path.join(tmp, "cache.json"))
    base_full.data = dict(entries)
    base_lookups = list(lookups)
    t = time.perf_counter()
    for k in base_lookups:
        assert base_full.get(k) is not None
    base_lookup = args.entries / (time.perf_counter() - t)

    print(f"entries={args.entries} value_chars~{args.value_chars} (baseline inserts measured on the first {n_base})")
    print(f"insert/s   sqlite-wal={ours_insert:,.0f}   reference-like-json={base_insert:,.0f}   "
          f"ratio={ours_insert / base_insert:,.1f}x")  # fmt: skip
    print(f"lookup/s   sqlite-wal={ours_lookup:,.0f} (1 thread), {ours_lookup_mt:,.0f} ({args.threads} threads)   "
          f"reference in-memory dict={base_lookup:,.0f}   ratio={ours_lookup / base_lookup:.4f}x")  # fmt: skip
    print("note: the reference answers lookups from an in-memory dict (it only reloads the file on mtime change), so "
          "its lookups are faster; ours are shared across processes immediately and persisted per insert.")  # fmt: skip
    tool_call_path(entries, lookups, tmp)


def tool_call_path(entries, lookups, tmp):
    r"""What a cached tool call pays on its own thread: the executor's `lookup` + `submit` (background batched
    writer) against the synchronous `get` + `put` it used before, on a free file and on one whose write lock another
    connection holds."""
    n = len(entries)
    sync = SQLiteCache(os.path.join(tmp, "sync.sqlite"))
    t = time.perf_counter()
    for k, v in entries:
        sync.put("search", k, v)
    put_s = (time.perf_counter() - t) / n
    t = time.perf_counter()
    for k in lookups:
        sync.get("search", k)
    get_s = (time.perf_counter() - t) / n
    sync.close()
    queued = SQLiteCache(os.path.join(tmp, "queued.sqlite"))
    t = time.perf_counter()
    for k, v in entries:
        queued.submit("search", k, v)
    submit_s = (time.perf_counter() - t) / n
    assert queued.flush(timeout_s=120)
    end_to_end = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for k in lookups:
        queued.lookup("search", k)
    lookup_s = (time.perf_counter() - t) / n
    assert queued.count() == n
    queued.close()
    print(f"call path  store: submit={submit_s * 1e6:,.1f} us   put (before)={put_s * 1e6:,.1f} us   "
          f"ratio={put_s / submit_s:,.1f}x; all {n} submitted entries on disk at {end_to_end:,.0f} entries/s "
          f"(batched) vs {1 / put_s:,.0f}/s one put per call")  # fmt: skip
    print(f"call path  lookup: lookup={lookup_s * 1e6:,.1f} us   get={get_s * 1e6:,.1f} us   "
          f"ratio={get_s / lookup_s:.2f}x")  # fmt: skip

    path = os.path.join(tmp, "locked.sqlite")
    locked = SQLiteCache(path, busy_timeout_s=1.0)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        t = time.perf_counter()
        for k, v in entries[:100]:
            locked.submit("search", k, v)
        submit_locked = (time.perf_counter() - t) / 100
        t = time.perf_counter()
        for k, v in entries[:2]:
            try:
                locked.put("search", k, v)
            except sqlite3.OperationalError:
                pass
        put_locked = (time.perf_counter() - t) / 2
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert locked.flush(timeout_s=30)
    locked.close()
    print(f"write lock held elsewhere: submit={submit_locked * 1e6:,.1f} us per call   put={put_locked:.2f} s per "
          f"call (its busy timeout, 1 s here; 30 s by default)   ratio={put_locked / submit_locked:,.0f}x; the queued "
          "entries were written once the lock was released")  # fmt: skip


if __name__ == "__main__":
    main()

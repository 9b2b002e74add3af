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

r"""Persistent, shared tool cache: SQLite (embedded default, WAL mode) or Redis (multi-node).

Entries are keyed by (tool name, normalised arguments) and store the observation text, its status, the latency of
the call that produced it, the creation time, an optional expiry time and the backend name (docs/algorithms.md
§7.5). Secrets are never stored: only the observation text and the backend's name are.

Normalisation of search queries (`normalize_search_query`), exactly:
1. lone UTF-16 surrogates (undecodable bytes smuggled in with `surrogateescape`) become `\\udcXX` escapes;
2. every `"` is removed (the reference's only normalisation, RUC-NLPIR/ARPO search_tool.py);
3. every run of whitespace (`str.isspace`: spaces, tabs, newlines, Unicode spaces) becomes one space, and leading and
   trailing whitespace is removed. Case, other punctuation and Unicode normal form are kept.
Other tools are keyed by their stripped call body.

Policy (who stores what) lives in the executor: only status "ok" is stored (errors and timeouts only when asked),
empty results never. Modes: `read_write` (look up, store new results), `read_only` (look up, never store),
`offline` (look up; the executor answers misses with the no-result text instead of calling the tool).
"""

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .base import NO_SEARCH_RESULTS_TEXT, STATUS_OK


logger = logging.getLogger(__name__)

CACHE_MODES = ("read_write", "read_only", "offline")
_STATS_FLUSH_S = 10.0


def _clean_surrogates(text: str) -> str:
    return text.encode("utf-8", errors="backslashreplace").decode("utf-8")


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def normalize_search_query(text: str) -> str:
    r"""Cache key (and backend query) of a search call; see the module docstring for the exact rules."""
    return " ".join(_clean_surrogates(text).replace('"', "").split())


def normalize_args(tool: str, content: str) -> str:
    r"""Cache key of `content` for `tool`: search queries as `normalize_search_query`, others stripped."""
    if tool == "search":
        return normalize_search_query(content)
    return _clean_surrogates(content).strip()


@dataclass
class CacheEntry:
    r"""One stored observation (`created`/`expires` are Unix times in seconds)."""

    tool: str
    key: str
    result: str
    status: str = STATUS_OK
    latency_s: float = 0.0
    created: float = 0.0
    backend: str = ""
    expires: float | None = None


class CacheError(RuntimeError):
    r"""The cache cannot be opened or used (corrupt file with `on_corrupt="raise"`, bad mode, import in read-only)."""


class ToolCache:
    r"""Interface shared by the SQLite and Redis caches.

    Args:
        mode: "read_write", "read_only" or "offline".
        ttl_s: entries expire this many seconds after creation (None: never).
    """

    def __init__(self, mode: str = "read_write", ttl_s: float | None = None) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        if mode not in CACHE_MODES:
            raise CacheError(f"unknown cache mode {mode!r}; use one of {CACHE_MODES}")
        self.mode = mode
        self.ttl_s = ttl_s
        self._stats_lock = threading.Lock()
        self._hits: Counter = Counter()
        self._misses: Counter = Counter()
        self._last_flush = time.monotonic()

    @property
    def writable(self) -> bool:
        r"""Whether `put` stores anything (mode `read_write`)."""
        return self.mode == "read_write"

    # ---------------------------------------------------------------- backend primitives
    def _get(self, tool: str, key: str) -> CacheEntry | None:
        raise NotImplementedError

    def _put_many(self, entries: list[CacheEntry], overwrite: bool) -> int:
        raise NotImplementedError

    def iter_entries(self, tool: str | None = None) -> Iterator[CacheEntry]:
        r"""Every live entry (of `tool`, or all), oldest first where the backend knows the order."""
        raise NotImplementedError

    def count(self, tool: str | None = None) -> int:
        r"""Number of live entries."""
        raise NotImplementedError

    def size_bytes(self) -> int:
        r"""Storage used, in bytes (file sizes for SQLite, value bytes for Redis)."""
        raise NotImplementedError

    def _flush_stats(self, hits: Counter, misses: Counter) -> None:
        raise NotImplementedError

    def _stored_stats(self) -> dict[str, tuple[int, int]]:
        raise NotImplementedError

    def close(self) -> None:
        r"""Flush hit/miss counters and release connections."""
        self.flush_stats()

    # ---------------------------------------------------------------- public API
    def get(self, tool: str, key: str) -> CacheEntry | None:
        r"""The live entry for (tool, normalised key), or None; counts a hit or a miss."""
        entry = self._get(tool, key)
        with self._stats_lock:
            (self._hits if entry is not None else self._misses)[tool] += 1
            due = time.monotonic() - self._last_flush > _STATS_FLUSH_S
        if due:
            try:
                self.flush_stats()
            except Exception as exc:  # noqa: BLE001 - statistics never break a lookup
                logger.debug("cache stats flush failed: %s", exc)
        return entry

    def put(
        self,
        tool: str,
        key: str,
        result: str,
        status: str = STATUS_OK,
        latency_s: float = 0.0,
        backend: str = "",
        overwrite: bool = False,
    ) -> bool:
        r"""Store one entry (first writer wins unless `overwrite` or the old entry expired).

        Returns:
            True when the entry was written, False in a read-only mode or when a live entry already existed.
        """
        if not self.writable:
            return False
        now = time.time()
        entry = CacheEntry(tool, key, result, status, float(latency_s), now, backend, self._expiry(now))
        return self._put_many([entry], overwrite) == 1

    def put_many(self, entries: Iterable[CacheEntry], overwrite: bool = False) -> int:
        r"""Store many entries in one transaction / pipeline; returns how many were written."""
        if not self.writable:
            return 0
        return self._put_many(list(entries), overwrite)

    def _expiry(self, created: float) -> float | None:
        return created + self.ttl_s if self.ttl_s else None

    def flush_stats(self) -> None:
        r"""Persist the hit/miss counters gathered since the last flush (read_write mode only)."""
        with self._stats_lock:
            hits, misses = self._hits, self._misses
            self._hits, self._misses = Counter(), Counter()
            self._last_flush = time.monotonic()
        if not self.writable or not (hits or misses):
            return
        try:
            self._flush_stats(hits, misses)
        except Exception:
            with self._stats_lock:  # keep them for the next flush
                self._hits.update(hits)
                self._misses.update(misses)
            raise

    def stats(self) -> dict:
        r"""Entries, size and hit counters of the cache.

        Returns:
            `{"entries", "entries_per_tool", "size_bytes", "hits", "misses", "hit_rate", "per_tool"}`; the counters
            include every process that flushed into this cache.
        """
        stored = self._stored_stats()
        with self._stats_lock:
            tools = set(stored) | set(self._hits) | set(self._misses)
            per_tool = {}
            for tool in sorted(tools):
                hits = stored.get(tool, (0, 0))[0] + self._hits[tool]
                misses = stored.get(tool, (0, 0))[1] + self._misses[tool]
                per_tool[tool] = {"hits": hits, "misses": misses, "hit_rate": hits / max(1, hits + misses)}
        hits = sum(v["hits"] for v in per_tool.values())
        misses = sum(v["misses"] for v in per_tool.values())
        per_tool_entries = Counter(e.tool for e in self.iter_entries())
        return {
            "entries": sum(per_tool_entries.values()),
            "entries_per_tool": dict(per_tool_entries),
            "size_bytes": self.size_bytes(),
            "hits": hits,
            "misses": misses,
            "hit_rate": hits / max(1, hits + misses),
            "per_tool": per_tool,
        }

    def import_json(self, path: str | os.PathLike, tool: str = "search") -> dict[str, int]:
        r"""Import the reference cache format `{query: result}` (RUC-NLPIR/ARPO search_tool.py:30-323).

        Each key is normalised (`normalize_args(tool, key)`); after normalisation the first occurrence wins and the
        others are counted as duplicates and logged. Empty results and `No search results found.` are not stored
        (docs/algorithms.md §7.5: empty results never). Existing live entries are kept.

        Returns:
            Counts `{"total", "imported", "duplicates", "skipped_empty", "existing"}`.

        Raises:
            CacheError: the cache is not writable.
            ValueError: the file is not a JSON object.
        """
        if not self.writable:
            raise CacheError(f"cannot import into a cache opened in mode {self.mode!r}")
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object {{query: result}}")
        now = time.time()
        seen: set[str] = set()
        entries: list[CacheEntry] = []
        counts = Counter(total=len(data))
        for raw_key, value in data.items():
            key = normalize_args(tool, str(raw_key))
            if not isinstance(value, str) or not value.strip() or value.strip() == NO_SEARCH_RESULTS_TEXT:
                counts["skipped_empty"] += 1
                continue
            if key in seen:
                counts["duplicates"] += 1
                continue
            seen.add(key)
            entries.append(CacheEntry(tool, key, value, STATUS_OK, 0.0, now, "import:" + Path(path).name,
                                      self._expiry(now)))  # fmt: skip
        counts["imported"] = self._put_many(entries, overwrite=False)
        counts["existing"] = len(entries) - counts["imported"]
        result = {k: counts[k] for k in ("total", "imported", "duplicates", "skipped_empty", "existing")}
        logger.info("[agentic-tools] imported %s into the %s cache: %s", path, tool, result)
        if counts["duplicates"]:
            logger.warning("[agentic-tools] %d keys of %s were duplicates after normalisation (first kept)",
                           counts["duplicates"], path)  # fmt: skip
        return result

    def export_json(self, path: str | os.PathLike, tool: str = "search") -> int:
        r"""Write the "ok" entries of `tool` as the reference format `{query: result}` (atomic rename).

        Returns:
            The number of entries written.
        """
        data = {e.key: e.result for e in self.iter_entries(tool) if e.status == STATUS_OK}
        tmp = f"{path}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=0)
        os.replace(tmp, path)
        return len(data)


class SQLiteCache(ToolCache):
    r"""SQLite cache in WAL mode, safe for many threads and processes.

    One connection per thread (and per process after fork), `busy_timeout` for concurrent writers, every `put` its own
    committed transaction (a SIGKILL loses at most the entry being written).

    Args:
        path: database file (created with its folder if missing).
        mode, ttl_s: see `ToolCache`.
        busy_timeout_s: how long a writer waits for the write lock before `sqlite3.OperationalError`.
        on_corrupt: what to do when the file is not a readable database: "move" (rename it to
            `<path>.corrupt-<unix time>` and start empty; only in read_write mode), "empty" (leave the file, answer
            every lookup with a miss) or "raise" (`CacheError`). Defaults to "move" in read_write mode and "empty"
            otherwise.
    """

    _SCHEMA = (
        "CREATE TABLE IF NOT EXISTS entries (tool TEXT NOT NULL, key TEXT NOT NULL, result TEXT NOT NULL, "
        "status TEXT NOT NULL, latency_s REAL, created REAL NOT NULL, expires REAL, backend TEXT, "
        "PRIMARY KEY (tool, key))",
        "CREATE TABLE IF NOT EXISTS stats (tool TEXT PRIMARY KEY, hits INTEGER NOT NULL DEFAULT 0, "
        "misses INTEGER NOT NULL DEFAULT 0)",
    )

    def __init__(
        self,
        path: str | os.PathLike,
        mode: str = "read_write",
        ttl_s: float | None = None,
        busy_timeout_s: float = 30.0,
        on_corrupt: str | None = None,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        super().__init__(mode, ttl_s)
        self.path = str(path)
        self.busy_timeout_s = float(busy_timeout_s)
        self._local = threading.local()
        self._all_conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._disabled = False
        on_corrupt = on_corrupt or ("move" if self.writable else "empty")
        if on_corrupt not in ("move", "empty", "raise"):
            raise CacheError(f"unknown on_corrupt {on_corrupt!r}")
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._init_db()
        except sqlite3.DatabaseError as exc:
            if on_corrupt == "raise" or (on_corrupt == "move" and not self.writable):
                raise CacheError(f"tool cache {self.path} is not a usable SQLite database: {exc}") from exc
            if on_corrupt == "empty":
                logger.error("[agentic-tools] tool cache %s is unreadable (%s): every lookup misses", self.path, exc)
                self._disabled = True
                return
            self._drop_connections()
            moved = f"{self.path}.corrupt-{int(time.time())}"
            os.replace(self.path, moved)
            for suffix in ("-wal", "-shm"):
                if os.path.exists(self.path + suffix):
                    os.replace(self.path + suffix, moved + suffix)
            logger.error("[agentic-tools] tool cache %s was corrupt (%s); moved to %s, starting empty",
                         self.path, exc, moved)  # fmt: skip
            self._init_db()

    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            return conn
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: committed data survives a process crash
        self._local.conn = conn
        self._local.pid = os.getpid()
        with self._conns_lock:
            self._all_conns.append(conn)
        return conn

    def _init_db(self) -> None:
        conn = self._connect()
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # raises DatabaseError on a corrupt header
        if self.writable:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode.lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            for statement in self._SCHEMA:
                conn.execute(statement)

    def _drop_connections(self) -> None:
        with self._conns_lock:
            for conn in self._all_conns:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._all_conns.clear()
        self._local = threading.local()

    def _has_table(self) -> bool:
        row = self._connect().execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='entries'").fetchone()
        return row is not None

    def _get(self, tool: str, key: str) -> CacheEntry | None:
        if self._disabled:
            return None
        try:
            row = (
                self._connect()
                .execute(
                    "SELECT result, status, latency_s, created, backend, expires FROM entries "
                    "WHERE tool = ? AND key = ? AND (expires IS NULL OR expires > ?)",
                    (tool, key, time.time()),
                )
                .fetchone()
            )
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):  # a read-only cache opened before anyone wrote
                return None
            raise
        if row is None:
            return None
        return CacheEntry(tool, key, row[0], row[1], row[2] or 0.0, row[3], row[4] or "", row[5])

    def _put_many(self, entries: list[CacheEntry], overwrite: bool) -> int:
        if self._disabled or not entries:
            return 0
        conn = self._connect()
        if overwrite:
            conflict = "DO UPDATE SET result=excluded.result, status=excluded.status, latency_s=excluded.latency_s, "
            conflict += "created=excluded.created, backend=excluded.backend, expires=excluded.expires"
        else:  # first writer wins, unless the stored entry expired
            conflict = (
                "DO UPDATE SET result=excluded.result, status=excluded.status, latency_s=excluded.latency_s, "
                "created=excluded.created, backend=excluded.backend, expires=excluded.expires "
                "WHERE entries.expires IS NOT NULL AND entries.expires <= excluded.created"
            )
        sql = (
            "INSERT INTO entries (tool, key, result, status, latency_s, created, expires, backend) "
            f"VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tool, key) {conflict}"
        )
        rows = [
            (e.tool, e.key, _clean_surrogates(e.result), e.status, e.latency_s, e.created, e.expires, e.backend)
            for e in entries
        ]
        if len(rows) == 1:
            cur = conn.execute(sql, rows[0])
            return cur.rowcount
        conn.execute("BEGIN IMMEDIATE")
        try:
            before = conn.total_changes
            conn.executemany(sql, rows)
            written = conn.total_changes - before
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return written

    def iter_entries(self, tool: str | None = None) -> Iterator[CacheEntry]:
        r"""See the base class."""
        if self._disabled or not self._has_table():
            return
        sql = "SELECT tool, key, result, status, latency_s, created, backend, expires FROM entries "
        sql += "WHERE (expires IS NULL OR expires > ?)"
        params: tuple = (time.time(),)
        if tool is not None:
            sql += " AND tool = ?"
            params += (tool,)
        for row in self._connect().execute(sql + " ORDER BY rowid", params):
            yield CacheEntry(row[0], row[1], row[2], row[3], row[4] or 0.0, row[5], row[6] or "", row[7])

    def count(self, tool: str | None = None) -> int:
        r"""See the base class."""
        if self._disabled or not self._has_table():
            return 0
        sql = "SELECT count(*) FROM entries WHERE (expires IS NULL OR expires > ?)"
        params: tuple = (time.time(),)
        if tool is not None:
            sql += " AND tool = ?"
            params += (tool,)
        return int(self._connect().execute(sql, params).fetchone()[0])

    def size_bytes(self) -> int:
        r"""See the base class."""
        return sum(os.path.getsize(self.path + s) for s in ("", "-wal") if os.path.exists(self.path + s))

    def _flush_stats(self, hits: Counter, misses: Counter) -> None:
        if self._disabled:
            return
        rows = [(tool, hits[tool], misses[tool]) for tool in set(hits) | set(misses)]
        self._connect().executemany(
            "INSERT INTO stats (tool, hits, misses) VALUES (?, ?, ?) ON CONFLICT (tool) DO UPDATE SET "
            "hits = hits + excluded.hits, misses = misses + excluded.misses",
            rows,
        )

    def _stored_stats(self) -> dict[str, tuple[int, int]]:
        if self._disabled:
            return {}
        try:
            rows = self._connect().execute("SELECT tool, hits, misses FROM stats").fetchall()
        except sqlite3.OperationalError:
            return {}
        return {r[0]: (int(r[1]), int(r[2])) for r in rows}

    def integrity_check(self) -> str:
        r"""`PRAGMA integrity_check` result ("ok" for a healthy file)."""
        return str(self._connect().execute("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        r"""See the base class."""
        try:
            super().close()
        except sqlite3.Error as exc:
            logger.warning("[agentic-tools] could not flush cache statistics: %s", exc)
        self._drop_connections()

    def __repr__(self) -> str:
        r"""Standard `__repr__`."""
        return f"SQLiteCache({self.path!r}, mode={self.mode!r})"


class RedisCache(ToolCache):
    r"""Redis cache shared by several nodes.

    Each entry is one JSON string under `<prefix>e:<tool>:<sha256(key)>` written with `SET NX` (first writer wins)
    and `EX ttl_s`; hit/miss counters live in the hash `<prefix>stats`.

    Args:
        url: `redis://host:port/db` (or `rediss://`, `unix://`).
        mode, ttl_s: see `ToolCache`.
        prefix: key namespace (several caches can share one server).
        socket_timeout_s: per-command network timeout.
    """

    def __init__(
        self,
        url: str,
        mode: str = "read_write",
        ttl_s: float | None = None,
        prefix: str = "lfa:toolcache:",
        socket_timeout_s: float = 5.0,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        super().__init__(mode, ttl_s)
        import redis

        self.url = url
        self.prefix = prefix
        self._redis = redis.Redis.from_url(
            url, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s, health_check_interval=30
        )
        self._redis.ping()

    def _name(self, tool: str, key: str) -> str:
        return f"{self.prefix}e:{tool}:{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()}"

    @staticmethod
    def _decode(raw: bytes | None) -> CacheEntry | None:
        if raw is None:
            return None
        d = json.loads(raw)
        return CacheEntry(d["tool"], d["key"], d["result"], d.get("status", STATUS_OK), d.get("latency_s", 0.0),
                          d.get("created", 0.0), d.get("backend", ""), d.get("expires"))  # fmt: skip

    def _get(self, tool: str, key: str) -> CacheEntry | None:
        entry = self._decode(self._redis.get(self._name(tool, key)))
        if entry is not None and entry.key != key:  # sha256 collision: practically impossible, still checked
            return None
        return entry

    def _put_many(self, entries: list[CacheEntry], overwrite: bool) -> int:
        if not entries:
            return 0
        pipe = self._redis.pipeline(transaction=False)
        for e in entries:
            value = json.dumps(
                {
                    "tool": e.tool,
                    "key": _clean_surrogates(e.key),
                    "result": _clean_surrogates(e.result),
                    "status": e.status,
                    "latency_s": e.latency_s,
                    "created": e.created,
                    "backend": e.backend,
                    "expires": e.expires,
                },  # fmt: skip
                ensure_ascii=False,
            )
            ex = max(1, int(round(e.expires - e.created))) if e.expires else None
            pipe.set(self._name(e.tool, e.key), value, nx=not overwrite, ex=ex)
        return sum(1 for r in pipe.execute() if r)

    def _scan_names(self, tool: str | None) -> Iterator[bytes]:
        base = _glob_escape(f"{self.prefix}e:") + (_glob_escape(f"{tool}:") if tool else "")
        pattern = base + "*"
        yield from self._redis.scan_iter(match=pattern, count=1000)

    def iter_entries(self, tool: str | None = None) -> Iterator[CacheEntry]:
        r"""See the base class."""
        batch: list[bytes] = []
        entries: list[CacheEntry] = []
        for name in self._scan_names(tool):
            batch.append(name)
            if len(batch) >= 500:
                entries.extend(e for e in map(self._decode, self._redis.mget(batch)) if e is not None)
                batch = []
        if batch:
            entries.extend(e for e in map(self._decode, self._redis.mget(batch)) if e is not None)
        entries.sort(key=lambda e: e.created)
        yield from entries

    def count(self, tool: str | None = None) -> int:
        r"""See the base class."""
        return sum(1 for _ in self._scan_names(tool))

    def size_bytes(self) -> int:
        r"""See the base class."""
        total = 0
        names = list(self._scan_names(None))
        for i in range(0, len(names), 500):
            pipe = self._redis.pipeline(transaction=False)
            for name in names[i : i + 500]:
                pipe.strlen(name)
            total += sum(int(x or 0) for x in pipe.execute())
        return total

    def _flush_stats(self, hits: Counter, misses: Counter) -> None:
        pipe = self._redis.pipeline(transaction=False)
        for tool, n in hits.items():
            pipe.hincrby(self.prefix + "stats", f"{tool}:hits", n)
        for tool, n in misses.items():
            pipe.hincrby(self.prefix + "stats", f"{tool}:misses", n)
        pipe.execute()

    def _stored_stats(self) -> dict[str, tuple[int, int]]:
        out: dict[str, list[int]] = {}
        for field, value in self._redis.hgetall(self.prefix + "stats").items():
            tool, kind = field.decode().rsplit(":", 1)
            out.setdefault(tool, [0, 0])[0 if kind == "hits" else 1] += int(value)
        return {k: (v[0], v[1]) for k, v in out.items()}

    def close(self) -> None:
        r"""See the base class."""
        try:
            super().close()
        except Exception as exc:  # noqa: BLE001
            logger.warning("[agentic-tools] could not flush cache statistics: %s", exc)
        self._redis.close()

    def __repr__(self) -> str:
        r"""Standard `__repr__`."""
        return f"RedisCache(prefix={self.prefix!r}, mode={self.mode!r})"


def open_cache(
    location: str | os.PathLike | None, mode: str = "read_write", ttl_s: float | None = None, **kwargs
) -> ToolCache | None:
    r"""Open the cache at `location`: a `redis://` / `rediss://` / `unix://` URL or a SQLite file path.

    Returns:
        None when `location` is None or "".

    Raises:
        CacheError: bad mode, or corrupt file with `on_corrupt="raise"`.
        redis.ConnectionError: the Redis server cannot be reached.
    """
    if not location:
        return None
    location = str(location)
    if location.startswith(("redis://", "rediss://", "unix://")):
        return RedisCache(location, mode=mode, ttl_s=ttl_s, **kwargs)
    if location.startswith("sqlite:///"):
        location = location[len("sqlite:///") - 1 :]
    return SQLiteCache(location, mode=mode, ttl_s=ttl_s, **kwargs)


__all__ = [
    "CACHE_MODES",
    "CacheEntry",
    "CacheError",
    "RedisCache",
    "SQLiteCache",
    "ToolCache",
    "normalize_args",
    "normalize_search_query",
    "open_cache",
]

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

r"""The embedded backend of the tool cache: one SQLite file in WAL mode (`SQLiteCache`)."""

import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from ...common.log import get_logger
from ...hparams import CACHE_MODE
from .base import (
    _ENTRY_COLUMNS,
    BadCacheEntry,
    CacheEntry,
    CacheError,
    ToolCache,
    _checked_entry,
    _clean_surrogates,
    _utf8_len_over,
)


logger = get_logger(__name__)


class SQLiteCache(ToolCache):
    r"""SQLite cache in WAL mode, safe for many threads and processes.

    One connection per thread (and per process after fork). The direct API commits each `put` in its own
    transaction (a SIGKILL loses at most the entry being written) and waits up to `busy_timeout_s` for the write
    lock; the tool-call path waits at most `lookup_timeout_s` per lookup and writes in the background (see
    `ToolCache`).

    Args:
        path: database file. In read_write mode it (and its folder) is created when missing; the read-only modes
            never create anything and raise `CacheError` for a missing file.
        mode, ttl_s: see `ToolCache`.
        busy_timeout_s: how long a direct-API writer waits for the write lock before `sqlite3.OperationalError`.
        on_corrupt: what to do when the file is not a readable database: "move" (rename it to
            `<path>.corrupt-<unix time>` and start empty; only in read_write mode), "empty" (leave the file, answer
            every lookup with a miss) or "raise" (`CacheError`). Defaults to "move" in read_write mode and "empty"
            otherwise.
        degrade: when the database is locked or unreadable at opening, warn and behave as an unusable cache (tool
            calls go on, the opening is retried later) instead of raising `CacheError`.
        **kwargs: the tool-call path's bounds (`lookup_timeout_s`, `write_timeout_s`, ...; see `ToolCache`).
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
        mode: str = CACHE_MODE,
        ttl_s: float | None = None,
        busy_timeout_s: float = 30.0,
        on_corrupt: str | None = None,
        degrade: bool = False,
        **kwargs,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        super().__init__(mode, ttl_s, **kwargs)
        self.path = str(path)
        self.busy_timeout_s = float(busy_timeout_s)
        self._local = threading.local()
        self._all_conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._disabled = False
        self._ready = False
        on_corrupt = on_corrupt or ("move" if self.writable else "empty")
        if on_corrupt not in ("move", "empty", "raise"):
            raise CacheError(f"unknown on_corrupt {on_corrupt!r}")
        self._on_corrupt = on_corrupt
        if os.path.isdir(self.path):
            raise CacheError(f"tool cache path {self.path} is a directory, not a SQLite file: name a file, e.g. "
                             f"{os.path.join(self.path, 'tool_cache.sqlite')}")  # fmt: skip
        if self.writable:
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CacheError(
                    f"tool cache {self.path}: its folder cannot be created ({exc}): check the path"
                ) from exc
        elif not os.path.isfile(self.path):
            raise CacheError(f"tool cache {self.path} does not exist (mode {mode} never creates one): check the path")
        try:
            self._open(self.lookup_timeout_s if degrade else self.busy_timeout_s)
        except sqlite3.OperationalError as exc:
            if not degrade:
                raise CacheError(f"tool cache {self.path} cannot be opened: {exc}") from exc
            self._failed("lookup", exc)
            self._failed("write", exc)

    def _open(self, timeout_s: float) -> None:
        r"""Check the file and create the schema (read_write); handles corruption as `on_corrupt` says."""
        try:
            self._init_db(timeout_s)
        except sqlite3.OperationalError:  # locked, or the file cannot be opened at all: not a corruption
            raise
        except sqlite3.DatabaseError as exc:
            on_corrupt = self._on_corrupt
            if on_corrupt == "raise" or (on_corrupt == "move" and not self.writable):
                raise CacheError(f"tool cache {self.path} is not a usable SQLite database: {exc}") from exc
            if on_corrupt == "empty":
                logger.error("[agentic-tools] tool cache %s is unreadable (%s): every lookup misses", self.path, exc)
                self._disabled = True
                self._ready = True
                return
            self._drop_connections()
            moved = f"{self.path}.corrupt-{int(time.time())}"
            os.replace(self.path, moved)
            for suffix in ("-wal", "-shm"):
                if os.path.exists(self.path + suffix):
                    os.replace(self.path + suffix, moved + suffix)
            logger.error("[agentic-tools] tool cache %s was corrupt (%s); moved to %s, starting empty",
                         self.path, exc, moved)  # fmt: skip
            self._init_db(timeout_s)

    def _connect(self, timeout_s: float | None = None) -> sqlite3.Connection:
        timeout_s = self.busy_timeout_s if timeout_s is None else timeout_s
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            if self.writable:
                conn = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
            else:  # never creates the file (or its folder)
                conn = sqlite3.connect(f"file:{_uri_path(self.path)}?mode=ro", uri=True, timeout=timeout_s,
                                       isolation_level=None, check_same_thread=False)  # fmt: skip
            conn.text_factory = _text_or_bytes  # undecodable text is one bad entry, not a failed query
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: committed data survives a process crash
            self._local.conn = conn
            self._local.pid = os.getpid()
            self._local.timeout = None
            with self._conns_lock:
                self._all_conns.append(conn)
        if self._local.timeout != timeout_s:
            conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            self._local.timeout = timeout_s
        return conn

    def _init_db(self, timeout_s: float) -> None:
        conn = self._connect(timeout_s)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # raises DatabaseError on a corrupt header
        self._check_is_tool_cache(conn)  # before anything is written: another application's file stays untouched
        if self.writable:
            # Switching to WAL needs an exclusive lock, and SQLite answers "database is locked" at once, without its
            # busy timeout, while another connection holds the write lock (a new file opened by several processes at
            # once): wait for it here, up to `timeout_s`.
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
                    if mode.lower() != "wal":
                        conn.execute("PRAGMA journal_mode = WAL")
                    for statement in self._SCHEMA:
                        conn.execute(statement)
                    break
                except sqlite3.OperationalError as exc:
                    left = deadline - time.monotonic()
                    if "locked" not in str(exc) or left <= 0:
                        raise
                    time.sleep(min(0.05, left))
        self._ready = True

    def _check_is_tool_cache(self, conn: sqlite3.Connection) -> None:
        r"""Raise `CacheError` for a database that has tables but not the tool cache's `entries` table.

        An empty database (no table: a new file) is a tool cache yet to be filled, except for the read-only commands
        (`on_corrupt="raise"`), which refuse it too.
        """
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()]
        columns = (
            {r[1] for r in conn.execute("PRAGMA table_info(entries)").fetchall()} if "entries" in tables else set()
        )
        if not tables and (self.writable or self._on_corrupt != "raise"):
            return
        if not set(_ENTRY_COLUMNS) <= columns:
            what = "no `entries` table" if "entries" not in tables else "an `entries` table of another layout"
            shown = ", ".join(str(t) for t in tables[:10]) or "none"
            raise CacheError(f"{self.path} is an SQLite database but not a tool cache (it has {what}; tables: "
                             f"{shown}); it was left unchanged: name a new file for the cache")  # fmt: skip

    def _ensure_ready(self, timeout_s: float | None) -> bool:
        r"""Finish an opening that found the database locked; False while it still cannot be opened."""
        if not self._ready:
            self._open(self.busy_timeout_s if timeout_s is None else timeout_s)
        return not self._disabled

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

    def _get(self, tool: str, key: str, timeout_s: float | None = None) -> CacheEntry | None:
        if not self._ensure_ready(timeout_s):
            return None
        try:
            row = (
                self._connect(timeout_s)
                .execute(
                    f"SELECT {self._BOUNDED_COLUMNS} FROM entries "
                    "WHERE tool = ? AND key = ? AND (expires IS NULL OR expires > ?)",
                    (self.max_entry_bytes, tool, key, time.time()),
                )
                .fetchone()
            )
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):  # a read-only cache opened before anyone wrote
                return None
            raise
        if row is None:
            return None
        return self._entry_from_row(row)

    # the result only when it is at most `max_entry_bytes` long (its length is read without decoding it)
    _BOUNDED_COLUMNS = (
        "tool, key, CASE WHEN length(CAST(result AS BLOB)) > ?1 THEN NULL ELSE result END, status, latency_s, "
        "created, backend, expires, length(CAST(result AS BLOB)), rowid"
    )

    def _entry_from_row(self, row: tuple) -> CacheEntry:
        r"""`CacheEntry` of a row of `_BOUNDED_COLUMNS`, or `BadCacheEntry`."""
        tool, key = row[0], row[1]
        where = f"its row in {self.path} (`DELETE FROM entries WHERE rowid = {row[9]}`)"
        if row[8] is not None and row[8] > self.max_entry_bytes:
            shown_key = key if isinstance(key, str) else repr(key)
            raise BadCacheEntry(str(tool), shown_key, f"result of {row[8]} bytes is larger than max_entry_bytes="
                                f"{self.max_entry_bytes}", where)  # fmt: skip
        return _checked_entry(tool, key, row[2], row[3], row[4], row[5], row[6], row[7], where)

    def _put_many(self, entries: list[CacheEntry], overwrite: bool, timeout_s: float | None = None) -> int:
        entries = [e for e in entries if not _utf8_len_over(e.result, self.max_entry_bytes)]  # never read back
        if not entries or not self._ensure_ready(timeout_s):
            return 0
        conn = self._connect(timeout_s)
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
        if not self._ensure_ready(None) or not self._has_table():
            return
        sql = f"SELECT {self._BOUNDED_COLUMNS} FROM entries WHERE (expires IS NULL OR expires > ?2)"
        params: tuple = (self.max_entry_bytes, time.time())
        if tool is not None:
            sql += " AND tool = ?3"
            params += (tool,)
        for row in self._connect().execute(sql + " ORDER BY rowid", params):
            try:
                yield self._entry_from_row(row)
            except BadCacheEntry as exc:  # skipped: one bad row does not stop stats or export
                self._bad_entry(exc)

    def count(self, tool: str | None = None) -> int:
        r"""See the base class (queued entries are written first, see `flush`)."""
        self.flush()
        if not self._ensure_ready(None) or not self._has_table():
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

    def _flush_stats(self, hits: Counter, misses: Counter, timeout_s: float | None = None) -> None:
        if not self._ensure_ready(timeout_s):
            return
        rows = [(tool, hits[tool], misses[tool]) for tool in set(hits) | set(misses)]
        self._connect(timeout_s).executemany(
            "INSERT INTO stats (tool, hits, misses) VALUES (?, ?, ?) ON CONFLICT (tool) DO UPDATE SET "
            "hits = hits + excluded.hits, misses = misses + excluded.misses",
            rows,
        )

    def _stored_stats(self) -> dict[str, tuple[int, int]]:
        if not self._ensure_ready(None):
            return {}
        try:
            rows = self._connect().execute("SELECT tool, hits, misses FROM stats").fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return {}
            raise
        return {r[0]: (int(r[1]), int(r[2])) for r in rows}

    def integrity_check(self) -> str:
        r"""`PRAGMA integrity_check` result ("ok" for a healthy file)."""
        return str(self._connect().execute("PRAGMA integrity_check").fetchone()[0])

    def _release(self) -> None:
        self._drop_connections()

    def __repr__(self) -> str:
        r"""Standard `__repr__`."""
        return f"SQLiteCache({self.path!r}, mode={self.mode!r})"


def _text_or_bytes(raw: bytes) -> str | bytes:
    r"""SQLite text column as `str`; bytes that are not UTF-8 stay `bytes` (a bad entry, see `_checked_entry`)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _uri_path(path: str) -> str:
    from urllib.parse import quote

    return quote(os.path.abspath(path))

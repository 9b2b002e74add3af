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

import atexit
import hashlib
import json
import os
import sqlite3
import threading
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..common.log import get_logger
from ..hparams import CACHE_MODE
from .base import ALL_STATUSES, NO_SEARCH_RESULTS_TEXT, STATUS_OK


logger = get_logger(__name__)

CACHE_MODES = ("read_write", "read_only", "offline")
MAX_ENTRY_BYTES = 1 << 20  # entries larger than this are not read (nor written): see `ToolCache`
_STATS_FLUSH_S = 10.0
_ENTRY_COLUMNS = ("tool", "key", "result", "status", "latency_s", "created", "expires", "backend")


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


class CacheUnavailable(CacheError):
    r"""A tool-call lookup did not get an answer in time (locked, slow, broken or unreachable cache).

    Attributes:
        skipped: True when the cache was not even asked because it failed recently (within `retry_after_s`).
    """

    def __init__(self, message: str, skipped: bool = False) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        super().__init__(message)
        self.skipped = skipped


class BadCacheEntry(CacheError):
    r"""One stored entry cannot be used; the other entries are not affected.

    Raised by the backends' readers for an entry that is not JSON (Redis), not UTF-8 text (SQLite), has a field of the
    wrong type or an unknown status, or is larger than `max_entry_bytes`. The tool-call path (`ToolCache.lookup`)
    answers such an entry as a miss and counts it (`bad_entries`); `iter_entries` (stats, export) skips it.

    Attributes:
        tool, key: the entry's tool name and normalised key (`key` may be "" when it could not be read).
        reason: what is wrong with it.
        where: how to find it in the store (SQLite: the `entries` row; Redis: the key name), for the fix.
    """

    def __init__(self, tool: str, key: str, reason: str, where: str = "") -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        super().__init__(f"bad cache entry ({tool}, {key[:200]!r}): {reason}")
        self.tool, self.key, self.reason, self.where = tool, key, reason, where


def _utf8_len_over(text: str, limit: int) -> bool:
    r"""Whether `text` takes more than `limit` bytes in UTF-8 (without encoding short texts)."""
    return len(text) > limit // 4 and len(text.encode("utf-8", "surrogatepass")) > limit


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _checked_entry(
    tool: object,
    key: object,
    result: object,
    status: object,
    latency_s: object,
    created: object,
    backend: object,
    expires: object,
    where: str = "",
) -> CacheEntry:
    r"""A `CacheEntry` from the stored fields, or `BadCacheEntry` naming the first field of a wrong type.

    `latency_s`, `created` and `backend` may be missing (None); `expires` may be None (never).
    """
    shown_tool = tool if isinstance(tool, str) else repr(tool)
    shown_key = key if isinstance(key, str) else repr(key)

    def bad(reason: str) -> BadCacheEntry:
        return BadCacheEntry(shown_tool, shown_key, reason, where)

    for name, value in (("tool", tool), ("key", key), ("result", result), ("status", status)):
        if not isinstance(value, str):
            if isinstance(value, bytes):
                raise bad(f"`{name}` is not UTF-8 text ({len(value)} bytes)")
            raise bad(f"`{name}` is {type(value).__name__}, not text")
    if status not in ALL_STATUSES:
        raise bad(f"unknown status {status[:50]!r}")
    for name, value in (("latency_s", latency_s), ("created", created), ("expires", expires)):
        if value is not None and not _is_number(value):
            raise bad(f"`{name}` is {type(value).__name__}, not a number")
    if backend is not None and not isinstance(backend, str):
        raise bad(f"`backend` is {type(backend).__name__}, not text")
    return CacheEntry(tool, key, result, status, float(latency_s or 0.0), float(created or 0.0), backend or "",
                      None if expires is None else float(expires))  # fmt: skip


class ToolCache:
    r"""Interface shared by the SQLite and Redis caches.

    Two ways in. The tool-call path (`lookup`, `submit`) never raises and never waits long: a lookup is bounded by
    `lookup_timeout_s`; a store is queued and written by one background thread per cache, in batches, at least every
    `flush_interval_s` (so another process sees it within about that time while the cache is usable) and on
    `close`/`flush`. A cache that fails a lookup is not asked again for `retry_after_s` (lookups raise
    `CacheUnavailable(skipped=True)` at once); failed writes stay queued (at most `max_pending` entries) and are
    retried after `retry_after_s`; `close` waits at most `close_timeout_s` for them. Each kind of failure is logged
    once as a warning (then at debug level) and counted in `pop_health()`. One bad entry (not JSON, not UTF-8 text,
    a field of the wrong type, or larger than `max_entry_bytes`) is not a failure of the cache: its lookup is a miss,
    the first one is logged as a warning naming the entry and the fix, each is counted as `bad_entries`, every other
    key is still answered, and in `read_write` mode the next result stored for that key replaces it. The direct API (`get`, `put`, `put_many`, `stats`, import/export) raises (`get`:
    `BadCacheEntry` for a bad entry) and waits up to the backend's own timeouts, for tools and scripts; `iter_entries`
    (and so `stats` and `export_json`) skips bad entries.

    Args:
        mode: "read_write", "read_only" or "offline".
        ttl_s: entries expire this many seconds after creation (None: never).
        lookup_timeout_s: longest wait of one tool-call lookup (SQLite busy timeout, Redis socket timeout).
        write_timeout_s: longest wait of one background write attempt.
        flush_interval_s: the background writer writes queued entries at least this often.
        retry_after_s: after a failure, the cache is left alone this long.
        max_pending: queued entries beyond this are not stored (counted as `not_stored`).
        close_timeout_s: `close` waits at most this long for queued entries.
        max_entry_bytes: an entry whose result is larger than this (UTF-8 bytes; the JSON value for Redis) is not
            read (a bad entry, see above: reading and decoding megabytes would delay the call) and a result larger
            than this is not queued for writing (`not_stored`). Far above any observation the built-in tools
            produce (a search observation is at most `topk` pages of `snippet_chars` characters).
    """

    def __init__(
        self,
        mode: str = CACHE_MODE,
        ttl_s: float | None = None,
        lookup_timeout_s: float = 0.5,
        write_timeout_s: float = 1.0,
        flush_interval_s: float = 1.0,
        retry_after_s: float = 5.0,
        max_pending: int = 10_000,
        close_timeout_s: float = 2.0,
        max_entry_bytes: int = MAX_ENTRY_BYTES,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        if mode not in CACHE_MODES:
            raise CacheError(f"unknown cache mode {mode!r}; use one of {CACHE_MODES}")
        self.mode = mode
        self.ttl_s = ttl_s
        self.lookup_timeout_s = float(lookup_timeout_s)
        self.write_timeout_s = float(write_timeout_s)
        self.flush_interval_s = float(flush_interval_s)
        self.retry_after_s = float(retry_after_s)
        self.max_pending = int(max_pending)
        self.close_timeout_s = float(close_timeout_s)
        self.max_entry_bytes = int(max_entry_bytes)
        self._stats_lock = threading.Lock()
        self._hits: Counter = Counter()
        self._misses: Counter = Counter()
        self._last_flush = time.monotonic()
        self._cond = threading.Condition()
        self._pending: dict[tuple[str, str], CacheEntry] = {}
        self._writer: threading.Thread | None = None
        self._writer_pid = 0
        self._closing = False
        self._health: Counter = Counter()
        self._lookups_down_until = 0.0
        self._writes_down_until = 0.0
        self._warned: set[str] = set()  # kinds of failure already logged as a warning (once per cache)
        self._down: set[str] = set()  # kinds of operation failing now
        self._bad_keys: OrderedDict[tuple[str, str], None] = OrderedDict()  # bad entries a new result replaces
        self._bad_seen = 0  # bad entries met so far (never reset, unlike the health counters)

    @property
    def writable(self) -> bool:
        r"""Whether `put` stores anything (mode `read_write`)."""
        return self.mode == "read_write"

    # ---------------------------------------------------------------- backend primitives
    def _get(self, tool: str, key: str, timeout_s: float | None = None) -> CacheEntry | None:
        raise NotImplementedError

    def _put_many(self, entries: list[CacheEntry], overwrite: bool, timeout_s: float | None = None) -> int:
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

    def _flush_stats(self, hits: Counter, misses: Counter, timeout_s: float | None = None) -> None:
        raise NotImplementedError

    def _stored_stats(self) -> dict[str, tuple[int, int]]:
        raise NotImplementedError

    def _release(self) -> None:
        r"""Close the backend's connections (called once by `close`)."""

    # ---------------------------------------------------------------- failure bookkeeping
    def _failed(self, kind: str, exc: BaseException) -> None:
        r"""Count a failure of `kind` ("lookup", "write", "stats"), leave the cache alone a while, warn once."""
        now = time.monotonic()
        with self._cond:
            self._health[f"{kind}_errors"] += 1
            if kind == "lookup":
                self._lookups_down_until = now + self.retry_after_s
            else:
                self._writes_down_until = now + self.retry_after_s
            first = kind not in self._warned
            self._warned.add(kind)
            self._down.add(kind)
        log = logger.warning if first else logger.debug
        log("[agentic-tools] %r: %s failed (%s: %s); tool calls go on without it (misses, writes queued and "
            "retried in %gs); further failures are counted in tools/cache/%s_errors",
            self, kind, type(exc).__name__, exc, self.retry_after_s, kind)  # fmt: skip

    def _recovered(self, kind: str) -> None:
        if kind not in self._down:
            return
        with self._cond:
            was_down = kind in self._down
            self._down.discard(kind)
        if was_down:
            logger.info("[agentic-tools] %r: %s works again", self, kind)

    def _bad_entry(self, exc: BadCacheEntry, tool: str | None = None, key: str | None = None) -> None:
        r"""Count a bad entry (`bad_entries`); warn about the first one, with the fix, then log at debug level.

        With `tool` and `key` (a lookup's), the next result queued for that key replaces the bad entry.
        """
        with self._cond:
            self._health["bad_entries"] += 1
            self._bad_seen += 1
            if tool is not None and key is not None and self.writable:
                self._bad_keys[(tool, key)] = None
                while len(self._bad_keys) > self.max_pending:
                    self._bad_keys.popitem(last=False)
            first = "bad_entry" not in self._warned
            self._warned.add("bad_entry")
        log = logger.warning if first else logger.debug
        log("[agentic-tools] %r: skipped a bad cache entry (%s): a lookup of it is a miss, the other entries are "
            "used as usual, further bad entries are counted in tools/cache/bad_entries. A new result of the same "
            "call replaces it (read_write mode); or delete %s", self, exc, exc.where or "the entry")  # fmt: skip

    def pop_health(self) -> dict[str, int]:
        r"""Health counters of the tool-call path since the last call, then reset.

        Returns:
            `lookup_errors`, `lookups_skipped`, `bad_entries` (entries skipped as unreadable, see the class
            docstring), `write_errors`, `written`, `not_stored`, `stats_errors`, plus the gauge `pending` (entries
            queued now).
        """
        with self._cond:
            health, self._health = self._health, Counter()
            pending = len(self._pending)
        out = {k: int(health[k]) for k in ("lookup_errors", "lookups_skipped", "bad_entries", "write_errors",
                                           "written", "not_stored", "stats_errors")}  # fmt: skip
        out["pending"] = pending
        return out

    # ---------------------------------------------------------------- background writer
    def _ensure_writer(self) -> None:
        if self._writer is not None and self._writer_pid == os.getpid() and self._writer.is_alive():
            return
        with self._cond:
            if self._closing:
                return
            if self._writer is None or self._writer_pid != os.getpid() or not self._writer.is_alive():
                if self._writer is None or self._writer_pid != os.getpid():  # queued entries outlive a missed close
                    atexit.register(_flush_at_exit, weakref.ref(self))
                self._writer_pid = os.getpid()
                self._writer = threading.Thread(target=self._writer_loop, name="agentic-cache-writer", daemon=True)
                self._writer.start()

    def _writer_loop(self) -> None:
        while True:
            with self._cond:
                if not self._closing:
                    self._cond.wait(timeout=self.flush_interval_s)
                closing = self._closing
                batch = list(self._pending.values())
                down = time.monotonic() < self._writes_down_until
            healthy = True
            if batch and (closing or not down):
                healthy = self._write_batch(batch)
            due = time.monotonic() - self._last_flush > _STATS_FLUSH_S
            if self.writable and healthy and (closing or due) and time.monotonic() >= self._writes_down_until:
                try:
                    self.flush_stats(timeout_s=self.write_timeout_s)
                except Exception as exc:  # noqa: BLE001 - statistics never break anything
                    self._failed("stats", exc)
            if closing:
                with self._cond:
                    dropped = len(self._pending)
                    self._health["not_stored"] += dropped
                    self._pending.clear()
                    self._cond.notify_all()
                if dropped:
                    logger.warning("[agentic-tools] %r: %d cache entries not stored (cache unusable at close)",
                                   self, dropped)  # fmt: skip
                return

    def _write_batch(self, batch: list[CacheEntry]) -> bool:
        r"""Write `batch` in parts of 500; False (and counted, retried later) when a part fails."""
        for i in range(0, len(batch), 500):
            part = batch[i : i + 500]
            with self._cond:  # a new result replaces a bad entry that a lookup skipped (first writer wins otherwise)
                heal = [e for e in part if (e.tool, e.key) in self._bad_keys]
                keep = [e for e in part if (e.tool, e.key) not in self._bad_keys] if heal else part
            try:
                written = self._put_many(keep, overwrite=False, timeout_s=self.write_timeout_s)
                if heal:
                    written += self._put_many(heal, overwrite=True, timeout_s=self.write_timeout_s)
            except Exception as exc:  # noqa: BLE001 - a locked or broken cache never fails a tool call
                self._failed("write", exc)
                return False
            with self._cond:
                for e in heal:
                    self._bad_keys.pop((e.tool, e.key), None)
                for e in part:
                    if self._pending.get((e.tool, e.key)) is e:
                        del self._pending[(e.tool, e.key)]
                self._health["written"] += written
                self._cond.notify_all()
            self._recovered("write")
        return True

    def submit(
        self, tool: str, key: str, result: str, status: str = STATUS_OK, latency_s: float = 0.0, backend: str = ""
    ) -> bool:
        r"""Queue one entry for the background writer (first writer wins); never raises, never waits.

        Returns:
            True when queued; False in a read-only mode, for a result larger than `max_entry_bytes` or when
            `max_pending` entries are already queued (both counted as `not_stored`).
        """
        if not self.writable:
            return False
        if _utf8_len_over(result, self.max_entry_bytes):
            with self._cond:
                self._health["not_stored"] += 1
                first = "oversize" not in self._warned
                self._warned.add("oversize")
            log = logger.warning if first else logger.debug
            log("[agentic-tools] %r: a %s result of %d characters is larger than max_entry_bytes=%d and is not "
                "stored (counted in tools/cache/not_stored)", self, tool, len(result),
                self.max_entry_bytes)  # fmt: skip
            return False
        now = time.time()
        entry = CacheEntry(tool, key, result, status, float(latency_s), now, backend, self._expiry(now))
        with self._cond:
            if self._closing:
                self._health["not_stored"] += 1
                return False
            if (tool, key) not in self._pending:
                if len(self._pending) >= self.max_pending:
                    self._health["not_stored"] += 1
                    full = "queue" not in self._warned
                    self._warned.add("queue")
                    if full:
                        logger.warning("[agentic-tools] %r: %d entries queued, new results are not stored until the "
                                       "cache takes writes again", self, self.max_pending)  # fmt: skip
                    return False
                self._pending[(tool, key)] = entry
        self._ensure_writer()
        return True

    def flush(self, timeout_s: float | None = None) -> bool:
        r"""Ask the writer to write the queued entries now and wait up to `timeout_s` (default `close_timeout_s`).

        Returns:
            True when nothing is left queued.
        """
        deadline = time.monotonic() + (self.close_timeout_s if timeout_s is None else timeout_s)
        with self._cond:
            if not self._pending:
                return True
            self._writes_down_until = 0.0  # an explicit flush tries at once
        self._ensure_writer()
        with self._cond:
            self._cond.notify_all()
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(timeout=min(left, 0.05))
                self._cond.notify_all()
        return True

    # ---------------------------------------------------------------- public API
    def _pending_entry(self, tool: str, key: str) -> CacheEntry | None:
        with self._cond:
            entry = self._pending.get((tool, key))
        if entry is not None and (entry.expires is None or entry.expires > time.time()):
            return entry
        return None

    def _count_lookup(self, tool: str, hit: bool) -> None:
        with self._stats_lock:
            (self._hits if hit else self._misses)[tool] += 1

    def get(self, tool: str, key: str) -> CacheEntry | None:
        r"""The live entry for (tool, normalised key), or None; counts a hit or a miss.

        Raises:
            BadCacheEntry: the stored entry cannot be used (counted as a miss and in `bad_entries`).
            Exception: the backend's errors (locked database, unreachable server).
        """
        try:
            entry = self._pending_entry(tool, key) or self._get(tool, key)
        except BadCacheEntry:
            self._count_lookup(tool, False)
            with self._cond:
                self._health["bad_entries"] += 1
            raise
        self._count_lookup(tool, entry is not None)
        if self.writable:
            self._ensure_writer()  # it also flushes the hit/miss counters
        return entry

    def lookup(self, tool: str, key: str) -> CacheEntry | None:
        r"""`get` for the tool-call path: bounded by `lookup_timeout_s`, never waits on a recently failed cache.

        Failures are counted (`pop_health`); a cache that failed is not asked again for `retry_after_s`. A bad
        entry (`BadCacheEntry`) is answered as a miss and counted as `bad_entries`; it is not a failure of the cache.

        Raises:
            CacheUnavailable: the cache did not answer (`skipped` when it was not asked); treat it as a miss whose
                result is not stored.
        """
        entry = self._pending_entry(tool, key)
        if entry is None:
            if time.monotonic() < self._lookups_down_until:
                with self._cond:
                    self._health["lookups_skipped"] += 1
                raise CacheUnavailable(f"{self!r} failed recently; not asked for {self.retry_after_s:g}s", True)
            try:
                entry = self._get(tool, key, timeout_s=self.lookup_timeout_s)
            except BadCacheEntry as exc:  # this entry only: a miss; the cache itself works
                self._bad_entry(exc, tool, key)
                entry = None
            except Exception as exc:  # noqa: BLE001 - locked, slow, corrupt or unreachable
                self._failed("lookup", exc)
                raise CacheUnavailable(f"{type(exc).__name__}: {exc}") from exc
            self._recovered("lookup")
        self._count_lookup(tool, entry is not None)
        if self.writable:
            self._ensure_writer()
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
        r"""Store one entry now (first writer wins unless `overwrite` or the old entry expired); may wait and raise.

        Returns:
            True when the entry was written; False in a read-only mode, when a live entry already existed, or for a
            result larger than `max_entry_bytes` (it could not be read back).
        """
        if not self.writable:
            return False
        now = time.time()
        entry = CacheEntry(tool, key, result, status, float(latency_s), now, backend, self._expiry(now))
        return self._put_many([entry], overwrite) == 1

    def put_many(self, entries: Iterable[CacheEntry], overwrite: bool = False) -> int:
        r"""Store many entries in one transaction / pipeline now; returns how many were written.

        Entries larger than `max_entry_bytes` are not written (they could not be read back).
        """
        if not self.writable:
            return 0
        return self._put_many(list(entries), overwrite)

    def _expiry(self, created: float) -> float | None:
        return created + self.ttl_s if self.ttl_s else None

    def flush_stats(self, timeout_s: float | None = None) -> None:
        r"""Persist the hit/miss counters gathered since the last flush (read_write mode only)."""
        with self._stats_lock:
            hits, misses = self._hits, self._misses
            self._hits, self._misses = Counter(), Counter()
            self._last_flush = time.monotonic()
        if not self.writable or not (hits or misses):
            return
        try:
            self._flush_stats(hits, misses, timeout_s)
        except Exception:
            with self._stats_lock:  # keep them for the next flush
                self._hits.update(hits)
                self._misses.update(misses)
            raise

    def stats(self) -> dict:
        r"""Entries, size and hit counters of the cache (queued entries are written first, see `flush`).

        Returns:
            `{"entries", "entries_per_tool", "bad_entries", "size_bytes", "hits", "misses", "hit_rate", "per_tool"}`;
            `bad_entries` counts the stored entries that cannot be read (skipped, see the class docstring; the first
            one is logged with the fix); the counters include every process that flushed into this cache.
        """
        self.flush()
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
        with self._cond:
            bad_before = self._bad_seen
        per_tool_entries = Counter(e.tool for e in self.iter_entries())
        with self._cond:
            bad = self._bad_seen - bad_before
        return {
            "entries": sum(per_tool_entries.values()),
            "entries_per_tool": dict(per_tool_entries),
            "bad_entries": bad,
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
        (docs/algorithms.md §7.5: empty results never), nor are results larger than `max_entry_bytes` (they could
        not be read back; counted as `skipped_large` and logged). Existing live entries are kept.

        Returns:
            Counts `{"total", "imported", "duplicates", "skipped_empty", "skipped_large", "existing"}`.

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
            if _utf8_len_over(value, self.max_entry_bytes):
                counts["skipped_large"] += 1
                continue
            entries.append(CacheEntry(tool, key, value, STATUS_OK, 0.0, now, "import:" + Path(path).name,
                                      self._expiry(now)))  # fmt: skip
        counts["imported"] = self._put_many(entries, overwrite=False)
        counts["existing"] = len(entries) - counts["imported"]
        result = {k: counts[k] for k in ("total", "imported", "duplicates", "skipped_empty", "skipped_large",
                                         "existing")}  # fmt: skip
        logger.info("[agentic-tools] imported %s into the %s cache: %s", path, tool, result)
        if counts["duplicates"]:
            logger.warning("[agentic-tools] %d keys of %s were duplicates after normalisation (first kept)",
                           counts["duplicates"], path)  # fmt: skip
        if counts["skipped_large"]:
            logger.warning("[agentic-tools] %d results of %s are larger than max_entry_bytes=%d and were not imported",
                           counts["skipped_large"], path, self.max_entry_bytes)  # fmt: skip
        return result

    def export_json(self, path: str | os.PathLike, tool: str = "search") -> int:
        r"""Write the "ok" entries of `tool` as the reference format `{query: result}` (atomic rename).

        Returns:
            The number of entries written.
        """
        self.flush()
        data = {e.key: e.result for e in self.iter_entries(tool) if e.status == STATUS_OK}
        tmp = f"{path}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=0)
        os.replace(tmp, path)
        return len(data)

    def close(self) -> None:
        r"""Write what is queued (waiting at most `close_timeout_s`), flush hit/miss counters, release connections."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            writer = self._writer if self._writer_pid == os.getpid() else None
        if writer is not None:
            writer.join(timeout=self.close_timeout_s)
            if writer.is_alive():
                with self._cond:
                    left = len(self._pending)
                    self._health["not_stored"] += left
                logger.warning("[agentic-tools] %r: gave up waiting for the cache after %gs; %d queued entries not "
                               "stored", self, self.close_timeout_s, left)  # fmt: skip
                return  # the daemon writer still uses the connections; the process ends without waiting for it
        else:
            try:
                self.flush_stats(timeout_s=self.write_timeout_s)
            except Exception as exc:  # noqa: BLE001
                logger.warning("[agentic-tools] could not flush cache statistics: %s", exc)
        self._release()


def _flush_at_exit(ref: "weakref.ref[ToolCache]") -> None:
    r"""At interpreter exit, write what an unclosed cache still has queued (bounded by its `close_timeout_s`)."""
    cache = ref()
    if cache is not None and not cache._closing:
        try:
            cache.flush()
        except Exception:  # noqa: BLE001 - never fail the exit
            pass


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


class RedisCache(ToolCache):
    r"""Redis cache shared by several nodes.

    Each entry is one JSON string under `<prefix>e:<tool>:<sha256(key)>` written with `SET NX` (first writer wins)
    and `EX ttl_s`; hit/miss counters live in the hash `<prefix>stats`.

    Args:
        url: `redis://host:port/db` (or `rediss://`, `unix://`).
        mode, ttl_s: see `ToolCache`.
        prefix: key namespace (several caches can share one server).
        socket_timeout_s: network timeout of the direct API (connect and each command).
        degrade: when the server cannot be reached at opening, warn and behave as an unusable cache (tool calls go
            on; it is asked again after `retry_after_s`) instead of raising `CacheError`.
        **kwargs: the tool-call path's bounds (`lookup_timeout_s`, `write_timeout_s`, ...; see `ToolCache`), which
            are also the socket and connect timeouts of its lookups and background writes.
    """

    def __init__(
        self,
        url: str,
        mode: str = CACHE_MODE,
        ttl_s: float | None = None,
        prefix: str = "lfa:toolcache:",
        socket_timeout_s: float = 5.0,
        degrade: bool = False,
        **kwargs,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        super().__init__(mode, ttl_s, **kwargs)
        import redis

        self.url = url
        self.prefix = prefix
        self._clients: dict[float, redis.Redis] = {}
        self._clients_lock = threading.Lock()
        self._redis = self._client(float(socket_timeout_s))
        try:
            self._client(self.lookup_timeout_s).ping()
        except redis.RedisError as exc:
            if not degrade:
                self._release()
                raise CacheError(f"Redis tool cache {url} cannot be reached: {exc}") from exc
            self._failed("lookup", exc)
            self._failed("write", exc)

    def _client(self, timeout_s: float | None):
        import redis

        timeout_s = float(timeout_s) if timeout_s is not None else None
        with self._clients_lock:
            if timeout_s not in self._clients:
                self._clients[timeout_s] = redis.Redis.from_url(
                    self.url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, health_check_interval=30
                )
            return self._clients[timeout_s]

    def _name(self, tool: str, key: str) -> str:
        return f"{self.prefix}e:{tool}:{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()}"

    def _decode(self, raw: bytes | None, name: bytes | str, tool: str = "?", key: str = "") -> CacheEntry | None:
        r"""`CacheEntry` of the stored JSON value `raw` of Redis key `name`; `BadCacheEntry` when it is not one."""
        if raw is None:
            return None
        name = name.decode("utf-8", "replace") if isinstance(name, bytes) else name
        where = f"the Redis key {name} (`DEL {name}`)"
        if len(raw) > self.max_entry_bytes:
            raise BadCacheEntry(tool, key, f"value of {len(raw)}+ bytes is larger than max_entry_bytes="
                                f"{self.max_entry_bytes}", where)  # fmt: skip
        try:
            d = json.loads(raw)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            raise BadCacheEntry(tool, key, f"value is not JSON ({exc})", where) from None
        if not isinstance(d, dict) or not {"tool", "key", "result"} <= set(d):
            raise BadCacheEntry(tool, key, "value is not an object with `tool`, `key` and `result`", where)
        return _checked_entry(d["tool"], d["key"], d["result"], d.get("status", STATUS_OK), d.get("latency_s"),
                              d.get("created"), d.get("backend"), d.get("expires"), where)  # fmt: skip

    def _get(self, tool: str, key: str, timeout_s: float | None = None) -> CacheEntry | None:
        import redis

        client = self._redis if timeout_s is None else self._client(timeout_s)
        name = self._name(tool, key)
        try:  # at most max_entry_bytes + 1 bytes travel: a larger value is refused without being read whole
            raw = client.getrange(name, 0, self.max_entry_bytes)
        except redis.ResponseError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            raise BadCacheEntry(tool, key, "not a string value", f"the Redis key {name} (`DEL {name}`)") from None
        if not raw:  # no such key (GETRANGE answers "" for a missing key; an empty value is no entry either)
            return None
        entry = self._decode(raw, name, tool, key)
        if entry is not None and entry.key != key:  # sha256 collision: practically impossible, still checked
            return None
        return entry

    def _put_many(self, entries: list[CacheEntry], overwrite: bool, timeout_s: float | None = None) -> int:
        if not entries:
            return 0
        client = self._redis if timeout_s is None else self._client(timeout_s)
        pipe = client.pipeline(transaction=False)
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
            ).encode("utf-8")
            if len(value) > self.max_entry_bytes:  # it would never be read back
                continue
            ex = max(1, int(round(e.expires - e.created))) if e.expires else None
            pipe.set(self._name(e.tool, e.key), value, nx=not overwrite, ex=ex)
        return sum(1 for r in pipe.execute() if r)

    def _scan_names(self, tool: str | None) -> Iterator[bytes]:
        base = _glob_escape(f"{self.prefix}e:") + (_glob_escape(f"{tool}:") if tool else "")
        pattern = base + "*"
        yield from self._redis.scan_iter(match=pattern, count=1000)

    def iter_entries(self, tool: str | None = None) -> Iterator[CacheEntry]:
        r"""See the base class (bad entries are skipped and counted, see `ToolCache`)."""
        batch: list[bytes] = []
        entries: list[CacheEntry] = []

        def _read(names: list[bytes]) -> None:
            values = self._redis.mget(names)
            missing = [name for name, raw in zip(names, values) if raw is None]  # deleted meanwhile, or no string
            if missing:
                pipe = self._redis.pipeline(transaction=False)
                for name in missing:
                    pipe.type(name)
                for name, kind in zip(missing, pipe.execute()):
                    if kind not in (b"none", "none"):
                        shown = name.decode("utf-8", "replace")
                        self._bad_entry(BadCacheEntry(tool or "?", "", f"a Redis {kind!r} value, not a string",
                                                      f"the Redis key {shown} (`DEL {shown}`)"))  # fmt: skip
            for name, raw in zip(names, values):
                try:
                    entry = self._decode(raw, name, tool or "?")
                except BadCacheEntry as exc:
                    self._bad_entry(exc)
                    continue
                if entry is not None:
                    entries.append(entry)

        for name in self._scan_names(tool):
            batch.append(name)
            if len(batch) >= 500:
                _read(batch)
                batch = []
        if batch:
            _read(batch)
        entries.sort(key=lambda e: e.created)
        yield from entries

    def count(self, tool: str | None = None) -> int:
        r"""See the base class (queued entries are written first, see `flush`)."""
        self.flush()
        return sum(1 for _ in self._scan_names(tool))

    def size_bytes(self) -> int:
        r"""See the base class."""
        total = 0
        names = list(self._scan_names(None))
        for i in range(0, len(names), 500):
            pipe = self._redis.pipeline(transaction=False)
            for name in names[i : i + 500]:
                pipe.strlen(name)
            # a value of another Redis type (a bad entry) answers WRONGTYPE: not counted
            total += sum(int(x or 0) for x in pipe.execute(raise_on_error=False) if isinstance(x, int))
        return total

    def _flush_stats(self, hits: Counter, misses: Counter, timeout_s: float | None = None) -> None:
        client = self._redis if timeout_s is None else self._client(timeout_s)
        pipe = client.pipeline(transaction=False)
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

    def _release(self) -> None:
        with self._clients_lock:
            for client in self._clients.values():
                client.close()

    def __repr__(self) -> str:
        r"""Standard `__repr__`."""
        return f"RedisCache(prefix={self.prefix!r}, mode={self.mode!r})"


def open_cache(
    location: str | os.PathLike | None, mode: str = CACHE_MODE, ttl_s: float | None = None, **kwargs
) -> ToolCache | None:
    r"""Open the cache at `location`: a `redis://` / `rediss://` / `unix://` URL or a SQLite file path.

    Args:
        location: URL or file path (`sqlite:///abs/path` is accepted too); None or "" opens nothing.
        mode: "read_write", "read_only" or "offline" (see `ToolCache`).
        ttl_s: entries expire this many seconds after creation (None: never).
        **kwargs: backend arguments, e.g. `degrade=True` (the executor's choice: a locked or unreachable cache is
            warned about and then behaves as a miss) or `on_corrupt="raise"` (the command line's choice); those of
            the other backend are ignored.

    Returns:
        None when `location` is None or "".

    Raises:
        CacheError: bad mode, missing file in a read-only mode, corrupt file with `on_corrupt="raise"`, or (without
            `degrade`) a locked database or an unreachable Redis server.
    """
    if not location:
        return None
    location = str(location)
    if location.startswith(("redis://", "rediss://", "unix://")):
        for sqlite_only in ("on_corrupt", "busy_timeout_s"):
            kwargs.pop(sqlite_only, None)
        return RedisCache(location, mode=mode, ttl_s=ttl_s, **kwargs)
    if location.startswith("sqlite:///"):
        location = location[len("sqlite:///") - 1 :]
    for redis_only in ("prefix", "socket_timeout_s"):
        kwargs.pop(redis_only, None)
    return SQLiteCache(location, mode=mode, ttl_s=ttl_s, **kwargs)


__all__ = [
    "CACHE_MODES",
    "MAX_ENTRY_BYTES",
    "BadCacheEntry",
    "CacheEntry",
    "CacheError",
    "CacheUnavailable",
    "RedisCache",
    "SQLiteCache",
    "ToolCache",
    "normalize_args",
    "normalize_search_query",
    "open_cache",
]

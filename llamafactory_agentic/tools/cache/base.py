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

r"""The tool cache's common part, shared by every backend.

Key normalisation, entries and their checks, errors, and `ToolCache`: the in-process layer, statistics and the
background writer thread. Keys, normalisation and policy: the package's docstring (`tools/cache/__init__.py`).
"""

import atexit
import json
import os
import threading
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ...common.log import get_logger
from ...hparams import CACHE_MODE
from ..base import ALL_STATUSES, NO_SEARCH_RESULTS_TEXT, STATUS_OK


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

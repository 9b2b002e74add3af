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

r"""The multi-node backend of the tool cache: a Redis server (`RedisCache`)."""

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Iterator

from ...hparams import CACHE_MODE
from ..base import STATUS_OK
from .base import (
    BadCacheEntry,
    CacheEntry,
    CacheError,
    ToolCache,
    _checked_entry,
    _clean_surrogates,
    _glob_escape,
)


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

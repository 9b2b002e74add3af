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

Modules: `base.py` (normalisation, entries, errors, `ToolCache` with its in-process layer and writer thread),
`sqlite.py` (`SQLiteCache`), `redis.py` (`RedisCache`); `open_cache` here picks one.
"""

import os

from ...hparams import CACHE_MODE
from .base import (
    CACHE_MODES,
    MAX_ENTRY_BYTES,
    BadCacheEntry,
    CacheEntry,
    CacheError,
    CacheUnavailable,
    ToolCache,
    normalize_args,
    normalize_search_query,
)
from .redis import RedisCache
from .sqlite import SQLiteCache


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

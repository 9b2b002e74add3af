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

"""`ToolExecutor`: runs one round's tool calls concurrently, with the cache, dedup, limits and metrics.

Per call, in order: unknown tag -> `unknown_tool`; empty body -> `Error: empty <tag> call.` (docs/algorithms.md §12);
per-trajectory call limit of the tool -> `limit`; parse; cache lookup (cached tools only; a hit is cut to the tool's
limits by `BaseTool.limit_observation`; `offline` mode answers a miss with the no-result text); in-flight dedup
(identical (tool, key) calls share one execution, also across threads); otherwise the call runs in the thread pool
with the tool's retries (tenacity) and the executor waits at most the tool's `timeout_s` plus a grace period counted
from the moment a worker starts the call (time spent queued behind other calls when there are more calls than workers
does not count), with an overall safety bound on the queueing time.
New "ok" results of cached tools are queued for the cache's background writer (`ToolCache.submit`), and lookups are
bounded (`ToolCache.lookup`): a locked, slow or broken cache delays a call by at most the cache's lookup timeout,
and a call whose lookup failed is a miss whose result is not stored.
Nothing raises into the caller: every failure, including cache failures, becomes observation text plus a metric.
"""

import os
import threading
import time
from collections import Counter, OrderedDict, defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import numpy as np

from ..common.log import get_logger
from ..data.tags import empty_call_text  # shared with the rollout (docs/algorithms.md §12)
from ..hparams import CACHE_MODE, CACHE_TOOLS, TOOL_WORKERS
from ..validation import validate_tool_keys
from .base import (
    NO_SEARCH_RESULTS_TEXT,
    STATUS_CACHE_MISS,
    STATUS_EMPTY,
    STATUS_ERROR,
    STATUS_LIMIT,
    STATUS_OK,
    STATUS_TIMEOUT,
    STATUS_UNKNOWN_TOOL,
    BaseTool,
    ToolCall,
    ToolResult,
    check_number,
    error_text,
)
from .cache import CacheError, CacheUnavailable, ToolCache, open_cache


logger = get_logger(__name__)


class _StartMark:
    r"""Set by the worker thread when it picks a call up: the per-call deadline counts from `at`."""

    __slots__ = ("at", "event")

    def __init__(self) -> None:
        self.at: float | None = None
        self.event = threading.Event()

    def mark(self) -> None:
        self.at = time.perf_counter()
        self.event.set()

    def release(self, _: Future) -> None:
        self.event.set()  # done without having started (cancelled at shutdown): wake the waiter


class _NotStarted(Exception):
    r"""No worker picked the call up within the queueing safety bound."""


class ToolExecutor:
    r"""Concurrent, cached, deduplicating tool executor (docs/tools.md).

    Args:
        tools: the tools, keyed by their tag (a list is keyed by each tool's `tag`).
        cache: persistent cache (None: no caching).
        cache_tools: names of the tools whose results are cached, a list or a comma-separated string (default
            `agentic_cache_tools`'s).
        workers: thread-pool size (`agentic_tool_workers`; default the `arpo` preset's, `hparams.TOOL_WORKERS`).
        cache_errors: also store "error"/"timeout" results (never "empty").
        grace_s: seconds the executor waits beyond a tool's `timeout_s` (counted from the moment a worker starts the
            call) before answering `timeout` itself. A call still queued (all workers busy) is answered `timeout`
            after `(max tool timeout_s + grace_s) * (1 + calls ahead of it // workers)` seconds, a safety bound
            that holds when the calls ahead of it end within their own budget.
        max_tracked_trajectories: trajectories whose per-tool call counts are remembered (oldest forgotten first).
    """

    def __init__(
        self,
        tools: dict[str, BaseTool] | list[BaseTool],
        cache: ToolCache | None = None,
        cache_tools: tuple[str, ...] | list[str] | str = CACHE_TOOLS,
        workers: int = TOOL_WORKERS,
        cache_errors: bool = False,
        grace_s: float = 2.0,
        max_tracked_trajectories: int = 1_000_000,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        if isinstance(tools, dict):
            self.tools = dict(tools)
        else:
            self.tools = {tool.tag: tool for tool in tools}
        self.cache = cache
        if isinstance(cache_tools, str):
            cache_tools = [t.strip() for t in cache_tools.split(",") if t.strip()]
        self.cache_tools = set(cache_tools)
        self.workers = check_number("workers", workers, integer=True, minimum=1, inclusive=True)
        self.cache_errors = cache_errors
        self.grace_s = check_number("grace_s", grace_s, inclusive=True)
        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="agentic-tool")
        self._inflight: dict[tuple[str, str], tuple[Future, _StartMark, float]] = {}
        self._outstanding = 0  # submitted executions not finished yet (queued or running)
        self._outstanding_lock = threading.Lock()
        self._inflight_lock = threading.Lock()
        self._counts: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._counts_lock = threading.Lock()
        self._max_tracked = int(max_tracked_trajectories)
        self._metrics_lock = threading.Lock()
        self._reset_metrics()
        self._closed = False
        # measured isolation level of each tool that runs code in a local sandbox (the python tool)
        self._isolation_levels = {
            t.name: t.isolation_report().level
            for t in self.tools.values()
            if callable(getattr(t, "isolation_report", None)) and getattr(t, "backend", None) == "local"
        }

    # ------------------------------------------------------------------ metrics
    def _reset_metrics(self) -> None:
        self._counters: dict[str, Counter] = defaultdict(Counter)
        self._latencies: dict[str, list[float]] = defaultdict(list)

    def _record(self, tool: str, result: ToolResult, **extra: int) -> None:
        with self._metrics_lock:
            c = self._counters[tool]
            c["calls"] += 1
            c["cache_hits"] += int(result.cached)
            c["failures"] += int(result.status in (STATUS_ERROR, STATUS_UNKNOWN_TOOL))
            c["timeouts"] += int(result.status == STATUS_TIMEOUT)
            c["empty"] += int(result.status == STATUS_EMPTY)
            c["limit"] += int(result.status == STATUS_LIMIT)
            c["cache_misses_offline"] += int(result.status == STATUS_CACHE_MISS)
            for key, value in extra.items():
                c[key] += value
            self._latencies[tool].append(result.latency_s)

    def _count(self, tool: str, key: str, n: int = 1) -> None:
        with self._metrics_lock:
            self._counters[tool][key] += n

    def pop_metrics(self) -> dict[str, float]:
        r"""Per-tool metrics since the last call, then reset.

        Returns:
            `tools/<name>/calls`, `cache_hits`, `cache_hit_rate`, `failures`, `timeouts`, `latency_p50_s`,
            `latency_p95_s`, plus `empty`, `limit`, `dedup_hits`, `backend_calls`, `cache_misses`,
            `cache_errors` (lookups that failed), `cache_unavailable` (lookups skipped because the cache failed
            recently), `cache_not_stored` (results not cached because of that or a full write queue),
            `cache_misses_offline`; for tools with a measured sandbox (the local python tool)
            `calls_at_<level>`: executions at the measured isolation level (`none`, `unprivileged`, `confined`,
            `full`); and the cache's own `tools/cache/lookup_errors`, `lookups_skipped`, `bad_entries`,
            `write_errors`, `written`, `not_stored`, `stats_errors`, `pending`.
        """
        with self._metrics_lock:
            counters, latencies = self._counters, self._latencies
            self._reset_metrics()
        out: dict[str, float] = {}
        for tool, c in counters.items():
            prefix = f"tools/{tool}/"
            for key in ("calls", "cache_hits", "failures", "timeouts", "empty", "limit", "dedup_hits",
                        "backend_calls", "cache_misses", "cache_errors", "cache_unavailable", "cache_not_stored",
                        "cache_misses_offline"):  # fmt: skip
                out[prefix + key] = float(c[key])
            lookups = c["cache_hits"] + c["cache_misses"]
            out[prefix + "cache_hit_rate"] = c["cache_hits"] / lookups if lookups else 0.0
            lat = latencies.get(tool) or [0.0]
            out[prefix + "latency_p50_s"] = float(np.percentile(lat, 50))
            out[prefix + "latency_p95_s"] = float(np.percentile(lat, 95))
            level = self._isolation_levels.get(tool)
            if level is not None:
                out[prefix + f"calls_at_{level}"] = float(c["backend_calls"])
        for tool in self._stateful_tools():  # sessions_live, sessions_created, replayed_calls, forks, resets
            for key, value in tool.pop_environment_metrics().items():
                out[f"tools/{tool.name}/{key}"] = value
        if self.cache is not None:
            for key, value in self.cache.pop_health().items():
                out[f"tools/cache/{key}"] = float(value)
        return out

    # ------------------------------------------------------------------ limits
    def _over_limit(self, tool: BaseTool, trajectory_id: str | None) -> bool:
        if tool.call_limit is None or trajectory_id is None:
            return False
        key = (trajectory_id, tool.tag)
        with self._counts_lock:
            n = self._counts.pop(key, 0) + 1
            self._counts[key] = n
            while len(self._counts) > self._max_tracked:
                self._counts.popitem(last=False)
        return n > tool.call_limit

    def forget_trajectories(self, trajectory_ids: list[str] | None = None) -> None:
        r"""Drop per-trajectory call counts and close the trajectories' environments (all when None).

        Environments: docs/tools.md "Environments".
        """
        for tool in self._stateful_tools():
            tool.release(trajectory_ids)
        with self._counts_lock:
            if trajectory_ids is None:
                self._counts.clear()
                return
            ids = set(trajectory_ids)
            for key in [k for k in self._counts if k[0] in ids]:
                del self._counts[key]

    def release_trajectories(self, trajectory_ids: list[str]) -> None:
        r"""Close the environments of finished trajectories (the call counts stay; `forget_trajectories` drops both).

        Environments: docs/tools.md "Environments". Costs nothing when no tool is an environment.
        """
        for tool in self._stateful_tools():
            tool.release(trajectory_ids)

    def fork_trajectory(self, parent_id: str, child_id: str) -> None:
        r"""An ARPO branch `child_id` of `parent_id`: every environment gives it the parent's state; never raises.

        Environments: docs/tools.md "Environments".
        """
        for tool in self._stateful_tools():
            try:
                tool.fork_trajectory(parent_id, child_id)
            except Exception as exc:  # noqa: BLE001 - the branch then starts from a fresh environment
                logger.warning("[agentic-tools] forking %s's environment failed: %s", tool.name, exc)

    def _stateful_tools(self) -> list[BaseTool]:
        return [t for t in self.tools.values() if getattr(t, "stateful", False)]

    # ------------------------------------------------------------------ execution
    def _cached(self, tool: BaseTool) -> bool:
        # an environment's result depends on its trajectory's state: never cached (docs/tools.md "Environments")
        return self.cache is not None and tool.name in self.cache_tools and not getattr(tool, "stateful", False)

    def _run(self, tool: BaseTool, args: Any, key: str, store: bool = True) -> ToolResult:
        try:
            result = tool.execute_args(args)
        except Exception as exc:  # noqa: BLE001 - execute_args never raises, belt and braces
            result = ToolResult(error_text(tool.name, str(exc)), STATUS_ERROR, 0.0)
        self._count(tool.name, "backend_calls")
        if self._cached(tool) and self.cache.writable:
            storable = result.status == STATUS_OK or (
                self.cache_errors and result.status in (STATUS_ERROR, STATUS_TIMEOUT)
            )
            if storable and result.text.strip():
                # queued for the cache's background writer: a locked or slow cache never delays the result
                queued = store and self.cache.submit(
                    tool.name, key, result.text, result.status, result.latency_s, tool.backend_name()
                )
                if not queued:
                    self._count(tool.name, "cache_not_stored")
        return result

    def _run_marked(self, mark: _StartMark, tool: BaseTool, args: Any, key: str, store: bool) -> ToolResult:
        mark.mark()  # the per-call deadline starts here, in the worker, not at submission
        return self._run(tool, args, key, store)

    def _queue_bound(self, now: float) -> float:
        r"""Latest time a call submitted `now` may still be waiting for a worker (the safety bound)."""
        budget = max((t.timeout_s for t in self.tools.values()), default=0.0) + self.grace_s
        with self._outstanding_lock:
            ahead = self._outstanding
            self._outstanding += 1
        return now + budget * (1 + ahead // self.workers)

    def _finished(self, _: Future) -> None:
        with self._outstanding_lock:
            self._outstanding -= 1

    def _new_execution(
        self, tool: BaseTool, args: Any, key: str, store: bool = True
    ) -> tuple[Future, _StartMark, float]:
        mark = _StartMark()
        queue_bound = self._queue_bound(time.perf_counter())
        try:
            future = self._pool.submit(self._run_marked, mark, tool, args, key, store)
        except BaseException:
            self._finished(None)
            raise
        future.add_done_callback(self._finished)
        future.add_done_callback(mark.release)
        return future, mark, queue_bound

    def _submit(
        self, tool: BaseTool, args: Any, key: str, store: bool = True
    ) -> tuple[Future, _StartMark, float, bool]:
        r"""(future, start mark, queue bound, deduped) of the execution of (tool, key).

        Reuses an in-flight execution when the tool dedups; `store` False: its result is not cached.
        """
        if not tool.dedup:
            return *self._new_execution(tool, args, key, store), False
        ident = (tool.tag, key)
        with self._inflight_lock:
            entry = self._inflight.get(ident)
            if entry is not None:
                return *entry, True
            entry = self._new_execution(tool, args, key, store)
            self._inflight[ident] = entry
        future = entry[0]

        def _done(_: Future) -> None:
            with self._inflight_lock:
                current = self._inflight.get(ident)
                if current is not None and current[0] is future:
                    del self._inflight[ident]

        future.add_done_callback(_done)
        return *entry, False

    def execute(self, calls: list[ToolCall]) -> list[ToolResult]:
        r"""Run a batch of calls concurrently.

        Returns:
            One `ToolResult` per call, in the order of `calls`. Never raises.
        """
        results: list[ToolResult | None] = [None] * len(calls)
        pending: list[tuple[int, BaseTool, Future, _StartMark, float, float, bool]] = []
        for i, call in enumerate(calls):
            start = time.perf_counter()
            try:
                results[i] = self._prepare(i, call, start, pending)
            except Exception as exc:  # noqa: BLE001 - nothing escapes
                name = getattr(call, "tool", "unknown")
                results[i] = ToolResult(error_text(str(name), f"{type(exc).__name__}: {exc}"), STATUS_ERROR,
                                        time.perf_counter() - start)  # fmt: skip
                self._record(str(name), results[i])
        for i, tool, future, mark, start, queue_bound, deduped in pending:
            try:
                if not mark.event.wait(timeout=max(0.0, queue_bound - time.perf_counter())):
                    raise _NotStarted
                started = mark.at if mark.at is not None else time.perf_counter()  # None: cancelled, never ran
                deadline = started + tool.timeout_s + self.grace_s  # counted from the worker's start
                result = future.result(timeout=max(0.0, deadline - time.perf_counter()))
                result = ToolResult(result.text, result.status, time.perf_counter() - start, result.cached)
            except _NotStarted:
                result = ToolResult(
                    error_text(tool.name, f"not started within {queue_bound - start:.3g} seconds (all workers busy)"),
                    STATUS_TIMEOUT,
                    time.perf_counter() - start,
                )
            except FutureTimeout:
                result = ToolResult(
                    error_text(tool.name, f"no answer within {tool.timeout_s:g} seconds"),
                    STATUS_TIMEOUT,
                    time.perf_counter() - start,
                )
            except Exception as exc:  # noqa: BLE001
                result = ToolResult(error_text(tool.name, str(exc)), STATUS_ERROR, time.perf_counter() - start)
            results[i] = result
            self._record(tool.name, result, dedup_hits=int(deduped))
        return results  # type: ignore[return-value]

    def _prepare(self, i: int, call: ToolCall, start: float, pending: list) -> ToolResult | None:
        tool = self.tools.get(call.tool)
        if tool is None:
            available = ", ".join(sorted(self.tools)) or "none"
            result = ToolResult(
                f"Error: unknown tool <{call.tool}>. Available tools: {available}.", STATUS_UNKNOWN_TOOL, 0.0
            )
            self._record("unknown", result)
            return result
        content = call.content if isinstance(call.content, str) else str(call.content or "")
        if not content.strip():
            self._over_limit(tool, call.trajectory_id)  # an empty call still counts
            result = ToolResult(empty_call_text(tool.tag), STATUS_ERROR, time.perf_counter() - start)
            self._record(tool.name, result)
            return result
        if self._over_limit(tool, call.trajectory_id):
            result = ToolResult(
                f"Error: Tool({tool.name}) call limit of {tool.call_limit} per trajectory reached.",
                STATUS_LIMIT,
                time.perf_counter() - start,
            )
            self._record(tool.name, result)
            return result
        try:
            args = tool.parse(content)
            if getattr(tool, "stateful", False):  # an environment: the call runs in its trajectory's state
                args = tool.bind(call.trajectory_id, args)
            key = tool.cache_key(args)
        except Exception as exc:  # noqa: BLE001
            result = ToolResult(tool._safe(error_text(tool.name, str(exc))), STATUS_ERROR, time.perf_counter() - start)
            self._record(tool.name, result)
            return result
        store = True
        if self._cached(tool):
            try:
                entry = self.cache.lookup(tool.name, key)  # bounded wait; never raises anything but this
            except CacheUnavailable as exc:  # a locked, slow or broken cache: a miss whose result is not stored
                entry, store = None, False
                self._count(tool.name, "cache_unavailable" if exc.skipped else "cache_errors")
            except Exception as exc:  # noqa: BLE001 - belt and braces for a user's ToolCache subclass
                entry, store = None, False
                self._count(tool.name, "cache_errors")
                logger.debug("[agentic-tools] cache lookup failed for %s: %s", tool.name, exc)
            if entry is not None:  # within the tool's own limits, as a live result would be
                text = tool.limit_observation(entry.result)
                result = ToolResult(text, entry.status, time.perf_counter() - start, True)
                self._record(tool.name, result)
                return result
            self._count(tool.name, "cache_misses")
            if self.cache.mode == "offline":
                text = NO_SEARCH_RESULTS_TEXT if tool.name == "search" else f"Tool({tool.name}) result not cached."
                result = ToolResult(text, STATUS_CACHE_MISS, time.perf_counter() - start)
                self._record(tool.name, result)
                return result
        future, mark, queue_bound, deduped = self._submit(tool, args, key, store)
        pending.append((i, tool, future, mark, start, queue_bound, deduped))
        return None

    def close(self) -> None:
        r"""Stop the pool (running calls finish in the background), close tools and the cache."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        for tool in self.tools.values():
            try:
                tool.close()
            except Exception as exc:  # noqa: BLE001
                logger.debug("closing %s failed: %s", tool, exc)
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> "ToolExecutor":
        r"""Standard `__enter__`."""
        return self

    def __exit__(self, *exc: Any) -> None:
        r"""Standard `__exit__`."""
        self.close()


def validate_tool_args(finetuning_args: Any) -> dict[str, Any]:
    r"""The run's tool keys checked and resolved: `llamafactory_agentic.validation.validate_tool_keys` (the one validator).

    Raises:
        ValueError: naming the recipe key, what it must be and the value received.
    """
    return validate_tool_keys(finetuning_args)


def build_executor_from_args(finetuning_args: Any, **overrides: Any) -> ToolExecutor:
    r"""Build the executor from the `agentic_*` keys of `AgenticArguments` (llamafactory_agentic/hparams.py).

    Keys read: agentic_tool_config, agentic_tool_retries and agentic_tool_workers (None: the `arpo` preset's),
    agentic_python_timeout, agentic_python_max_output_chars, agentic_search_backend,
    agentic_search_topk, agentic_search_snippet_chars, agentic_search_index (local backend), agentic_python_isolation,
    agentic_python_min_isolation, agentic_cache_path, agentic_cache_mode, agentic_cache_tools.
    Without a tool config the tools are `python` and `search`. The run arguments are defaults: a tool config entry's
    own `timeout`, `retries` and `params` win over them; its `cache` section is used where the arguments leave
    the cache unset. The keys and the tool config are validated first (`validate_tool_args`,
    `registry.load_tool_config`). The cache is opened with `degrade=True`: a locked database or an unreachable Redis
    server is warned about and then behaves as a miss. With `agentic_python_min_isolation` set, every local python
    tool's sandbox is measured (`sandbox.isolation.measure_isolation`) and a lower level stops the run.

    Args:
        finetuning_args: the run's `ToolsConfig` (`train/arpo/config.py`), or any object with those attributes
            (missing ones take their defaults, see `validate_tool_args`).
        **overrides: extra `ToolExecutor` keyword arguments (e.g. `grace_s`).

    Raises:
        FileNotFoundError: the tool config does not exist.
        ValueError: a bad `agentic_*` key, or a bad tool config (`registry.ToolConfigError`, naming the file, the
            entry and the fix).
        KeyError: an environment variable the tool config needs is unset.
        CacheError: the cache cannot be opened (bad mode, missing file in a read-only mode, a directory, a database
            that is not a tool cache), naming the key that gave the path.
        IsolationError: the python tool's measured isolation is below `agentic_python_min_isolation`.
    """
    from .python_tool import PythonTool
    from .registry import ToolConfigError, ToolSpec, build_tools, load_tool_config
    from .sandbox.isolation import check_min_isolation

    a = finetuning_args
    keys = validate_tool_keys(a)
    retries, workers = keys["retries"], keys["workers"]
    config_path = keys["tool_config"]
    config = load_tool_config(config_path) if config_path else None
    cache_cfg = dict(config.cache) if config else {}
    cache_path = keys["cache_path"] or cache_cfg.get("path")
    cache_mode = keys["cache_mode"] or cache_cfg.get("mode") or CACHE_MODE
    cache_tools = keys["cache_tools"] or cache_cfg.get("tools") or CACHE_TOOLS
    try:
        cache = open_cache(os.path.expanduser(str(cache_path)) if cache_path and "://" not in str(cache_path)
                           else cache_path, mode=cache_mode, ttl_s=cache_cfg.get("ttl_s"), degrade=True)  # fmt: skip
    except CacheError as exc:  # a directory, another application's database, a missing read-only file: name the key
        if keys["cache_path"]:
            key = "recipe key `agentic_cache_path` (`--cache` of the command line)"
        else:
            key = f"`cache.path` of the tool config {config_path}"
        raise CacheError(f"{key}: {exc}") from exc
    defaults = {
        "python": {
            "timeout_s": keys["python_timeout"],
            "max_output_chars": keys["python_max_output_chars"],
            "retries": retries,
        },
        "search": {
            "backend": keys["search_backend"],
            "topk": keys["search_topk"],
            "snippet_chars": keys["search_snippet_chars"],
            "retries": retries,
            "cache": cache,
        },
    }
    defaults["python"]["isolation"] = keys["python_isolation"]
    defaults["python_session"] = dict(defaults["python"])  # the python tool's limits (docs/tools.md "Environments")
    search_index = keys["search_index"]
    if search_index and defaults["search"]["backend"] == "local":
        defaults["search"]["index_dir"] = os.path.expanduser(str(search_index))
    specs = config.tools if config else [
        ToolSpec(name="python", where="the python tool (recipe keys agentic_python_*)"),
        ToolSpec(name="search", where="the search tool (recipe keys agentic_search_*)"),
    ]  # fmt: skip
    tools = []
    try:
        for spec in specs:
            tool_defaults = dict(defaults.get(spec.name, {"retries": retries}))
            if spec.name == "search" and "backend" in spec.params:
                tool_defaults.pop("backend")
            for tool in build_tools(spec, tool_defaults):  # an MCP server gives one tool per server tool
                tools.append(tool)
                clash = next((t for t in tools[:-1] if t.tag == tool.tag), None)
                if clash is not None:
                    raise ToolConfigError(
                        f"{spec.where or spec.name}: tag <{tool.tag}> is already used by tool `{clash.name}`; give "
                        "one of them another `tag`"
                    )
        minimum = keys["python_min_isolation"]
        if minimum:
            for tool in tools:
                if isinstance(tool, PythonTool) or tool.name == "python_session":
                    check_min_isolation(tool.isolation_report(), minimum, executable=tool.executable)
    except BaseException:
        for tool in tools:
            tool.close()
        if cache is not None:
            cache.close()
        raise
    kwargs: dict[str, Any] = {"cache_errors": bool(cache_cfg.get("cache_errors", False))}
    kwargs.update(overrides)
    return ToolExecutor(tools, cache=cache, cache_tools=cache_tools, workers=workers, **kwargs)


__all__ = ["ToolExecutor", "build_executor_from_args", "empty_call_text", "validate_tool_args"]

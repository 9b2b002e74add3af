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

r"""Metric reduction of the `arpo`/`aepo` trainer and the helpers of the `rollouts.jsonl` writer.

Per-rank rollout and tool metrics are combined over ranks here. Pure functions over plain values (no trainer, no torch).
"""

import math
from collections import defaultdict


def _trained_mean(values: list[float], mask: list[int]) -> float:
    r"""Mean of `values` over the positions where the loss mask is 1 (0.0 when there are none)."""
    selected = [v for v, m in zip(values, mask) if m]
    return sum(selected) / len(selected) if selected else 0.0


def _zero_spans(mask: list[int]) -> list[list[int]]:
    r"""`[start, end)` token spans where the loss mask is 0 (observations)."""
    spans, start = [], None
    for i, m in enumerate(list(mask) + [1]):
        if m == 0 and start is None:
            start = i
        elif m != 0 and start is not None:
            spans.append([start, i])
            start = None
    return spans


# rollout counters that add up over ranks; every other rollout metric is a mean (weighted by the rank's groups,
# or by its branch decisions for the mean entropy change)
_ROLLOUT_COUNTS = {
    "rollout/trajectories",
    "rollout/branches",
    "rollout/fills",
    "rollout/decisions",
    "rollout/penalised_decisions",
    "rollout/call_limit_hits",
    "rollout/truncations",
    "rollout/empty_calls",
    "rollout/generated_tokens",
    "rollout/masked_tokens",
    "rollout/finish_eos",
}
_ROLLOUT_COUNT_PREFIXES = ("rollout/branch_points/", "rollout/executed_")
_ALIASES = {
    "rollout/penalised_decisions": "aepo/penalised_branch_decisions",
    "rollout/premonitor_global": "aepo/premonitor_global_samples",
    "rollout/premonitor_branch": "aepo/premonitor_branch_samples",
    "rollout/premonitor_h_root": "aepo/premonitor_h_root",
    "rollout/premonitor_h_bar": "aepo/premonitor_h_bar",
    "rollout/mean_delta_h": "rollout/delta_h_mean",
}


def _combine_shards(shards: list[tuple[int, dict, dict, dict]]) -> tuple[dict, dict]:
    r"""Combine per-rank rollout metrics (counts summed, means weighted), timings (max) and tool metrics."""
    metrics: dict[str, float] = {}
    weights = defaultdict(float)
    for n, m, _, _ in shards:
        for k, v in m.items():
            if not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                continue
            if k in _ROLLOUT_COUNTS or k.startswith(_ROLLOUT_COUNT_PREFIXES):
                metrics[k] = metrics.get(k, 0.0) + float(v)
                continue
            w = float(m.get("rollout/decisions", 0.0)) if k == "rollout/mean_delta_h" else float(max(n, 0))
            metrics[k] = metrics.get(k, 0.0) + float(v) * w
            weights[k] += w
    metrics = {k: (v / weights[k] if weights[k] > 0 else 0.0) if k in weights else v for k, v in metrics.items()}
    if metrics.get("rollout/decisions"):
        metrics["rollout/branch_rate"] = metrics.get("rollout/branches", 0.0) / metrics["rollout/decisions"]

    timing: dict[str, float] = {}
    for _, _, t, _ in shards:
        for k, v in t.items():
            timing[k] = max(timing.get(k, 0.0), float(v))

    metrics.update(_combine_tool_metrics([tm for _, _, _, tm in shards]))
    return metrics, timing


def _combine_tool_metrics(shards: list[dict[str, float]]) -> dict[str, float]:
    r"""Combine `ToolExecutor.pop_metrics` results (per rank and/or per batch).

    Rates and latency percentiles are averaged over the shards that report them, counters summed, cache hit rates
    recomputed from the summed hits and misses.
    """
    tools: dict[str, float] = {}
    counts = defaultdict(int)
    for tm in shards:
        for k, v in tm.items():
            tools[k] = tools.get(k, 0.0) + float(v)
            if k.endswith("_rate") or "latency" in k:
                counts[k] += 1
    for k, c in counts.items():
        tools[k] /= c
    for k in list(tools):
        if k.endswith("/cache_hit_rate"):
            base = k[: -len("/cache_hit_rate")]
            lookups = tools.get(base + "/cache_hits", 0.0) + tools.get(base + "/cache_misses", 0.0)
            if lookups:
                tools[k] = tools.get(base + "/cache_hits", 0.0) / lookups
    return tools

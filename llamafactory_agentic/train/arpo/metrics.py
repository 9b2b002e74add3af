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

r"""From trajectories to logged values: the `arpo`/`aepo` trainer's metric reduction and `rollouts.jsonl` entries.

Pure functions of their arguments (no trainer, no process group): `combine_rank_shards` merges the per-rank rollout,
timing and tool metrics a gather returned, `rollout_log_values` turns one training rollout into the values the trainer
logs, `select_logged_groups` and `rollout_log_entries` build the sampled `rollouts.jsonl` lines.
"""

import math
import random
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

import torch

from .records import ScoredTrajectory, has_reward_signal, prompt_ids_of


ROLLOUT_LOG_NAME = "rollouts.jsonl"


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


def combine_rank_shards(shards: list[tuple[int, dict, dict, dict]]) -> tuple[dict[str, float], dict[str, float]]:
    r"""Combine per-rank rollout metrics (counts summed, means weighted), timings (max) and tool metrics.

    Args:
        shards: One `(groups rolled out, rollout metrics, timing, tool metrics)` per rank.

    Returns:
        `(metrics, timing)`: counters (`_ROLLOUT_COUNTS`, `rollout/branch_points/...`, `rollout/executed_...`)
        summed, other rollout metrics averaged weighted by the rank's groups (`rollout/mean_delta_h` by its branch
        decisions), `rollout/branch_rate` recomputed from the sums, non-finite values dropped, tool metrics combined
        by `combine_tool_metrics`; timings are the maximum over ranks (the critical path), in seconds.
    """
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

    metrics.update(combine_tool_metrics([tm for _, _, _, tm in shards]))
    return metrics, timing


def combine_tool_metrics(shards: list[dict[str, float]]) -> dict[str, float]:
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


def consecutive_branch_stats(records: list[ScoredTrajectory]) -> tuple[int, dict[int, int]]:
    r"""Consecutive branches of a rollout, read from the branch trees (independent of the penalty's scope).

    A branch is consecutive when its source is itself a branch created at the previous tool call of the same lineage
    (`branch_call_index` one lower): the chains of branching at successive tool calls that AEPO's penalty targets
    (docs/algorithms.md §5.2; arXiv 2510.14545 section 3). The chain length of a branch is 1 plus its source's when
    consecutive, else 1.

    Args:
        records: Scored trajectories (`group`, `member`, `parent`: member index of the source or None for a global
            rollout, `branch_call_index`).

    Returns:
        `(number of consecutive branches, {group: longest chain of branches, 0 without branches})`.
    """
    by_key = {(r.group, r.member): r for r in records}
    chain: dict[tuple[int, int], int] = {}
    consecutive = 0
    longest = {r.group: 0 for r in records}
    for r in sorted(records, key=lambda r: (r.group, r.member)):  # a source precedes its branches
        if r.parent is None:
            continue
        source = by_key.get((r.group, r.parent))
        linked = (
            source is not None
            and source.parent is not None
            and r.branch_call_index is not None
            and source.branch_call_index is not None
            and r.branch_call_index == source.branch_call_index + 1
        )
        consecutive += int(linked)
        chain[(r.group, r.member)] = chain.get((r.group, r.parent), 0) + 1 if linked else 1
        longest[r.group] = max(longest[r.group], chain[(r.group, r.member)])
    return consecutive, longest


def repeated_call_rate(records: Iterable[ScoredTrajectory]) -> float:
    r"""Share of the non-empty tool calls that repeat an earlier call (same tool, same text) of their trajectory.

    A branch's inherited calls count in its own lineage, as in `num_tool_calls`. 0.0 when no call was made. The
    reward-gaming monitor (guards/gaming.py) watches it.
    """
    total = repeated = 0
    for record in records:
        seen: set[tuple[str, str]] = set()
        for call in record.tool_calls:
            if not call.content:
                continue
            total += 1
            key = (call.tool, call.content)
            repeated += key in seen
            seen.add(key)
    return repeated / total if total else 0.0


def component_means(records: list[ScoredTrajectory]) -> dict[str, float]:
    r"""`reward/<name>`: the mean unweighted score of each compound-reward component (docs/rewards.md); {} otherwise."""
    values: dict[str, list[float]] = defaultdict(list)
    for r in records:
        for name, score in r.components.items():
            values[name].append(score)
    return {f"reward/{name}": sum(v) / len(v) for name, v in values.items()}


def rollout_log_values(
    records: list[ScoredTrajectory],
    metrics: dict[str, float],
    timing: dict[str, float],
    peak_gpu_memory_gib: float | None = None,
) -> dict[str, float]:
    r"""The values one training rollout adds to the trainer's logs (averaged per key over a logging window).

    Args:
        records: Every scored trajectory of the rollout (all ranks, all groups).
        metrics: Rollout and tool metrics combined over ranks (`combine_rank_shards`).
        timing: Seconds per phase (`time/...`), combined over ranks.
        peak_gpu_memory_gib: `torch.cuda.max_memory_allocated()` in GiB, or None without CUDA.

    Returns:
        `reward`, `reward/...` and `rollout/...` computed from `records` (these win over a rollout metric of the same
        name), then the remaining rollout metrics, their `aepo/...` aliases, the timings, `perf/generated_tokens_per_s`
        (when the rollout reports generated tokens and generation time) and `perf/peak_gpu_memory_gib`.
    """
    out: dict[str, float] = {}
    rewards = torch.tensor([r.reward for r in records], dtype=torch.float64)
    groups = defaultdict(list)
    for r in records:
        groups[r.group].append(r)
    n = max(len(records), 1)
    num_groups = max(len(groups), 1)
    out["reward"] = float(rewards.mean())
    out["reward/mean"] = float(rewards.mean())
    out["reward/std"] = float(rewards.std()) if len(records) > 1 else 0.0
    out["reward/accuracy"] = sum(r.accuracy for r in records) / n
    out["reward/format_ok_rate"] = sum(r.format_ok for r in records) / n
    out["reward/identical_groups"] = sum(not has_reward_signal(g) for g in groups.values()) / num_groups
    out.update(component_means(records))
    trained = sum(sum(r.loss_mask) for r in records)
    total = sum(len(r.response_ids) for r in records)
    out["rollout/tool_calls_per_traj"] = sum(r.num_tool_calls for r in records) / n
    out["rollout/repeated_tool_calls_rate"] = repeated_call_rate(records)
    out["rollout/call_limit_hits"] = float(sum(r.hit_call_limit for r in records))
    out["rollout/call_limit_hit_rate"] = sum(r.hit_call_limit for r in records) / n
    out["rollout/truncated_rate"] = sum(r.truncated for r in records) / n
    out["rollout/trained_tokens"] = float(trained)  # loss-mask 1 over all rows (shared prefixes d times)
    out["rollout/observation_tokens"] = float(total - trained)  # loss-mask 0 (observations)
    out["rollout/response_length"] = total / n
    branches = [r for r in records if r.parent is not None]
    out["rollout/branches"] = float(len(branches))
    out["rollout/branches_per_group"] = len(branches) / num_groups
    consecutive, longest = consecutive_branch_stats(records)
    out["rollout/consecutive_branches"] = float(consecutive)
    out["rollout/longest_branch_chain"] = sum(longest.values()) / num_groups
    out["aepo/global_samples_per_group"] = (len(records) - len(branches)) / num_groups
    out["aepo/branch_samples_per_group"] = len(branches) / num_groups
    out["rollout/fills_per_group"] = sum(r.is_fill for r in records) / num_groups
    for reason in ("eos", "length", "call_limit"):
        out[f"rollout/finish_{reason}_rate"] = sum(r.finish_reason == reason for r in records) / n
    for key, value in metrics.items():
        out.setdefault(key, float(value))  # values computed above from all ranks' trajectories win
    for source, alias in _ALIASES.items():
        if source in metrics:
            out[alias] = float(metrics[source])
    for key, value in timing.items():
        out[key] = float(value)

    sampled = metrics.get("rollout/generated_tokens")
    if sampled is not None and timing.get("time/generation"):
        out["perf/generated_tokens_per_s"] = float(sampled) / max(float(timing["time/generation"]), 1e-9)
    if peak_gpu_memory_gib is not None:
        out["perf/peak_gpu_memory_gib"] = float(peak_gpu_memory_gib)
    return out


def select_logged_groups(groups: Iterable[int], ratio: float, rng: random.Random) -> list[int]:
    r"""The groups written to `rollouts.jsonl`: each with probability `ratio`, one draw of `rng` per group in order.

    Args:
        groups: Group ids of the rollout (drawn in sorted order, so the draws do not depend on the input order).
        ratio: `arpo_rollout_log_ratio` in [0, 1]; 0 draws nothing and selects nothing.
        rng: The trainer's log sampler (saved in checkpoints, see `rollout.rng_state`).

    Returns:
        The selected group ids, sorted.
    """
    if ratio <= 0:
        return []
    return [g for g in sorted(set(groups)) if rng.random() < ratio]


def rollout_log_entries(
    records: list[ScoredTrajectory],
    group_rows: list[dict[str, Any]],
    chosen: list[int],
    decode: Callable[[list[int]], str],
    global_step: int,
    rollout_index: int,
) -> list[dict[str, Any]]:
    r"""One JSON-serialisable `rollouts.jsonl` entry per chosen group, with its branch tree.

    Args:
        records: The rollout's scored trajectories, after advantages (`token_advantages`, `loss_mask_train`).
        group_rows: Dataset row per group id (`_ground_truth`, `_data_source`, prompt ids).
        chosen: Group ids to write (`select_logged_groups`).
        decode: Token ids to text, special tokens kept.
        global_step: Optimiser step of the rollout.
        rollout_index: Rollout call number of the run.

    Returns:
        `{"global_step", "rollout", "group", "prompt", "ground_truth", "data_source", "trajectories": [...]}` per
        group; each trajectory has its branch fields, decoded response and ids, `observation_spans` (`[start, end)`
        token spans with loss mask 0), `round_entropies` and `entropy_base` (the rollout viewer's ΔH at each branch
        decision), reward, accuracy, `advantage` (mean over its trained tokens), tool calls and finish flags.
    """
    by_group = defaultdict(list)
    for r in records:
        by_group[r.group].append(r)
    entries = []
    for g in chosen:
        row = group_rows[g]
        members = [
            {
                "member": r.member,
                "parent": r.parent,
                "branch_pos": r.branch_pos,
                "branch_call_index": r.branch_call_index,
                "round_entropies": r.round_entropies,
                "entropy_base": r.entropy_base,
                "is_fill": r.is_fill,
                "response": decode(r.response_ids),
                "response_ids": r.response_ids,
                # behaviour log-prob of each response token (None where there is none) and the weights' version
                "behaviour_logps": [None if v != v else round(v, 6) for v in r.behaviour_logps],
                "weight_version": r.weight_version,
                "observation_spans": _zero_spans(r.loss_mask),
                "reward": r.reward,
                "accuracy": r.accuracy,
                "reward_components": r.components,
                "advantage": _trained_mean(r.token_advantages, r.loss_mask_train),
                "num_tool_calls": r.num_tool_calls,
                "tool_calls": [asdict(c) for c in r.tool_calls],
                "finish_reason": r.finish_reason,
                "hit_call_limit": r.hit_call_limit,
                "truncated": r.truncated,
            }
            for r in by_group[g]
        ]
        entries.append(
            {
                "global_step": global_step,
                "rollout": rollout_index,
                "group": g,
                "prompt": decode(prompt_ids_of(row)),
                "ground_truth": row.get("_ground_truth"),
                "data_source": row.get("_data_source"),
                "trajectories": members,
            }
        )
    return entries


def loss_metric_values(
    pg_metrics: dict[str, float],
    entropy: torch.Tensor,
    mask: torch.Tensor,
    kl_value: torch.Tensor | None,
    entropy_value: torch.Tensor | None,
    clip_mask: torch.Tensor | None,
) -> dict[str, float]:
    r"""This micro-batch's loss metrics, as means over its own loss-mask tokens (before the mean over ranks).

    Args:
        pg_metrics: The policy loss's metrics (`loss/clip_frac`, ..., `loss/balanced_clip_frac`).
        entropy: Per-token entropy `[batch, seq_len]` without gradient (nats).
        mask: Bool loss mask `[batch, seq_len]`.
        kl_value: Token-mean KL of the micro-batch (scalar tensor), or None without the KL term.
        entropy_value: Token-mean entropy of the entropy bonus (scalar tensor), or None without it.
        clip_mask: Bool `[batch, seq_len]` of the high-entropy tokens (`high_entropy` clip scope), or None.

    Returns:
        `loss/...` and `aepo/...` values, sorted by key; the trainer weights each by the micro-batch's token count.
    """
    count = float(mask.sum().item())
    trained = entropy[mask].float()
    local = {
        "loss/clip_frac": pg_metrics.get("loss/clip_frac", 0.0),
        "loss/clip_frac_upper": pg_metrics.get("loss/clip_frac_upper", 0.0),
        "loss/clip_frac_lower": pg_metrics.get("loss/clip_frac_lower", 0.0),
        "loss/dual_clip_frac": pg_metrics.get("loss/dual_clip_frac", 0.0),
        "loss/approx_kl": pg_metrics.get("loss/approx_kl", 0.0),
        "loss/ratio_mean": pg_metrics.get("loss/ratio_mean", 0.0),
        "loss/entropy": float(trained.mean().item()) if count else 0.0,
        "aepo/grad_preserved_frac": pg_metrics.get("loss/balanced_clip_frac", 0.0),
        "aepo/trained_entropy_std": float(trained.std().item()) if count > 1 else 0.0,
        "aepo/trained_entropy_p90": float(torch.quantile(trained, 0.9).item()) if count else 0.0,
        "aepo/trained_entropy_max": float(trained.max().item()) if count else 0.0,
    }
    if clip_mask is not None:
        local["aepo/high_entropy_token_frac"] = float(clip_mask.sum().item()) / max(count, 1.0)
    if kl_value is not None:
        local["loss/kl"] = float(kl_value.item())
    if entropy_value is not None:
        local["loss/entropy_bonus_term"] = float(entropy_value.item())
    return {key: local[key] for key in sorted(local)}


def validation_metrics(
    records: list[ScoredTrajectory], batch_values: dict[str, list[float]], tool_metrics: dict[str, float]
) -> dict[str, float]:
    r"""The metrics of one validation pass (before the `eval_` prefix).

    Args:
        records: One greedy trajectory per validation prompt, each dataset row once.
        batch_values: Values collected per evaluation batch (the rollout timings, seconds).
        tool_metrics: The pass's tool metrics, combined (`combine_tool_metrics`).

    Returns:
        `reward/std` (with two or more prompts), the mean of every per-batch value and of the per-prompt
        `reward/mean`, `reward/accuracy`, `rollout/tool_calls_per_traj`, `rollout/response_tokens`,
        `rollout/call_limit_hit_rate`, then the tool metrics and `reward` (= `reward/mean`).
    """
    values = defaultdict(list, {key: list(items) for key, items in batch_values.items()})
    for rec in records:
        values["reward/mean"].append(rec.reward)
        values["reward/accuracy"].append(rec.accuracy)
        for name, score in rec.components.items():
            values[f"reward/{name}"].append(score)
        values["rollout/tool_calls_per_traj"].append(rec.num_tool_calls)
        values["rollout/response_tokens"].append(len(rec.response_ids))
        values["rollout/call_limit_hit_rate"].append(float(rec.hit_call_limit))
    out: dict[str, float] = {}
    rewards = values.get("reward/mean", [])
    if len(rewards) > 1:
        out["reward/std"] = float(torch.tensor(rewards, dtype=torch.float64).std())
    for key, items in values.items():
        if items:
            out[key] = sum(items) / len(items)
    out.update(tool_metrics)
    if rewards:
        out["reward"] = out["reward/mean"]
    return out

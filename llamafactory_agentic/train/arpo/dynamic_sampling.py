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

r"""Dynamic sampling (`rl_dynamic_sampling`, DAPO, arXiv 2503.14476 section 3.2; docs/algorithms.md §4.7).

A group whose M rewards are all equal has zero advantage for every member (docs/algorithms.md §4.1), so it adds no
gradient and only dilutes the update. With dynamic sampling the trainer keeps the groups with different rewards,
rolls out further generation batches of prompts drawn from the training set until it holds as many such groups as
the update needs (or `rl_dynamic_sampling_max_batches` batches were rolled out), and fills what is still missing with
equal-reward groups, so the batch geometry never changes. Pure functions; the trainer calls them in
`pipeline.ArpoStep.dynamic_sampling`.
"""

import math
import random
from collections import defaultdict
from dataclasses import replace
from typing import Any

from .metrics import combine_rank_shards
from .records import ScoredTrajectory, has_reward_signal


def groups_by_id(records: list[ScoredTrajectory]) -> dict[int, list[ScoredTrajectory]]:
    r"""The records of each group id, in member order, groups in ascending id order."""
    groups: dict[int, list[ScoredTrajectory]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.group, r.member)):
        groups[r.group].append(r)
    return dict(groups)


def count_signal_groups(records: list[ScoredTrajectory]) -> int:
    r"""Number of groups of `records` whose rewards differ (`has_reward_signal`)."""
    return sum(has_reward_signal(g) for g in groups_by_id(records).values())


def extra_prompt_indices(dataset_size: int, count: int, seed: int, step: int, attempt: int) -> list[int]:
    r"""Row indices of the prompts of an extra generation batch: `count` rows drawn without replacement.

    The draw depends only on `(seed, step, attempt)` (a string-seeded `random.Random`), so every rank draws the same
    rows without communicating, and a resumed run draws what the uninterrupted run would have. Rows of the current
    generation batch may be drawn again (the chance is `batch / dataset_size` per row).

    Args:
        dataset_size: Rows in the training set (> 0).
        count: Prompts per generation batch (`arpo_rollout_batch_size`); at most `dataset_size` distinct rows are
            drawn, repeated in order when `count` is larger.
        seed: The run's seed (`seed`).
        step: The optimiser step at which the rollout happens (`state.global_step`).
        attempt: 1 for the first extra batch of this rollout, 2 for the second, ...

    Raises:
        ValueError: `dataset_size` or `count` is not positive.
    """
    if dataset_size <= 0 or count <= 0:
        raise ValueError(f"need a non-empty training set and count > 0, got {dataset_size} rows and count {count}")
    rng = random.Random(f"dynamic-sampling/{seed}/{step}/{attempt}")
    drawn = rng.sample(range(dataset_size), min(count, dataset_size))
    return [drawn[i % len(drawn)] for i in range(count)]


def choose_update_groups(batches: list[list[ScoredTrajectory]], target: int) -> list[tuple[int, int]]:
    r"""The `(batch index, group id)` of the `target` groups of the update.

    Groups with different rewards first, in rollout order (batch, then group id); when there are fewer than `target`,
    equal-reward groups fill the rest, also in rollout order. Nothing is drawn at random.

    Args:
        batches: The scored records of each generation batch, group ids local to their batch.
        target: Groups the update needs (`arpo_rollout_batch_size`).

    Raises:
        ValueError: the batches hold fewer than `target` groups in all.
    """
    signal, flat = [], []
    for b, records in enumerate(batches):
        for gid, group in groups_by_id(records).items():
            (signal if has_reward_signal(group) else flat).append((b, gid))
    if len(signal) + len(flat) < target:
        raise ValueError(f"{len(signal) + len(flat)} groups rolled out, the update needs {target}")
    return (signal + flat)[:target]


def assemble_update(
    batches: list[tuple[list[ScoredTrajectory], list[dict[str, Any]]]], target: int
) -> tuple[list[ScoredTrajectory], list[dict[str, Any]], list[ScoredTrajectory], dict[str, float]]:
    r"""Build the update's records and rows from one or more generation batches (`choose_update_groups`).

    Args:
        batches: `(records, group rows)` per generation batch; `records[i].group` indexes that batch's `group rows`.
        target: Groups the update needs.

    Returns:
        `(update records, update rows, all records, metrics)`: the update's records renumbered `0 .. target-1` in the
        chosen order (copies; the members keep their ids), the matching dataset rows, every rolled-out record with
        group ids made unique over the batches (batch b's group g becomes `b * target + g`; for the logged reward and
        rollout metrics, which describe what the policy sampled), and the `dynamic_sampling/...` metrics:
        `generation_batches`, `groups_rolled_out`, `dropped_groups` (rolled out but not in the update),
        `filled_groups` (equal-reward groups in the update) and `identical_groups_in_update` (their share).
    """
    chosen = choose_update_groups([records for records, _ in batches], target)
    grouped = [groups_by_id(records) for records, _ in batches]
    update_records, update_rows = [], []
    filled = 0
    for new_gid, (b, gid) in enumerate(chosen):
        group = grouped[b][gid]
        filled += not has_reward_signal(group)
        update_records.extend(replace(r, group=new_gid) for r in group)
        update_rows.append(batches[b][1][gid])
    sampled = [replace(r, group=b * target + r.group) for b, (records, _) in enumerate(batches) for r in records]
    rolled_out = sum(len(g) for g in grouped)
    metrics = {
        "dynamic_sampling/generation_batches": float(len(batches)),
        "dynamic_sampling/groups_rolled_out": float(rolled_out),
        "dynamic_sampling/dropped_groups": float(rolled_out - target),
        "dynamic_sampling/filled_groups": float(filled),
        "dynamic_sampling/identical_groups_in_update": filled / max(target, 1),
    }
    return update_records, update_rows, sampled, metrics


def combine_generation_batches(batches: list[tuple[int, dict, dict]]) -> tuple[dict[str, float], dict[str, float]]:
    r"""Rollout metrics and timings of several generation batches rolled out one after the other.

    Args:
        batches: `(groups, rollout and tool metrics, timing)` per batch, as `ArpoStep.roll_out_and_score` returns them.

    Returns:
        `(metrics, timing)`: rollout metrics as `combine_rank_shards` combines ranks (counters summed, means weighted
        by groups), tool metrics (`tools/...`) by `combine_tool_metrics`, and timings summed (the batches ran in
        sequence; `time/...` keys, in seconds; other keys, e.g. `perf/decode_step_ms`, averaged).
    """
    shards = []
    for groups, metrics, _ in batches:
        rollout = {k: v for k, v in metrics.items() if not k.startswith("tools/")}
        tools = {k: v for k, v in metrics.items() if k.startswith("tools/")}
        shards.append((groups, rollout, {}, tools))
    metrics, _ = combine_rank_shards(shards)
    timing: dict[str, float] = {}
    counts: dict[str, int] = defaultdict(int)
    for _, _, t in batches:
        for k, v in t.items():
            if isinstance(v, (int, float)) and math.isfinite(float(v)):
                timing[k] = timing.get(k, 0.0) + float(v)
                counts[k] += 1
    for k, c in counts.items():
        if not k.startswith("time/"):  # rates such as perf/decode_step_ms: mean over the batches reporting them
            timing[k] /= c
    return metrics, timing

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

r"""From scored trajectories to the trainer's micro-batches: groups, token advantages, layout and padding.

Pure functions of their arguments (no trainer, no process group); the stages of `pipeline.py` call
them in this order: `groups_of_rows`, the rollout, `token_advantages`, `micro_batch_layout`, `collate_records`.
"""

import math
from typing import Any

import torch

from ...algorithms import get_advantage_estimator
from ..trl_compat import pad
from .records import ScoredTrajectory, prompt_ids_of


def groups_of_rows(rows: list[dict[str, Any]], group_size: int) -> list[dict[str, Any]]:
    r"""One dataset row per group of a generation batch in TRL's layout (each prompt repeated M times in a row).

    Raises:
        RuntimeError: the rows are not whole groups of `group_size` identical prompts.
    """
    if len(rows) % group_size:
        raise RuntimeError(f"generation batch of {len(rows)} rows is not whole groups of {group_size}.")
    group_rows = []
    for start in range(0, len(rows), group_size):
        chunk = rows[start : start + group_size]
        key = prompt_ids_of(chunk[0])
        if any(prompt_ids_of(r) != key for r in chunk[1:]):
            raise RuntimeError("TRL's sampler did not place the M copies of a prompt in consecutive rows.")
        group_rows.append(chunk[0])
    return group_rows


def token_advantages(
    records: list[ScoredTrajectory], config: Any, reward_name: str = "the reward function"
) -> tuple[list[list[float]], list[list[int]]]:
    r"""Token advantages and training loss masks of every record (soft or hard attribution, docs/algorithms.md §4.2-§4.3).

    Rewards and advantages are checked in float32, the dtype they are trained in: a reward that is finite in float64
    but not in float32 (1e308) would give inf, then NaN advantages, NaN gradients and a NaN model (issue 24).

    Args:
        records: The whole generation batch (every group, all ranks), in group order.
        config: The run's `ArpoLossConfig`: `attribution` names the advantage estimator in the registry (`soft`,
            `hard` or any registered name), which receives the whole config (e.g. `hard_dedup`).
        reward_name: The reward's name (`agentic_reward`) for the error message.

    Returns:
        `(advantages, loss masks)`, one `[len_response]` list per record.

    Raises:
        FloatingPointError: a reward or an advantage is not finite in float32, naming the reward function and the
            first such trajectory (group, member, reward).
    """
    if not records:
        return [], []
    rewards = torch.tensor([r.reward for r in records], dtype=torch.float32)
    _check_finite(rewards, records, reward_name, "reward")
    lengths = [len(r.response_ids) for r in records]
    width = max(max(lengths), 1)
    mask = torch.zeros(len(records), width, dtype=torch.long)
    for i, r in enumerate(records):
        if lengths[i]:
            mask[i, : lengths[i]] = torch.tensor(r.loss_mask, dtype=torch.long)
    estimator = get_advantage_estimator(config.attribution)
    token_adv, new_mask = estimator(
        rewards,
        torch.tensor([r.group for r in records], dtype=torch.long),
        mask,
        config,
        parents=[r.parent for r in records],
        branch_pos=[r.branch_pos for r in records],
        lengths=lengths,
    )
    _check_finite(token_adv.to(torch.float32), records, reward_name, "advantage")
    advs = [token_adv[i, : lengths[i]].tolist() for i in range(len(records))]
    masks = [new_mask[i, : lengths[i]].tolist() for i in range(len(records))]
    return advs, masks


def _check_finite(values: torch.Tensor, records: list[ScoredTrajectory], reward_name: str, what: str) -> None:
    r"""Raise `FloatingPointError` naming the reward and the first record whose `values` row is not finite."""
    finite = torch.isfinite(values)
    if finite.all():
        return
    row = int((~finite.reshape(len(records), -1).all(dim=1)).nonzero()[0, 0])
    rec = records[row]
    raise FloatingPointError(
        f"reward function {reward_name}: the {what} of trajectory (group {rec.group}, member {rec.member}) is not "
        f"finite in float32 (reward {rec.reward!r}); training on it would make every weight NaN. Keep rewards "
        "within about +-1e38 (the reference scale is [-1, 1.1]); the run stops here and saves nothing."
    )


def micro_batch_layout(
    num_records: int, rank: int, world_size: int, per_device_batch: int, accumulation_steps: int, steps: int
) -> list[tuple[slice, slice]]:
    r"""Rows of this rank's micro-batches: update-major, then rank, then accumulation step (`ArpoTrainer` docstring).

    Args:
        num_records: Trajectories of the generation batch (all ranks).
        rank: This process's index.
        world_size: Number of processes.
        per_device_batch: `per_device_train_batch_size` (b).
        accumulation_steps: `gradient_accumulation_steps` (A).
        steps: `steps_per_generation` (micro-steps fed by one rollout).

    Returns:
        Per micro-step k = (update u, accumulation step a): `(rows of the micro-batch, rows of its optimiser update)`,
        i.e. `u*U + rank*A*b + a*b` ... `+ b` and `u*U` ... `(u+1)*U` with U = b * A * world_size.

    Raises:
        RuntimeError: the trajectories do not fill `steps / A` updates exactly.
    """
    per_update = per_device_batch * accumulation_steps * world_size
    if num_records != per_update * (steps // accumulation_steps):
        raise RuntimeError(
            f"{num_records} trajectories do not fill {steps // accumulation_steps} updates of {per_update}."
        )
    layout = []
    for k in range(steps):
        u, a = divmod(k, accumulation_steps)
        start = u * per_update + rank * accumulation_steps * per_device_batch + a * per_device_batch
        layout.append((slice(start, start + per_device_batch), slice(u * per_update, (u + 1) * per_update)))
    return layout


def padded_tokens(lengths: list[tuple[int, int]]) -> int:
    r"""Tokens of a micro-batch as collated: rows x (longest prompt + longest response) (`collate_records` layout)."""
    if not lengths:
        return 0
    return len(lengths) * (max(p for p, _ in lengths) + max(max(c, 1) for _, c in lengths))


def token_micro_batches(lengths: list[tuple[int, int]], max_tokens: int, count: int | None = None) -> list[list[int]]:
    r"""Cut one rank's rows of an optimiser update into micro-batches of at most `max_tokens` padded tokens.

    Rows are sorted by total length (longest first, ties by index) and packed greedily in that order, so rows of
    similar length share a micro-batch and little padding is computed; a row longer than `max_tokens` on its own gets a
    micro-batch of its own. With `count` the result has exactly `count` micro-batches: the largest ones (by padded
    tokens, with two rows or more) are halved until there are enough.

    Every rank must run the same number of forward/backward passes per update (DDP and DeepSpeed synchronise
    gradients in the last one; ZeRO-3 gathers parameters in each), so the trainer calls this once per rank with
    `count=None`, takes the largest result over ranks and calls it again with that `count` (every rank has every
    trajectory after the rollout's gather, so no communication is needed). Every rank holds the same number of rows
    per update and the greedy count never exceeds the rows, so that `count` is always reachable.

    Args:
        lengths: `(prompt tokens, response tokens)` per row, in row order.
        max_tokens: Cap on `padded_tokens` of a micro-batch (> 0).
        count: Exact number of micro-batches wanted (>= the greedy count), or None.

    Returns:
        Row indices per micro-batch (each in ascending order), micro-batches ordered by their first row.

    Raises:
        ValueError: `max_tokens` < 1, or `count` below the greedy number of micro-batches or above the rows.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}.")
    order = sorted(range(len(lengths)), key=lambda i: (-(lengths[i][0] + lengths[i][1]), i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        candidate = current + [i]
        if current and padded_tokens([lengths[j] for j in candidate]) > max_tokens:
            batches.append(current)
            candidate = [i]
        current = candidate
    if current:
        batches.append(current)
    if count is not None:
        if count < len(batches):
            raise ValueError(f"{len(batches)} micro-batches of at most {max_tokens} tokens do not fit in {count}.")
        if count > len(lengths):
            raise ValueError(f"{len(lengths)} rows cannot make {count} micro-batches.")
        while len(batches) < count:
            splittable = [b for b in batches if len(b) > 1]
            largest = max(splittable, key=lambda b: (padded_tokens([lengths[j] for j in b]), -b[0]))
            batches.remove(largest)
            half = len(largest) // 2
            batches += [largest[:half], largest[half:]]
    return sorted((sorted(b) for b in batches), key=lambda b: b[0])


def collate_records(
    records: list[ScoredTrajectory],
    num_tokens: int,
    pad_token_id: int,
    device: Any,
    num_sequences: int | None = None,
    proximal_version: int | None = None,
) -> dict[str, torch.Tensor]:
    r"""One micro-batch in TRL's layout plus the loss mask and token advantages.

    Args:
        records: The micro-batch's trajectories (`token_advantages` and `loss_mask_train` filled).
        num_tokens: Loss-mask tokens of the whole optimiser update over all ranks (the token-mean normaliser).
        pad_token_id: Padding id (an empty response becomes one padding token with attention 0).
        device: Where the tensors go.
        num_sequences: Trajectories of the whole optimiser update over all ranks (the sequence-mean normaliser of
            `rl_loss_agg_mode`, docs/algorithms.md §4.8); None: the rows of this micro-batch.
        proximal_version: Version of the weights the update starts from (optimiser steps done); when a record was
            sampled by an older version, the micro-batch also carries `behaviour_per_token_logps` `[b, C]` (NaN where
            there is none) and `behaviour_stale` `[b]` for the off-policy correction (docs/algorithms.md §13.2).

    Returns:
        `prompt_ids`/`prompt_mask` `[b, P]` (left-padded), `completion_ids`/`completion_mask` `[b, C]` (attention,
        observations included), `loss_mask` `[b, C]`, `advantages` `[b, C]`, `num_items_in_batch` (scalar, >= 1) and
        `num_sequences_in_batch` (scalar, >= 1); plus the two behaviour tensors when a record is stale.
    """
    prompt = [torch.tensor(r.prompt_ids, dtype=torch.long, device=device) for r in records]
    response = [torch.tensor(r.response_ids or [pad_token_id], dtype=torch.long, device=device) for r in records]
    attn = [torch.ones(len(r.response_ids) or 1, dtype=torch.long, device=device) for r in records]
    if any(not r.response_ids for r in records):
        attn = [a * (1 if r.response_ids else 0) for a, r in zip(attn, records)]
    loss_mask = [torch.tensor(r.loss_mask_train or [0], dtype=torch.long, device=device) for r in records]
    adv = [torch.tensor(r.token_advantages or [0.0], dtype=torch.float32, device=device) for r in records]
    stale = [
        proximal_version is not None and r.weight_version is not None and r.weight_version < proximal_version
        for r in records
    ]
    extra = {}
    if any(stale):
        behaviour = [
            torch.tensor(
                r.behaviour_logps if len(r.behaviour_logps) == len(r.response_ids) and r.response_ids else [math.nan],
                dtype=torch.float32,
                device=device,
            )
            for r in records
        ]
        extra = {
            "behaviour_per_token_logps": pad(behaviour, padding_value=math.nan, padding_side="right"),
            "behaviour_stale": torch.tensor(stale, dtype=torch.bool, device=device),
        }
    return extra | {
        "prompt_ids": pad(prompt, padding_value=pad_token_id, padding_side="left"),
        "prompt_mask": pad([torch.ones_like(p) for p in prompt], padding_value=0, padding_side="left"),
        "completion_ids": pad(response, padding_value=pad_token_id, padding_side="right"),
        "completion_mask": pad(attn, padding_value=0, padding_side="right"),
        "loss_mask": pad(loss_mask, padding_value=0, padding_side="right"),
        "advantages": pad(adv, padding_value=0.0, padding_side="right"),
        "num_items_in_batch": torch.tensor(float(max(num_tokens, 1)), device=device),
        "num_sequences_in_batch": torch.tensor(float(max(num_sequences or len(records), 1)), device=device),
    }

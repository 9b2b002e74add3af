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

r"""Outcome advantages for ARPO/AEPO: GRPO group normalisation with soft or hard (lineage) attribution.

Documented in docs/algorithms.md §4. Group normalisation follows RUC-NLPIR/ARPO
`ARPO/verl_arpo_entropy/verl/trainer/ppo/core_algos.py:113-166` (unbiased std, eps added to the std) except that a
group of size 1 gets advantage 0 (the reference uses mean 0 and std 1 there, i.e. A = r).

Lineage semantics used throughout this module (one group = the M trajectories of one prompt):

* A **global rollout** (initial rollout or fill) starts from the bare prompt. It shares only the prompt with every other
  row of the group: 0 leading response tokens.
* A **branch** is created by copying its source's full state at a round boundary. `parent` is the source's row index
  (within the group) and `branch_pos` = p is the source's response length at the moment of the copy. The branch
  therefore starts with exactly the source's first p response tokens (observations included) and from there on samples
  independently: branch and source share the first p response tokens and are treated as different from token p on.
* Two rows share every token before their **divergence point**. For a branch i of source q at copy position p and any
  row j that existed as a lineage before i: shared(i, j) = min(p, shared(q, j)); shared(i, i) = len(i).
  Sharing is a prefix relation, so the rows containing a given token form one tree segment.
"""

from collections.abc import Sequence
from typing import Protocol

import torch

from .registry import register_advantage_estimator


def compute_grpo_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6, std_norm: bool = True
) -> torch.Tensor:
    r"""GRPO group normalisation of scalar outcome rewards.

    `A_i = (r_i - mean_g r) / (std_g r + eps)` with the unbiased std (divisor M - 1) over the rows of i's group g.
    A group whose rewards are all identical, and a group with a single row, gets A = 0 exactly (no floating-point
    residue from the mean). Computed in float64 and returned in float32 (or the rewards' floating dtype if wider).
    With `std_norm=False` (Dr. GRPO, `rl_advantage_std_norm: false`) the std division is left out:
    `A_i = r_i - mean_g r` (docs/algorithms.md §4.8).

    Source: docs/algorithms.md §4.1; RUC-NLPIR/ARPO `ARPO/verl_arpo_entropy/verl/trainer/ppo/core_algos.py:113-166`;
    Dr. GRPO, arXiv 2503.20783 §3.1.

    Args:
        rewards: Scalar reward per trajectory, `[batch]`.
        group_ids: Group (prompt) id per trajectory, `[batch]`, integer dtype; rows of a group need not be contiguous.
        eps: Added to the std (not to the variance).
        std_norm: Divide by the group std (GRPO); False: only subtract the group mean (Dr. GRPO).

    Returns:
        Advantages, `[batch]`.

    Raises:
        ValueError: shapes are not `[batch]` and `[batch]`, or `group_ids` is not an integer tensor.
    """
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_ids must both be [batch]; got {tuple(rewards.shape)}, {tuple(group_ids.shape)}."
        )
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool:
        raise ValueError(f"group_ids must be an integer tensor, got {group_ids.dtype}.")
    out_dtype = rewards.dtype if rewards.dtype in (torch.float64,) else torch.float32
    if rewards.numel() == 0:
        return rewards.to(out_dtype)

    scores = rewards.detach().to(torch.float64)
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max().item()) + 1
    counts = torch.zeros(num_groups, dtype=torch.float64, device=scores.device).index_add_(
        0, inverse, torch.ones_like(scores)
    )
    sums = torch.zeros(num_groups, dtype=torch.float64, device=scores.device).index_add_(0, inverse, scores)
    means = sums / counts
    centred = scores - means[inverse]
    sq = torch.zeros(num_groups, dtype=torch.float64, device=scores.device).index_add_(0, inverse, centred.square())
    std = torch.sqrt(sq / (counts - 1).clamp(min=1))
    gmax = torch.full((num_groups,), -torch.inf, dtype=torch.float64, device=scores.device).scatter_reduce(
        0, inverse, scores, reduce="amax"
    )
    gmin = torch.full((num_groups,), torch.inf, dtype=torch.float64, device=scores.device).scatter_reduce(
        0, inverse, scores, reduce="amin"
    )
    degenerate = (counts < 2) | (gmax == gmin)
    advantages = centred / (std[inverse] + eps) if std_norm else centred
    advantages = torch.where(degenerate[inverse], torch.zeros_like(advantages), advantages)
    return advantages.to(out_dtype)


def broadcast_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    r"""Broadcast per-trajectory advantages to every response token: `A[:, None] * mask`.

    Args:
        advantages: `[batch]`.
        response_mask: Loss mask `[batch, seq_len]` (1 trained token, 0 observation or padding).

    Returns:
        Token advantages `[batch, seq_len]` (0 where the mask is 0), dtype of `advantages`.

    Raises:
        ValueError: shapes disagree.
    """
    if advantages.dim() != 1 or response_mask.dim() != 2 or response_mask.shape[0] != advantages.shape[0]:
        raise ValueError(
            f"advantages must be [batch] and response_mask [batch, seq_len]; got {tuple(advantages.shape)}, "
            f"{tuple(response_mask.shape)}."
        )
    return advantages[:, None] * response_mask.to(advantages.dtype)


def lineage_shared_lengths(
    parents: Sequence[int | None], branch_pos: Sequence[int | None], lengths: Sequence[int]
) -> torch.Tensor:
    r"""Number of leading response tokens every pair of rows of ONE group shares, from the recorded lineage.

    Semantics (see the module docstring): a global rollout (`parents[i] is None`) shares no response token with any
    other row; a branch i of source q = `parents[i]` copied q's full response at copy position p = `branch_pos[i]`
    (q's response length at that moment), so shared(i, q) = p and, for every other row j that is not a descendant of
    i, shared(i, j) = min(p, shared(q, j)); descendants of i are handled symmetrically. The diagonal is the row's own
    response length. Parents may have any index (they need not precede their branches).

    Example: row 0 global (length 10), row 1 branched from row 0 at p=4 (length 9), row 2 branched from row 1 at p=6
    (length 8), row 3 global: shared[1, 0] = 4, shared[2, 1] = 6, shared[2, 0] = min(6, 4) = 4, shared[3, :3] = 0.

    Source: docs/algorithms.md §4.3; lineage fields of `rollout.Trajectory` (`parent`,
    `branch_pos`).

    Args:
        parents: `parents[i]` = row index (within the group) of i's source, or None for a global rollout. `[M]`.
        branch_pos: `branch_pos[i]` = response length of the source at the copy (ignored, may be None, for global
            rollouts). `[M]`.
        lengths: Final response length (tokens, observations included) of every row. `[M]`.

    Returns:
        Symmetric long tensor `[M, M]`, `result[i, j]` = shared leading response tokens, `result[i, i] = lengths[i]`.

    Raises:
        ValueError: lists of different lengths, a parent index out of range or equal to the row, a lineage cycle, a
            branch without `branch_pos`, a negative length, or a copy position larger than the source's final length
            or the branch's own length.
    """
    num_rows = len(lengths)
    if len(parents) != num_rows or len(branch_pos) != num_rows:
        raise ValueError(
            f"parents ({len(parents)}), branch_pos ({len(branch_pos)}) and lengths ({num_rows}) differ in length."
        )
    for i in range(num_rows):
        if lengths[i] < 0:
            raise ValueError(f"row {i}: negative length {lengths[i]}.")
        q = parents[i]
        if q is None:
            continue
        if not 0 <= q < num_rows or q == i:
            raise ValueError(f"row {i}: parent {q} is not another row of the group (size {num_rows}).")
        p = branch_pos[i]
        if p is None or p < 0:
            raise ValueError(f"row {i}: a branch needs a non-negative branch_pos, got {p}.")
        if p > lengths[q] or p > lengths[i]:
            raise ValueError(
                f"row {i}: copy position {p} exceeds the source's length {lengths[q]} or the branch's length {lengths[i]}."
            )

    # Topological order: every parent before its branches.
    order: list[int] = []
    state = [0] * num_rows  # 0 new, 1 on stack, 2 done
    for start in range(num_rows):
        chain = []
        node = start
        while node is not None and state[node] == 0:
            state[node] = 1
            chain.append(node)
            node = parents[node]
        if node is not None and state[node] == 1:
            raise ValueError(f"lineage cycle through row {node}.")
        for member in reversed(chain):
            state[member] = 2
            order.append(member)

    shared = torch.zeros(num_rows, num_rows, dtype=torch.long)
    done: list[int] = []
    for i in order:
        shared[i, i] = int(lengths[i])
        q = parents[i]
        if q is not None:
            p = int(branch_pos[i])
            for j in done:
                value = min(p, int(shared[q, j]))
                shared[i, j] = value
                shared[j, i] = value
        done.append(i)
    return shared


def batch_shared_lengths(
    group_ids: torch.Tensor | Sequence[int],
    parents: Sequence[int | None],
    branch_pos: Sequence[int | None],
    lengths: Sequence[int],
) -> torch.Tensor:
    r"""Block-diagonal `[batch, batch]` shared-length matrix of a whole batch from per-group lineage.

    Rows of different groups share nothing (0). Within a group, `parents` holds group-local indices: the k-th row (in
    batch order) carrying a group id is that group's member k, as in `RolloutOutput.groups` flattened group by group.

    Args:
        group_ids: Group id per row, `[batch]`.
        parents: Group-local index of each row's source or None, `[batch]`.
        branch_pos: Source response length at the copy or None, `[batch]`.
        lengths: Response length of each row, `[batch]`.

    Returns:
        Long tensor `[batch, batch]`.

    Raises:
        ValueError: as `lineage_shared_lengths`, or lists of different lengths.
    """
    ids = group_ids.tolist() if isinstance(group_ids, torch.Tensor) else list(group_ids)
    num_rows = len(ids)
    if not len(parents) == len(branch_pos) == len(lengths) == num_rows:
        raise ValueError("group_ids, parents, branch_pos and lengths must have the same length.")
    members: dict[int, list[int]] = {}
    for row, gid in enumerate(ids):
        members.setdefault(gid, []).append(row)
    shared = torch.zeros(num_rows, num_rows, dtype=torch.long)
    for rows in members.values():
        block = lineage_shared_lengths(
            [parents[r] for r in rows], [branch_pos[r] for r in rows], [lengths[r] for r in rows]
        )
        index = torch.tensor(rows, dtype=torch.long)
        shared[index[:, None], index[None, :]] = block
    return shared


def compute_hard_attribution_advantages(
    advantages: torch.Tensor, shared: torch.Tensor, response_mask: torch.Tensor, dedup: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Hard (tree-segment) attribution of trajectory advantages to tokens.

    Token t of row i (response position t, 0-based, response left-aligned in `response_mask`) lies in the tree segment
    shared by the rows S(i, t) = {j : shared[i, j] > t}; every row's copy of it gets the segment advantage
    mean_{j in S(i, t)} A_j. Tokens after a row's last divergence point have S = {i} and keep A_i; a fresh global
    rollout shares no response token, so all its tokens keep A_i. With token-mean aggregation and no clipping the
    summed gradient equals soft attribution (a segment shared by d rows contributes d * mean(A) * grad log pi either
    way); it differs where clipping and dual clip act, because the sign tests use the segment mean.

    With `dedup`, a shared segment is kept only in the lowest-index row that contains it: token (i, t) stays in the loss
    iff i = min S(i, t), i.e. iff t >= max_{j < i} shared[i, j]; the other copies are masked out, so the prefix weighs
    1 instead of d.

    Source: docs/algorithms.md §4.3 (`arpo_hard_dedup`).

    Args:
        advantages: Per-trajectory advantages (e.g. from `compute_grpo_advantages`), `[batch]`.
        shared: Shared leading response tokens between rows, `[batch, batch]` (block diagonal over groups; see
            `lineage_shared_lengths`, `batch_shared_lengths`). `shared[i, i]` is row i's response length.
        response_mask: Loss mask `[batch, seq_len]` (1 trained token, 0 observation or padding).
        dedup: Keep each shared segment in its lowest-index row only.

    Returns:
        `(token_advantages [batch, seq_len], loss_mask [batch, seq_len])`: the advantages are 0 where the returned
        mask is 0; the mask is `response_mask` (its dtype) with de-duplicated copies zeroed.

    Raises:
        ValueError: shapes disagree, `shared` is not symmetric, or an off-diagonal entry exceeds a row's own length.
    """
    batch = advantages.shape[0]
    if advantages.dim() != 1 or shared.shape != (batch, batch) or response_mask.dim() != 2:
        raise ValueError(
            f"expected advantages [B], shared [B, B], response_mask [B, T]; got {tuple(advantages.shape)}, "
            f"{tuple(shared.shape)}, {tuple(response_mask.shape)}."
        )
    if response_mask.shape[0] != batch:
        raise ValueError(f"response_mask has {response_mask.shape[0]} rows, advantages {batch}.")
    seq_len = response_mask.shape[1]
    device = response_mask.device
    shared = shared.to(device=device, dtype=torch.long)
    if not torch.equal(shared, shared.T):
        raise ValueError("shared must be symmetric.")
    diag = torch.diagonal(shared)
    if bool((shared > diag[:, None]).any()):
        raise ValueError("shared[i, j] must not exceed shared[i, i] (row i's length).")
    if batch == 0:
        return response_mask.to(torch.float32) * 0, response_mask

    adv64 = advantages.detach().to(device=device, dtype=torch.float64)
    sorted_shared, order = torch.sort(shared, dim=1, stable=True)  # ascending per row
    adv_sorted = adv64[order]  # [B, B]
    suffix = torch.flip(torch.cumsum(torch.flip(adv_sorted, dims=[1]), dim=1), dims=[1])
    suffix = torch.cat([suffix, torch.zeros(batch, 1, dtype=torch.float64, device=device)], dim=1)  # [B, B + 1]
    positions = torch.arange(seq_len, device=device, dtype=torch.long).expand(batch, seq_len).contiguous()
    first = torch.searchsorted(sorted_shared.contiguous(), positions, right=True)  # first index with shared > t
    count = (batch - first).to(torch.float64)
    total = torch.gather(suffix, 1, first)
    token_adv = torch.where(count > 0, total / count.clamp(min=1.0), torch.zeros_like(total))

    loss_mask = response_mask
    if dedup:
        lower = torch.tril(shared, diagonal=-1)  # shared[i, j] for j < i, else 0
        keep_from = lower.max(dim=1).values if batch > 1 else torch.zeros(batch, dtype=torch.long, device=device)
        keep = positions >= keep_from[:, None]
        loss_mask = torch.where(keep, response_mask, torch.zeros_like(response_mask))

    out_dtype = advantages.dtype if advantages.dtype == torch.float64 else torch.float32
    token_adv = token_adv.to(out_dtype) * loss_mask.to(out_dtype)
    return token_adv, loss_mask


def _lineage_lists(batch: int, parents, branch_pos, lengths, response_mask: torch.Tensor):
    if parents is None:
        parents = [None] * batch
    if branch_pos is None:
        branch_pos = [None] * batch
    if lengths is None:
        lengths = [response_mask.shape[1]] * batch
    elif isinstance(lengths, torch.Tensor):
        lengths = lengths.tolist()
    return list(parents), list(branch_pos), [int(x) for x in lengths]


def compute_soft_attribution_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    parents: Sequence[int | None] | None = None,
    branch_pos: Sequence[int | None] | None = None,
    lengths: Sequence[int] | torch.Tensor | None = None,
    dedup: bool = False,
    eps: float = 1e-6,
    std_norm: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Soft attribution (default, `arpo_advantage_attribution: soft`): plain GRPO over all M rows, branches included.

    Every token of row i gets A_i; a prefix shared by d rows is thus implicitly credited with the mean advantage of the
    rows sharing it, weighted d times under token-mean. Lineage arguments are accepted for a uniform estimator
    signature and ignored (as is `dedup`, which only applies to hard attribution).

    Source: docs/algorithms.md §4.2; RUC-NLPIR/ARPO issue 6; arXiv 2507.19849 section 3.2.

    Args:
        rewards: Scalar rewards `[batch]`.
        group_ids: Group id per row `[batch]` (integer).
        response_mask: Loss mask `[batch, seq_len]`.
        parents: Ignored.
        branch_pos: Ignored.
        lengths: Ignored.
        dedup: Ignored.
        eps: Added to the group std.
        std_norm: Divide by the group std (`compute_grpo_advantages`).

    Returns:
        `(token_advantages [batch, seq_len], loss_mask [batch, seq_len])`; the mask is `response_mask` unchanged.
    """
    del parents, branch_pos, lengths, dedup
    advantages = compute_grpo_advantages(rewards, group_ids, eps=eps, std_norm=std_norm)
    return broadcast_advantages(advantages.to(response_mask.device), response_mask), response_mask


def compute_hard_attribution_from_lineage(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    parents: Sequence[int | None] | None = None,
    branch_pos: Sequence[int | None] | None = None,
    lengths: Sequence[int] | torch.Tensor | None = None,
    dedup: bool = False,
    eps: float = 1e-6,
    std_norm: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Hard attribution (`arpo_advantage_attribution: hard`): GRPO advantages averaged over lineage tree segments.

    Combines `compute_grpo_advantages`, `batch_shared_lengths` and `compute_hard_attribution_advantages`.

    Args:
        rewards: Scalar rewards `[batch]`.
        group_ids: Group id per row `[batch]` (integer). The k-th row of a group (batch order) is its member k.
        response_mask: Loss mask `[batch, seq_len]`, responses left-aligned.
        parents: Group-local source index per row, None for global rollouts (all None: no sharing, equals soft).
        branch_pos: Source response length at the copy per row (None for global rollouts).
        lengths: Response length per row (`len(Trajectory.response_ids)`); default `seq_len` for every row, which
            only disables the check that a copy position fits its source.
        dedup: `arpo_hard_dedup`: keep each shared segment in its lowest-index row only.
        eps: Added to the group std.
        std_norm: Divide by the group std (`compute_grpo_advantages`).

    Returns:
        `(token_advantages [batch, seq_len], loss_mask [batch, seq_len])`.

    Raises:
        ValueError: inconsistent lineage (see `lineage_shared_lengths`).
    """
    batch = rewards.shape[0]
    parents, branch_pos, lengths = _lineage_lists(batch, parents, branch_pos, lengths, response_mask)
    advantages = compute_grpo_advantages(rewards, group_ids, eps=eps, std_norm=std_norm)
    shared = batch_shared_lengths(group_ids, parents, branch_pos, lengths)
    return compute_hard_attribution_advantages(advantages.to(response_mask.device), shared, response_mask, dedup=dedup)


class EstimatorSettings(Protocol):
    r"""What the built-in estimators read from their config object (`train.arpo.config.ArpoLossConfig` has it).

    An estimator of your own may read any other field of the config object it receives.
    """

    hard_dedup: bool  # arpo_hard_dedup
    # read with a fallback to GRPO's std division (configs built before this field, e.g. a namespace of the field
    # above): advantage_std_norm (rl_advantage_std_norm resolved), docs/algorithms.md §4.8


@register_advantage_estimator("soft")
def soft_estimator(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    response_mask: torch.Tensor,
    config: EstimatorSettings,
    *,
    parents: Sequence[int | None] | None = None,
    branch_pos: Sequence[int | None] | None = None,
    lengths: Sequence[int] | torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The registered form of `compute_soft_attribution_advantages` (`arpo_advantage_attribution: soft`).

    Args:
        rewards: Scalar rewards `[batch]`.
        group_ids: Group id per row `[batch]`.
        response_mask: Loss mask `[batch, seq_len]`.
        config: The run's loss config: `advantage_std_norm` (`rl_advantage_std_norm`; GRPO's std division without
            it).
        parents: Group-local source index per row (ignored by soft attribution).
        branch_pos: Source response length at the copy per row (ignored).
        lengths: Response length per row (ignored).

    Returns:
        `(token_advantages [batch, seq_len], loss_mask [batch, seq_len])`.
    """
    return compute_soft_attribution_advantages(
        rewards,
        group_ids,
        response_mask,
        parents=parents,
        branch_pos=branch_pos,
        lengths=lengths,
        std_norm=getattr(config, "advantage_std_norm", True),
    )


@register_advantage_estimator("hard")
def hard_estimator(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    response_mask: torch.Tensor,
    config: EstimatorSettings,
    *,
    parents: Sequence[int | None] | None = None,
    branch_pos: Sequence[int | None] | None = None,
    lengths: Sequence[int] | torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The registered form of `compute_hard_attribution_from_lineage` (`arpo_advantage_attribution: hard`).

    Args:
        rewards: Scalar rewards `[batch]`.
        group_ids: Group id per row `[batch]`.
        response_mask: Loss mask `[batch, seq_len]`, responses left-aligned.
        config: The run's loss config: `hard_dedup` (`arpo_hard_dedup`) and `advantage_std_norm`
            (`rl_advantage_std_norm`; GRPO's std division without it).
        parents: Group-local source index per row, None for global rollouts.
        branch_pos: Source response length at the copy per row (None for global rollouts).
        lengths: Response length per row (see `compute_hard_attribution_from_lineage`).

    Returns:
        `(token_advantages [batch, seq_len], loss_mask [batch, seq_len])`.

    Raises:
        ValueError: inconsistent lineage.
    """
    return compute_hard_attribution_from_lineage(
        rewards,
        group_ids,
        response_mask,
        parents=parents,
        branch_pos=branch_pos,
        lengths=lengths,
        dedup=config.hard_dedup,
        std_norm=getattr(config, "advantage_std_norm", True),
    )

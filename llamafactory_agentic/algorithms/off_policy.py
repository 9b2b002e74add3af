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

r"""The off-policy correction of asynchronous training (docs/algorithms.md §13): per-token importance weights.

With `rl_max_staleness: k > 0` a trajectory may have been sampled by weights up to k optimiser steps older than the
ones that train on it. Three policies are involved per token t (log-probs of the sampled token at temperature T):
`behaviour` (the weights that sampled it, returned by the engine), `proximal` (the trainer's weights when the batch's
first update starts, recomputed: TRL's "old" log-probs) and the current `policy` (with gradient). The policy loss
(any registered one) keeps using `policy / proximal` as its ratio; this module only computes the weight
`w_t = pi_prox(t) / pi_behav(t)` by which each token's advantage is multiplied, kept apart from the losses so that new
losses need no change (`pipeline.micro_batch_loss` applies it).

Modes (`rl_off_policy_correction`):

* `decoupled` - decoupled PPO (Hilton et al. 2022, "Batch size-invariance for policy optimization"; AReaL):
  `w_t = exp(proximal_t - behaviour_t)`, uncapped.
* `tis` (default) - truncated importance sampling: `w_t = min(exp(proximal_t - behaviour_t), cap)`,
  `cap = rl_off_policy_cap` (default 2.0).
* `none` - `w_t = 1` (the stale tokens are trained as if on-policy).

Tokens sampled by the proximal weights themselves (staleness 0), and tokens without a behaviour log-prob (NaN:
observations, an appended EOS, an engine that returns none) get `w_t = 1` exactly, so `rl_max_staleness: 0` trains as
before, bit for bit.
"""

import torch


CORRECTIONS = ("tis", "decoupled", "none")


def off_policy_weights(
    proximal_logps: torch.Tensor,
    behaviour_logps: torch.Tensor,
    stale: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "tis",
    cap: float = 2.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""Per-token importance weights `pi_prox / pi_behav` (docs/algorithms.md §13.2), 1 where no correction applies.

    Args:
        proximal_logps: `[b, C]` recomputed log-probs of the sampled tokens under the trainer's weights (no grad).
        behaviour_logps: `[b, C]` the engine's log-probs of the same tokens; NaN where there is none.
        stale: `[b]` or `[b, C]` bool, True where the sampling weights are older than the proximal ones.
        mask: `[b, C]` loss mask (bool or 0/1); the metrics only count these tokens.
        mode: `tis`, `decoupled` or `none` (`CORRECTIONS`).
        cap: Upper bound of the `tis` weight (> 0).

    Returns:
        `(weights [b, C] float32, detached, 1 outside the corrected tokens; metrics)` with `off_policy/weight_mean`,
        `off_policy/weight_max`, `off_policy/capped_frac` (share of corrected tokens whose weight was capped) and
        `off_policy/corrected_tokens`, all over the corrected loss-mask tokens.

    Raises:
        ValueError: an unknown mode or a cap <= 0.
    """
    if mode not in CORRECTIONS:
        raise ValueError(f"rl_off_policy_correction must be one of {CORRECTIONS}, got {mode!r}")
    if cap <= 0:
        raise ValueError(f"rl_off_policy_cap must be > 0, got {cap}")
    proximal = proximal_logps.detach().float()
    behaviour = behaviour_logps.detach().float().to(proximal.device)
    stale = stale.to(proximal.device).bool()
    if stale.dim() == 1:
        stale = stale.unsqueeze(-1).expand_as(proximal)
    corrected = stale & mask.bool() & ~torch.isnan(behaviour)
    ones = torch.ones_like(proximal)
    if mode == "none" or not bool(corrected.any()):
        return ones, {"off_policy/corrected_tokens": float(corrected.sum().item())}
    log_ratio = torch.where(corrected, proximal - torch.nan_to_num(behaviour), torch.zeros_like(proximal))
    raw = torch.exp(log_ratio)
    weights = torch.clamp(raw, max=cap) if mode == "tis" else raw
    weights = torch.where(corrected, weights, ones)
    count = corrected.sum()
    metrics = {
        "off_policy/corrected_tokens": float(count.item()),
        "off_policy/weight_mean": float(weights[corrected].mean().item()),
        "off_policy/weight_max": float(weights[corrected].max().item()),
        "off_policy/capped_frac": float(((raw > cap) & corrected).sum().item() / count.item())
        if mode == "tis"
        else 0.0,
    }
    return weights, metrics

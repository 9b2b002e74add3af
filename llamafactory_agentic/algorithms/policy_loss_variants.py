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

r"""Policy losses users pair with agents, next to PPO clip: GSPO, Dr. GRPO and CISPO (`rl_policy_loss`).

Documented in docs/algorithms.md §4.8. Each is registered by name and works with any rollout (`stage: arpo` or `aepo`,
any preset): the rollout never reads the loss, and the loss reads only the run's `ArpoLossConfig`.

* `gspo` (arXiv 2507.18071): sequence-level importance ratio `s_i = exp(mean_t (ℓ − ℓ_old))` and sequence-level
  clipping, aggregated by `seq_mean_token_mean`;
* `dr_grpo` (arXiv 2503.20783): GRPO's PPO-clip token loss with advantages `r − mean_g r` (no std division, selected
  through `rl_advantage_std_norm`) and the token sum divided by the constant `N_seq × arpo_max_response_length`;
* `cispo` (MiniMax-M1, arXiv 2506.13585): REINFORCE with clipped, stop-gradient importance-sampling weights,
  `−sg(clip(r, 1 − ε_low, 1 + ε_high)) · A · ℓ`, aggregated by `rl_loss_agg_mode` (token mean by default).

`resolve_loss_settings` holds the one table of which aggregation, advantage normalisation and clip each loss fixes, and
refuses combinations that are not the named method.
"""

from typing import Any

import torch

from .aggregation import LOSS_AGG_MODES, aggregate_loss
from .policy_loss import check_loss_shapes, compute_policy_loss, masked_loss_inputs, policy_loss_metrics
from .registry import register_policy_loss


# ---------------------------------------------------------------------------------------------- per-loss settings
# What a built-in loss fixes (docs/algorithms.md §4.8): its aggregation, its advantage normalisation, and whether it
# implements AEPO's balanced clip. A loss not listed (ppo_clip, arpo, aepo, one of your own) fixes nothing.
FIXED_AGG_MODE = {"gspo": "seq_mean_token_mean", "dr_grpo": "seq_mean_token_sum"}
FIXED_ADVANTAGE_STD_NORM = {"dr_grpo": False}
NO_BALANCED_CLIP = ("gspo", "cispo")


def resolve_loss_settings(
    policy_loss: str,
    loss_agg_mode: str | None,
    advantage_std_norm: bool | None,
    balanced_clip: bool,
    dual_clip: float | None = None,
    epsilon_high: float | None = None,
) -> tuple[str, bool]:
    r"""The aggregation mode and advantage normalisation of a run, from its loss and the two keys (None: the loss's own).

    `rl_loss_agg_mode: null` takes the loss's aggregation (`gspo`: `seq_mean_token_mean`, `dr_grpo`:
    `seq_mean_token_sum` over a constant, every other loss `token_mean`); `rl_advantage_std_norm: null` takes its
    normalisation (`dr_grpo`: off, every other loss on, GRPO's `(r − mean) / (std + 1e-6)`).

    Args:
        policy_loss: `rl_policy_loss`.
        loss_agg_mode: `rl_loss_agg_mode` (None: the loss's own).
        advantage_std_norm: `rl_advantage_std_norm` (None: the loss's own).
        balanced_clip: `aepo_balanced_clip` after the presets (on in the `aepo` and `aepo-paper` presets).
        dual_clip: `rl_dual_clip` (None: off).
        epsilon_high: `rl_epsilon_high` after the presets (None: not checked).

    Returns:
        `(loss_agg_mode, advantage_std_norm)`, resolved.

    Raises:
        ValueError: an unknown aggregation mode; a mode or normalisation the loss fixes otherwise (GSPO's objective is
            a mean over sequences of a sequence-level term; Dr. GRPO is defined by the unnormalised advantage and the
            constant normaliser); `aepo_balanced_clip` with `gspo`/`cispo`, which do not implement it; or `cispo` with
            `rl_dual_clip` c < 1 + `rl_epsilon_high`, where the dual clip would cut IS weights that CISPO's own clip
            keeps (docs/algorithms.md §4.8, "Dual clip"). Each message names the keys and the fix.
    """
    if loss_agg_mode is not None and loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"Unknown `rl_loss_agg_mode` {loss_agg_mode!r}; choose one of {', '.join(LOSS_AGG_MODES)}.")
    fixed_mode = FIXED_AGG_MODE.get(policy_loss)
    if fixed_mode is not None and loss_agg_mode not in (None, fixed_mode):
        raise ValueError(
            f"`rl_policy_loss: {policy_loss}` aggregates by `{fixed_mode}` (docs/algorithms.md §4.8), got "
            f"`rl_loss_agg_mode: {loss_agg_mode}`. Remove `rl_loss_agg_mode` (or set it to `{fixed_mode}`), or use "
            f"`rl_policy_loss: ppo_clip` or `cispo` with `rl_loss_agg_mode: {loss_agg_mode}`."
        )
    fixed_norm = FIXED_ADVANTAGE_STD_NORM.get(policy_loss)
    if fixed_norm is not None and advantage_std_norm not in (None, fixed_norm):
        raise ValueError(
            f"`rl_policy_loss: {policy_loss}` uses advantages without the group std division (docs/algorithms.md "
            f"§4.8), got `rl_advantage_std_norm: {str(advantage_std_norm).lower()}`. Remove `rl_advantage_std_norm`, "
            "or use `rl_policy_loss: ppo_clip` with `rl_loss_agg_mode: seq_mean_token_sum` for std-normalised "
            "advantages with a token-sum aggregation."
        )
    if balanced_clip and policy_loss in NO_BALANCED_CLIP:
        raise ValueError(
            f"`rl_policy_loss: {policy_loss}` does not implement AEPO's entropy-balanced clip, and this run has "
            "`aepo_balanced_clip: true` (the `aepo` presets' value). Set `aepo_balanced_clip: false` to pair "
            f"{policy_loss} with AEPO's rollout (entropy pre-monitoring, branch penalty) and entropy-aware advantage, "
            "which do not depend on the loss; or use `rl_policy_loss: ppo_clip` or `dr_grpo`, which do."
        )
    if policy_loss == "cispo" and dual_clip is not None and epsilon_high is not None and dual_clip < 1 + epsilon_high:
        raise ValueError(
            f"`rl_policy_loss: cispo` bounds every importance-sampling weight by 1 + rl_epsilon_high = "
            f"{1 + epsilon_high:g}, and `rl_dual_clip: {dual_clip:g}` is below that bound, so it would cut the weights "
            'of negative-advantage tokens that CISPO keeps (docs/algorithms.md §4.8, "Dual clip"). Set '
            f"`rl_dual_clip: null` (CISPO as in its paper), or `rl_dual_clip` >= {1 + epsilon_high:g}, where the "
            "weight clip already holds the dual-clip bound."
        )
    mode = loss_agg_mode or fixed_mode or "token_mean"
    norm = advantage_std_norm if advantage_std_norm is not None else (fixed_norm if fixed_norm is not None else True)
    return mode, norm


# ---------------------------------------------------------------------------------------------- helpers
def _check_inputs(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor, loss_mask: torch.Tensor
) -> None:
    check_loss_shapes(log_probs, old_log_probs=old_log_probs, advantages=advantages, loss_mask=loss_mask)
    if log_probs.dim() != 2:
        raise ValueError(f"log_probs must be [batch, seq_len], got {tuple(log_probs.shape)}.")


# ---------------------------------------------------------------------------------------------- GSPO
GSPO_MAX_LOG_RATIO = 20.0  # |mean_t log r| is clamped here against overflow (s <= 4.9e8, far outside any clip range)


def compute_gspo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    epsilon_low: float = 3e-4,
    epsilon_high: float = 4e-4,
    dual_clip: float | None = None,
    num_sequences: int | float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""GSPO: sequence-level importance ratio and clipping (GSPO-token form), mean over sequences.

    With ℓ = log π_θ, ℓ_old = log π_old, m the loss mask and |y_i| = Σ_t m_it:

    ```
    s_i   = exp( Σ_t m_it·(ℓ_it − ℓ_old,it) / |y_i| )                 sequence-level ratio
    s_it  = sg(s_i) · exp(ℓ_it − sg(ℓ_it))                           value s_i, gradient s_i·∇ℓ_it
    L_it  = max( −A_it·s_it , −A_it·clip(s_it, 1 − ε_low, 1 + ε_high) )
    L_it  = min( L_it , −c·A_it )   where A_it < 0                     dual clip c (`dual_clip`), if set
    loss  = Σ_i ( Σ_t m_it·L_it / |y_i| ) / N_seq                     (`seq_mean_token_mean`)
    ```

    With one advantage per sequence (A_it = A_i, soft attribution) this is GSPO's sequence-level objective exactly:
    the gradient is −A_i·∇s_i / N_seq = −A_i·s_i·mean_t ∇ℓ_it / N_seq unless the clip is active, and 0 for every token
    of a sequence whose clipped term is active (A_i > 0 and s_i > 1 + ε_high, or A_i < 0 and s_i < 1 − ε_low). With
    token advantages (hard attribution) it is the paper's GSPO-token. The mean log-ratio is clamped to ±20 against
    overflow. The dual clip (not in the paper; `rl_dual_clip` of the registered form) is PPO's, on the sequence ratio:
    a sequence with A_i < 0 and s_i > c contributes the constant −c·A_i and no gradient; it changes nothing while
    s_i <= c.

    Source: docs/algorithms.md §4.8; GSPO, arXiv 2507.18071 (§4.1 the sequence-level objective, §4.3 GSPO-token); the
    default ranges are the paper's (3e-4, 4e-4).

    Args:
        log_probs: Current policy log-probs of the response tokens `[batch, seq_len]` (carries the gradient).
        old_log_probs: Log-probs of the policy that generated the batch `[batch, seq_len]`.
        advantages: Token advantages `[batch, seq_len]`.
        loss_mask: `[batch, seq_len]`, 1 for trained tokens.
        epsilon_low: Lower clip range of the sequence ratio.
        epsilon_high: Upper clip range of the sequence ratio.
        dual_clip: Dual-clip constant c > 1 on the sequence ratio for A < 0 (None, the paper's GSPO: none).
        num_sequences: Sequence-mean normaliser (default: the rows of this call); the update's global trajectory count
            when micro-batch losses are summed.

    Returns:
        `(loss, metrics)` with the metric names of `compute_policy_loss`: `loss/clip_frac` is the share of loss-mask
        tokens whose clipped term is active (whole sequences with one advantage), `loss/clip_frac_upper` / `_lower`
        the tokens of sequences with A > 0 and s > 1 + ε_high / A < 0 and s < 1 − ε_low, `loss/ratio_mean` and
        `loss/ratio_max` the sequence ratio s_i over the tokens, `loss/approx_kl` the token mean of ℓ_old − ℓ,
        `loss/dual_clip_frac` the tokens of sequences whose dual-clip bound is active.

    Raises:
        ValueError: shapes disagree, ε_low not in [0, 1) or ε_high < 0, or dual_clip <= 1.
    """
    _check_inputs(log_probs, old_log_probs, advantages, loss_mask)
    if not 0 <= epsilon_low < 1 or epsilon_high < 0:
        raise ValueError(f"need 0 <= epsilon_low < 1 and epsilon_high >= 0; got {epsilon_low}, {epsilon_high}.")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}.")
    mask, logp, old, adv, dtype = masked_loss_inputs(log_probs, old_log_probs, advantages, loss_mask)
    log_ratio = logp - old
    lengths = mask.sum(dim=-1).clamp(min=1).to(dtype)
    seq_log_ratio = (log_ratio.sum(dim=-1) / lengths).clamp(-GSPO_MAX_LOG_RATIO, GSPO_MAX_LOG_RATIO)  # [batch]
    seq_ratio = torch.exp(seq_log_ratio.detach())  # [batch], s_i
    token_ratio = seq_ratio[:, None] * torch.exp(logp - logp.detach())  # [batch, seq_len], s_it
    lower, upper = 1.0 - epsilon_low, 1.0 + epsilon_high
    loss_unclipped = -adv * token_ratio
    loss_clipped = -adv * torch.clamp(token_ratio, lower, upper)
    token_loss = torch.maximum(loss_unclipped, loss_clipped)
    dual_active = None
    if dual_clip is not None:  # PPO's dual clip on the sequence ratio (docs/algorithms.md §4.8, "Dual clip")
        loss_dual = -adv * dual_clip
        negative = adv < 0
        dual_active = negative & (token_loss.detach() > loss_dual)
        token_loss = torch.where(negative, torch.minimum(token_loss, loss_dual), token_loss)
    loss = aggregate_loss(token_loss, mask, "seq_mean_token_mean", num_sequences=num_sequences)
    ratio_t = seq_ratio[:, None].expand_as(logp)
    metrics = policy_loss_metrics(
        loss,
        mask,
        dtype,
        clipped=loss_clipped.detach() > loss_unclipped.detach(),
        upper=(adv > 0) & (ratio_t > upper),
        lower=(adv < 0) & (ratio_t < lower),
        log_ratio=log_ratio,
        ratio=ratio_t,
        dual=dual_active,
    )
    return loss, metrics


# ---------------------------------------------------------------------------------------------- CISPO
def compute_cispo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    loss_agg_mode: str = "token_mean",
    num_tokens: int | float | torch.Tensor | None = None,
    num_sequences: int | float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""CISPO: REINFORCE with clipped, stop-gradient importance-sampling weights (MiniMax-M1).

    With r_t = exp(ℓ_t − ℓ_old,t):

    ```
    w_t  = sg( clip(r_t, 1 − ε_low, 1 + ε_high) )
    L_t  = −w_t · A_t · ℓ_t
    loss = aggregate(L, mask, loss_agg_mode)           (token_mean by default: Σ_t m_t·L_t / Σ_t m_t)
    ```

    The gradient flows only through ℓ: ∂L_t/∂ℓ_t = −w_t·A_t, for EVERY loss-mask token. Unlike PPO's clip, which
    drops the gradient of a token whose clipped term is active, a clipped weight only bounds the token's step. This is
    the variant of the paper's Eq. (4)-(5), the token-level normalisation Σ_i |o_i| included (with `token_mean`),
    and without the token mask of its generalised form (Eq. 6-7); ε_low = `rl_epsilon`, ε_high = `rl_epsilon_high`.
    The paper imposes no lower bound (a large ε_low) and tunes only ε_high: `rl_epsilon: 1.0` gives that (lower bound
    0, which no ratio goes below). The dual clip's bound on a negative-advantage token, a coefficient of at most
    c·|A|, already holds when c >= 1 + ε_high (w <= 1 + ε_high); `resolve_loss_settings` refuses `rl_dual_clip` below
    that, where it would cut weights that CISPO keeps (docs/algorithms.md §4.8, "Dual clip").

    Source: docs/algorithms.md §4.8; MiniMax-M1, arXiv 2506.13585 §3.1.

    Args:
        log_probs: Current policy log-probs `[batch, seq_len]` (carries the gradient).
        old_log_probs: Log-probs of the policy that generated the batch `[batch, seq_len]`.
        advantages: Token advantages `[batch, seq_len]`.
        loss_mask: `[batch, seq_len]`, 1 for trained tokens.
        epsilon_low: Lower range of the IS weight, in [0, 1] (1: no lower bound).
        epsilon_high: Upper range of the IS weight (>= 0).
        loss_agg_mode: `token_mean`, `seq_mean_token_sum` or `seq_mean_token_mean` (`aggregation.aggregate_loss`).
        num_tokens: Token-mean normaliser (the update's global loss-token count).
        num_sequences: Sequence-mean normaliser (the update's global trajectory count).

    Returns:
        `(loss, metrics)` with the metric names of `compute_policy_loss`: `loss/clip_frac` is the share of loss-mask
        tokens whose weight was clipped (`_upper`: r > 1 + ε_high, `_lower`: r < 1 − ε_low; their gradient is kept),
        `loss/ratio_mean`/`_max` the unclipped ratio r.

    Raises:
        ValueError: shapes disagree, ε_low not in [0, 1] or ε_high < 0, or an unknown aggregation mode.
    """
    _check_inputs(log_probs, old_log_probs, advantages, loss_mask)
    if not 0 <= epsilon_low <= 1 or epsilon_high < 0:
        raise ValueError(f"need 0 <= epsilon_low <= 1 and epsilon_high >= 0; got {epsilon_low}, {epsilon_high}.")
    mask, logp, old, adv, dtype = masked_loss_inputs(log_probs, old_log_probs, advantages, loss_mask)
    log_ratio = (logp - old).detach()
    ratio = torch.exp(log_ratio)
    lower, upper = 1.0 - epsilon_low, 1.0 + epsilon_high
    weight = torch.clamp(ratio, lower, upper)  # already detached: sg(clip(r))
    token_loss = -weight * adv * logp
    loss = aggregate_loss(token_loss, mask, loss_agg_mode, num_tokens=num_tokens, num_sequences=num_sequences)
    upper_hit, lower_hit = ratio > upper, ratio < lower
    metrics = policy_loss_metrics(
        loss,
        mask,
        dtype,
        clipped=upper_hit | lower_hit,
        upper=upper_hit,
        lower=lower_hit,
        log_ratio=log_ratio,
        ratio=ratio,
    )
    return loss, metrics


# ---------------------------------------------------------------------------------------------- registered forms
@register_policy_loss("gspo")
def gspo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: Any,
    *,
    balanced_clip_mask: torch.Tensor | None = None,
    num_tokens: int | float | torch.Tensor | None = None,
    num_sequences: int | float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""The registered form of `compute_gspo_loss` (`rl_policy_loss: gspo`): ε_low/ε_high from `config`.

    Args:
        log_probs: `[batch, seq_len]` (carries the gradient).
        old_log_probs: `[batch, seq_len]`.
        advantages: `[batch, seq_len]`.
        loss_mask: `[batch, seq_len]`.
        config: The run's loss config (`epsilon_low`, `epsilon_high`, GSPO's paper uses 3e-4 and 4e-4; `dual_clip`,
            on the sequence ratio).
        balanced_clip_mask: Must be None (GSPO has no balanced clip; `resolve_loss_settings` refuses the key).
        num_tokens: Not used (GSPO averages over sequences).
        num_sequences: Sequence-mean normaliser (the update's global trajectory count).

    Raises:
        ValueError: a `balanced_clip_mask`, or what `compute_gspo_loss` raises.
    """
    del num_tokens
    if balanced_clip_mask is not None:
        raise ValueError("gspo has no balanced clip: set `aepo_balanced_clip: false`.")
    return compute_gspo_loss(
        log_probs,
        old_log_probs,
        advantages,
        loss_mask,
        epsilon_low=config.epsilon_low,
        epsilon_high=config.epsilon_high,
        dual_clip=getattr(config, "dual_clip", None),
        num_sequences=num_sequences,
    )


@register_policy_loss("dr_grpo")
def dr_grpo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: Any,
    *,
    balanced_clip_mask: torch.Tensor | None = None,
    num_tokens: int | float | torch.Tensor | None = None,
    num_sequences: int | float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""Dr. GRPO's loss (`rl_policy_loss: dr_grpo`): PPO-clip tokens, token sum over a constant normaliser.

    ```
    L_it = compute_policy_loss's token loss (clip ε_low/ε_high, dual clip c, AEPO's balanced clip if switched on)
    loss = Σ_i Σ_t m_it·L_it / (N_seq · L_max)          L_max = arpo_max_response_length
    ```

    The normaliser depends on neither the response lengths nor the number of loss-mask tokens, which removes GRPO's
    length bias; the advantages come without the group std division (`rl_advantage_std_norm` resolves to false for
    this loss, `advantages.compute_grpo_advantages(std_norm=False)`). Source: docs/algorithms.md §4.8; Dr. GRPO,
    arXiv 2503.20783 §3.1 (Eq. 3 and its listing: `masked_sum(...) / MAX_TOKENS`).

    Args:
        log_probs: `[batch, seq_len]` (carries the gradient).
        old_log_probs: `[batch, seq_len]`.
        advantages: `[batch, seq_len]`, unnormalised (`r − mean_g r`).
        loss_mask: `[batch, seq_len]`.
        config: The run's loss config (`epsilon_low`, `epsilon_high`, `dual_clip`, `balanced_clip`,
            `max_response_length`).
        balanced_clip_mask: Where AEPO's gradient-preserving bound applies, or None.
        num_tokens: Not used (the normaliser is constant).
        num_sequences: The update's global trajectory count (default: the rows of this call).

    Returns:
        `(loss, metrics)` of `compute_policy_loss`.
    """
    del num_tokens
    rows = num_sequences if num_sequences is not None else max(loss_mask.shape[0], 1)
    return compute_policy_loss(
        log_probs,
        old_log_probs,
        advantages,
        loss_mask,
        epsilon_low=config.epsilon_low,
        epsilon_high=config.epsilon_high,
        dual_clip=config.dual_clip,
        balanced_clip=config.balanced_clip,
        balanced_clip_mask=balanced_clip_mask,
        loss_agg_mode="seq_mean_token_sum",
        num_sequences=rows * float(config.max_response_length),
    )


@register_policy_loss("cispo")
def cispo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: Any,
    *,
    balanced_clip_mask: torch.Tensor | None = None,
    num_tokens: int | float | torch.Tensor | None = None,
    num_sequences: int | float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""The registered form of `compute_cispo_loss` (`rl_policy_loss: cispo`): ε and aggregation from `config`.

    Args:
        log_probs: `[batch, seq_len]` (carries the gradient).
        old_log_probs: `[batch, seq_len]`.
        advantages: `[batch, seq_len]`.
        loss_mask: `[batch, seq_len]`.
        config: The run's loss config (`epsilon_low`, `epsilon_high`, `loss_agg_mode`; token mean without it).
        balanced_clip_mask: Must be None (CISPO keeps every token's gradient; nothing to balance).
        num_tokens: Token-mean normaliser (the update's global loss-token count).
        num_sequences: Sequence-mean normaliser (the update's global trajectory count).

    Raises:
        ValueError: a `balanced_clip_mask`, or what `compute_cispo_loss` raises.
    """
    if balanced_clip_mask is not None:
        raise ValueError("cispo has no balanced clip: set `aepo_balanced_clip: false`.")
    return compute_cispo_loss(
        log_probs,
        old_log_probs,
        advantages,
        loss_mask,
        epsilon_low=config.epsilon_low,
        epsilon_high=config.epsilon_high,
        loss_agg_mode=getattr(config, "loss_agg_mode", "token_mean"),
        num_tokens=num_tokens,
        num_sequences=num_sequences,
    )

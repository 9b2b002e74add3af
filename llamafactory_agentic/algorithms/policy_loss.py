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

r"""Policy losses for ARPO/AEPO: PPO clip with asymmetric bounds and dual clip, AEPO's gradient-preserving clip, KL.

Documented in docs/algorithms.md §4.4 and §5.3. Every function works on `[batch, seq_len]` tensors of response
tokens and aggregates by token mean over the loss mask with an explicit normaliser `num_tokens`, so a trainer that
splits a mini-batch into micro-batches (and ranks) can pass the mini-batch's global loss-token count and sum the
micro-batch losses: the result equals the token mean over the whole mini-batch (docs/algorithms.md §4.4, **Decision**).
"""

from typing import Protocol

import torch

from .registry import register_policy_loss


def _normaliser(mask: torch.Tensor, num_tokens: int | float | torch.Tensor | None) -> torch.Tensor | float:
    if num_tokens is None:
        return mask.sum().clamp(min=1).to(torch.float32)
    if isinstance(num_tokens, torch.Tensor):
        return num_tokens.to(device=mask.device, dtype=torch.float32)
    if num_tokens <= 0:
        raise ValueError(f"num_tokens must be positive, got {num_tokens}.")
    return float(num_tokens)


def masked_mean(
    values: torch.Tensor, mask: torch.Tensor, num_tokens: int | float | torch.Tensor | None = None
) -> torch.Tensor:
    r"""Token mean `sum(mask * values) / num_tokens`.

    Positions where the mask is 0 never contribute, even if `values` holds inf or NaN there.

    Args:
        values: `[batch, seq_len]` (any shape broadcastable with `mask`).
        mask: Loss mask of the same shape (bool or 0/1).
        num_tokens: Normaliser; default `mask.sum()` (at least 1, so an all-zero mask gives 0, not NaN). Pass the
            global loss-token count of the mini-batch when summing micro-batch losses.

    Returns:
        Scalar tensor (float32 or wider).

    Raises:
        ValueError: a non-tensor `num_tokens` <= 0.
    """
    selected = torch.where(mask.bool(), values, torch.zeros_like(values))
    total = selected.sum(dtype=torch.float64 if values.dtype == torch.float64 else torch.float32)
    return total / _normaliser(mask, num_tokens)


def check_loss_shapes(log_probs: torch.Tensor, **others: torch.Tensor) -> None:
    r"""Check that every tensor of `others` (by name) has the shape of `log_probs`.

    Raises:
        ValueError: naming the first tensor whose shape differs, with both shapes.
    """
    for name, tensor in others.items():
        if tensor.shape != log_probs.shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, log_probs {tuple(log_probs.shape)}.")


def masked_loss_inputs(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor, loss_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.dtype]:
    r"""The inputs every policy loss computes on, zero outside the loss mask (shared by `policy_loss_variants`).

    No term then reads a padding or observation position, where the inputs may hold inf or NaN.

    Args:
        log_probs: `[batch, seq_len]` (keeps its gradient).
        old_log_probs: `[batch, seq_len]` (detached).
        advantages: `[batch, seq_len]` (detached).
        loss_mask: `[batch, seq_len]`, 1 for trained tokens.

    Returns:
        `(mask, logp, old_logp, adv, dtype)`: the bool mask and the three tensors in `dtype` (float64 when `log_probs`
        is float64, else float32).
    """
    mask = loss_mask.bool()
    dtype = torch.float64 if log_probs.dtype == torch.float64 else torch.float32
    logp = torch.where(mask, log_probs.to(dtype), torch.zeros((), dtype=dtype, device=log_probs.device))
    old_logp = torch.where(mask, old_log_probs.detach().to(dtype), torch.zeros_like(logp))
    adv = torch.where(mask, advantages.detach().to(dtype), torch.zeros_like(logp))
    return mask, logp, old_logp, adv, dtype


LOSS_METRIC_NAMES = (
    "loss/pg_loss",
    "loss/clip_frac",
    "loss/clip_frac_upper",
    "loss/clip_frac_lower",
    "loss/dual_clip_frac",
    "loss/balanced_clip_frac",
    "loss/approx_kl",
    "loss/ratio_mean",
    "loss/ratio_max",
    "loss/num_tokens",
)


def policy_loss_metrics(
    loss: torch.Tensor,
    mask: torch.Tensor,
    dtype: torch.dtype,
    *,
    clipped: torch.Tensor,
    upper: torch.Tensor,
    lower: torch.Tensor,
    log_ratio: torch.Tensor,
    ratio: torch.Tensor,
    dual: torch.Tensor | None = None,
    preserved: torch.Tensor | None = None,
) -> dict[str, float]:
    r"""The metrics of every policy loss (`LOSS_METRIC_NAMES`, read by the step logger), in one device -> host copy.

    Each `loss/*_frac` is the share of this call's loss-mask tokens whose flag is set.

    Args:
        loss: The scalar loss (`loss/pg_loss`).
        mask: Bool loss mask `[batch, seq_len]`.
        dtype: The loss's compute dtype.
        clipped: `[batch, seq_len]` flags: the clipped term is active (`loss/clip_frac`).
        upper: Flags of the upper clip (`loss/clip_frac_upper`).
        lower: Flags of the lower clip (`loss/clip_frac_lower`).
        log_ratio: ℓ − ℓ_old `[batch, seq_len]` (`loss/approx_kl` is the token mean of its negative).
        ratio: The ratio the loss reports `[batch, seq_len]` (`loss/ratio_mean`, `loss/ratio_max`).
        dual: Flags of the active dual-clip bound (None: 0).
        preserved: Flags of the tokens whose gradient AEPO's balanced clip preserved (None: 0).

    Returns:
        `{name: float}` for each name of `LOSS_METRIC_NAMES`; `loss/num_tokens` is the mask count.
    """
    with torch.no_grad():
        maskf = mask.to(dtype)
        count = maskf.sum()
        denom = count.clamp(min=1)

        def frac(flags: torch.Tensor | None) -> torch.Tensor:
            return (flags & mask).to(dtype).sum() / denom if flags is not None else count * 0

        ratio = ratio.detach()
        values = torch.stack(
            [
                loss.detach().to(dtype),
                frac(clipped),
                frac(upper),
                frac(lower),
                frac(dual),
                frac(preserved),
                (-log_ratio.detach() * maskf).sum() / denom,
                (ratio * maskf).sum() / denom,
                torch.where(mask, ratio, torch.zeros_like(ratio)).max() if mask.numel() else count * 0,
                count,
            ]
        ).tolist()
    return {name: float(value) for name, value in zip(LOSS_METRIC_NAMES, values)}


def compute_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    dual_clip: float | None = 3.0,
    balanced_clip: bool = False,
    balanced_clip_mask: torch.Tensor | None = None,
    num_tokens: int | float | torch.Tensor | None = None,
    loss_agg_mode: str = "token_mean",
    num_sequences: int | float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""Clipped policy-gradient loss (PPO clip, eps_low/eps_high, dual clip), optionally with AEPO's balanced clip.

    Per token, with r = exp(log_probs - old_log_probs):

    ```
    L = max(-A * r, -A * clip(r, 1 - eps_low, upper))
    L = min(L, -c * A)          if A < 0 and dual_clip = c is not None
    loss = sum(mask * L) / num_tokens
    ```

    `upper` is the constant 1 + eps_high, or with `balanced_clip` the gradient-preserving bound
    (1 + eps_high) * r / sg(r) (AEPO): implemented as (1 + eps_high) * exp(log_probs - sg(log_probs)), whose value is
    exactly 1 + eps_high and whose gradient is (1 + eps_high) * grad log pi. The loss VALUE is therefore identical to
    PPO's; only tokens with A > 0 and r > 1 + eps_high change their gradient, from 0 to -(1 + eps_high) * A *
    grad log pi / num_tokens. `balanced_clip_mask` restricts the gradient-preserving bound to the True tokens
    (`aepo_balanced_clip_scope: high_entropy`); the others keep the constant bound.

    Source: docs/algorithms.md §4.4 and §5.3; RUC-NLPIR/ARPO `ARPO/verl_arpo_entropy/verl/trainer/ppo/core_algos.py`
    (`compute_policy_loss`) and `AEPO/verl_aepo_entropy/verl/trainer/ppo/core_algos.py:645-679`; dual clip from
    arXiv 1912.09729.

    Args:
        log_probs: Current policy log-probs of the response tokens, `[batch, seq_len]` (carries the gradient).
        old_log_probs: Log-probs of the policy that generated the batch (recomputed before the first update),
            `[batch, seq_len]`, no gradient needed.
        advantages: Token advantages `[batch, seq_len]` (already entropy-scaled if AEPO's entropy advantage is on).
        loss_mask: `[batch, seq_len]`, 1 for trained tokens, 0 for observations and padding.
        epsilon_low: Lower clip range; the ratio is clipped below at 1 - epsilon_low.
        epsilon_high: Upper clip range; the ratio is clipped above at 1 + epsilon_high.
        dual_clip: Dual-clip constant c > 1 for A < 0 (None disables it).
        balanced_clip: Use AEPO's gradient-preserving upper bound.
        balanced_clip_mask: Optional bool `[batch, seq_len]`: where the gradient-preserving bound applies (only with
            `balanced_clip`); None applies it to every token.
        num_tokens: Token-mean normaliser (default: `loss_mask.sum()`); pass the global loss-token count of the
            mini-batch over micro-batches and ranks.
        loss_agg_mode: How the token losses L are aggregated (`aggregation.aggregate_loss`, docs/algorithms.md §4.8):
            `token_mean` (the formula above, default), `seq_mean_token_sum` or `seq_mean_token_mean`.
        num_sequences: The sequence modes' normaliser (default: the rows of this call); pass the update's global
            trajectory count over micro-batches and ranks.

    Returns:
        `(loss, metrics)`: a scalar loss tensor and float metrics computed over this call's loss-mask tokens:
        `loss/pg_loss`, `loss/clip_frac` (clipped term strictly active, verl's `pg_clipfrac`),
        `loss/clip_frac_upper` (A > 0 and r > 1 + eps_high), `loss/clip_frac_lower` (A < 0 and r < 1 - eps_low),
        `loss/dual_clip_frac` (A < 0 and the dual clip bound is active), `loss/balanced_clip_frac` (tokens whose
        gradient the balanced clip preserved), `loss/approx_kl` (mean of old - new log-prob),
        `loss/ratio_mean`, `loss/ratio_max`, `loss/num_tokens` (this call's mask count).

    Raises:
        ValueError: shapes disagree, dual_clip <= 1, epsilons negative (or epsilon_low >= 1), a non-positive
            `num_tokens`, or `balanced_clip_mask` given without `balanced_clip`.
    """
    shape = log_probs.shape
    check_loss_shapes(log_probs, old_log_probs=old_log_probs, advantages=advantages, loss_mask=loss_mask)
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}.")
    if epsilon_low < 0 or epsilon_high < 0 or epsilon_low >= 1:
        raise ValueError(f"need 0 <= epsilon_low < 1 and epsilon_high >= 0; got {epsilon_low}, {epsilon_high}.")
    if balanced_clip_mask is not None:
        if not balanced_clip:
            raise ValueError("balanced_clip_mask is only meaningful with balanced_clip=True.")
        if balanced_clip_mask.shape != shape:
            raise ValueError(
                f"balanced_clip_mask has shape {tuple(balanced_clip_mask.shape)}, expected {tuple(shape)}."
            )

    mask, logp, old_logp, adv, compute_dtype = masked_loss_inputs(log_probs, old_log_probs, advantages, loss_mask)

    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    lower = 1.0 - epsilon_low
    upper_value = 1.0 + epsilon_high
    upper_hit = ratio > upper_value
    lower_hit = ratio < lower

    if balanced_clip:
        # value exactly 1 + eps_high, gradient (1 + eps_high) * grad log pi (= (1 + eps_high) * r / sg(r))
        upper = upper_value * torch.exp(logp - logp.detach())
        if balanced_clip_mask is not None:
            upper = torch.where(balanced_clip_mask.bool(), upper, torch.full_like(upper, upper_value).detach())
    else:
        upper = torch.full_like(ratio, upper_value)
    clipped_ratio = torch.where(upper_hit, upper, torch.where(lower_hit, torch.full_like(ratio, lower), ratio))

    loss_unclipped = -adv * ratio
    loss_clipped = -adv * clipped_ratio
    token_loss = torch.maximum(loss_unclipped, loss_clipped)
    negative = adv < 0
    if dual_clip is not None:
        loss_dual = -adv * dual_clip
        dual_active = negative & (token_loss > loss_dual)
        token_loss = torch.where(negative, torch.minimum(token_loss, loss_dual), token_loss)
    else:
        dual_active = None

    if loss_agg_mode == "token_mean":
        loss = masked_mean(token_loss, mask, num_tokens)
    else:  # other aggregation modes (docs/algorithms.md §4.8)
        from .aggregation import aggregate_loss

        loss = aggregate_loss(token_loss, mask, loss_agg_mode, num_tokens=num_tokens, num_sequences=num_sequences)

    positive = adv > 0
    preserved = None
    if balanced_clip:
        preserved = positive & upper_hit
        if balanced_clip_mask is not None:
            preserved = preserved & balanced_clip_mask.bool()
    metrics = policy_loss_metrics(
        loss,
        mask,
        compute_dtype,
        clipped=loss_clipped.detach() > loss_unclipped.detach(),
        upper=positive & upper_hit,
        lower=negative & lower_hit,
        log_ratio=log_ratio,
        ratio=ratio,
        dual=dual_active,
        preserved=preserved,
    )
    return loss, metrics


def compute_aepo_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    dual_clip: float | None = 3.0,
    balanced_clip: bool = True,
    balanced_clip_mask: torch.Tensor | None = None,
    num_tokens: int | float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""`compute_policy_loss` with AEPO's entropy-balanced (gradient-preserving) clip on by default.

    Source: docs/algorithms.md §5.3; RUC-NLPIR/ARPO `AEPO/verl_aepo_entropy/verl/trainer/ppo/core_algos.py:645-679`.
    Arguments, returns and errors as `compute_policy_loss`.
    """
    return compute_policy_loss(
        log_probs,
        old_log_probs,
        advantages,
        loss_mask,
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        dual_clip=dual_clip,
        balanced_clip=balanced_clip,
        balanced_clip_mask=balanced_clip_mask,
        num_tokens=num_tokens,
    )


class PolicyLossSettings(Protocol):
    r"""What a registered policy loss reads from its config object (`train.arpo.config.ArpoLossConfig` has these).

    A loss of your own may read any other field of the config object it receives (e.g. `entropy_coef`); add the key
    to `hparams.py` and the field to `ArpoLossConfig` and the loss gets it without a change to the trainer.
    """

    epsilon_low: float  # rl_epsilon
    epsilon_high: float  # rl_epsilon_high (resolved: rl_epsilon when unset)
    dual_clip: float | None  # rl_dual_clip
    balanced_clip: bool  # aepo_balanced_clip
    # read with a fallback to the former behaviour (configs built before these fields, e.g. a namespace of the four
    # settings above): loss_agg_mode (rl_loss_agg_mode resolved, default token_mean), docs/algorithms.md §4.8


@register_policy_loss("ppo_clip")
@register_policy_loss("arpo")
@register_policy_loss("aepo")  # the balanced clip follows config.balanced_clip (on in the AEPO presets)
def ppo_clip_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: PolicyLossSettings,
    *,
    balanced_clip_mask: torch.Tensor | None = None,
    num_tokens: int | float | torch.Tensor | None = None,
    num_sequences: int | float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""The registered form of `compute_policy_loss` (`rl_policy_loss: ppo_clip`, `arpo` or `aepo`): settings from `config`.

    Args:
        log_probs: Current policy log-probs `[batch, seq_len]` (carries the gradient).
        old_log_probs: Log-probs of the policy that generated the batch `[batch, seq_len]`.
        advantages: Token advantages `[batch, seq_len]`.
        loss_mask: `[batch, seq_len]`, 1 for trained tokens.
        config: The run's loss config (`epsilon_low`, `epsilon_high`, `dual_clip`, `balanced_clip` and
            `loss_agg_mode` from `rl_loss_agg_mode`; a config without that field aggregates by `token_mean`).
        balanced_clip_mask: Bool `[batch, seq_len]` where the gradient-preserving bound applies, or None.
        num_tokens: Token-mean normaliser (the update's global loss-token count).
        num_sequences: Sequence-mean normaliser of the sequence aggregation modes (the update's global trajectory
            count; default: the rows of this call).

    Returns:
        `(loss, metrics)` of `compute_policy_loss`.
    """
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
        num_tokens=num_tokens,
        loss_agg_mode=getattr(config, "loss_agg_mode", "token_mean"),
        num_sequences=num_sequences,
    )


def low_var_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    r"""Low-variance KL estimate (Schulman's k3) of the current policy from the reference, per token.

    `k3 = exp(l_ref - l) - (l_ref - l) - 1`, clamped to [-10, 10]; non-negative and unbiased for KL(pi || pi_ref).

    Source: docs/algorithms.md §4.5; http://joschu.net/blog/kl-approx.html.

    Args:
        log_probs: Current policy log-probs `[batch, seq_len]`.
        ref_log_probs: Reference model log-probs `[batch, seq_len]`.

    Returns:
        `[batch, seq_len]`.

    Raises:
        ValueError: shapes disagree.
    """
    if log_probs.shape != ref_log_probs.shape:
        raise ValueError(f"shapes differ: {tuple(log_probs.shape)} vs {tuple(ref_log_probs.shape)}.")
    diff = ref_log_probs.float() - log_probs.float()
    return torch.clamp(torch.exp(diff) - diff - 1.0, min=-10.0, max=10.0)


def compute_kl_loss(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    loss_mask: torch.Tensor,
    num_tokens: int | float | torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Token-mean `low_var_kl` over the loss mask (multiply by `rl_kl_coef` and add to the loss).

    Args:
        log_probs: `[batch, seq_len]`.
        ref_log_probs: `[batch, seq_len]`.
        loss_mask: `[batch, seq_len]`.
        num_tokens: Token-mean normaliser (see `masked_mean`).

    Returns:
        Scalar tensor.
    """
    return masked_mean(low_var_kl(log_probs, ref_log_probs), loss_mask, num_tokens)


def compute_entropy_loss(
    entropy: torch.Tensor, loss_mask: torch.Tensor, num_tokens: int | float | torch.Tensor | None = None
) -> torch.Tensor:
    r"""Token-mean entropy over the loss mask; the entropy bonus is `loss - rl_entropy_coef * this`.

    Args:
        entropy: Per-token entropy `[batch, seq_len]` (with gradient if the bonus should act).
        loss_mask: `[batch, seq_len]`.
        num_tokens: Token-mean normaliser (see `masked_mean`).

    Returns:
        Scalar tensor (nats).
    """
    return masked_mean(entropy, loss_mask, num_tokens)

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

r"""Token entropy and AEPO's entropy-aware advantage.

Documented in docs/algorithms.md §5.3 (`high_entropy` scope) and §5.4; reference
RUC-NLPIR/ARPO `AEPO/verl_aepo_entropy/verl/trainer/ppo/core_algos.py:620-638`. Unlike the reference, the entropy is
meant to be computed whenever these terms need it (not only with a non-zero entropy bonus), and a micro-batch with
fewer than two valid tokens gets z = 0 instead of NaN (docs/algorithms.md §12).
"""

import torch
from torch.utils.checkpoint import checkpoint


def _entropy_rows(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    scaled = logits.float()
    if temperature != 1.0:
        scaled = scaled / temperature
    log_p = torch.log_softmax(scaled, dim=-1)
    prob = log_p.exp()
    safe_log_p = torch.where(prob > 0, log_p, torch.zeros_like(log_p))  # 0 * -inf would give NaN
    return -(prob * safe_log_p).sum(dim=-1)


def _check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}.")


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    r"""Full-vocabulary entropy `H = -sum_v p_v log p_v` of `softmax(logits / temperature)` per position.

    Numerically stable (log-softmax in float32; vocabulary entries with probability 0, e.g. logits of -inf, contribute
    0). Materialises float32 copies of the whole `[batch, seq_len, vocab]` tensor; for large vocabularies use
    `entropy_from_logits_chunked`.

    Args:
        logits: `[batch, seq_len, vocab]` (any leading shape, vocabulary last).
        temperature: Sampling temperature the logits are divided by (docs/algorithms.md §5.4: the rollout temperature).

    Returns:
        Entropy in nats, `[batch, seq_len]` (float32), differentiable w.r.t. `logits`.

    Raises:
        ValueError: `temperature` <= 0.
    """
    _check_temperature(temperature)
    return _entropy_rows(logits, temperature)


def entropy_from_logits_chunked(
    logits: torch.Tensor, chunk_size: int = 1024, temperature: float = 1.0
) -> torch.Tensor:
    r"""`entropy_from_logits` computed `chunk_size` positions at a time.

    Peak extra memory is a few float32 tensors of `[chunk_size, vocab]` instead of full `[batch, seq_len, vocab]`
    copies (bf16 logits are upcast per chunk only). If gradients are required each chunk is checkpointed, so the
    backward pass recomputes the chunk's softmax instead of keeping all of them alive.

    Args:
        logits: `[batch, seq_len, vocab]` (any leading shape, vocabulary last).
        chunk_size: Positions per chunk (> 0).
        temperature: Sampling temperature the logits are divided by.

    Returns:
        Entropy in nats, `[batch, seq_len]` (float32).

    Raises:
        ValueError: `chunk_size` <= 0 or `temperature` <= 0.
    """
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}.")
    _check_temperature(temperature)
    leading = logits.shape[:-1]
    flat = logits.reshape(-1, logits.shape[-1])
    needs_grad = torch.is_grad_enabled() and logits.requires_grad
    pieces = []
    for chunk in flat.split(chunk_size, dim=0):
        if needs_grad:
            pieces.append(checkpoint(_entropy_rows, chunk, temperature, use_reentrant=False))
        else:
            pieces.append(_entropy_rows(chunk, temperature))
    if not pieces:
        return torch.zeros(leading, dtype=torch.float32, device=logits.device)
    return torch.cat(pieces, dim=0).reshape(leading)


def entropy_zscore(entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""Z-score of token entropies over the loss-mask tokens: `z = (H - mean H) / std H` (detached).

    Mean and unbiased std (divisor n - 1) run over the valid tokens of the given tensors (the trainer passes one
    micro-batch: the reference scope). Rules: std = 0 -> std is replaced by 1; fewer than 2 valid tokens -> z = 0
    everywhere. Positions outside the mask get z = 0.

    Source: docs/algorithms.md §5.4; RUC-NLPIR/ARPO `AEPO/verl_aepo_entropy/verl/trainer/ppo/core_algos.py:620-638`.

    Args:
        entropy: Token entropies `[batch, seq_len]`.
        mask: Loss mask `[batch, seq_len]`.

    Returns:
        `[batch, seq_len]` float32 z-scores, no gradient.

    Raises:
        ValueError: shapes disagree.
    """
    if entropy.shape != mask.shape:
        raise ValueError(f"entropy {tuple(entropy.shape)} and mask {tuple(mask.shape)} differ in shape.")
    valid = mask.bool()
    ent = entropy.detach().to(torch.float64)
    count = int(valid.sum().item())
    if count < 2:
        return torch.zeros(entropy.shape, dtype=torch.float32, device=entropy.device)
    values = ent[valid]
    mean = values.mean()
    std = values.std(unbiased=True)
    if float(std.item()) == 0.0:
        std = torch.ones_like(std)
    z = (ent - mean) / std
    return torch.where(valid, z, torch.zeros_like(z)).to(torch.float32)


def entropy_aware_advantages(
    advantages: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor, coef: float = 0.2
) -> torch.Tensor:
    r"""AEPO's entropy-aware advantage `A~_t = A_t * (1 + coef * z_t)` with z from `entropy_zscore` (detached).

    The result replaces A everywhere in the policy loss, sign tests and dual clip included. Positions outside the mask
    keep A (z = 0 there).

    Source: docs/algorithms.md §5.4 (coefficient `aepo_entropy_advantage_coef`, 0.2).

    Args:
        advantages: Token advantages `[batch, seq_len]`.
        entropy: Token entropies `[batch, seq_len]` (current policy, logits / rollout temperature).
        mask: Loss mask `[batch, seq_len]`.
        coef: a.

    Returns:
        `[batch, seq_len]`, dtype of `advantages`.
    """
    if advantages.shape != entropy.shape:
        raise ValueError(f"advantages {tuple(advantages.shape)} and entropy {tuple(entropy.shape)} differ in shape.")
    z = entropy_zscore(entropy, mask)
    return advantages * (1.0 + coef * z).to(advantages.dtype)


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, threshold: float = 0.0) -> torch.Tensor:
    r"""Bool mask of loss-mask tokens whose entropy z-score exceeds `threshold` (`aepo_high_entropy_z`).

    Used as `balanced_clip_mask` for `aepo_balanced_clip_scope: high_entropy` (docs/algorithms.md §5.3).

    Args:
        entropy: Token entropies `[batch, seq_len]`.
        mask: Loss mask `[batch, seq_len]`.
        threshold: Strict lower bound on z.

    Returns:
        Bool `[batch, seq_len]`.
    """
    return (entropy_zscore(entropy, mask) > threshold) & mask.bool()

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

"""Round entropy, branching rules, branch penalty and pre-monitoring (docs/algorithms.md §3.2, §3.3, §5.1, §5.2).

Pure functions without model state; the torch helpers compute per-position entropy terms inside the engines.
"""

import math
from collections.abc import Sequence

import torch

from .trajectory import sigmoid


def round_entropy(position_terms: Sequence[float], num_tokens: int, log_vocab_size: float) -> float:
    r"""Round entropy H of one round segment (docs/algorithms.md §3.2).

    H = (sum of the per-position entropy terms of the first `min(num_tokens, n)` positions) / ln|V|: a sum over
    positions (not a mean, not renormalised), so shorter segments give smaller H. An empty segment has H = 0.

    Args:
        position_terms: Per generated position, `-sum exp(l) * l` over the returned log-probs l (`topk`) or the exact
            full-vocabulary entropy (`full`), in nats.
        num_tokens: k, the leading tokens used (`arpo_entropy_tokens`, 20).
        log_vocab_size: ln|V| with |V| = `len(tokenizer.get_vocab())`.

    Returns:
        H (dimensionless, in [0, ~k * ln|V| / ln|V|]).

    Source: RUC-NLPIR/ARPO `ARPO/verl_arpo_entropy/verl/workers/rollout/vllm_rollout/vllm_rollout_with_tools.py:172-177`.
    """
    terms = list(position_terms[:num_tokens])
    if not terms:
        return 0.0
    return float(sum(terms)) / log_vocab_size


def topk_entropy_terms(log_probs: torch.Tensor, sampled: torch.Tensor, k: int) -> torch.Tensor:
    r"""Per-position entropy term from the k most likely log-probs plus the sampled token if outside them.

    Mirrors what vLLM returns for `logprobs=k` (docs/algorithms.md §3.2).

    Args:
        log_probs: `[batch, vocab]` log-probs of the sampling distribution (float32; -inf outside a top-k / top-p
            filter).
        sampled: `[batch]` sampled token ids.
        k: Number of most likely log-probs (10).

    Returns:
        `[batch]` terms `-sum exp(l) * l` over the pooled values (nats).
    """
    values, indices = log_probs.topk(k, dim=-1)
    # tokens outside a top-k / top-p filter have log-prob -inf and contribute 0 (not 0 * -inf = nan)
    terms = -torch.where(values > float("-inf"), values.exp() * values, torch.zeros_like(values)).sum(-1)
    sampled_lp = log_probs.gather(-1, sampled.unsqueeze(-1)).squeeze(-1)
    outside = ~(indices == sampled.unsqueeze(-1)).any(-1)
    extra = -(sampled_lp.exp() * sampled_lp)
    return terms + torch.where(outside, extra, torch.zeros_like(extra))


def full_entropy_terms(log_probs: torch.Tensor) -> torch.Tensor:
    r"""Exact per-position entropy `-sum p log p` over the full vocabulary.

    Args:
        log_probs: `[batch, vocab]` log-probs (float32).

    Returns:
        `[batch]` entropies in nats.
    """
    probs = log_probs.exp()
    return -(probs * torch.where(probs > 0, log_probs, torch.zeros_like(log_probs))).sum(-1)


def logprob_dict_entropy_term(logprobs: dict) -> float:
    r"""Entropy term of one position from a vLLM-style `{token_id: Logprob | float}` dict (top-k + sampled token)."""
    total = 0.0
    for value in logprobs.values():
        lp = float(getattr(value, "logprob", value))
        if lp > -math.inf:
            total -= math.exp(lp) * lp
    return total


def penalty_factor(branch_penalty: float, consecutive: int) -> float:
    r"""f(l) = max(0, 1 - lambda * l) of the consecutive-branch penalty (docs/algorithms.md §3.3, §5.2)."""
    return max(0.0, 1.0 - branch_penalty * consecutive)


def should_branch(
    rule: str,
    delta_h: float,
    consecutive: int,
    *,
    tau: float,
    beta: float,
    alpha: float = 0.5,
    branch_penalty: float = 0.0,
    u: float | None = None,
) -> bool:
    r"""Branching rule of docs/algorithms.md §3.3.

    * `stochastic`: branch iff `(u + beta * dH) * f(l) >= 1 - tau`, u ~ U(0, 1) (RUC-NLPIR/ARPO
      `ARPO/verl_arpo_entropy/verl/workers/rollout/vllm_rollout/vllm_rollout_with_tools.py:470-477`); with lambda = 0,
      P(branch) = clip(tau + beta * dH, 0, 1).
    * `deterministic`: branch iff `(alpha + beta * dH) * f(l) > tau` (arXiv 2507.19849 section 3.1).

    Args:
        rule: `"stochastic"` or `"deterministic"`.
        delta_h: H of the source's latest round minus its lineage baseline.
        consecutive: l, the consecutive-branch count (0 for ARPO).
        tau: Base branch probability (stochastic) or threshold (deterministic).
        beta: Entropy weight.
        alpha: Deterministic rule's constant.
        branch_penalty: lambda of f(l).
        u: The uniform draw (required by the stochastic rule).

    Returns:
        Whether to create one branch.

    Raises:
        ValueError: unknown rule or missing `u` for the stochastic rule.
    """
    f = penalty_factor(branch_penalty, consecutive)
    if rule == "stochastic":
        if u is None:
            raise ValueError("The stochastic branching rule needs a uniform draw u.")
        return (u + beta * delta_h) * f >= 1.0 - tau
    if rule == "deterministic":
        return (alpha + beta * delta_h) * f > tau
    raise ValueError(f"Unknown branching rule {rule!r}.")


def premonitor_initial_rollouts(group_size: int, h_root: float, h_bar: float, beta: float) -> int:
    r"""Number m of global rollouts from entropy pre-monitoring (docs/algorithms.md §5.1).

    m = clip(floor(M * sigmoid(beta_pm * (H_root - H_bar))) + 1, 1, M). For M = 16 and H_root - H_bar = -4, -2, -1, 0,
    1, 2, 4: 2, 5, 7, 9, 10, 12, 15 (RUC-NLPIR/ARPO
    `AEPO/verl_aepo_entropy/verl/workers/rollout/vllm_rollout/vllm_rollout_with_tools.py:206-565`).

    Args:
        group_size: M.
        h_root: Round entropy of a short sample from the bare prompt.
        h_bar: Mean round entropy of the probe trajectory's rounds.
        beta: beta_pm (`aepo_premonitor_beta`).

    Returns:
        m in [1, M].
    """
    m = math.floor(group_size * sigmoid(beta * (h_root - h_bar))) + 1
    return int(min(max(m, 1), group_size))

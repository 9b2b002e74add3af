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

r"""Loss aggregation modes: how per-token losses `[batch, seq_len]` become one scalar (`rl_loss_agg_mode`).

Documented in docs/algorithms.md §4.8. Three modes (names as in verl's `loss_agg_mode`):

* `token_mean` (default; DAPO's token-level loss, arXiv 2503.14476): `Σ_{i,t} m·L / N_tokens`;
* `seq_mean_token_sum`: `Σ_i Σ_t m·L / N_seq` (each sequence's token sum, averaged over sequences);
* `seq_mean_token_mean`: `Σ_i (Σ_t m·L / Σ_t m) / N_seq` (GRPO's original per-sequence mean, and GSPO's).

Both normalisers are explicit arguments so that a trainer that splits an optimiser update into micro-batches (and ranks)
can pass the update's global counts and sum the micro-batch losses: the sum equals the mode applied to the whole update
(docs/algorithms.md §4.4, **Decision**; the sequence count is every trajectory of the update, §4.8).
"""

import torch

from ..hparams import key_choices
from .policy_loss import masked_mean


LOSS_AGG_MODES = key_choices("rl_loss_agg_mode")  # declared once, in hparams.py


def _sequence_normaliser(mask: torch.Tensor, num_sequences: int | float | torch.Tensor | None) -> torch.Tensor | float:
    if num_sequences is None:
        return float(max(mask.shape[0], 1))
    if isinstance(num_sequences, torch.Tensor):
        return num_sequences.to(device=mask.device, dtype=torch.float32)
    if num_sequences <= 0:
        raise ValueError(f"num_sequences must be positive, got {num_sequences}.")
    return float(num_sequences)


def aggregate_loss(
    token_loss: torch.Tensor,
    loss_mask: torch.Tensor,
    mode: str = "token_mean",
    *,
    num_tokens: int | float | torch.Tensor | None = None,
    num_sequences: int | float | torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Aggregate per-token losses over the loss mask by `mode` (docs/algorithms.md §4.8).

    ```
    token_mean:           Σ_{i,t} m_it·L_it / num_tokens
    seq_mean_token_sum:   Σ_i Σ_t m_it·L_it / num_sequences
    seq_mean_token_mean:  Σ_i (Σ_t m_it·L_it / max(1, Σ_t m_it)) / num_sequences
    ```

    Positions where the mask is 0 never contribute, even if `token_loss` holds inf or NaN there. `token_mean` is
    exactly `policy_loss.masked_mean` (the loss every run used before this key existed).

    Args:
        token_loss: Per-token loss `[batch, seq_len]`.
        loss_mask: `[batch, seq_len]`, 1 for trained tokens (bool or 0/1).
        mode: One of `LOSS_AGG_MODES`.
        num_tokens: `token_mean`'s normaliser (default `loss_mask.sum()`, at least 1); the update's global loss-token
            count when micro-batch losses are summed.
        num_sequences: The sequence modes' normaliser (default `batch`, the rows of this call); the update's global
            trajectory count when micro-batch losses are summed.

    Returns:
        Scalar tensor (float32, or float64 for float64 input).

    Raises:
        ValueError: an unknown `mode`, shapes that differ, or a non-tensor normaliser <= 0.
    """
    if token_loss.shape != loss_mask.shape or token_loss.dim() != 2:
        raise ValueError(
            f"token_loss and loss_mask must both be [batch, seq_len]; got {tuple(token_loss.shape)}, "
            f"{tuple(loss_mask.shape)}."
        )
    if mode == "token_mean":
        return masked_mean(token_loss, loss_mask, num_tokens)
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"Unknown loss aggregation mode {mode!r}; choose one of {', '.join(LOSS_AGG_MODES)}.")
    mask = loss_mask.bool()
    dtype = torch.float64 if token_loss.dtype == torch.float64 else torch.float32
    selected = torch.where(mask, token_loss.to(dtype), torch.zeros((), dtype=dtype, device=token_loss.device))
    per_sequence = selected.sum(dim=-1)  # [batch]
    if mode == "seq_mean_token_mean":
        per_sequence = per_sequence / mask.sum(dim=-1).clamp(min=1).to(dtype)
    return per_sequence.sum() / _sequence_normaliser(mask, num_sequences)

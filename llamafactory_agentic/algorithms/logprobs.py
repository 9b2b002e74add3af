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

r"""Token log-probabilities and entropies fused with the output projection, a chunk of positions at a time.

The policy loss needs, per trained token, `log softmax(W h / T)[target]` and (for the `loss/entropy` metric, AEPO's
entropy-aware advantage and clip scope, or the entropy bonus) the full-vocabulary entropy of `softmax(W h / T)`
(docs/algorithms.md §4.4, §5.3-§5.4). Computing `W h` for every position at once materialises `[batch, seq, vocab]`
logits plus their float32 log-softmax: for Qwen2.5 (|V| = 151936) that is 0.6 MB per position in float32, 2.4 GB for
a 4k-token trajectory, the largest tensor of the training step.

`linear_log_probs` never holds more than `chunk_size` rows of logits: the forward pass computes the logits of one
chunk, keeps only its log-sum-exp, the target's log-probability and the entropy, and drops the logits; the backward pass
recomputes them chunk by chunk and applies the closed-form gradients

    d log p_t / d z = onehot(t) - p            d H / d z = -p * (log p + H)          (z = W h / T)

so memory is `O(chunk_size * |V|)` instead of `O(positions * |V|)` at the price of one more `W h` product per chunk in
the backward pass (the same trade as activation checkpointing). Logits are computed in the autocast dtype (bf16 under
LLaMA-Factory's `bf16: true`) and reduced in float32.

`module_log_probs` does the same for any output module (a LoRA-wrapped `lm_head`, a ZeRO-3-partitioned one whose hooks
must gather its weight) with `torch.utils.checkpoint` per chunk instead of the closed-form backward.

Checked before writing this: TRL 0.24's `selective_log_softmax`/`entropy_from_logits` and LLaMA-Factory take
materialised logits; Liger's fused linear GRPO loss (TRL's `use_liger_loss`, not installed in the pinned stack)
computes its own GRPO loss inside the kernel, while ARPO/AEPO need the per-token log-probs and entropies as tensors
(AEPO's z-scores over the micro-batch, the registered policy losses, KL and metrics).
"""

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def _compute_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return weight.dtype


def _mm_float32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    r"""`a @ b` accumulated and returned in float32 (bf16/fp16 GEMM with a float32 output on CUDA)."""
    if a.dtype == torch.float32:
        return a @ b
    if a.is_cuda:
        try:
            return torch.mm(a, b, out_dtype=torch.float32)
        except (RuntimeError, TypeError):  # older kernels: one rounding of this chunk's product
            pass
    return (a @ b).float()


def _chunk_stats(logits: torch.Tensor, targets: torch.Tensor, want_entropy: bool, inplace: bool):
    r"""(log-sum-exp, target log-prob, entropy or None) of float32 `[c, V]` logits divided by T.

    `inplace` (no autograd graph: inside `_LinearLogProbs.forward`) overwrites `logits` to save one `[c, V]` buffer.
    """
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(1, targets.unsqueeze(1)).squeeze(1) - lse
    entropy = None
    if want_entropy:
        tiny = torch.finfo(torch.float32).min  # log p = -inf (a -inf logit) becomes finite, so 0 * log p = 0
        if inplace:
            log_p = logits.sub_(lse.unsqueeze(1)).clamp_(min=tiny)
        else:
            log_p = (logits - lse.unsqueeze(1)).clamp(min=tiny)
        p = log_p.exp()
        entropy = -(p.unsqueeze(1) @ log_p.unsqueeze(2)).view(-1)  # row-wise dot product, no [c, V] product tensor
    return lse, logp, entropy


class _LinearLogProbs(torch.autograd.Function):
    r"""Closed-form chunked log-softmax + entropy of `F.linear(hidden, weight, bias) / T` (see the module docstring)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk_size, want_entropy, entropy_grad):
        device_type = hidden.device.type
        dtype = _compute_dtype(hidden, weight)
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = torch.empty(n, dtype=torch.float32, device=hidden.device) if want_entropy else None
        with torch.autocast(device_type, enabled=False):
            w = weight.to(dtype)
            b = bias.to(dtype) if bias is not None else None
            for start in range(0, n, chunk_size):
                end = min(start + chunk_size, n)
                z = F.linear(hidden[start:end].to(dtype), w, b).float()
                if temperature != 1.0:
                    z.div_(temperature)
                c_lse, c_logp, c_ent = _chunk_stats(z, targets[start:end], want_entropy, inplace=True)
                lse[start:end] = c_lse
                logp[start:end] = c_logp
                if entropy is not None:
                    entropy[start:end] = c_ent
                del z
        ctx.save_for_backward(hidden, weight, bias, targets, lse, entropy if entropy_grad else None)
        ctx.temperature, ctx.chunk_size, ctx.dtype = temperature, chunk_size, dtype
        ctx.entropy_grad = entropy_grad
        ctx.mark_non_differentiable(lse)
        if entropy is not None and not entropy_grad:
            ctx.mark_non_differentiable(entropy)
        return logp, entropy, lse

    @staticmethod
    def backward(ctx, g_logp, g_entropy, _g_lse):
        hidden, weight, bias, targets, lse, entropy = ctx.saved_tensors
        temperature, chunk_size, dtype = ctx.temperature, ctx.chunk_size, ctx.dtype
        device_type = hidden.device.type
        need_h, need_w, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        n = hidden.shape[0]
        if g_logp is None:
            g_logp = torch.zeros(n, dtype=torch.float32, device=hidden.device)
        use_entropy = ctx.entropy_grad and g_entropy is not None
        grad_h = torch.empty(hidden.shape, dtype=dtype, device=hidden.device) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad_b = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if need_b else None
        with torch.autocast(device_type, enabled=False):
            w = weight.to(dtype)
            b = bias.to(dtype) if bias is not None else None
            for start in range(0, n, chunk_size):
                end = min(start + chunk_size, n)
                h = hidden[start:end].to(dtype)
                z = F.linear(h, w, b).float()
                if temperature != 1.0:
                    z.div_(temperature)
                log_p = z.sub_(lse[start:end].unsqueeze(1))  # in place: z becomes log p
                g_lp = g_logp[start:end].float().unsqueeze(1)
                if use_entropy:
                    # dL/dz = onehot(t) * g_lp - p * (g_lp + g_H * (log p + H))
                    p = log_p.exp()
                    coef = log_p.clamp_(min=torch.finfo(torch.float32).min)  # in place: log p becomes the coefficient
                    coef.add_(entropy[start:end].unsqueeze(1)).mul_(g_entropy[start:end].float().unsqueeze(1))
                    coef.add_(g_lp)
                    grad_z = p.mul_(coef).neg_()
                    del coef
                else:
                    grad_z = log_p.exp_().mul_(-g_lp)
                grad_z.scatter_add_(1, targets[start:end].unsqueeze(1), g_lp)
                if temperature != 1.0:
                    grad_z.div_(temperature)
                if need_b:
                    grad_b += grad_z.sum(0)
                grad_z_c = grad_z.to(dtype)
                del grad_z, log_p
                if need_h:
                    grad_h[start:end] = grad_z_c @ w
                if need_w:
                    grad_w += _mm_float32(grad_z_c.t(), h)
                del grad_z_c
        if grad_h is not None:
            grad_h = grad_h.to(hidden.dtype)
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None, None, None, None


def _check(chunk_size: int, temperature: float) -> None:
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}.")
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}.")


def linear_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""`log softmax(F.linear(hidden, weight, bias) / T)[targets]` and the entropy, without the full logits.

    Args:
        hidden: `[n, hidden]` final hidden states (the positions whose next token is scored).
        weight: `[vocab, hidden]` output projection (`lm_head.weight`; a tied embedding matrix is fine).
        targets: `[n]` token ids.
        bias: `[vocab]` or None.
        temperature: Sampling temperature T the logits are divided by (docs/algorithms.md §5.4).
        chunk_size: Positions per chunk (> 0); peak extra memory is about `3 * chunk_size * vocab * 4` bytes.
        with_entropy: Also return the full-vocabulary entropy of `softmax(logits / T)`.
        entropy_grad: The entropy is differentiable (entropy bonus); otherwise it is returned detached.

    Returns:
        `(log_probs [n] float32, entropy [n] float32 or None)`; gradients flow to `hidden`, `weight` and `bias`.

    Raises:
        ValueError: `chunk_size` <= 0 or `temperature` <= 0.
    """
    _check(chunk_size, temperature)
    logp, entropy, _ = _LinearLogProbs.apply(
        hidden, weight, bias, targets, float(temperature), int(chunk_size), bool(with_entropy), bool(entropy_grad)
    )
    return logp, entropy


def _module_chunk(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, want: bool):
    logits = head(hidden).float()
    if temperature != 1.0:
        logits = logits / temperature
    _, logp, entropy = _chunk_stats(logits, targets, want, inplace=False)
    return logp if entropy is None else (logp, entropy)


def module_log_probs(
    hidden: torch.Tensor,
    head: torch.nn.Module,
    targets: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""`linear_log_probs` for any output module (`head(hidden) -> logits`), one checkpointed chunk at a time.

    Used when the output projection is not a plain `nn.Linear` the closed form can read (a LoRA-wrapped `lm_head`,
    DeepSpeed ZeRO-3 partitioned weights that the module's hooks gather, forward hooks). With gradients enabled each
    chunk runs under `torch.utils.checkpoint`, so only the chunk's inputs are kept and its logits are recomputed in the
    backward pass. Without entropy gradients the entropy is computed without a graph.

    Args:
        hidden: `[n, hidden]`.
        head: The output module.
        targets: `[n]` token ids.
        temperature: T.
        chunk_size: Positions per chunk (> 0).
        with_entropy: Also return the entropy.
        entropy_grad: The entropy is differentiable.

    Returns:
        `(log_probs [n] float32, entropy [n] float32 or None)`.

    Raises:
        ValueError: `chunk_size` <= 0 or `temperature` <= 0.
    """
    _check(chunk_size, temperature)
    grad = torch.is_grad_enabled()
    logps, entropies = [], []
    for start in range(0, max(hidden.shape[0], 1), chunk_size):  # one (empty) chunk keeps an empty input in the graph
        h, t = hidden[start : start + chunk_size], targets[start : start + chunk_size]
        if grad and with_entropy and entropy_grad:
            logp, entropy = checkpoint(_module_chunk, head, h, t, temperature, True, use_reentrant=False)
        elif grad:
            logp = checkpoint(_module_chunk, head, h, t, temperature, False, use_reentrant=False)
            entropy = None
            if with_entropy:
                with torch.no_grad():
                    _, entropy = _module_chunk(head, h, t, temperature, True)
        else:
            out = _module_chunk(head, h, t, temperature, with_entropy)
            logp, entropy = out if with_entropy else (out, None)
        logps.append(logp)
        entropies.append(entropy)
    return torch.cat(logps), (torch.cat(entropies) if with_entropy else None)

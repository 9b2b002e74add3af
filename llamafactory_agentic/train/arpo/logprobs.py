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

r"""The policy's per-token log-probs and entropies at the trained response positions, without `[b, seq, vocab]` logits.

`response_log_probs` runs the model's own forward (through DDP / DeepSpeed / PEFT wrappers, so gradient
synchronisation, ZeRO-3 gathers and adapters work as usual) with its output projection swapped for a
`ResponseHead` for the duration of the call. The causal LM hands the head its final hidden states (only the last
`C + 1` positions with `logits_to_keep`); the head keeps the positions whose next token is a selected response token
(the loss mask: observation tokens and padding are never projected), and computes their log-probs and entropies in
chunks fused with the projection (`algorithms.logprobs`). The head's output stands in for the logits inside the
model's forward, so the projection weight is used inside the wrapped forward like before (DDP's unused-parameter
detection sees it).

Models whose forward does more than `lm_head(hidden)` to the logits (final logit soft-capping, logit scaling) are not
swapped; `can_fuse` says so and the trainer keeps the materialising path for them.
"""

import copy
from contextlib import contextmanager
from typing import Any

import torch

from ...algorithms.logprobs import linear_log_probs, module_log_probs
from ...rollout.weight_sync import zero3_gather, zero3_partitioned


_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def _causal_lm(model: Any) -> Any:
    r"""The transformers `*ForCausalLM` inside DDP / DeepSpeed / PEFT wrappers."""
    inner = model
    for _ in range(4):
        if hasattr(inner, "module") and isinstance(inner.module, torch.nn.Module):  # DDP, DeepSpeedEngine
            inner = inner.module
            continue
        if hasattr(inner, "get_base_model"):  # peft.PeftModel
            inner = inner.get_base_model()
            continue
        break
    return inner


def _head_attribute(lm: Any) -> tuple[str, torch.nn.Module] | None:
    get = getattr(lm, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if head is None:
        return None
    for name, child in lm.named_children():
        if child is head:
            return name, head
    return None


def can_fuse(model: Any) -> bool:
    r"""Whether `response_log_probs` can swap this model's output projection.

    False for models without `get_output_embeddings`, whose head is not a direct child of the causal LM, or whose
    config transforms the logits after the projection (soft-capping, scaling).
    """
    lm = _causal_lm(model)
    config = getattr(lm, "config", None)
    if config is not None and any(getattr(config, key, None) not in (None, 1.0) for key in _LOGIT_TRANSFORMS):
        return False
    return _head_attribute(lm) is not None


def _plain_linear(head: torch.nn.Module) -> bool:
    r"""A bare `nn.Linear` whose weight the closed form may read directly (no hooks, no ZeRO-3 partitioning)."""
    if type(head) is not torch.nn.Linear or head._forward_hooks or head._forward_pre_hooks:
        return False
    if hasattr(head, "_hf_hook") or zero3_partitioned([head.weight]):  # accelerate offload / DeepSpeed ZeRO-3
        return False
    return True


def _zero3_frozen_linear(head: torch.nn.Module) -> bool:
    r"""An `nn.Linear` with DeepSpeed ZeRO-3 partitioned parameters of which none trains (the LM head under LoRA)."""
    params = [p for p in (getattr(head, "weight", None), getattr(head, "bias", None)) if p is not None]
    return (
        isinstance(head, torch.nn.Linear)
        and zero3_partitioned([head.weight])
        and not any(p.requires_grad for p in params)
    )


def _gathered_frozen_linear(head: torch.nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""Full copies of a ZeRO-3 partitioned frozen linear's weight and bias (one all-gather, every rank enters).

    Under ZeRO-3 with LoRA the frozen LM head went through `module_log_probs`, whose per-chunk checkpoint re-runs the
    head in the backward pass; there DeepSpeed 0.16.9 did not gather the frozen weight again, and the recomputation
    met the partitioned `[0]` tensor: `CheckpointError: Recomputed values ... have different metadata` (the H200
    smoke rows z3-hf-lora and z3off-hf-lora, issue 25). A frozen head needs no weight gradient, so a gathered copy
    (vocab x hidden, e.g. 1.1 GB for a 7B Qwen2.5 in bf16, freed after the loss) feeds the closed form instead. The
    gather is the weight push's (`rollout.weight_sync.zero3_gather`: only what is partitioned right now).
    """
    with zero3_gather([p for p in (head.weight, head.bias) if p is not None]):
        weight = head.weight.detach().clone()
        bias = None if head.bias is None else head.bias.detach().clone()
    return weight, bias


class ResponseHead(torch.nn.Module):
    r"""Stands in for the output projection during one forward; see the module docstring.

    Args:
        head: The original output projection.
        width: C, the number of response positions (the last C tokens of the input).
        select: Bool `[b, C]`: response positions to score.
        targets: `[b, C]` response token ids.
        temperature: T.
        chunk_size: Positions per chunk.
        with_entropy / entropy_grad: As in `linear_log_probs`.
    """

    def __init__(self, head, width, select, targets, temperature, chunk_size, with_entropy, entropy_grad) -> None:
        r"""Keep the arguments (the original head is not registered as a submodule)."""
        super().__init__()
        object.__setattr__(self, "_head", head)
        self.width, self.select, self.targets = width, select, targets
        self.temperature, self.chunk_size = temperature, chunk_size
        self.with_entropy, self.entropy_grad = with_entropy, entropy_grad
        self.entropy: torch.Tensor | None = None
        self.log_probs: torch.Tensor | None = None  # the float32 values, before any cast of the model's output

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        r"""`[b, s, H]` hidden states -> `[n]` log-probs of the selected positions (entropy kept in `self.entropy`)."""
        width, seq = self.width, hidden.shape[1]
        # hidden position seq - 1 - width + j predicts response token j: gather the selected ones directly (`hidden` is
        # often a strided slice; advanced indexing copies only the [n, H] rows taken)
        rows, cols = self.select.nonzero(as_tuple=True)
        chosen = hidden[rows, cols + (seq - 1 - width)]
        targets = self.targets[rows, cols]
        head = self._head
        kwargs = dict(
            temperature=self.temperature,
            chunk_size=self.chunk_size,
            with_entropy=self.with_entropy,
            entropy_grad=self.entropy_grad,
        )
        if _plain_linear(head):
            logp, entropy = linear_log_probs(chosen, head.weight, targets, bias=head.bias, **kwargs)
        elif _zero3_frozen_linear(head):
            weight, bias = _gathered_frozen_linear(head)
            logp, entropy = linear_log_probs(chosen, weight, targets, bias=bias, **kwargs)
        else:
            logp, entropy = module_log_probs(chosen, head, targets, **kwargs)
        self.entropy, self.log_probs = entropy, logp
        return logp


def _match_parameter_mapping(head: torch.nn.Module, replacement: torch.nn.Module) -> None:
    r"""Give `replacement` an empty `_parameters` mapping of the same class as `head`'s.

    DeepSpeed ZeRO-3 replaces every module's `_parameters` dict by its own mapping (`ZeROOrderedDict`) when the engine
    is built, and its forward prologue sets an attribute on the mapping of every module of the model
    (`module._parameters._in_forward = True`). A module put into the tree later has a plain `dict` there, which has no
    attributes, so the first forward through the swapped head failed with `AttributeError: 'dict' object has no
    attribute '_in_forward'` (issue 25). A shallow copy keeps the class and its attributes; cleared, it owns nothing.
    """
    mapping = head._parameters
    if type(mapping) is type(replacement._parameters):
        return
    fresh = copy.copy(mapping)
    fresh.clear()
    replacement._parameters = fresh


@contextmanager
def _swapped_head(model: Any, replacement_for):
    lm = _causal_lm(model)
    found = _head_attribute(lm)
    if found is None:
        raise ValueError(f"{type(lm).__name__} has no output projection to swap (get_output_embeddings).")
    name, head = found
    replacement = replacement_for(head)
    _match_parameter_mapping(head, replacement)
    lm._modules[name] = replacement  # no __setattr__ bookkeeping: restored below
    try:
        yield replacement
    finally:
        lm._modules[name] = head


def response_log_probs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    width: int,
    select: torch.Tensor,
    temperature: float,
    chunk_size: int,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    position_ids: bool = True,
    logits_to_keep: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""Log-probs (and entropies) of the selected response tokens, `[b, C]` with zeros elsewhere.

    Args:
        model: The policy or the reference model, possibly wrapped (DDP, DeepSpeed, PEFT); `can_fuse(model)` must hold.
        input_ids: `[b, P + C]` prompt (left-padded) and response (right-padded) ids.
        attention_mask: `[b, P + C]`.
        width: C.
        select: Bool `[b, C]`: the positions to score (the loss mask); unselected positions get 0.
        temperature: T (the rollout's sampling temperature).
        chunk_size: Positions per chunk of the fused projection.
        with_entropy: Also return the entropy.
        entropy_grad: The entropy is differentiable (entropy bonus).
        position_ids: Pass `position_ids = cumsum(attention_mask) - 1` (models that accept them).
        logits_to_keep: Pass `logits_to_keep = C + 1` (models that accept it).

    Returns:
        `(log_probs [b, C] float32, entropy [b, C] float32 or None)`.

    Raises:
        ValueError: the model has no swappable output projection.
    """
    select = select.bool()
    targets = input_ids[:, -width:]

    def build(head):
        return ResponseHead(head, width, select, targets, temperature, chunk_size, with_entropy, entropy_grad)

    kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, "use_cache": False}
    if position_ids:
        kwargs["position_ids"] = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    if logits_to_keep:
        kwargs["logits_to_keep"] = width + 1
    with _swapped_head(model, build) as head:
        flat_logp = model(**kwargs).logits
        flat_entropy, exact = head.entropy, head.log_probs
        head.entropy = head.log_probs = None
    if flat_logp.dtype != exact.dtype:
        # a wrapper cast the model's output (accelerate's FSDP2 sets `output_dtype` bf16 under bf16 mixed precision,
        # so the float32 log-probs arrived in bf16 and the scatter below failed, issue 25): keep the float32 values
        # and let the gradient pass through the cast output, where the wrapper's backward hooks sit
        flat_logp = exact.detach() + (flat_logp - flat_logp.detach()).to(exact.dtype)
    shape = select.shape
    logps = torch.zeros(shape, dtype=torch.float32, device=flat_logp.device).masked_scatter(select, flat_logp)
    entropy = None
    if with_entropy:
        entropy = torch.zeros(shape, dtype=torch.float32, device=flat_logp.device).masked_scatter(select, flat_entropy)
    return logps, entropy

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

r"""GPU memory of an ARPO step: what the training state holds, the per-step split logged as `memory/*`, and estimates.

`training_state_bytes` counts tensors (works on any device): weights (every parameter once, tied ones once), gradients
(the `.grad` tensors alive at the moment of the call) and optimiser states (every tensor in `optimizer.state`).
`MemoryTracker` adds the CUDA peaks of the phases of a step (rollout, loss, optimiser step); `estimate_step_memory`
computes the same split from a model's shape and the run's settings, for the README table and for choosing
`rl_micro_batch_tokens` and `arpo_hf_generation_batch_size` before a run.
"""

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch


GIB = float(2**30)
# bytes per scored position and vocabulary entry of the materialising log-prob path (`rl_logprob_chunk_size: 0`)
# in bf16: the logits the model returns, the temperature-divided copy, the log-softmax kept for the backward and the
# logits' gradient (2 bytes each) and transients; 12 is fitted to one H200 run (0.5B, 32 x 1024 scored positions,
# no checkpointing: 127.9 GiB measured at the loss, 124.4 estimated; 10 gave 115.1; docs/plan.md)
MATERIALISED_HEAD_BYTES = 12


def unique_bytes(tensors) -> int:
    r"""Bytes of the distinct storages behind `tensors` (a tied or shared tensor counts once; None is skipped).

    A DTensor (FSDP2's parameters, gradients and optimiser states) counts its local shard: the wrapper has no storage
    of its own (`data pointer on an invalid python storage`, seen on the H200 under FSDP2, issue 25).
    """
    seen: set[tuple[str, int]] = set()
    total = 0
    for t in tensors:
        if t is None:
            continue
        if callable(getattr(t, "to_local", None)):  # torch.distributed.tensor.DTensor
            t = t.to_local()
        try:
            storage = t.untyped_storage()
            pointer = storage.data_ptr()
        except (RuntimeError, NotImplementedError):  # another tensor subclass without a storage: count the view
            total += t.numel() * t.element_size()
            continue
        key = (str(t.device), pointer)
        if pointer == 0:  # no data (meta device, empty): count the view
            total += t.numel() * t.element_size()
        elif key not in seen:
            seen.add(key)
            total += storage.nbytes()
    return total


def training_state_bytes(model: torch.nn.Module, optimizer: Any = None) -> dict[str, int]:
    r"""Bytes held by the weights, the gradients and the optimiser states right now.

    Args:
        model: The (possibly wrapped) model; every parameter counts, trainable or frozen.
        optimizer: A `torch.optim.Optimizer` (or a wrapper with `.optimizer`), or None.

    Returns:
        `{"weights": ..., "gradients": ..., "optimizer_states": ...}` in bytes.
    """
    params = list(model.parameters())
    weights = unique_bytes(params)
    gradients = unique_bytes(p.grad for p in params)
    states = 0
    inner = getattr(optimizer, "optimizer", optimizer)
    if inner is not None and hasattr(inner, "state"):
        states = unique_bytes(
            value for state in inner.state.values() for value in state.values() if isinstance(value, torch.Tensor)
        )
    return {"weights": weights, "gradients": gradients, "optimizer_states": states}


class MemoryTracker:
    r"""CUDA peaks per phase of a training step (no-ops without CUDA).

    `phase(name)` closes the running phase (its peak, `torch.cuda.max_memory_allocated` since it began, is kept under
    its name) and starts `name` with fresh peak statistics; `take()` returns and clears the collected peaks in GiB (the
    running phase's so far included, its statistics restarted). `overall` is the process-wide peak seen so far.
    """

    def __init__(self) -> None:
        r"""Start without a phase."""
        self.enabled = torch.cuda.is_available()
        self.current: str | None = None
        self.peaks: dict[str, float] = {}
        self.overall = 0.0

    def phase(self, name: str | None) -> None:
        r"""End the running phase and begin `name` (None: no phase)."""
        if not self.enabled:
            return
        if self.current is not None:
            peak = torch.cuda.max_memory_allocated() / GIB
            self.peaks[self.current] = max(self.peaks.get(self.current, 0.0), peak)
            self.overall = max(self.overall, peak)
        torch.cuda.reset_peak_memory_stats()
        self.current = name

    def take(self) -> dict[str, float]:
        r"""`{phase: peak GiB}` collected since the last call (the running phase included so far)."""
        if not self.enabled:
            return {}
        peaks = dict(self.peaks)
        if self.current is not None:
            running = torch.cuda.max_memory_allocated() / GIB
            peaks[self.current] = max(peaks.get(self.current, 0.0), running)
            self.overall = max(self.overall, running)
            torch.cuda.reset_peak_memory_stats()  # the running phase goes on from here, counted in the next take
        self.peaks = {}
        return peaks


# ---------------------------------------------------------------------------------------------------- estimates
@dataclass(frozen=True)
class ModelShape:
    r"""What the memory estimate needs of a decoder-only transformer (Qwen2-style: q/k/v biases, SwiGLU MLP)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool

    @property
    def head_dim(self) -> int:
        r"""Channels per attention head."""
        return self.hidden // self.heads

    @classmethod
    def from_config(cls, config: Any) -> "ModelShape":
        r"""From a transformers config (`hidden_size`, `intermediate_size`, ...)."""
        return cls(
            hidden=config.hidden_size,
            intermediate=config.intermediate_size,
            layers=config.num_hidden_layers,
            heads=config.num_attention_heads,
            kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
            vocab=config.vocab_size,
            tied=bool(getattr(config, "tie_word_embeddings", False)),
        )

    def linear_shapes(self) -> list[tuple[int, int]]:
        r"""`(in, out)` of the linear layers of one decoder layer (q, k, v, o, gate, up, down)."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        i = self.intermediate
        return [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]

    def layer_params(self) -> int:
        r"""Parameters of one decoder layer (projections, q/k/v biases, two RMSNorm weights)."""
        kv = self.kv_heads * self.head_dim
        return sum(a * b for a, b in self.linear_shapes()) + self.hidden + 2 * kv + 2 * self.hidden  # biases, norms

    def params(self) -> int:
        r"""Parameter count (embeddings once when tied)."""
        embed = self.vocab * self.hidden
        return self.layers * self.layer_params() + embed * (1 if self.tied else 2) + self.hidden

    def lora_params(self, rank: int) -> int:
        r"""LoRA parameters with every linear layer of every decoder layer adapted (LLaMA-Factory's `all`)."""
        return self.layers * rank * sum(a + b for a, b in self.linear_shapes())

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        r"""KV-cache bytes of one token over all layers (keys and values)."""
        return self.layers * 2 * self.kv_heads * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class MemoryEstimate:
    r"""Estimated GiB of one ARPO step on one GPU (see `estimate_step_memory`)."""

    weights: float
    gradients: float
    optimizer_states: float
    generation_copy: float  # bf16 generation weights (fp32 masters) or merged LoRA copies, during the rollout only
    kv_cache: float
    activations: float  # stored activations of the largest micro-batch (checkpointed layer inputs + one layer)
    logprob_head: float  # chunked fused head: chunk logits and the float32 weight-gradient buffer
    rollout_peak: float
    loss_peak: float
    prefill: float = 0.0  # transient activations of the hf engine's largest prefill forward (in rollout_peak)

    @property
    def static(self) -> float:
        r"""Weights + gradients + optimiser states."""
        return self.weights + self.gradients + self.optimizer_states

    @property
    def peak(self) -> float:
        r"""The larger of the rollout and loss peaks."""
        return max(self.rollout_peak, self.loss_peak)

    def as_dict(self) -> dict[str, float]:
        r"""Every field plus `static` and `peak`, rounded to 0.01 GiB."""
        out = {k: round(v, 2) for k, v in asdict(self).items()}
        out.update(static=round(self.static, 2), peak=round(self.peak, 2))
        return out


def estimate_step_memory(
    shape: ModelShape,
    finetuning: str = "full",
    lora_rank: int = 64,
    fp32_master: bool = False,
    context: int = 5632,
    slots: int = 64,
    micro_batch_tokens: int = 16384,
    gradient_checkpointing: bool = True,
    chunk_size: int = 1024,
    lora_merge: str = "gpu",
    prompt_length: int | None = None,
    prefill_chunk: int = 512,
) -> MemoryEstimate:
    r"""Estimated memory of one ARPO step (AdamW, bf16 compute, `rl_logprob_chunk_size` fused head).

    Args:
        shape: The model's shape.
        finetuning: `full` or `lora` (every linear layer adapted, LoRA weights and their AdamW states in float32 as
            LLaMA-Factory keeps trainable parameters).
        lora_rank: LoRA rank r.
        fp32_master: Full fine-tuning with float32 weights (LLaMA-Factory's `bf16: true` without `pure_bf16`):
            16 bytes per parameter plus a bf16 copy for generation; otherwise `pure_bf16` (8 bytes per parameter).
        context: Prompt + response budget per trajectory (KV-cache columns per slot).
        slots: `arpo_hf_generation_batch_size` (KV-cache slots).
        micro_batch_tokens: Padded tokens of the largest training micro-batch (`rl_micro_batch_tokens`).
        gradient_checkpointing: Whether decoder layers are checkpointed.
        chunk_size: `rl_logprob_chunk_size`: > 0 the fused head (one chunk's float32 logits, their exponent and
            gradient); 0 the materialising path (`MATERIALISED_HEAD_BYTES` per response position of the
            micro-batch and vocabulary entry).
        lora_merge: `arpo_hf_lora_merge` (`gpu` keeps merged copies of the adapted weights during the rollout).
        prompt_length: Prompt budget (`arpo_max_prompt_length`): the keys the first prefill attends to (None: the
            whole `context`, an upper bound).
        prefill_chunk: Tokens per row of one prefill forward of the hf engine (`HFEngine(prefill_chunk=512)`).

    Returns:
        A `MemoryEstimate` (GiB). The CUDA allocator's fragmentation and the CUDA context (~0.5-1 GiB) are not
        included; measured peaks come from the `memory/*` logs.

    Raises:
        ValueError: unknown `finetuning`.
    """
    n = shape.params()
    h, i, layers, vocab = shape.hidden, shape.intermediate, shape.layers, shape.vocab
    if finetuning == "full":
        per_param = (4, 4, 8) if fp32_master else (2, 2, 4)
        weights, grads, states = (n * b / GIB for b in per_param)
        generation_copy = 2 * n / GIB if fp32_master else 0.0
        head_grad = vocab * h * 4 / GIB  # float32 accumulation buffer of the output-projection gradient
    elif finetuning == "lora":
        lora = shape.lora_params(lora_rank)
        weights = (2 * n + 4 * lora) / GIB
        grads = 4 * lora / GIB
        states = 8 * lora / GIB
        adapted = layers * sum(a * b for a, b in shape.linear_shapes())
        generation_copy = 2 * adapted / GIB if lora_merge == "gpu" else 0.0
        head_grad = 0.0
    else:
        raise ValueError(f"Unknown finetuning {finetuning!r}; expected 'full' or 'lora'.")
    capacity = int(math.ceil((context + 10) / 256.0) * 256) + 1
    kv = slots * capacity * shape.kv_bytes_per_token() / GIB
    logits_step = slots * vocab * 4 * 4 / GIB  # decode-step logits and sampling buffers (float32)
    t = micro_batch_tokens
    per_layer_token = 10 * h + 4 * i  # bf16 elements a Qwen2 layer keeps for its backward
    if gradient_checkpointing:
        activations = (t * layers * h + t * per_layer_token) * 2 / GIB
    else:
        activations = t * layers * per_layer_token * 2 / GIB
    if chunk_size > 0:
        logprob_head = (3 * min(chunk_size, t) * vocab * 4) / GIB + head_grad
    else:  # the response positions of the micro-batch, projected at once
        prompt_share = min(prompt_length or 0, context) / max(context, 1)
        scored = t * (1.0 - prompt_share)
        logprob_head = scored * vocab * MATERIALISED_HEAD_BYTES / GIB  # the head's gradient is in `grads`
    # the hf engine's prefill (rollout/hf_engine.py `_prefill`): all slots admitted at once, `prefill_chunk` tokens of
    # each per forward, no gradient, so only one layer's transients live: the SwiGLU MLP's three [tokens, I] tensors,
    # or the attention's gathered and GQA-repeated keys and values of every row (an explicit mask keeps transformers'
    # SDPA path on repeat_kv) plus the mask; and a few [tokens, H] hidden states either way (bf16)
    prompt = min(prompt_length or context, context)
    rows, cols = slots, min(prefill_chunk, prompt)
    tokens = rows * cols
    mlp = tokens * 3 * i * 2
    attention = rows * prompt * shape.head_dim * (2 * shape.kv_heads + 2 * shape.heads) * 2 + rows * cols * prompt * 3
    prefill = (max(mlp, attention) + tokens * h * 4 * 2) / GIB
    # gradients are freed between steps; the decode step's buffers and the prefill's transients never coexist
    rollout_peak = weights + states + generation_copy + kv + max(logits_step, prefill)
    loss_peak = weights + grads + states + activations + logprob_head
    return MemoryEstimate(
        weights, grads, states, generation_copy, kv, activations, logprob_head, rollout_peak, loss_peak, prefill
    )

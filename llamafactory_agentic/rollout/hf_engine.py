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

"""`hf` generation backend: a batched decode loop over a transformers causal LM with a slot-based KV cache.

Design (docs/algorithms.md §3.4, Decision (d): token ids only, shared prefixes computed once):

* `SlotKVCache` is a transformers `Cache` holding one static `[slots, kv_heads, capacity, head_dim]` buffer per
  layer. Every batch row writes its keys/values at its own positions (`write_pos`), so trajectories of different
  lengths decode together without padding; the attention mask is an explicit 4-D additive mask built from each row's
  position, and RoPE positions are passed per row.
* A trajectory keeps its slot between rounds: the next round only prefills the observation (and the last sampled
  token). A branch (or a new global rollout of a prompt already resident) copies its source's cache rows up to the
  longest common prefix instead of re-running the prefill (`prefix_cache=True`).
* The decode step reads `[:batch]` slices of the static buffers (no gather), samples on the device (temperature,
  top-p, top-k, exponential-race sampling; greedy at temperature 0) and computes the entropy term per position.
  On CUDA the step can be captured as a CUDA graph per (batch bucket, length bucket); the host syncs once every
  `sync_every` steps to read tokens, check EOS / stop strings / budgets and retire rows.
* Continuous batching (`serve`): a retired row's slot takes the next waiting request at that sync (its prefill runs
  while the other rows keep their state), so a short round never waits for the longest one; `generate` serves one
  list of requests this way, the agent loop's `continuous` schedule feeds it next rounds, branches and fills.
* Attention runs with PyTorch's cuDNN SDPA backend switched off (`cudnn_attention=False`): cuDNN, PyTorch's first
  choice on H100/H200 with cuDNN > 9.15, builds an execution plan per exact attention shape (batch, query and key
  lengths, strides, mask), and prefills come in a new (rows, tokens) shape at almost every admission. Measured on an
  H200 (`benchmarks/bench_attention_memory_gpu.py --calls 150`, 134 prefill shapes): 14.4 s with cuDNN, 5.3 s
  without; memory outside the allocator grew 24 MiB vs 12 MiB (not the cause of the 100 GiB processes once suspected:
  that was JAX's preallocation, see `tools/index.py`).
* `release` drops the KV cache, the CUDA graphs and their memory pool before the optimisation phase; the next call
  re-creates them. `stats` splits the time into prefill, device decode steps, host bookkeeping, graph capture and idle
  waiting (`decode_metrics`).
"""

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
import torch
from transformers.cache_utils import Cache

from .branching import full_entropy_terms, topk_entropy_terms
from .engine import (
    HF_CAPABILITIES,
    GenerationEngine,
    GenerationRequest,
    GenerationResult,
    ListSource,
    SamplingSettings,
    StopStringMatcher,
)


class SlotKVCache(Cache):
    r"""Static KV cache with per-row write positions, addressed by slot.

    Before each forward the engine sets `rows` (`[batch]` slot of each batch row, or None for slots `0..batch-1`),
    `write_pos` (`[batch, seq]` cache column of each input token) and `kv_len` (columns visible to attention).

    Args:
        num_slots: Number of slots S (trajectories resident at once).
        capacity: Columns per slot (tokens); the last one is a scratch column for padding and idle rows.
    """

    def __init__(self, num_slots: int, capacity: int) -> None:
        r"""Create an empty cache; layer buffers are allocated (zeroed) on first use."""
        super().__init__(layers=[])
        self.num_slots = num_slots
        self.capacity = capacity
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.rows: torch.Tensor | None = None
        self.write_pos: torch.Tensor | None = None
        self.kv_len = capacity - 1
        self.arange: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        r"""Write `[batch, kv_heads, seq, head_dim]` states at `write_pos`; return `[batch, kv_heads, kv_len, head_dim]`."""
        if layer_idx >= len(self.keys):
            shape = (self.num_slots, key_states.shape[1], self.capacity, key_states.shape[-1])
            self.keys.append(torch.zeros(shape, dtype=key_states.dtype, device=key_states.device))
            self.values.append(torch.zeros(shape, dtype=value_states.dtype, device=value_states.device))
            if self.arange is None:
                self.arange = torch.arange(self.num_slots, device=key_states.device)
        k_cache, v_cache = self.keys[layer_idx], self.values[layer_idx]
        batch = key_states.shape[0]
        rows = self.rows if self.rows is not None else self.arange[:batch]
        index = rows.unsqueeze(1)
        k_cache[index, :, self.write_pos] = key_states.transpose(1, 2).to(k_cache.dtype)
        v_cache[index, :, self.write_pos] = value_states.transpose(1, 2).to(v_cache.dtype)
        if self.rows is None:
            return k_cache[:batch, :, : self.kv_len], v_cache[:batch, :, : self.kv_len]
        return k_cache[rows, :, : self.kv_len], v_cache[rows, :, : self.kv_len]

    def copy_slots(self, src: Sequence[int], dst: Sequence[int], length: int) -> None:
        r"""Copy the first `length` columns of slots `src` into slots `dst` (all layers)."""
        if not self.keys or not src or length <= 0:
            return
        device = self.keys[0].device
        src_t = torch.as_tensor(list(src), device=device)
        dst_t = torch.as_tensor(list(dst), device=device)
        for k_cache, v_cache in zip(self.keys, self.values):
            k_cache[dst_t, :, :length] = k_cache[src_t, :, :length]
            v_cache[dst_t, :, :length] = v_cache[src_t, :, :length]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        r"""Not meaningful per batch; positions are always passed explicitly."""
        return 0

    def get_mask_sizes(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        r"""Key length and offset (only used when no 4-D mask is given, which the engine never does)."""
        return self.kv_len, 0

    @property
    def is_compileable(self) -> bool:
        r"""Shapes are static per (batch, kv_len) bucket."""
        return True

    def __len__(self) -> int:
        r"""Number of allocated layers."""
        return len(self.keys)


GROUPED_SDPA = "agentic_grouped_sdpa"


def grouped_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    r"""SDPA for grouped-query attention with an explicit mask, without materialising repeated KV heads.

    transformers' `sdpa` path calls `repeat_kv` whenever a mask is given (a `[batch, heads, kv_len, head_dim]` copy
    per layer and step); here the query heads sharing one KV head are folded into the query length instead.

    Args:
        module: The attention module.
        query: `[batch, heads, seq, head_dim]`.
        key: `[batch, kv_heads, kv_len, head_dim]`.
        value: `[batch, kv_heads, kv_len, head_dim]`.
        attention_mask: `[batch, 1, seq, kv_len]` additive mask.
        dropout: Must be 0 (generation).
        scaling: Softmax scale.
        **kwargs: Ignored.

    Returns:
        `([batch, seq, heads, head_dim], None)` as transformers' attention functions.
    """
    batch, heads, seq, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    q = query.reshape(batch, kv_heads, groups * seq, dim)
    mask = attention_mask
    if mask is not None and groups > 1 and seq > 1:
        mask = mask.repeat(1, 1, groups, 1)
    out = torch.nn.functional.scaled_dot_product_attention(q, key, value, attn_mask=mask, dropout_p=0.0, scale=scaling)
    return out.reshape(batch, heads, seq, dim).transpose(1, 2).contiguous(), None


@contextmanager
def cudnn_attention_disabled() -> Iterator[None]:
    r"""Switch PyTorch's cuDNN SDPA backend off inside (the other backends stay as the caller set them).

    PyTorch builds one cuDNN attention plan per exact shape (kept per thread); generation's prefills come in ever new
    shapes, so most calls pay a plan build (H200, 134 shapes: 14.4 s with cuDNN, 5.3 s without,
    `benchmarks/bench_attention_memory_gpu.py`). The flag is global to the process: generation and training never run
    attention at the same time in one process, so switching it during `HFEngine.serve` is safe.
    """
    previous = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(previous)


def _register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_attention)


def _round_up(value: int, multiple: int) -> int:
    return ((value + multiple - 1) // multiple) * multiple


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


_MASK32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    r"""A 32-bit integer finaliser (xor-shift-multiply rounds) on int64 tensors holding values below 2**32."""
    x = (x ^ (x >> 16)) * 0x45D9F3B & _MASK32
    x = (x ^ (x >> 16)) * 0x45D9F3B & _MASK32
    return x ^ (x >> 16)


def seeded_exponential_noise(seeds: torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    r"""Exponential(1) noise `[batch, vocab]` that is a pure function of (seed, position, token id).

    Sampling `argmax(probs / noise)` with this noise draws from `probs` (the exponential race, as with the engine's
    generator), but the draw of a row depends only on its own request seed and the position of the token being
    sampled: the same trajectory gets the same tokens whatever else shares the batch, in which order requests arrive
    or whether the run was interrupted and resumed (the evaluation's per-sample seeds, docs/algorithms.md §9.3). Pure
    tensor operations (counter-based hashing, no generator state), so CUDA graphs capture it.

    Args:
        seeds: `[batch]` int64 seeds (any non-negative value; rows with negative seeds get noise too, unused).
        positions: `[batch]` int64 positions of the tokens being sampled.
        vocab: Vocabulary size (logit columns).

    Returns:
        `[batch, vocab]` float32 noise, strictly positive and finite.
    """
    seeds = seeds.long()
    row = _mix32((seeds & _MASK32) ^ _mix32((seeds >> 32) & _MASK32))
    row = _mix32(row ^ _mix32((positions.long() * 0x27D4EB2F + 0x165667B1) & _MASK32))
    cols = torch.arange(vocab, device=seeds.device, dtype=torch.long)
    bits = _mix32((row.unsqueeze(-1) + cols * 0x9E3779B1) & _MASK32)
    uniform = ((bits >> 8).float() + 0.5) * (1.0 / (1 << 24))  # in (0, 1): 24 bits, exact in float32
    return -torch.log(uniform)


def decode_metrics(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    r"""Log values of the engine work between two snapshots of `HFEngine.stats` (empty without decode steps).

    `time/prefill`, `time/decode` (the decode loop), `time/decode_device` (decode steps until their tokens reach the
    host), `time/graph_capture`, `time/engine_idle` (waiting for tool results); `perf/decode_step_ms` (device time
    per decode step, capture excluded), `perf/decode_wall_ms` (the decode loop per step, host bookkeeping included,
    capture excluded: what `benchmarks/bench_rollout_gpu.py` reports for the engine alone), `perf/decode_host_ms`
    (host work per step: token bookkeeping, stop strings; admissions are in `time/prefill`),
    `perf/decode_rows` / `perf/decode_batch` (mean rows decoding / computed per step), `perf/decode_kv_len` (mean
    attended cache length); `memory/engine_cache_gib` (KV cache at release) and `memory/engine_released_gib`.
    """
    delta = {k: float(after.get(k, 0.0)) - float(before.get(k, 0.0)) for k in after}
    steps = delta.get("decode_steps", 0.0)
    out: dict[str, float] = {}
    if steps <= 0:
        return out
    out["time/prefill"] = delta["prefill_s"]
    out["time/decode"] = delta["decode_s"]
    out["time/decode_device"] = delta["decode_device_s"]
    out["time/graph_capture"] = delta["capture_s"]
    out["time/engine_idle"] = delta["idle_s"]
    out["perf/decode_step_ms"] = 1e3 * delta["decode_device_s"] / steps
    out["perf/decode_wall_ms"] = 1e3 * (delta["decode_s"] - delta["capture_s"]) / steps
    out["perf/decode_host_ms"] = 1e3 * (delta["decode_s"] - delta["decode_device_s"] - delta["capture_s"]) / steps
    out["perf/decode_rows"] = delta["decode_row_steps"] / steps
    out["perf/decode_batch"] = delta["decode_batch_steps"] / steps
    out["perf/decode_kv_len"] = delta["decode_kv_steps"] / steps
    out["memory/engine_cache_gib"] = float(after.get("cache_bytes", 0.0)) / 2**30
    out["memory/engine_released_gib"] = float(after.get("released_bytes", 0.0)) / 2**30
    return out


class HFEngine(GenerationEngine):
    r"""Batched multi-round generation on a transformers causal LM with per-trajectory KV slots.

    Supported models: decoder-only transformers models whose attention calls `past_key_values.update` and accepts a
    4-D attention mask with explicit `position_ids` (Qwen2/2.5/3, Llama, Mistral, ...), with `sdpa` or `eager`
    attention (`flash_attention_2` ignores custom 4-D masks and is refused).

    Args:
        model: The policy; `set_model` replaces it.
        tokenizer: Its tokenizer (stop-string detection).
        max_batch_size: Slots S: trajectories decoded together; more requests take a slot as soon as one frees up.
        max_context: Longest prompt + response in tokens (cache columns are allocated for it; grown on demand).
        prefix_cache: Copy the KV rows of the longest resident common prefix (the branch source, or another
            trajectory of the same prompt) instead of re-running the prefill.
        prefill_chunk: Tokens per prefill forward and row (limits activation memory).
        cuda_graphs: Capture the decode step as CUDA graphs (default: True on CUDA, never on CPU).
        sync_every: Decode steps between host syncs (default 8 with CUDA graphs, else 1).
        length_bucket: Granularity (tokens) of the attention length, so graphs are reused.
        seed: Seed of the sampling generator (CPU/eager; CUDA graphs use the default CUDA generator) for requests
            without their own seed; a request with `GenerationRequest.seed` samples with `seeded_exponential_noise`
            of that seed and the token position instead, whatever shares the batch.
        grouped_attention: With `sdpa` models, use `grouped_sdpa_attention` during generation (no repeated KV heads).
        cudnn_attention: Let PyTorch pick its cuDNN SDPA backend during generation (default False: building a cuDNN
            plan per new prefill shape made generation 2.7x slower on an H200, see `cudnn_attention_disabled`).
    """

    capabilities = HF_CAPABILITIES

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_batch_size: int = 64,
        max_context: int | None = None,
        prefix_cache: bool = True,
        prefill_chunk: int = 512,
        cuda_graphs: bool | None = None,
        sync_every: int | None = None,
        length_bucket: int = 256,
        seed: int | None = None,
        grouped_attention: bool = True,
        cudnn_attention: bool = False,
    ) -> None:
        r"""Create the engine (arguments in the class docstring)."""
        self.grouped_attention = grouped_attention
        self.cudnn_attention = cudnn_attention
        self.tokenizer = tokenizer
        self.max_batch_size = int(max_batch_size)
        self.max_context = max_context
        self.prefix_cache = prefix_cache
        self.prefill_chunk = int(prefill_chunk)
        self._cuda_graphs_opt = cuda_graphs
        self._sync_every_opt = sync_every
        self.length_bucket = int(length_bucket)
        self.seed = seed
        self.model: Any = None
        self._cache: SlotKVCache | None = None
        self._graphs: dict[tuple, Any] = {}
        self._pool = None
        self._matchers: dict[tuple[str, ...], StopStringMatcher] = {}
        self._generator: torch.Generator | None = None
        self.stats: dict[str, float] = {}
        self.reset_stats()
        self.set_model(model)

    # ------------------------------------------------------------------ state
    def reset_stats(self) -> None:
        r"""Zero the counters in `stats` (prefill/decode seconds, decode steps, prefilled/copied tokens)."""
        self.stats = {
            "prefill_s": 0.0,  # admission: prefill forwards and the first sampled token
            "decode_s": 0.0,  # decode loop: device steps, host syncs, token bookkeeping, graph capture
            "decode_device_s": 0.0,  # launching the decode steps until their tokens are on the host, capture excluded
            "capture_s": 0.0,  # CUDA graph capture (warm-up steps included)
            "idle_s": 0.0,  # nothing to decode: waiting for the source (tool results)
            "decode_steps": 0,
            "decode_row_steps": 0,  # sum over decode steps of the rows decoding (mean batch = this / steps)
            "decode_batch_steps": 0,  # sum over decode steps of the batch computed (graph bucket)
            "decode_kv_steps": 0,  # sum over decode steps of the attended cache length
            "prefill_tokens": 0,
            "copied_tokens": 0,
            "generated_tokens": 0,
            "admissions": 0,  # prefill batches: 1 per call when everything fits, more with refill
            "cache_bytes": 0,  # KV cache and sampling buffers when last released
            "released_bytes": 0,  # device memory given back by the last `release` (cache, graphs and their pool)
        }

    def set_model(self, model: Any) -> None:
        r"""Use `model` from now on; cached keys/values (computed with the old weights) are dropped."""
        if model is not self.model:
            self._graphs.clear()
            self._cache = None
        self.model = model
        attn = getattr(getattr(model, "config", None), "_attn_implementation", "sdpa")
        if attn is not None and "flash" in str(attn):
            raise ValueError(
                f"The hf rollout engine needs `sdpa` or `eager` attention (got {attn!r}): flash attention ignores the "
                "per-row 4-D masks of the slot cache."
            )
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.use_graphs = (
            self.device.type == "cuda" if self._cuda_graphs_opt is None else bool(self._cuda_graphs_opt)
        ) and self.device.type == "cuda"
        self.sync_every = int(self._sync_every_opt or (8 if self.use_graphs else 1))
        self._sampling_generator(self.device)
        self.reset()

    def _sampling_generator(self, device: torch.device) -> torch.Generator | None:
        r"""The seeded sampling generator on `device` (None: unseeded, or CUDA graphs, which use the default one).

        Made on first use and made again, with the same seed, when the logits live on another device than the one it
        was made for: a model that is moved after the engine first saw it (FSDP's `cpu_ram_efficient_loading` loads
        on the CPU and shards onto the GPU later) otherwise failed with "Expected a 'cuda' device type for generator
        but found 'cpu'" at its first sampled token (issue 25).
        """
        if self.seed is None or self.use_graphs:
            return None
        generator = self._generator
        if generator is None or torch.device(generator.device) != torch.device(device):
            generator = torch.Generator(device=device)
            generator.manual_seed(int(self.seed))
            self._generator = generator
        return generator

    def reset(self) -> None:
        r"""Forget which trajectory owns which slot."""
        n = self.max_batch_size
        self._slot_key: list[int | None] = [None] * n
        self._slot_tokens: list[np.ndarray | None] = [None] * n
        self._slot_prompt: list[int | None] = [None] * n
        self._slot_tick = [0] * n
        self._key_slot: dict[int, int] = {}
        self._tick = 0

    def finish(self, keys: Sequence[int]) -> None:
        r"""Free the slots of finished trajectories (their prefixes stay reusable until overwritten)."""
        for key in keys:
            slot = self._key_slot.pop(key, None)
            if slot is not None:
                self._slot_key[slot] = None

    def cache_bytes(self) -> int:
        r"""Bytes of the KV cache and the per-slot buffers allocated now (0 after `release`)."""
        if self._cache is None:
            return 0
        tensors = list(self._cache.keys) + list(self._cache.values)
        if self._presence is not None:
            tensors.append(self._presence)
        return sum(t.numel() * t.element_size() for t in tensors)

    def release(self) -> None:
        r"""Drop the KV buffers and CUDA graphs (memory goes back to training); they are re-created lazily.

        `stats["cache_bytes"]` and, on CUDA, `stats["released_bytes"]` (allocated memory before minus after, graph
        pool included) record what was freed.
        """
        cuda = self.device.type == "cuda"
        before = torch.cuda.memory_allocated(self.device) if cuda else 0
        self.stats["cache_bytes"] = self.cache_bytes()
        self._graphs.clear()
        self._cache = None
        self._pool = None
        self._presence = None
        self.reset()
        if cuda:
            torch.cuda.synchronize(self.device)
            self.stats["released_bytes"] = before - torch.cuda.memory_allocated(self.device)
            torch.cuda.empty_cache()

    def _ensure_buffers(self, needed_columns: int) -> None:
        capacity = max(needed_columns, (self.max_context or 0) + self.sync_every + 2)
        capacity = _round_up(capacity, self.length_bucket) + 1
        if self._cache is not None and self._cache.capacity >= needed_columns:
            return
        self._graphs.clear()
        self.reset()
        self._cache = SlotKVCache(self.max_batch_size, capacity)
        n = self.max_batch_size
        self._ids = torch.zeros(n, dtype=torch.long, device=self.device)
        self._pos = torch.zeros(n, dtype=torch.long, device=self.device)
        self._live = torch.zeros(n, dtype=torch.bool, device=self.device)
        self._cols = torch.arange(capacity, device=self.device)
        self._rec_tok = torch.zeros(self.sync_every, n, dtype=torch.long, device=self.device)
        self._rec_ent = torch.zeros(self.sync_every, n, dtype=torch.float32, device=self.device)
        self._out_ent = torch.zeros(n, dtype=torch.float32, device=self.device)
        self._rec_lp = torch.zeros(self.sync_every, n, dtype=torch.float32, device=self.device)
        self._out_lp = torch.zeros(n, dtype=torch.float32, device=self.device)
        self._presence = None  # [slots, vocab] bool, allocated by the first wave with a repetition penalty
        self._row_index = torch.arange(n, device=self.device)
        self._row_seed = torch.full((n,), -1, dtype=torch.long, device=self.device)  # per-request seed, -1: none
        self._seeded_slots: set[int] = set()  # slots whose row was admitted with a seed
        self._true = torch.ones((), dtype=torch.bool, device=self.device)

    def _ensure_presence(self, vocab: int) -> torch.Tensor:
        r"""The `[slots, vocab]` mask of tokens present in each slot's context (repetition penalty only)."""
        if self._presence is None or self._presence.shape[1] != vocab:
            self._graphs.clear()
            self._presence = torch.zeros(self.max_batch_size, vocab, dtype=torch.bool, device=self.device)
        return self._presence

    def _matcher(self, stops: tuple[str, ...]) -> StopStringMatcher:
        if stops not in self._matchers:
            self._matchers[stops] = StopStringMatcher(self.tokenizer, stops)
        return self._matchers[stops]

    # ------------------------------------------------------------------ device computations
    def _forward(
        self,
        input_ids: torch.Tensor,
        rope_pos: torch.Tensor,
        write_pos: torch.Tensor,
        attend_upto: torch.Tensor,
        rows: torch.Tensor | None,
        kv_len: int,
    ) -> torch.Tensor:
        r"""One forward over `[batch, seq]` tokens; returns the logits of the last column, `[batch, vocab]`."""
        cache = self._cache
        cache.rows, cache.write_pos, cache.kv_len = rows, write_pos, kv_len
        allowed = self._cols[:kv_len].view(1, 1, kv_len) <= attend_upto.unsqueeze(-1)
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        mask = mask.masked_fill(~allowed, torch.finfo(self.dtype).min).unsqueeze(1)
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=rope_pos,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1, :]

    def _sample(
        self,
        logits: torch.Tensor,
        sampling: SamplingSettings,
        presence: torch.Tensor | None = None,
        seeds: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        r"""Sample `[batch]` tokens, their entropy terms and behaviour log-probs from `[batch, vocab]` logits (no sync).

        The behaviour log-prob of a sampled token is `log_softmax(logits / T)[token]` of the raw logits (greedy: T=1),
        before repetition penalty, top-k and top-p: the quantity the trainer recomputes for that token
        (`PolicyScorer`), so `proximal - behaviour` measures only the change of weights (docs/algorithms.md §13).

        The entropy terms are those of the sampling distribution: softmax of the logits divided by the temperature with
        top-k / top-p applied (greedy: the raw logits), matching the vLLM engine's `processed_logprobs`.
        `presence` (`[batch, vocab]` bool, only with `sampling.repetition_penalty != 1`): tokens already in each row's
        context, whose logits are divided (positive) or multiplied (negative) by the penalty first.
        `seeds`, `positions` (`[batch]` int64): a row with a seed >= 0 (`GenerationRequest.seed`) samples with
        `seeded_exponential_noise(seed, position)` instead of the engine's generator, so its tokens depend only on its
        own seed and context, never on which rows share the batch or in which order requests arrived.
        """
        logits = logits.float()
        scaled = logits if sampling.greedy else logits / sampling.temperature
        normaliser = torch.logsumexp(scaled, dim=-1)
        if presence is not None:
            penalty = float(sampling.repetition_penalty)
            logits = torch.where(presence, torch.where(logits > 0, logits / penalty, logits * penalty), logits)
        if sampling.greedy:
            log_probs = torch.log_softmax(logits, dim=-1)
            tokens = logits.argmax(dim=-1)
        else:
            logits = logits / sampling.temperature
            filtered = logits
            if sampling.top_k and sampling.top_k > 0:
                kth = filtered.topk(min(sampling.top_k, filtered.shape[-1]), dim=-1).values[:, -1:]
                filtered = filtered.masked_fill(filtered < kth, float("-inf"))
            if sampling.top_p < 1.0:
                sorted_logits, sorted_idx = filtered.sort(dim=-1, descending=True)
                cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
                remove = (cum - sorted_logits.softmax(dim=-1)) > sampling.top_p
                sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
                filtered = torch.full_like(filtered, float("-inf")).scatter(-1, sorted_idx, sorted_logits)
            probs = torch.softmax(filtered, dim=-1)
            noise = torch.empty_like(probs).exponential_(generator=self._sampling_generator(probs.device))
            if seeds is not None:
                seeded = seeded_exponential_noise(seeds, positions, probs.shape[-1])
                noise = torch.where((seeds >= 0).unsqueeze(-1), seeded, noise)
            tokens = (probs / noise).argmax(dim=-1)
            # entropy of the distribution sampled from (temperature, top-k, top-p applied), as vLLM's
            # logprobs_mode="processed_logprobs" returns it (docs/algorithms.md §3.2)
            log_probs = torch.log_softmax(filtered, dim=-1)
        if sampling.entropy_source == "full":
            terms = full_entropy_terms(log_probs)
        else:
            terms = topk_entropy_terms(log_probs, tokens, sampling.entropy_topk)
        behaviour = scaled.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - normaliser
        return tokens, terms, behaviour

    def _decode_step(self, batch: int, kv_len: int, sampling: SamplingSettings) -> None:
        r"""One decode step for slots `[0, batch)`; idle rows write to the scratch column."""
        ids, pos, live = self._ids[:batch], self._pos[:batch], self._live[:batch]
        scratch = self._cache.capacity - 1
        write = torch.where(live, pos, torch.full_like(pos, scratch)).unsqueeze(1)
        rope = torch.where(live, pos, torch.zeros_like(pos)).unsqueeze(1)
        logits = self._forward(ids.unsqueeze(1), rope, write, rope, None, kv_len)
        presence = self._presence[:batch] if sampling.repetition_penalty != 1.0 else None
        seeds = self._row_seed[:batch] if self._seeded_slots else None  # training rows have no seed: no extra work
        tokens, terms, behaviour = self._sample(logits, sampling, presence, seeds, pos + 1)
        if presence is not None:
            presence.index_put_((self._row_index[:batch], tokens), self._true)
        ids.copy_(tokens)
        pos.add_(live.long())
        self._out_ent[:batch].copy_(terms)
        self._out_lp[:batch].copy_(behaviour)

    def _step(self, batch: int, kv_len: int, sampling: SamplingSettings) -> None:
        if not self.use_graphs:
            self._decode_step(batch, kv_len, sampling)
            return
        key = (
            batch,
            kv_len,
            sampling.temperature,
            sampling.top_p,
            sampling.top_k,
            sampling.entropy_source,
            sampling.entropy_topk,
            sampling.repetition_penalty,
            bool(self._seeded_slots),
        )
        graph = self._graphs.get(key)
        if graph is None:
            t0 = time.perf_counter()
            saved_ids, saved_pos = self._ids.clone(), self._pos.clone()
            penalty = sampling.repetition_penalty != 1.0 and self._presence is not None
            saved_presence = self._presence.clone() if penalty else None
            stream = torch.cuda.Stream(device=self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._decode_step(batch, kv_len, sampling)
            torch.cuda.current_stream(self.device).wait_stream(stream)
            self._ids.copy_(saved_ids)
            self._pos.copy_(saved_pos)
            if saved_presence is not None:  # the warm-up steps marked their sampled tokens as present
                self._presence.copy_(saved_presence)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                self._decode_step(batch, kv_len, sampling)
            self._graphs[key] = graph
            torch.cuda.synchronize(self.device)
            self.stats["capture_s"] += time.perf_counter() - t0
        graph.replay()

    # ------------------------------------------------------------------ slot assignment
    def _assign(
        self,
        requests: list[GenerationRequest],
        contexts: list[np.ndarray],
        pending: list[int],
        busy: set[int] | None = None,
    ):
        r"""Pick the requests to admit, their slots and the KV copies; returns (rows, copies, leftover).

        `busy`: slots of rows that are decoding now (never reassigned, but usable as prefix sources: the columns a
        copy reads, up to their last recorded context, are not rewritten while the row continues).
        """
        busy = set(busy or ())
        n_slots = self.max_batch_size - len(busy)
        rows: list[dict] = []
        used: set[int] = set(busy)
        pinned: set[int] = set()
        copies: list[tuple[int, int, int]] = []
        leftover: list[int] = []
        fresh: list[int] = []
        for i in pending:
            slot = self._key_slot.get(requests[i].key)
            if slot is not None and len(rows) < n_slots and slot not in used:
                tokens = self._slot_tokens[slot]
                cached = _lcp(tokens, contexts[i]) if tokens is not None else 0
                rows.append({"req": i, "slot": slot, "cached": cached})
                used.add(slot)
            else:
                fresh.append(i)
        for i in fresh:
            if len(rows) >= n_slots:
                leftover.append(i)
                continue
            req, ctx = requests[i], contexts[i]
            prompt_hash = hash(tuple(req.prompt_ids))
            src, best = None, 0
            if self.prefix_cache:
                candidates = []
                if req.parent_key is not None and req.parent_key in self._key_slot:
                    candidates.append(self._key_slot[req.parent_key])
                candidates += [s for s in range(self.max_batch_size) if self._slot_prompt[s] == prompt_hash]
                for s in candidates:
                    tokens = self._slot_tokens[s]
                    if tokens is None:
                        continue
                    common = _lcp(tokens, ctx)
                    if common > best:
                        src, best = s, common
            slot = self._free_slot(used, pinned | ({src} if src is not None else set()))
            if slot is None:
                leftover.append(i)
                continue
            if src is not None and best > 0:
                pinned.add(src)
                copies.append((src, slot, best))
            old_key = self._slot_key[slot]
            if old_key is not None:
                self._key_slot.pop(old_key, None)
            self._slot_key[slot] = req.key
            self._key_slot[req.key] = slot
            self._slot_prompt[slot] = prompt_hash
            self._slot_tokens[slot] = None
            used.add(slot)
            rows.append({"req": i, "slot": slot, "cached": best if src is not None else 0})
        return rows, copies, leftover

    def _free_slot(self, used: set[int], pinned: set[int]) -> int | None:
        best, best_tick = None, None
        for s in range(self.max_batch_size):
            if s in used or s in pinned:
                continue
            if self._slot_key[s] is None and self._slot_tokens[s] is None:
                return s
            tick = self._slot_tick[s] - (1 << 40 if self._slot_key[s] is None else 0)
            if best is None or tick < best_tick:
                best, best_tick = s, tick
        return best

    # ------------------------------------------------------------------ generation
    @torch.no_grad()
    def generate(self, requests: list[GenerationRequest], sampling: SamplingSettings) -> list[GenerationResult]:
        r"""Generate one round for every request (see `GenerationEngine.generate`).

        More requests than slots are decoded with continuous refill: a finished row's slot takes the next request at
        the following host sync, not after the slowest row of a wave.

        Args:
            requests: One per trajectory; `max_tokens` per trajectory.
            sampling: Sampling parameters of the round.

        Returns:
            One `GenerationResult` per request, in order.
        """
        source = ListSource(requests)
        self.serve(source, sampling)
        return source.results

    @torch.no_grad()
    def serve(self, source: Any, sampling: SamplingSettings) -> None:
        r"""Decode requests from `source` with continuous batching until it has no more work.

        Every `sync_every` decode steps the host reads the new tokens, hands each finished row to `source.put` at
        once and fills the free slots with `source.take(free)` (prefill of the new rows, then they join the running
        decode batch). When no row is decoding and the source has nothing ready, `source.wait()` blocks until it has
        (e.g. tool results); the loop ends when nothing decodes and `source.waiting()` is False.

        Args:
            source: A request source (`engine.RequestSource`: `take`, `put`, `waiting`, `wait`).
            sampling: Sampling parameters (one setting for everything the source hands out).

        Raises:
            RuntimeError: a request cannot get a KV slot although no row is decoding.
        """
        was_training = self.model.training
        self.model.eval()
        config = getattr(self.model, "config", None)
        original_attn = getattr(config, "_attn_implementation", None)
        if self.grouped_attention and original_attn == "sdpa":
            _register_attention()
            config._attn_implementation = GROUPED_SDPA
        try:
            with nullcontext() if self.cudnn_attention else cudnn_attention_disabled():
                self._serve(source, sampling)
        finally:
            if config is not None and getattr(config, "_attn_implementation", None) == GROUPED_SDPA:
                config._attn_implementation = original_attn
            if was_training:
                self.model.train()

    def _serve(self, source: Any, sampling: SamplingSettings) -> None:
        matcher = self._matcher(tuple(sampling.stop_strings))
        eos = {int(e) for e in sampling.eos_token_ids}
        live: dict[int, dict] = {}  # slot -> row being decoded
        waiting: list[tuple[GenerationRequest, np.ndarray]] = []  # taken from the source, not admitted yet
        if self._cache is not None:
            self._live.zero_()
        while True:
            free = self.max_batch_size - len(live)
            if free > len(waiting):
                for req in source.take(free - len(waiting)):
                    if req.max_tokens <= 0:
                        source.put(req, GenerationResult(token_ids=[], finish_reason="length"))
                        continue
                    waiting.append((req, np.asarray(list(req.prompt_ids) + list(req.response_ids), dtype=np.int64)))
            if waiting and free > 0:
                admitted_before = len(waiting)
                waiting = self._admit(waiting, live, sampling, matcher, eos, source)
                if not live and len(waiting) == admitted_before:
                    raise RuntimeError("No free KV slot for a request; increase max_batch_size.")
            if not live:
                if waiting:
                    continue  # everything admitted finished at its first token: admit more
                if source.waiting():
                    t0 = time.perf_counter()
                    source.wait()
                    self.stats["idle_s"] += time.perf_counter() - t0
                    continue
                return
            self._decode_block(live, sampling, matcher, eos, source)

    def _admit(
        self,
        waiting: list[tuple[GenerationRequest, np.ndarray]],
        live: dict[int, dict],
        sampling: SamplingSettings,
        matcher: StopStringMatcher,
        eos: set[int],
        source: Any,
    ) -> list[tuple[GenerationRequest, np.ndarray]]:
        r"""Prefill as many waiting requests as there are free slots; returns the ones still waiting."""
        t0 = time.perf_counter()
        extra = self.sync_every + 2
        if not live:
            needed = max(len(ctx) + req.max_tokens for req, ctx in waiting) + extra
            self._ensure_buffers(needed)  # grows (and forgets the slots) only when nothing is decoding
            self._live.zero_()
        capacity = self._cache.capacity
        fits = [j for j, (req, ctx) in enumerate(waiting) if len(ctx) + req.max_tokens + extra <= capacity]
        if not fits:
            return waiting
        requests = [waiting[j][0] for j in fits]
        contexts = [waiting[j][1] for j in fits]
        rows, copies, leftover = self._assign(requests, contexts, list(range(len(fits))), busy=set(live))
        admitted = {fits[row["req"]] for row in rows}
        still = [w for j, w in enumerate(waiting) if j not in admitted]
        if not rows:
            return still
        if copies:
            self._cache.copy_slots([c[0] for c in copies], [c[1] for c in copies], max(c[2] for c in copies))
            self.stats["copied_tokens"] += sum(c[2] for c in copies)
        self.stats["admissions"] += 1
        logits = self._prefill(rows, contexts)
        presence = table = slot_t = None
        if sampling.repetition_penalty != 1.0:
            # the mask of each admitted row is rebuilt from its full context (prompt and response so far)
            table = self._ensure_presence(logits.shape[-1])
            slot_t = torch.as_tensor([row["slot"] for row in rows], device=self.device)
            table[slot_t] = False
            for row in rows:
                table[row["slot"], torch.as_tensor(contexts[row["req"]], device=self.device)] = True
            presence = table[slot_t]
        row_seeds = [-1 if requests[row["req"]].seed is None else int(requests[row["req"]].seed) for row in rows]
        seeds_t = torch.as_tensor(row_seeds, dtype=torch.long, device=self.device)
        positions_t = torch.as_tensor([len(contexts[row["req"]]) for row in rows], device=self.device)
        seeded = any(seed >= 0 for seed in row_seeds)
        tokens, terms, behaviour = self._sample(logits, sampling, presence, seeds_t if seeded else None, positions_t)
        if presence is not None:
            table[slot_t, tokens] = True
        first_tok, first_ent, first_lp = tokens.tolist(), terms.tolist(), behaviour.tolist()
        started, started_rows = [], []
        for j, row in enumerate(rows):
            req, ctx = requests[row["req"]], contexts[row["req"]]
            state = {"req": req, "ctx": ctx, "slot": row["slot"], "pos": len(ctx), "gen": [], "ent": [], "lp": []}
            state.update(done=False, reason="length", stop=None, max=req.max_tokens)
            self._accept(state, first_tok[j], first_ent[j], first_lp[j], sampling, matcher, eos)
            if state["done"]:
                self._finish_row(state, source)
            else:
                live[row["slot"]] = state
                started.append((row["slot"], first_tok[j], len(ctx)))
                started_rows.append(j)
        if started:
            slot_t = torch.as_tensor([s for s, _, _ in started], device=self.device)
            self._ids[slot_t] = torch.as_tensor([t for _, t, _ in started], device=self.device)
            self._pos[slot_t] = torch.as_tensor([p for _, _, p in started], device=self.device)
            self._live[slot_t] = True
            self._row_seed[slot_t] = seeds_t[torch.as_tensor(started_rows, device=self.device)]
            for slot, _, _ in started:
                self._seeded_slots.discard(slot)
            self._seeded_slots.update(rows[j]["slot"] for j in started_rows if row_seeds[j] >= 0)
        self.stats["prefill_s"] += time.perf_counter() - t0
        return still

    @staticmethod
    def _accept(
        state: dict, token: int, ent: float, logprob: float, sampling: SamplingSettings, matcher, eos: set[int]
    ) -> None:
        state["gen"].append(token)
        state["lp"].append(logprob)
        if len(state["ent"]) < sampling.entropy_tokens:
            state["ent"].append(ent)
        if token in eos:
            state["done"], state["reason"] = True, "eos"
            return
        stop = matcher.check(state["gen"])
        if stop is not None:
            state["done"], state["reason"], state["stop"] = True, "stop", stop
        elif len(state["gen"]) >= state["max"]:
            state["done"], state["reason"] = True, "length"

    def _finish_row(self, state: dict, source: Any) -> None:
        slot = state["slot"]
        self._slot_tokens[slot] = np.concatenate([state["ctx"], np.asarray(state["gen"][:-1], dtype=np.int64)])
        self._tick += 1
        self._slot_tick[slot] = self._tick
        self.stats["generated_tokens"] += len(state["gen"])
        result = GenerationResult(
            token_ids=state["gen"],
            entropy_terms=state["ent"],
            finish_reason=state["reason"],
            stop_string=state["stop"],
            logprobs=state["lp"],
            weight_version=self.weight_version,
        )
        source.put(state["req"], result)

    def _decode_block(
        self, live: dict[int, dict], sampling: SamplingSettings, matcher, eos: set[int], source: Any
    ) -> None:
        r"""`sync_every` decode steps of the live rows, then one host sync; finished rows go to `source.put`."""
        t0 = time.perf_counter()
        batch = max(live) + 1
        if self.use_graphs:
            batch = min(1 << (batch - 1).bit_length(), self.max_batch_size)
        k_steps = self.sync_every
        top = max(state["pos"] for state in live.values())
        kv_len = min(_round_up(top + k_steps, self.length_bucket), self._cache.capacity - 1)
        capture_before = self.stats["capture_s"]
        for t in range(k_steps):
            self._step(batch, kv_len, sampling)
            self._rec_tok[t, :batch].copy_(self._ids[:batch])
            self._rec_ent[t, :batch].copy_(self._out_ent[:batch])
            self._rec_lp[t, :batch].copy_(self._out_lp[:batch])
        rec_tok = self._rec_tok[:, :batch].cpu().numpy()
        rec_ent = self._rec_ent[:, :batch].cpu().numpy()
        rec_lp = self._rec_lp[:, :batch].cpu().numpy()
        t1 = time.perf_counter()
        stats = self.stats
        stats["decode_device_s"] += t1 - t0 - (stats["capture_s"] - capture_before)
        stats["decode_steps"] += k_steps
        stats["decode_row_steps"] += len(live) * k_steps
        stats["decode_batch_steps"] += batch * k_steps
        stats["decode_kv_steps"] += kv_len * k_steps
        finished = []
        for slot, state in live.items():
            for t in range(k_steps):
                token, ent, logprob = int(rec_tok[t, slot]), float(rec_ent[t, slot]), float(rec_lp[t, slot])
                self._accept(state, token, ent, logprob, sampling, matcher, eos)
                if state["done"]:
                    break
            state["pos"] += k_steps
            if state["done"]:
                finished.append(slot)
        if finished:
            self._live[torch.as_tensor(finished, device=self.device)] = False
            for slot in finished:
                self._finish_row(live.pop(slot), source)
        stats["decode_s"] += time.perf_counter() - t0

    def _prefill(self, rows: list[dict], contexts: list[np.ndarray]) -> torch.Tensor:
        r"""Prefill every row's uncached tokens in chunks; returns the last-position logits `[rows, vocab]`."""
        scratch = self._cache.capacity - 1
        offsets = []
        for row in rows:
            ctx = contexts[row["req"]]
            row["cached"] = min(row["cached"], len(ctx) - 1)
            offsets.append(row["cached"])
        final: list[torch.Tensor | None] = [None] * len(rows)
        while True:
            active = [j for j, row in enumerate(rows) if offsets[j] < len(contexts[row["req"]])]
            if not active:
                break
            chunks = []
            for j in active:
                ctx = contexts[rows[j]["req"]]
                chunks.append(ctx[offsets[j] : offsets[j] + self.prefill_chunk])
            width = max(len(c) for c in chunks)
            ids = np.zeros((len(active), width), dtype=np.int64)
            pos = np.zeros((len(active), width), dtype=np.int64)
            write = np.full((len(active), width), scratch, dtype=np.int64)
            for b, (j, chunk) in enumerate(zip(active, chunks)):
                n = len(chunk)
                cols = np.arange(offsets[j], offsets[j] + n)
                ids[b, width - n :] = chunk
                pos[b, width - n :] = cols
                write[b, width - n :] = cols
            kv_len = min(_round_up(int(pos.max()) + 1, self.length_bucket), self._cache.capacity - 1)
            slots = torch.as_tensor([rows[j]["slot"] for j in active], device=self.device)
            pos_t = torch.as_tensor(pos, device=self.device)
            logits = self._forward(
                torch.as_tensor(ids, device=self.device),
                pos_t,
                torch.as_tensor(write, device=self.device),
                pos_t,
                slots,
                kv_len,
            )
            self.stats["prefill_tokens"] += int(sum(len(c) for c in chunks))
            for b, (j, chunk) in enumerate(zip(active, chunks)):
                offsets[j] += len(chunk)
                if offsets[j] >= len(contexts[rows[j]["req"]]):
                    final[j] = logits[b]
        return torch.stack(final)

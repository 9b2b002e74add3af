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

r"""The policy's weights as the `hf` rollout engine should read them: compute dtype, LoRA adapters merged.

Why the training loop decoded slower than the engine's own benchmark (issue 12), from the code:

* LLaMA-Factory keeps trainable parameters in float32 (`bf16: true` without `pure_bf16`; LoRA adapters always) and
  trains under bf16 autocast. The engine has no autocast, so full fine-tuning decoded in float32: twice the weight
  bytes per step (plus a float32 KV cache), and the LoRA adapters ran as float32 matmuls with casts.
* An unmerged LoRA layer adds about six small kernels (cast, A, B, scale, add, cast) to each of the seven adapted
  projections of every layer: ~1,200 extra kernels per decode step for a 28-layer model, which CUDA graphs replay but
  do not remove.

`GenerationWeights.applied(model)` swaps, for the duration of a rollout, every floating parameter whose dtype differs
from the compute dtype for a cast copy, and every vanilla LoRA linear layer's base weight for `W + B A * scaling`
(computed in float32, rounded once) while marking the adapter merged, so peft's forward reads the base layer alone. On
exit the original tensors are put back bit for bit (no merge/unmerge round trip that would drift bf16 base weights):

* `lora_merge="gpu"`: the merged weights are new tensors; the originals stay where they are (+2 bytes per adapted
  weight during the rollout, 13 GB for Qwen2.5-7B with every linear layer adapted);
* `lora_merge="cpu"`: merged in place, the originals copied to pinned CPU buffers first (kept for the next rollout)
  and copied back after (no extra GPU memory; two copies of the adapted weights over PCIe per rollout);
* `lora_merge="off"`: adapters stay unmerged.

Layers that cannot be merged this way (DoRA and other LoRA variants, `lora_bias`, quantised or non-`Linear` base
layers) stay unmerged and still work.
"""

from contextlib import contextmanager
from typing import Any

import torch


def _lora_layers(model: torch.nn.Module):
    r"""(module, adapters) of every peft LoRA `Linear` layer whose active adapters can be merged exactly as W + BA."""
    try:
        from peft.tuners.lora.layer import LoraLayer
    except ImportError:
        return
    for module in model.modules():
        if not isinstance(module, LoraLayer) or module.disable_adapters or module.merged:
            continue
        base = module.get_base_layer()
        if type(base) is not torch.nn.Linear or not base.weight.is_floating_point():
            continue
        adapters = [a for a in module.active_adapters if a in module.lora_A]
        if not adapters:
            continue
        variants = getattr(module, "lora_variant", {})
        if any(a in variants or module.lora_bias.get(a, False) for a in adapters):
            continue
        yield module, adapters


def _delta(module: Any, adapters: list[str]) -> torch.Tensor:
    r"""`sum_a B_a A_a * scaling_a` in float32 (transposed for `fan_in_fan_out` layers)."""
    delta = None
    for name in adapters:
        a = module.lora_A[name].weight.float()
        b = module.lora_B[name].weight.float()
        part = (b @ a) * module.scaling[name]
        delta = part if delta is None else delta + part
    return delta.T if module.fan_in_fan_out else delta


class GenerationWeights:
    r"""Puts a model into its generation form for a rollout and back (see the module docstring).

    Args:
        dtype: Compute dtype of generation (the training autocast dtype), or None to keep every parameter's dtype.
        lora_merge: `gpu`, `cpu` or `off` (`arpo_hf_lora_merge`).

    Raises:
        ValueError: unknown `lora_merge`.
    """

    def __init__(self, dtype: torch.dtype | None = None, lora_merge: str = "gpu") -> None:
        r"""Keep the settings; CPU stash buffers are allocated on first use and reused."""
        if lora_merge not in ("gpu", "cpu", "off"):
            raise ValueError(f"Unknown lora_merge {lora_merge!r}; expected 'gpu', 'cpu' or 'off'.")
        self.dtype = dtype
        self.lora_merge = lora_merge
        self._stash: dict[int, torch.Tensor] = {}
        self.last: dict[str, int] = {}

    def _stash_buffer(self, param: torch.Tensor) -> torch.Tensor:
        buffer = self._stash.get(id(param))
        if buffer is None or buffer.shape != param.shape or buffer.dtype != param.dtype:
            buffer = torch.empty(param.shape, dtype=param.dtype, pin_memory=param.is_cuda)
            self._stash[id(param)] = buffer
        return buffer

    @contextmanager
    def applied(self, model: torch.nn.Module):
        r"""Inside: parameters in `dtype`, LoRA merged. On exit (also on error): every parameter as it was.

        `self.last` afterwards: `merged_layers`, `cast_params` and `extra_bytes` (new GPU tensors created).
        """
        swaps: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        restores: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        marked: list[tuple[Any, list[str]]] = []
        done: set[int] = set()
        extra = cast = 0
        try:
            if self.lora_merge != "off":
                for module, adapters in list(_lora_layers(model)):
                    weight = module.get_base_layer().weight
                    target = self.dtype or weight.dtype
                    with torch.no_grad():
                        merged = (weight.float() + _delta(module, adapters)).to(target)
                        if self.lora_merge == "gpu" or target != weight.dtype:
                            swaps.append((weight, weight.data))
                            weight.data = merged
                            extra += merged.numel() * merged.element_size()
                        else:
                            buffer = self._stash_buffer(weight)
                            buffer.copy_(weight.data)
                            restores.append((weight, buffer))
                            weight.data.copy_(merged)
                        del merged
                    done.add(id(weight))
                    marked.append((module, list(module.merged_adapters)))
                    module.merged_adapters.extend(adapters)
            if self.dtype is not None:
                for param in model.parameters():
                    if id(param) in done or not param.is_floating_point() or param.dtype == self.dtype:
                        continue
                    swaps.append((param, param.data))
                    param.data = param.data.to(self.dtype)
                    extra += param.numel() * param.element_size()
                    cast += 1
            self.last = {"merged_layers": len(marked), "cast_params": cast, "extra_bytes": extra}
            yield model
        finally:
            for module, previous in marked:
                module.merged_adapters[:] = previous
            for param, data in reversed(swaps):
                param.data = data
            for param, buffer in restores:
                param.data.copy_(buffer)

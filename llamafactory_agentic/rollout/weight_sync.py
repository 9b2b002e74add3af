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

"""Push a policy's weights into an inference engine (vLLM) as plain base-model tensors, one module at a time.

An inference engine knows the base architecture only, so it needs, for every parameter of the base model, the tensor
the policy actually computes with, under the base model's name:

* plain models: `named_parameters()` as they are (each tied parameter once);
* PEFT models (LoRA, DoRA, trainable tokens, ...): every tuner layer's adapters merged into its base layer's weight,
  names without the PEFT prefixes (`base_model.model.` and `.base_layer`), no adapter tensors (`lora_A`, `lora_B`,
  `lora_magnitude_vector`, ...), and for a `modules_to_save` wrapper the active adapter's trained copy instead of the
  frozen `original_module`.

The model is walked module by module. A *unit* is a tuner layer (its base layer plus its adapter parameters) or a
module's own (non-recursive) parameters. For each unit the parameters are gathered (DeepSpeed ZeRO-3), a tuner layer is
merged with peft's `merge(safe_merge=True)`, which writes the merged weight into a new tensor, the unit's tensors are
handed to `load_weights`, and the original values are put back (bit-exact: no merge/unmerge round-off drift in the
trained weights, unlike peft's `merge_adapter()`/`unmerge_adapter()` round trip in bf16).

Memory trade-off under ZeRO-3: gathering the whole model at once (TRL's `unwrap_model_for_generation` with
`gather_deepspeed3_params=True`) holds a full replica of every parameter on every rank during the copy (2 bytes per
parameter in bf16: ~15 GB for a 7B model, on top of the sharded training state and vLLM's own copy). Gathering one unit
at a time needs only the largest unit (one projection matrix plus its adapters, e.g. 0.27 GB for Qwen2.5-7B's
`embed_tokens`), at the price of one all-gather collective per unit (~7-10 per decoder layer) and one `load_weights`
call per unit, so the sync is latency-bound rather than memory-bound. Every rank must walk the same units in the same
order (they do: the walk depends on the module tree only).
"""

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch


GatherFn = Callable[[list[torch.nn.Parameter]], AbstractContextManager]
_THREAD = threading.local()


@contextmanager
def collective_group(group: Any) -> Iterator[None]:
    r"""Within the block, this thread's weight pushes synchronise the ranks on `group` (None: the default group).

    An asynchronous rollout producer (`rl_max_staleness > 0` on several ranks) pushes from a thread of its own while
    the trainer's thread runs the optimiser's collectives on the default group; two threads must never share one
    group, so the producer's barriers go to a group of their own (`train.arpo.async_rollout`).
    """
    previous = getattr(_THREAD, "group", None)
    _THREAD.group = group
    try:
        yield
    finally:
        _THREAD.group = previous


def current_group() -> Any:
    r"""The process group this thread's weight pushes synchronise on (`collective_group`); None: the default."""
    return getattr(_THREAD, "group", None)


@dataclass
class WeightUnit:
    r"""One gather/merge/load unit of the walk.

    Attributes:
        prefix: Module path in the base model (no PEFT prefixes), e.g. `model.layers.0.self_attn.q_proj`.
        module: The module owning the parameters (a tuner layer for `kind == "tuner"`).
        kind: `"tuner"` (peft tuner layer: merge before reading the base layer) or `"plain"`.
        params: `(name relative to prefix, parameter)` pairs whose values are sent (base layer's for a tuner).
        gathered: Every parameter to gather for the unit (for a tuner layer: base layer and adapters).
    """

    prefix: str
    module: torch.nn.Module
    kind: str
    params: list[tuple[str, torch.nn.Parameter]]
    gathered: list[torch.nn.Parameter]


def _peft_classes() -> tuple[type | None, type | None, type | None]:
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:
        return None, None, None
    try:
        from peft.utils.other import ModulesToSaveWrapper
    except ImportError:
        ModulesToSaveWrapper = None
    try:
        from peft.utils.other import TrainableTokensWrapper
    except ImportError:
        TrainableTokensWrapper = None
    return BaseTunerLayer, ModulesToSaveWrapper, TrainableTokensWrapper


def base_model_of(model: torch.nn.Module) -> torch.nn.Module:
    r"""The transformers model under a `PeftModel` (`model.base_model.model`), else `model` itself."""
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base) and getattr(model, "peft_config", None) is not None:
        return get_base()
    return model


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def weight_units(model: torch.nn.Module) -> list[WeightUnit]:
    r"""The units of `model` in module order (each parameter object appears in at most one unit's `params`).

    Args:
        model: A transformers model, optionally wrapped by peft (`PeftModel`).

    Returns:
        The units; names are those of the base (merged) model, e.g. `model.layers.0.mlp.up_proj.weight`.

    Raises:
        ValueError: a tuner layer's base weight is not a floating-point tensor (quantized base, e.g. QLoRA), which
            cannot be merged into plain weights for the inference engine.
    """
    tuner_cls, save_cls, tokens_cls = _peft_classes()
    units: list[WeightUnit] = []
    seen: set[int] = set()

    def visit(module: torch.nn.Module, prefix: str) -> None:
        if tuner_cls is not None and isinstance(module, tuner_cls):
            base = module.get_base_layer()
            own = [(n, p) for n, p in base.named_parameters() if id(p) not in seen]
            for name, p in own:
                if not p.is_floating_point():
                    raise ValueError(
                        f"Cannot merge the adapters of `{_join(prefix, name)}`: its base weight has dtype {p.dtype} "
                        "(quantized base model). Use `arpo_rollout_backend: hf` for QLoRA."
                    )
            seen.update(id(p) for _, p in own)
            units.append(WeightUnit(prefix, module, "tuner", own, list(module.parameters())))
            return
        if save_cls is not None and isinstance(module, save_cls):
            active = module.active_adapters
            use_copy = (not module.disable_adapters) and active and active[0] in module.modules_to_save
            visit(module.modules_to_save[active[0]] if use_copy else module.original_module, prefix)
            return
        if tokens_cls is not None and isinstance(module, tokens_cls):
            visit(module.token_adapter, prefix)  # a tuner layer around the original embedding
            return
        own = [(n, p) for n, p in module.named_parameters(recurse=False) if id(p) not in seen]
        if own:
            seen.update(id(p) for _, p in own)
            units.append(WeightUnit(prefix, module, "plain", own, [p for _, p in own]))
        for name, child in module.named_children():
            visit(child, _join(prefix, name))

    visit(base_model_of(model), "")
    return units


def zero3_partitioned(params: Iterator[torch.nn.Parameter] | list[torch.nn.Parameter]) -> bool:
    r"""Whether any of `params` is managed by DeepSpeed ZeRO-3 (gathered or not right now)."""
    return any(hasattr(p, "ds_id") for p in params)


def zero3_gather(params: list[torch.nn.Parameter]) -> AbstractContextManager:
    r"""`deepspeed.zero.GatheredParameters` over those of `params` that are ZeRO-3 partitioned right now, else a no-op.

    Read-only gather (`modifier_rank=None`): the shards are not updated on exit. Parameters already gathered by an
    outer context (`ds_status` AVAILABLE, e.g. TRL's `unwrap_model_for_generation(gather_deepspeed3_params=True)`)
    are left alone, so this never re-partitions what someone else gathered.
    """
    partitioned = [p for p in params if getattr(getattr(p, "ds_status", None), "name", None) == "NOT_AVAILABLE"]
    if partitioned:
        import deepspeed

        return deepspeed.zero.GatheredParameters(partitioned, modifier_rank=None)
    return nullcontext()


@contextmanager
def merged_tensors(unit: WeightUnit) -> Iterator[list[tuple[str, torch.Tensor]]]:
    r"""Context giving the unit's `(full name, tensor)` pairs, with a tuner layer's active adapters merged meanwhile.

    Already merged or disabled tuner layers are read as they are. The merge uses peft's `merge(safe_merge=True)`
    (NaN check; LoRA writes the merged weight into a new tensor). On exit every base parameter gets its exact
    original values back without an unmerge: a parameter whose tensor the merge replaced is pointed back at the
    original tensor, one changed in place (other tuner types) is restored from a copy taken before the merge (one
    module's weights of extra memory, no bf16 merge/unmerge round-off in the trained weights).

    Raises:
        ValueError: peft's NaN check failed for a broken adapter.
    """
    layer = unit.module
    names = [] if unit.kind != "tuner" or layer.disable_adapters or layer.merged else list(layer.active_adapters)
    if not names:
        yield [(_join(unit.prefix, n), p.data) for n, p in unit.params]
        return
    originals = [p.data for _, p in unit.params]
    backups = [t.clone() for t in originals]
    merged_before = list(layer.merged_adapters)
    try:
        layer.merge(safe_merge=True, adapter_names=names)
        yield [(_join(unit.prefix, n), p.data) for n, p in unit.params]
    finally:
        for (_, p), original, backup in zip(unit.params, originals, backups):
            if p.data.data_ptr() == original.data_ptr():
                p.data.copy_(backup)  # unchanged or merged in place
            else:
                p.data = original  # the merge replaced the tensor; the original was not touched
        layer.merged_adapters = merged_before


def push_weights(
    model: torch.nn.Module,
    load_weights: Callable[[list[tuple[str, torch.Tensor]]], Any],
    gather: GatherFn | None = None,
) -> int:
    r"""Send the policy's effective base-model weights to `load_weights`, one unit at a time.

    `load_weights` is called once per unit with a list of `(name, tensor)` pairs and must copy the values before it
    returns (the tensors are only valid inside the unit's gather/merge context). The model is left exactly as it was
    (same tensors, adapters unmerged).

    Args:
        model: The policy (transformers model or peft `PeftModel`), unwrapped from DDP/DeepSpeed.
        load_weights: E.g. vLLM's `model_runner.model.load_weights`.
        gather: Context-manager factory gathering a unit's parameters; default `zero3_gather` (DeepSpeed ZeRO-3
            aware, a no-op otherwise).

    Returns:
        The number of tensors sent.

    Raises:
        ValueError: quantized base weights under a tuner layer (see `weight_units`).
    """
    gather = gather or zero3_gather
    sent = 0
    for unit in weight_units(model):
        with gather(unit.gathered), merged_tensors(unit) as tensors:
            load_weights(tensors)
            sent += len(tensors)
    return sent

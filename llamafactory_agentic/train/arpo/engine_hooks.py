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

r"""Keep a distributed engine's forward hooks out of the hf rollout (docs/scaling.md).

DeepSpeed's engine registers a forward pre-hook and a forward hook on the model it wraps (`DeepSpeedEngine.
_forward_prologue` / `_forward_epilogue`: wall-clock timers that call `torch.cuda.synchronize()`, ZeRO-3's "in
forward" flags, flops profiling), and ZeRO-3 one more that resets its parameter-fetch coordinator. They sit on the
unwrapped module, so the hf rollout engine, which calls that module directly, ran them at every decode step and inside
CUDA-graph capture, where the synchronisation fails (`CUDA error: operation not permitted when stream is capturing`,
issue 25, ZeRO-2). They serve the training step only: during a rollout the parameters are already gathered
(`unwrap_model_for_generation`) and nothing is timed or profiled, so `suspended_forward_hooks` takes them off the
module for the rollout and puts them back, in their original order, afterwards.

FSDP (version 1, LLaMA-Factory's accelerate configs) wraps the decoder layers in `FullyShardedDataParallel` units
that stay inside the module `unwrap_model_for_generation` returns. Calling them from the rollout made the first unit
to run believe it was the root (`_is_root`), and the training forward then failed with "Non-root FSDP instance's
`_is_root` should not have been set yet"; on several ranks their per-call all-gathers would also not match, since ranks
decode different numbers of steps. `fsdp_unsharded` gathers every parameter once, collectively
(`summon_full_params(writeback=False)`), and puts the wrapped modules in place of their FSDP units for the rollout, so
decoding runs plain modules on full weights (CUDA graphs included) and the shards are left as they were.

FSDP2 (`fully_shard`, accelerate's `fsdp_version: 2`) changes the modules' classes in place instead of wrapping them,
and each unit's forward hooks all-gather its parameters and, with `reshard_after_forward`, free them again: on several
ranks every decode step would be a collective that ranks decoding different numbers of steps never match (a hang).
`fsdp_unsharded` unshards every unit once (a collective every rank enters) and turns `reshard_after_forward` off for the
rollout, so the units' hooks find their parameters gathered and communicate nothing; on exit the setting is restored
and the units are resharded.
"""

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch


_HOOK_DICTS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)


def engine_forward_hook_handles(engine: Any) -> list[Any]:
    r"""The `RemovableHandle`s of the forward hooks a DeepSpeed engine put on its module (empty for other wrappers).

    Args:
        engine: The trainer's `model_wrapped` (a `deepspeed.DeepSpeedEngine`, DDP, FSDP or the model itself).

    Returns:
        The engine's prologue and epilogue hooks and, under ZeRO-3, the parameter offload's start-of-forward hook.
    """
    handles = [getattr(engine, "module_forward_pre_hook", None), getattr(engine, "module_forward_post_hook", None)]
    offload = getattr(getattr(engine, "optimizer", None), "parameter_offload", None)
    handles.append(getattr(offload, "fwd_pre_hook", None))
    return [h for h in handles if h is not None and hasattr(h, "id") and hasattr(h, "hooks_dict_ref")]


@contextmanager
def suspended_forward_hooks(module: Any, handles: list[Any]) -> Iterator[int]:
    r"""Inside: the hooks of `handles` are not registered on `module`; on exit (also on error) they are again.

    Args:
        module: The `torch.nn.Module` the hooks were registered on.
        handles: `torch.utils.hooks.RemovableHandle`s (e.g. `engine_forward_hook_handles(engine)`).

    Yields:
        The number of hooks taken off.
    """
    ids = {h.id for h in handles}
    saved: list[tuple[dict, list[tuple[int, Any]]]] = []
    taken: set[int] = set()
    for name in _HOOK_DICTS:
        table = getattr(module, name, None)
        if not isinstance(table, dict) or not ids.intersection(table):
            continue
        saved.append((table, list(table.items())))
        for hook_id in ids.intersection(table):
            del table[hook_id]
            taken.add(hook_id)
    try:
        yield len(taken)
    finally:
        for table, items in saved:
            added = [(k, v) for k, v in table.items() if k not in dict(items)]
            table.clear()
            table.update(items)
            table.update(added)


def _fsdp_class() -> type | None:
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:  # torch without distributed support
        return None
    return FullyShardedDataParallel


def _fsdp2_units(module: torch.nn.Module) -> list[Any]:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch without FSDP2
        return []
    return [m for m in module.modules() if isinstance(m, FSDPModule)]


def _reshards_after_forward(unit: Any) -> bool:
    r"""Whether an FSDP2 unit frees its gathered parameters after each forward (True when it cannot be told)."""
    group = getattr(unit._get_fsdp_state(), "_fsdp_param_group", None)
    if group is None:  # a unit without parameters of its own
        return True
    return getattr(group, "post_forward_mesh_info", True) is not None


_LOGGED: set[str] = set()


@contextmanager
def _fsdp2_unsharded(units: list[Any]) -> Iterator[int]:
    if "fsdp2" not in _LOGGED:
        from ...common.log import get_logger

        _LOGGED.add("fsdp2")
        get_logger(__name__).info(
            "[agentic] FSDP2: the hf rollout gathers the %d fully_shard units once per rollout (no collective per "
            "decode step) and reshards them after it",
            len(units),
        )
    settings = [_reshards_after_forward(unit) for unit in units]
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
    try:
        for unit in units:  # the all-gathers, in the same order on every rank
            unit.unshard()
        yield len(units)
    finally:
        for unit, setting in zip(units, settings):
            unit.set_reshard_after_forward(setting, recurse=False)
        for unit in units:
            unit.reshard()


@contextmanager
def fsdp_unsharded(wrapped: Any, module: torch.nn.Module) -> Iterator[int]:
    r"""Inside: `module` (the unwrapped policy) computes with full, unsharded parameters and no per-call collective.

    FSDP (version 1, `wrapped` an FSDP root): the parameters are gathered (`summon_full_params`) and the units are
    taken out of the tree, so `module` holds none; with `use_orig_params: true` (LLaMA-Factory's default) the original
    parameters are the gathered tensors inside; nothing is written back on exit. FSDP2 (`module` holds `fully_shard`
    units): every unit is unsharded once and keeps its parameters gathered until the exit, which restores
    `reshard_after_forward` and reshards (module docstring). A no-op for any other model. Every rank must enter it:
    the gathering is a collective.

    Args:
        wrapped: The trainer's `model_wrapped`.
        module: The module the rollout calls (`accelerator.unwrap_model(wrapped)`).

    Yields:
        The number of FSDP units taken out of the tree (version 1) or unsharded (FSDP2).
    """
    fsdp = _fsdp_class()
    if fsdp is None or not isinstance(wrapped, fsdp):
        units = _fsdp2_units(module)
        with _fsdp2_unsharded(units) if units else nullcontext(0) as count:
            yield count
        return
    swaps: list[tuple[torch.nn.Module, str, torch.nn.Module]] = []
    with fsdp.summon_full_params(wrapped, writeback=False, recurse=True):
        try:
            for parent in list(module.modules()):
                for name, child in list(parent._modules.items()):
                    if isinstance(child, fsdp):
                        parent._modules[name] = child.module
                        swaps.append((parent, name, child))
            yield len(swaps)
        finally:
            for parent, name, child in reversed(swaps):
                parent._modules[name] = child

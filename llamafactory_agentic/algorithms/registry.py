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

"""Name -> function registries for advantage estimators and policy losses.

The idea follows verl's `core_algos` (an advantage-estimator registry and a policy-loss registry selected by a config
string): trainers look a function up by the name in the config instead of branching on it, and users can register their
own with `@register_policy_loss("my_loss")` before training starts.
"""

import inspect
from collections.abc import Callable
from typing import TypeVar


F = TypeVar("F", bound=Callable)

_ADVANTAGE_ESTIMATORS: dict[str, Callable] = {}
_POLICY_LOSSES: dict[str, Callable] = {}


def _register(table: dict[str, Callable], kind: str, name: str, overwrite: bool) -> Callable[[F], F]:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind} name must be a non-empty string, got {name!r}.")

    def decorator(fn: F) -> F:
        if name in table and not overwrite and table[name] is not fn:
            raise ValueError(f"{kind} {name!r} is already registered ({table[name].__qualname__}).")
        table[name] = fn
        return fn

    return decorator


def _get(table: dict[str, Callable], kind: str, name: str) -> Callable:
    try:
        return table[name]
    except KeyError:
        raise KeyError(f"Unknown {kind} {name!r}; registered: {sorted(table)}.") from None


def register_advantage_estimator(name: str, overwrite: bool = False) -> Callable[[F], F]:
    r"""Decorator registering an advantage estimator under `name`.

    An estimator has the signature of `advantages.soft_estimator`: `(rewards [batch], group_ids [batch],
    loss_mask [batch, seq_len], config, *, parents, branch_pos, lengths)`, where `config` is the run's
    `ArpoLossConfig` (its settings, e.g. `hard_dedup`) and the keywords the rows' lineage, and returns
    `(token_advantages [batch, seq_len], loss_mask [batch, seq_len])`. A run selects it by name with
    `arpo_advantage_attribution: <name>` (checked when the run's config is built, `validation.validate_loss_keys`).

    Raises:
        ValueError: `name` is empty or already registered to another function (unless `overwrite`).
    """
    return _register(_ADVANTAGE_ESTIMATORS, "advantage estimator", name, overwrite)


def get_advantage_estimator(name: str) -> Callable:
    r"""The advantage estimator registered as `name` (`soft`, `hard`, ...).

    Raises:
        KeyError: nothing is registered under `name`.
    """
    return _get(_ADVANTAGE_ESTIMATORS, "advantage estimator", name)


def list_advantage_estimators() -> list[str]:
    r"""Sorted names of all registered advantage estimators."""
    return sorted(_ADVANTAGE_ESTIMATORS)


def register_policy_loss(name: str, overwrite: bool = False) -> Callable[[F], F]:
    r"""Decorator registering a policy loss under `name` (e.g. `@register_policy_loss("arpo")`).

    A policy loss has the signature of `policy_loss.ppo_clip_loss` and returns `(scalar loss, metrics dict)`. The
    trainer calls the loss named by `rl_policy_loss` on every micro-batch with `(log_probs, old_log_probs,
    advantages, loss_mask)` `[batch, seq_len]`, the run's `ArpoLossConfig` as `config` (every optimisation setting:
    `epsilon_low`, `epsilon_high`, `dual_clip`, `balanced_clip`, ...; a new setting is a new field there, not a new
    argument) and the keywords `balanced_clip_mask` and `num_tokens` (computed per micro-batch), plus `num_sequences`
    (the update's trajectory count, the normaliser of the sequence aggregation modes, docs/algorithms.md §4.8) when
    its signature names that parameter (`accepts_keyword`), so a loss written before that keyword existed still runs.

    Raises:
        ValueError: `name` is empty or already registered to another function (unless `overwrite`).
    """
    return _register(_POLICY_LOSSES, "policy loss", name, overwrite)


def get_policy_loss(name: str) -> Callable:
    r"""The policy loss registered as `name` (`ppo_clip`, `arpo`, `aepo`, ...).

    Raises:
        KeyError: nothing is registered under `name`.
    """
    return _get(_POLICY_LOSSES, "policy loss", name)


def list_policy_losses() -> list[str]:
    r"""Sorted names of all registered policy losses."""
    return sorted(_POLICY_LOSSES)


def accepts_keyword(fn: Callable, name: str) -> bool:
    r"""Whether `fn`'s signature names the parameter `name` (a `**kwargs` catch-all does not count).

    The trainer passes a keyword added after the registry's first signature (`num_sequences`) only to the losses that
    declare it, so a loss registered with the earlier signature keeps working.

    Args:
        fn: A registered function (decorators that use `functools.wraps` are looked through).
        name: The parameter name.
    """
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C callable without a signature
        return False
    parameter = parameters.get(name)
    return parameter is not None and parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)

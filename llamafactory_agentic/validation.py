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

r"""The one validator of the plugin's keys (docs/architecture.md, "One declaration and one validator per key").

Every check of a recipe key lives here, and every caller uses it:

* LLaMA-Factory's parser (`integration/patches.py`, `AgenticFinetuningArguments.__post_init__`): `validate_arguments`.
* LLaMA-Board's checks before a run starts (`webui/checks.py`): `validate_arguments` and `check_rl_sampling`.
* The tool executor (`tools/executor.py`, `build_executor_from_args`): `validate_tool_keys`.
* The evaluation config (`evaluation/config.py`): `validate_tool_keys` for the tool keys its protocol records.
* The run configs (`train/arpo/config.py`): `validate_loss_keys` and `check_rl_sampling`.

The checks read the declarations of `llamafactory_agentic/hparams.py` (types, `Literal` choices, defaults), so a
choice or a default is never written twice. Messages name the key, the value and the fix.

This module imports only `hparams` (no torch, no LLaMA-Factory, no tools): it is loaded while the parser is built and is
the bottom layer every other layer may import.
"""

import dataclasses
import math
import types
import typing
from typing import Any, Literal

from .common.numbers import check_number  # noqa: F401 (re-exported: the validators' number check)
from .hparams import TOOL_RETRIES, TOOL_WORKERS, AgenticArguments, agentic_default, key_annotation, key_choices


# ---------------------------------------------------------------------------------------------- declared types
_TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def check_field_type(key: str, value: Any, annotation: Any) -> Any:
    r"""`value` of the plugin key `key` checked against its declared type; returns it (an int for a float key as float).

    parse_dict (YAML, JSON, LLaMA-Board) hands values over unconverted, so `arpo_rollout_n: eight` would otherwise
    reach a comparison or a cast far from the recipe.

    Raises:
        ValueError: naming the key, the value and the expected type (or the allowed choices of a `Literal`).
    """
    args = typing.get_args(annotation)
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        if value is None:
            return value
        (annotation,) = [arg for arg in args if arg is not type(None)]
    if typing.get_origin(annotation) is Literal:
        choices = list(typing.get_args(annotation))
        if value not in choices:
            raise ValueError(f"`{key}` must be one of {choices}, got {value!r}.")
        return value

    expected = _TYPE_NAMES.get(annotation)
    if expected is None:
        return value
    ok = isinstance(value, annotation) and not (annotation is int and isinstance(value, bool))
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if annotation is float and ok and not math.isfinite(value):
        raise ValueError(f"`{key}` must be a finite number, got {value!r}.")
    if not ok:
        none = " or null" if optional else ""
        raise ValueError(f"`{key}` must be {expected}{none}, got {value!r} ({type(value).__name__}).")
    return value


def validate_field_types(args: Any) -> None:
    r"""Reject a plugin key whose value does not fit its declared type (parse_dict checks none); convert in place.

    Declared types: an integer, a finite number, true/false, a string, one of the `Literal` choices, or null where the
    key is optional. An integer given for a number key is stored as a float.

    Raises:
        ValueError: naming the key, the value and the expected type, e.g. "`arpo_rollout_n` must be an integer, got
            'eight' (str)."
    """
    for f in dataclasses.fields(AgenticArguments):
        value = getattr(args, f.name)
        checked = check_field_type(f.name, value, key_annotation(f.name))
        if checked is not value:
            setattr(args, f.name, checked)


# ---------------------------------------------------------------------------------------------- ranges of RL keys
def validate_rl_arguments(args: Any) -> None:
    r"""Ranges of an `arpo`/`aepo` run's keys (call `validate_field_types` first).

    Group and beam sizes, lengths, fine-tuning type, the optimisation keys with a range (`rl_logprob_chunk_size`,
    `rl_micro_batch_tokens`, `rl_dynamic_sampling_max_batches`) and the tool keys (`validate_tool_keys`).

    Raises:
        ValueError: naming the key, the value and the allowed range.
    """
    if args.arpo_rollout_n < 1:
        raise ValueError(f"`arpo_rollout_n` must be >= 1, got {args.arpo_rollout_n}.")

    if args.arpo_initial_rollouts is not None and not 1 <= args.arpo_initial_rollouts <= args.arpo_rollout_n:
        raise ValueError(
            f"`arpo_initial_rollouts` must be in [1, arpo_rollout_n={args.arpo_rollout_n}], "
            f"got {args.arpo_initial_rollouts}."
        )

    if args.arpo_beam_size is not None and args.arpo_beam_size < 1:
        raise ValueError(f"`arpo_beam_size` must be >= 1, got {args.arpo_beam_size}.")

    if args.arpo_max_response_length < 1 or args.arpo_max_prompt_length < 1:
        raise ValueError("`arpo_max_prompt_length` and `arpo_max_response_length` must be positive.")

    if args.finetuning_type not in ("full", "freeze", "lora"):
        raise ValueError(f"Stage `{args.agentic_stage}` supports full, freeze and lora fine-tuning.")

    check_optimisation_ranges(args.rl_logprob_chunk_size, args.rl_micro_batch_tokens,
                              args.rl_dynamic_sampling_max_batches)  # fmt: skip
    check_async_keys(args.rl_max_staleness, args.rl_off_policy_correction, args.rl_off_policy_cap)
    validate_tool_keys(args)


def check_optimisation_ranges(
    logprob_chunk_size: int, micro_batch_tokens: int, dynamic_sampling_max_batches: int
) -> None:
    r"""`rl_logprob_chunk_size >= 0`, `rl_micro_batch_tokens >= 0` (0: off) and `rl_dynamic_sampling_max_batches >= 1`.

    Raises:
        ValueError: naming the key, the value and its range.
    """
    if int(logprob_chunk_size) < 0:
        raise ValueError(f"rl_logprob_chunk_size must be >= 0 (0: full logits), got {logprob_chunk_size}.")
    if int(micro_batch_tokens) < 0:
        raise ValueError(f"rl_micro_batch_tokens must be >= 0 (0: off), got {micro_batch_tokens}.")
    if int(dynamic_sampling_max_batches) < 1:
        raise ValueError(
            "rl_dynamic_sampling_max_batches must be >= 1 (generation batches per update, the first included), "
            f"got {dynamic_sampling_max_batches}."
        )


def check_async_keys(max_staleness: int, correction: str, cap: float) -> None:
    r"""`rl_max_staleness >= 0`, `rl_off_policy_correction` in tis/decoupled/none, `rl_off_policy_cap > 0`.

    Raises:
        ValueError: naming the key, the value and its range.
    """
    if int(max_staleness) < 0:
        raise ValueError(f"rl_max_staleness must be >= 0 (0: lockstep rollout), got {max_staleness}.")
    if correction not in ("tis", "decoupled", "none"):
        raise ValueError(f"rl_off_policy_correction must be tis, decoupled or none, got {correction!r}.")
    if not float(cap) > 0:
        raise ValueError(f"rl_off_policy_cap must be > 0, got {cap}.")


def validate_reward(args: Any) -> None:
    r"""Build the reward once (`rewards.compound.reward_from_args`, no judge call): name, import, signature, bonus.

    An unknown name, a module that does not import or a function with the wrong signature, in `agentic_reward` or any
    entry of `agentic_reward_funcs`, stops the run before any model loads (docs/algorithms.md §6.4, §6.6,
    docs/rewards.md).
    """
    from .rewards.compound import reward_from_args

    reward_from_args(args, connect=False)


def validate_arguments(args: Any, rl: bool) -> None:
    r"""Every parse-time check of the plugin's keys: what LLaMA-Factory's parser and LLaMA-Board's checks run.

    Args:
        args: The parsed `FinetuningArguments` with the plugin's keys (or a namespace with every plugin key,
            `stage`, `agentic_stage` and `finetuning_type`); values of a float key given as int are converted in place.
        rl: Whether the stage trains with rollouts (`arpo`, `aepo`): then the ranges and the reward are checked too.

    Raises:
        ValueError: naming the key, the value and the fix.
    """
    validate_field_types(args)
    if rl:
        validate_rl_arguments(args)
        validate_reward(args)


# ---------------------------------------------------------------------------------------------- tool keys
def _tool_key(args: Any, key: str, default: Any) -> Any:
    # a run's arguments and its ToolsConfig carry every key; an object built by hand (the synthetic task, a test, a
    # notebook) may carry some: the others take their hparams declaration (`default` is read from there)
    value = getattr(args, key, None)
    return default if value is None else value


def validate_tool_keys(args: Any) -> dict[str, Any]:
    r"""Check the `agentic_*` tool keys of a run and return them resolved (the tool executor's settings).

    A key that is missing or None takes its `hparams.AgenticArguments` default; the stage-dependent
    `agentic_tool_retries` and `agentic_tool_workers` (None until the presets are resolved) take the `arpo` preset's
    values (`hparams.TOOL_RETRIES`, `hparams.TOOL_WORKERS`); `agentic_python_min_isolation` and `agentic_cache_mode`
    stay None when missing (no isolation check; the tool config's cache mode applies). The choices are the `Literal`
    types declared in hparams.

    Args:
        args: `FinetuningArguments`, the run's `ToolsConfig` (`train/arpo/config.py`) or a namespace with some keys.

    Returns:
        `{"retries", "workers", "python_timeout", "python_max_output_chars", "search_topk", "search_snippet_chars",
        "search_backend", "python_isolation", "python_min_isolation", "cache_mode", "tool_config", "search_index",
        "cache_path", "cache_tools"}` (the last four None when unset).

    Raises:
        ValueError: naming the recipe key, what it must be and the value received.
    """

    def number(key: str, default: Any = None, **kw: Any) -> Any:
        default = agentic_default(key) if default is None else default
        try:
            return check_number(key, _tool_key(args, key, default), **kw)
        except ValueError as exc:
            raise ValueError(f"recipe key {exc}") from None

    def choice(key: str, default: str | None) -> str | None:
        value = _tool_key(args, key, default)
        choices = key_choices(key)
        if value is not None and value not in choices:
            raise ValueError(f"recipe key `{key}` must be one of {', '.join(choices)}, got {value!r}")
        return value

    return {
        "retries": number("agentic_tool_retries", TOOL_RETRIES, integer=True, minimum=1, inclusive=True),
        "workers": number("agentic_tool_workers", TOOL_WORKERS, integer=True, minimum=1, inclusive=True),
        "python_timeout": number("agentic_python_timeout"),
        "python_max_output_chars": number("agentic_python_max_output_chars", integer=True, minimum=2, inclusive=True),
        "search_topk": number("agentic_search_topk", integer=True),
        "search_snippet_chars": number("agentic_search_snippet_chars", integer=True),
        "search_backend": _tool_key(args, "agentic_search_backend", agentic_default("agentic_search_backend")),
        "python_isolation": choice("agentic_python_isolation", agentic_default("agentic_python_isolation")),
        "python_min_isolation": choice("agentic_python_min_isolation", None),
        "cache_mode": choice("agentic_cache_mode", None) or None,
        "tool_config": _tool_key(args, "agentic_tool_config", None),
        "search_index": _tool_key(args, "agentic_search_index", None),
        "cache_path": _tool_key(args, "agentic_cache_path", None),
        "cache_tools": _tool_key(args, "agentic_cache_tools", None),
    }


# ---------------------------------------------------------------------------------------------- run configs
def validate_loss_keys(policy_loss: str, advantage_estimator: str, balanced_clip_scope: str) -> None:
    r"""The names of the policy loss, the advantage estimator and the balanced-clip scope of a run.

    The loss and the estimator may be any name registered before training starts (`algorithms.registry`).

    Raises:
        ValueError: an unregistered `rl_policy_loss` or `arpo_advantage_attribution`, or an unknown
            `aepo_balanced_clip_scope`, naming the registered names and how to register one.
    """
    from .algorithms.registry import list_advantage_estimators, list_policy_losses

    if policy_loss not in list_policy_losses():
        raise ValueError(
            f"Unknown `rl_policy_loss` {policy_loss!r}; registered: {list_policy_losses()}. Register "
            "your own with `llamafactory_agentic.algorithms.register_policy_loss` before training starts."
        )
    if balanced_clip_scope not in key_choices("aepo_balanced_clip_scope"):
        raise ValueError(f"Unknown `aepo_balanced_clip_scope` {balanced_clip_scope!r}.")
    if advantage_estimator not in list_advantage_estimators():
        raise ValueError(
            f"Unknown `arpo_advantage_attribution` {advantage_estimator!r}; registered: "
            f"{list_advantage_estimators()}. Register your own with "
            "`llamafactory_agentic.algorithms.register_advantage_estimator` before training starts."
        )


def check_rl_sampling(generating_args: Any) -> None:
    r"""Refuse greedy decoding and out-of-range `top_p`/`top_k` for RL training (`arpo`/`aepo` stages).

    GRPO needs M different trajectories per prompt, and the loss divides the logits by `generating_args.temperature`
    (docs/algorithms.md §5.4), which must be the temperature the rollout sampled with. With `do_sample: false` or
    `temperature <= 0` the rollout would be greedy while the loss assumes sampling.

    `top_p` must lie in (0, 1] (1.0: no nucleus filter) and `top_k` be an integer >= 0 (0: no top-k filter). vLLM
    writes "no top-k filter" as -1 (LLaMA-Factory's vLLM and SGLang chat engines turn its 0 into -1), transformers'
    `generate` refuses -1; the rollout engines take LLaMA-Factory's 0 and convert it for vLLM themselves
    (`rollout/vllm_engine.py`), so a recipe writes 0.

    Args:
        generating_args: LLaMA-Factory's `GeneratingArguments` (or an object with `do_sample`, `temperature`,
            `top_p` and `top_k`).

    Raises:
        ValueError: `do_sample` is false, `temperature` is not positive, `top_p` is outside (0, 1] or `top_k` is not
            an integer >= 0; the message names the key, the value and the range.
    """
    do_sample, temperature = generating_args.do_sample, generating_args.temperature
    if not do_sample or temperature is None or not float(temperature) > 0:
        raise ValueError(
            f"RL training (stage arpo/aepo) needs sampled rollouts, got do_sample={do_sample}, "
            f"temperature={temperature}: set do_sample: true and temperature > 0 (the recipes use temperature: 1.0, "
            f"top_p: 1.0, top_k: 0). Validation is greedy on its own."
        )
    top_p = generating_args.top_p
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(
            f"`top_p` must be a number in (0, 1] (1.0 keeps every token: no nucleus filter), got {top_p!r}; the "
            "recipes use top_p: 1.0."
        )
    top_k = generating_args.top_k
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(
            f"`top_k` must be an integer >= 0 (0 turns the top-k filter off), got {top_k!r}; vLLM's -1 for 'off' is "
            "written 0 here (the rollout converts it for vLLM). The recipes use top_k: 0."
        )


__all__ = [
    "check_async_keys",
    "check_field_type",
    "check_number",
    "check_optimisation_ranges",
    "check_rl_sampling",
    "key_annotation",
    "key_choices",
    "validate_arguments",
    "validate_field_types",
    "validate_loss_keys",
    "validate_reward",
    "validate_rl_arguments",
    "validate_tool_keys",
]

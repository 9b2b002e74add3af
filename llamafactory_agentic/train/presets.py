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

"""Presets of the `arpo` and `aepo` stages (docs/algorithms.md §5.5) and their resolution against a recipe.

`stage: arpo` applies the `arpo` preset (`grpo` with `arpo_variant: grpo`: the GRPO baseline, N = M trajectories per
prompt, no branching); `stage: aepo` applies `aepo` (the released scripts, RUC-NLPIR/ARPO
`AEPO/scripts/AEPO_Qwen3_14B_DeepResearch.sh:52-54`) or, with `aepo_variant: paper`, `aepo-paper` (arXiv 2510.14545).
Every preset key defaults to `None` in `llamafactory_agentic.hparams.AgenticArguments`, so a key written in a recipe
(explicit) always wins over the preset. The trainer and the rollout read only the resolved keys, never the stage name:
an `aepo` run whose AEPO keys are set to the `arpo` values behaves exactly like an `arpo` run.

The consecutive-branch penalty counts per trajectory lineage in every preset; the released code's per-question count
stays available as the explicit key `aepo_branch_penalty_scope: question` (bit-for-bit comparisons with the release).

Keys that are inert in a preset (docs/algorithms.md §5.5; e.g. `aepo_premonitor_beta` under `arpo`) still get a
value (the one documented in docs/algorithms.md §5.5) so that downstream code never sees `None`.
"""

import json
import os
from collections import Counter
from dataclasses import fields
from types import SimpleNamespace
from typing import Any

from ..common.log import get_logger
from ..hparams import TOOL_RETRIES, TOOL_WORKERS, AgenticArguments, agentic_default, agentic_value


AGENTIC_CONFIG_NAME = "agentic_config.json"

_COMMON: dict[str, Any] = {
    "arpo_initial_rollouts": 8,
    "arpo_beam_size": 2,
    "arpo_branch_rule": "stochastic",
    "arpo_branch_tau": 0.5,
    "arpo_entropy_weight": 0.2,
    "arpo_entropy_source": "topk",
    "arpo_entropy_topk": 10,
    "arpo_entropy_tokens": 20,
    "arpo_advantage_attribution": "soft",
}

PRESETS: dict[str, dict[str, Any]] = {
    "arpo": {
        **_COMMON,
        "aepo_branch_penalty": 0.0,
        "aepo_branch_penalty_scope": "lineage",  # inert: lambda = 0
        "aepo_dynamic_rollouts": False,
        "aepo_premonitor_beta": 0.5,  # inert: no pre-monitoring
        "aepo_premonitor_tokens": 50,  # inert
        "aepo_premonitor_rounds": "all",  # inert
        "aepo_balanced_clip": False,
        "aepo_balanced_clip_scope": "all",  # inert: no balanced clip
        "aepo_entropy_advantage": False,
        "aepo_entropy_advantage_coef": 0.2,  # inert
        "agentic_max_tool_calls": 3,  # reasoning setting; deep-search recipes set 6 (docs/algorithms.md §10)
        "agentic_tool_retries": TOOL_RETRIES,  # also what the tools layer uses where no preset was resolved
        "agentic_tool_workers": TOOL_WORKERS,
    },
    "aepo": {
        **_COMMON,
        "aepo_branch_penalty": 0.05,
        # lineage in every preset: the release counts per question (`question`), which makes branching depend on
        # which prompts share a batch; `aepo_branch_penalty_scope: question` reproduces it bit for bit
        "aepo_branch_penalty_scope": "lineage",
        "aepo_dynamic_rollouts": False,  # the released scripts set it off
        "aepo_premonitor_beta": 0.5,  # inert
        "aepo_premonitor_tokens": 50,  # inert
        "aepo_premonitor_rounds": "all",  # inert
        "aepo_balanced_clip": True,
        "aepo_balanced_clip_scope": "all",
        "aepo_entropy_advantage": False,  # the released switch is inert (docs/algorithms.md §5.4)
        "aepo_entropy_advantage_coef": 0.2,  # inert
        "agentic_max_tool_calls": 6,
        "agentic_tool_retries": 4,
        "agentic_tool_workers": 32,
    },
    "aepo-paper": {
        **_COMMON,
        "aepo_branch_penalty": 0.05,
        "aepo_branch_penalty_scope": "lineage",
        "aepo_dynamic_rollouts": True,
        "aepo_premonitor_beta": 0.5,
        "aepo_premonitor_tokens": 50,
        "aepo_premonitor_rounds": "post_tool",
        "aepo_balanced_clip": True,
        "aepo_balanced_clip_scope": "high_entropy",
        "aepo_entropy_advantage": True,
        "aepo_entropy_advantage_coef": 0.2,
        "agentic_max_tool_calls": 6,
        "agentic_tool_retries": 4,
        "agentic_tool_workers": 32,
    },
}


def _group_size(finetuning_args: Any) -> int:
    return finetuning_args.arpo_rollout_n


# GRPO, the baseline of both papers (`stage: arpo` + `arpo_variant: grpo`): N = M independent trajectories per prompt,
# so the group is full before any branching decision; beam 1 makes that explicit. Everything else is ARPO's.
PRESETS["grpo"] = {**PRESETS["arpo"], "arpo_initial_rollouts": _group_size, "arpo_beam_size": 1}

# Keys outside the presets whose values are reported next to them (fixed defaults, same in every preset).
_REPORTED_KEYS = (
    "arpo_rollout_n",
    "arpo_branch_alpha",
    "arpo_hard_dedup",
    "arpo_max_prompt_length",
    "arpo_overlong_prompt",
    "arpo_max_response_length",
    "arpo_rollout_backend",
    "arpo_rollout_batch_size",
    "aepo_high_entropy_z",
    "rl_policy_loss",
    "rl_loss_agg_mode",
    "rl_advantage_std_norm",
    "rl_epsilon",
    "rl_epsilon_high",
    "rl_dual_clip",
    "rl_kl_coef",
    "rl_entropy_coef",
    "rl_num_iterations",
    "agentic_reward",
    "agentic_reward_math",
    "agentic_reward_tool_bonus",
    "agentic_python_timeout",
    "agentic_search_backend",
    "agentic_cache_path",
    "agentic_cache_mode",
)


# Keys that act only while another key (their switch) has a given value: (keys, switch, value that makes them act).
# Source: where the trainer and the rollout read them (`train/arpo/pipeline.py` `micro_batch_loss`, `rollout/agent_loop.py`,
# `algorithms/off_policy.py`, `rollout/server_engine.py`).
_SERVER_KEYS = (
    "arpo_server_urls",
    "arpo_server_api_key",
    "arpo_server_timeout",
    "arpo_server_weight_transfer",
    "arpo_server_weight_dir",
)
_INERT_UNLESS: tuple[tuple[tuple[str, ...], str, Any], ...] = (
    (("aepo_premonitor_beta", "aepo_premonitor_tokens", "aepo_premonitor_rounds"), "aepo_dynamic_rollouts", True),
    (("aepo_balanced_clip_scope",), "aepo_balanced_clip", True),
    (("aepo_high_entropy_z",), "aepo_balanced_clip_scope", "high_entropy"),
    (("aepo_entropy_advantage_coef",), "aepo_entropy_advantage", True),
    (("aepo_branch_penalty_scope",), "aepo_branch_penalty", "> 0"),
    (("arpo_branch_alpha",), "arpo_branch_rule", "deterministic"),
    # the off-policy correction weighs only tokens sampled by older weights, which the lockstep step never has
    (("rl_off_policy_correction", "rl_off_policy_cap"), "rl_max_staleness", "> 0"),
    (("rl_off_policy_cap",), "rl_off_policy_correction", "tis"),
    (_SERVER_KEYS, "arpo_rollout_backend", "vllm_server"),
)


# AEPO's mechanism switches: under `stage: arpo` one that is off (the `arpo` preset's value) does nothing at all
_AEPO_SWITCHES = ("aepo_branch_penalty", "aepo_dynamic_rollouts", "aepo_balanced_clip", "aepo_entropy_advantage")


def inert_keys(finetuning_args: Any) -> set[str]:
    r"""The keys that do not act on this run, presets resolved (left out of the printed effective values).

    A key is inert when its switch (`_INERT_UNLESS`) is off or is itself inert (e.g. `aepo_high_entropy_z` without
    the balanced clip); under `stage: arpo` an AEPO mechanism switch that is off is inert too (docs/algorithms.md §5.5).
    `agentic_config.json` still records every key.
    """
    stage = getattr(finetuning_args, "agentic_stage", None) or getattr(finetuning_args, "stage", None)
    inert: set[str] = set()
    if stage == "arpo":
        inert.update(switch for switch in _AEPO_SWITCHES if not getattr(finetuning_args, switch, None))
    for keys, switch, wanted in _INERT_UNLESS:  # in order: a switch's own switch comes first
        if switch in inert or not _acts(getattr(finetuning_args, switch, None), wanted):
            inert.update(keys)
    return inert


def _acts(value: Any, wanted: Any) -> bool:
    return bool(value) and value > 0 if wanted == "> 0" else value == wanted


def _yaml(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def inert_key_warnings(finetuning_args: Any, explicit: list[str] | tuple[str, ...] = ()) -> list[str]:
    r"""Warnings for keys the recipe sets that have no effect in this run (called by `resolve_presets`).

    A key counts as set when it is in `explicit` (preset keys given in the recipe) or differs from its declared
    default (the other keys). It has no effect when its switch is off after the presets are resolved: the AEPO
    coefficients under `stage: arpo` (whose preset turns every AEPO mechanism off, docs/algorithms.md §5.5), the
    pre-monitoring keys under the released `aepo` preset, `aepo_variant` under `stage: arpo`, and `arpo_branch_alpha`
    with the stochastic branch rule.

    Args:
        finetuning_args: Arguments with the presets resolved.
        explicit: Preset keys the recipe set (`resolve_presets`' `explicit`).

    Returns:
        One message per switch, naming the keys, the switch, its value in this run and the fix.
    """
    stage = getattr(finetuning_args, "agentic_stage", None) or getattr(finetuning_args, "stage", None)
    name = preset_name(finetuning_args)

    def is_set(key: str) -> bool:
        return key in explicit or (key not in PRESETS[name] and getattr(finetuning_args, key) != agentic_default(key))

    warnings = []
    if stage == "arpo" and agentic_value(finetuning_args, "aepo_variant") != "released":
        warnings.append(
            f"`aepo_variant: {finetuning_args.aepo_variant}` has no effect under `stage: arpo` (it selects the preset "
            "of `stage: aepo`); use `stage: aepo` or remove it."
        )
    warned: set[str] = set()  # a key inert for two reasons is named once, for the first (the outer switch)
    for keys, switch, wanted in _INERT_UNLESS:
        value = getattr(finetuning_args, switch)
        unused = [key for key in keys if is_set(key) and key not in warned]
        if not unused or _acts(value, wanted):
            continue
        warned.update(unused)
        if switch in explicit:
            origin = "explicit"
        elif switch in PRESETS[name]:
            origin = f"the `{name}` preset's value"
        else:
            origin = "explicit" if getattr(finetuning_args, switch) != agentic_default(switch) else "the default"
        need = f"`{switch}` {wanted}" if wanted == "> 0" else f"`{switch}: {_yaml(wanted)}`"
        aepo_only = switch.startswith("aepo_") and stage == "arpo"
        where = " (the AEPO mechanisms are on only under `stage: aepo` unless switched on here)" if aepo_only else ""
        warnings.append(
            f"{', '.join(f'`{key}`' for key in unused)} {'has' if len(unused) == 1 else 'have'} no effect in this "
            f"run: {'it acts' if len(unused) == 1 else 'they act'} only with {need}, and this run has "
            f"`{switch}: {_yaml(value)}` ({origin}){where}. Remove {'it' if len(unused) == 1 else 'them'} or set {need}."
        )
    return warnings


def preset_name(finetuning_args: Any) -> str:
    r"""Name of the preset that applies to `finetuning_args` (`arpo`, `grpo`, `aepo` or `aepo-paper`).

    The stage is read from `agentic_stage` when the activation layer set it, else from `stage`; `stage: arpo` with
    `arpo_variant: grpo` is the GRPO baseline.

    Raises:
        ValueError: if the stage is neither `arpo` nor `aepo`, or `arpo_variant: grpo` is set with `stage: aepo`.
    """
    stage = getattr(finetuning_args, "agentic_stage", None) or getattr(finetuning_args, "stage", None)
    arpo_variant = agentic_value(finetuning_args, "arpo_variant") or agentic_default("arpo_variant")
    if arpo_variant not in ("arpo", "grpo"):
        raise ValueError(f"Unknown `arpo_variant` {arpo_variant!r}; expected `arpo` or `grpo`.")
    if stage == "arpo":
        return arpo_variant

    if arpo_variant != "arpo":
        raise ValueError(f"`arpo_variant: {arpo_variant}` applies to `stage: arpo`, not to stage {stage!r}.")

    if stage == "aepo":
        variant = agentic_value(finetuning_args, "aepo_variant")
        if variant == "released":
            return "aepo"
        if variant == "paper":
            return "aepo-paper"
        raise ValueError(f"Unknown `aepo_variant` {variant!r}; expected `released` or `paper`.")

    raise ValueError(f"Presets exist for the stages `arpo` and `aepo`, got stage {stage!r}.")


def agentic_namespace(stage: str, keys: dict[str, Any] | None = None) -> SimpleNamespace:
    r"""A namespace with every plugin key at its `hparams` declaration, `keys` applied, presets NOT resolved.

    `stage` is `arpo` or `aepo` (also set as `agentic_stage`); `finetuning_type` is LLaMA-Factory's default (`lora`)
    unless `keys` gives it. LLaMA-Board's checks validate such a namespace like the parser validates the arguments.

    Args:
        stage: The stage name.
        keys: Plugin keys (and `finetuning_type`) to set; other names are ignored.
    """
    namespace = SimpleNamespace(**{f.name: f.default for f in fields(AgenticArguments)})
    for key, value in (keys or {}).items():
        if hasattr(namespace, key):
            setattr(namespace, key, value)
    namespace.stage = namespace.agentic_stage = stage
    namespace.finetuning_type = (keys or {}).get("finetuning_type", "lora")
    return namespace


def resolved_arguments(preset: str = "arpo", **keys: Any) -> SimpleNamespace:
    r"""Every plugin key at its declared default (hparams), `keys` applied, then the preset resolved.

    Args:
        preset: A preset name: `arpo`, `grpo`, `aepo` or `aepo-paper` (stage and variant follow from it).
        **keys: Plugin keys to set before the presets are resolved.

    Raises:
        ValueError: an unknown preset name, or what `resolve_presets` raises.
    """
    stage, variant = {"arpo": ("arpo", {}), "grpo": ("arpo", {"arpo_variant": "grpo"}), "aepo": ("aepo", {}),
                      "aepo-paper": ("aepo", {"aepo_variant": "paper"})}.get(preset, (None, None))  # fmt: skip
    if stage is None:
        raise ValueError(f"Unknown preset {preset!r}; expected one of {sorted(PRESETS)}.")
    args = agentic_namespace(stage, {**variant, **keys})
    resolve_presets(args, verbose=False)
    return args


def resolve_presets(finetuning_args: Any, output_dir: str | None = None, verbose: bool = True) -> dict[str, Any]:
    r"""Fill every `None`-valued preset key of `finetuning_args` in place from the preset (docs/algorithms.md §5.5).

    Explicit keys (not `None`) are kept. `rl_epsilon_high` left at `None` becomes `rl_epsilon` (its documented meaning);
    `rl_loss_agg_mode` and `rl_advantage_std_norm` left at `None` become the policy loss's own
    (`algorithms.resolve_loss_settings`, docs/algorithms.md §4.8).
    The `grpo` preset fills `arpo_initial_rollouts` with M (`arpo_rollout_n`).

    Args:
        finetuning_args: LLaMA-Factory's `FinetuningArguments` extended with `AgenticArguments` (or any object with the
            same attributes); modified in place.
        output_dir: If given, the effective values are written to `<output_dir>/agentic_config.json`.
        verbose: Print the effective values (one line per key, `(preset)`, `(explicit)`, `(default)`,
            `(= rl_epsilon)` or `(from rl_policy_loss)` after each; a reported key outside the presets is `explicit` when it differs from its
            declared default).

    Returns:
        `{"stage", "preset", "values": {key: value}, "explicit": [keys set in the recipe], "from_preset": [keys filled],
        "derived": [`rl_epsilon_high` when it was left to equal `rl_epsilon`, the loss keys left to the loss],
        "inert": [reported keys that do not act on this run, `inert_keys`], "warnings": [keys set in the recipe that
        have no effect in this run, see `inert_key_warnings`]}` (the warnings are logged when `verbose`).

    Raises:
        ValueError: for an unknown stage or variant, `arpo_initial_rollouts` outside [1, M], or set to other than M
            under `arpo_variant: grpo`; loss keys that combine into no named method (`resolve_loss_settings`).
    """
    name = preset_name(finetuning_args)
    preset = PRESETS[name]
    explicit, filled = [], []
    for key, value in preset.items():
        if getattr(finetuning_args, key) is None:
            setattr(finetuning_args, key, value(finetuning_args) if callable(value) else value)
            filled.append(key)
        else:
            explicit.append(key)

    group_size, initial = finetuning_args.arpo_rollout_n, finetuning_args.arpo_initial_rollouts
    if name == "grpo" and initial != group_size:
        raise ValueError(
            f"`arpo_variant: grpo` samples N = M = {group_size} trajectories per prompt, got "
            f"arpo_initial_rollouts={initial}; remove arpo_initial_rollouts from the recipe (or use `arpo_variant: arpo`)."
        )
    if group_size is not None and not 1 <= initial <= group_size:
        raise ValueError(f"`arpo_initial_rollouts` must be in [1, arpo_rollout_n={group_size}], got {initial}.")

    derived = []
    if finetuning_args.rl_epsilon_high is None:
        finetuning_args.rl_epsilon_high = finetuning_args.rl_epsilon
        derived.append("rl_epsilon_high")
    # the loss's own aggregation and advantage normalisation where left unset (docs/algorithms.md §4.8)
    from ..algorithms.policy_loss_variants import resolve_loss_settings

    agg_mode, std_norm = finetuning_args.rl_loss_agg_mode, finetuning_args.rl_advantage_std_norm
    finetuning_args.rl_loss_agg_mode, finetuning_args.rl_advantage_std_norm = resolve_loss_settings(
        finetuning_args.rl_policy_loss,
        agg_mode,
        std_norm,
        bool(finetuning_args.aepo_balanced_clip),
        dual_clip=finetuning_args.rl_dual_clip,
        epsilon_high=finetuning_args.rl_epsilon_high,
    )
    derived += [
        key for key, value in (("rl_loss_agg_mode", agg_mode), ("rl_advantage_std_norm", std_norm)) if value is None
    ]

    warnings = inert_key_warnings(finetuning_args, explicit)
    values = {key: getattr(finetuning_args, key) for key in preset}
    values.update({key: getattr(finetuning_args, key) for key in _REPORTED_KEYS})
    stage = getattr(finetuning_args, "agentic_stage", None) or getattr(finetuning_args, "stage", None)
    result = {"stage": stage, "preset": name, "values": values, "explicit": explicit, "from_preset": filled,
              "derived": derived, "inert": sorted(inert_keys(finetuning_args) & set(values))}  # fmt: skip
    if verbose:
        print(format_effective_config(result))
        logger = get_logger(__name__)
        for warning in warnings:
            logger.warning(warning)
    result["warnings"] = warnings

    if output_dir is not None:
        save_agentic_config(result, output_dir, finetuning_args)

    return result


def format_effective_config(result: dict[str, Any]) -> str:
    r"""Multi-line text of the effective configuration returned by `resolve_presets`.

    Keys that do not act on the run (`result["inert"]`, `inert_keys`) are left out unless the recipe set them, then
    they are marked `(no effect in this run)`.
    """
    lines = [f"[llamafactory-agentic] stage `{result['stage']}`, preset `{result['preset']}`; effective values:"]
    explicit, from_preset, inert = set(result["explicit"]), set(result["from_preset"]), set(result.get("inert", ()))
    for key, value in result["values"].items():
        set_here = key in explicit or (key not in from_preset and value != agentic_default(key))
        if key in inert and not set_here:
            continue  # does not act on this run (`inert_keys`): e.g. every AEPO key of an `arpo` run
        if key in inert:
            origin = "no effect in this run"
        elif key in explicit:
            origin = "explicit"
        elif key in from_preset:
            origin = "preset"
        elif key in result.get("derived", ()):  # rl_epsilon_high: None means equal to rl_epsilon; the loss keys
            origin = "= rl_epsilon" if key == "rl_epsilon_high" else "from rl_policy_loss"
        else:  # a reported key outside the presets: set in the recipe unless it still has its declared default
            origin = "default" if value == agentic_default(key) else "explicit"
        lines.append(f"  {key}: {value!r} ({origin})")
    return "\n".join(lines)


def recorded_keys(finetuning_args: Any) -> dict[str, Any]:
    r"""Every plugin key (`hparams.AgenticArguments`: tool, rollout, reward and loss keys) of a run, JSON-safe.

    `agentic_config.json` keeps them under `keys` so that `llamafactory-agentic eval` with `eval_preset: train_val`
    repeats the training's tools and rollout (docs/evaluation.md "train_val"); a value that JSON cannot hold is
    written as its text.
    """
    out = {}
    for spec in fields(AgenticArguments):
        value = getattr(finetuning_args, spec.name, None)
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            value = str(value)
        out[spec.name] = value
    return out


def save_agentic_config(result: dict[str, Any], output_dir: str, finetuning_args: Any = None) -> str:
    r"""Write `result` as `<output_dir>/agentic_config.json` (next to the checkpoints) and return the path.

    Args:
        result: What `resolve_presets` returned (`stage`, `preset`, `values`, ...).
        output_dir: The run's output folder (created).
        finetuning_args: The resolved run arguments; when given, every plugin key is recorded under `keys`
            (`recorded_keys`), which the `train_val` evaluation preset applies.
    """
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, AGENTIC_CONFIG_NAME)
    if finetuning_args is not None:
        result = {**result, "keys": recorded_keys(finetuning_args)}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2, sort_keys=False)
        f.write("\n")
    return path


def training_system_prompt(systems: list[str], default_system: str | None) -> str:
    r"""The system prompt a run's prompts were rendered with: the rows' most common `_system`, else the template's.

    Args:
        systems: The `_system` column of the RL prompts (`data.load_rl_dataset`; "" where a row has none).
        default_system: The template's default system prompt (LLaMA-Factory's `Template.default_system`), used by
            `encode_rl_prompts` for a row without one.
    """
    counts = Counter(system for system in systems if system)
    if counts:
        return counts.most_common(1)[0][0]
    return default_system or ""


def record_system_prompt(output_dir: str, system_prompt: str) -> str | None:
    r"""Add `system_prompt` to `<output_dir>/agentic_config.json` (LLaMA-Board's Chat fills its system prompt from it).

    Returns:
        The file's path, or None when there is no `agentic_config.json` there (nothing is written).
    """
    path = os.path.join(output_dir, AGENTIC_CONFIG_NAME)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    saved["system_prompt"] = system_prompt
    with open(path, "w", encoding="utf-8") as f:
        json.dump(saved, f, indent=2, sort_keys=False)
        f.write("\n")
    return path

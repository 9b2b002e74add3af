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

r"""From parsed arguments to the config objects of an `arpo`/`aepo` run: the one place the arguments are read.

`build_run_config` is called once by `run_arpo`, after `resolve_presets`: defaults come only from
`llamafactory_agentic/hparams.py` and the stage presets (`train/presets.py`), and every lower layer (rollout, tools,
algorithms, rewards) receives a config object, never the arguments. Its parts: `build_grpo_config` (TRL's config and
the batch geometry, `derive_steps_per_generation`; `validation.check_rl_sampling` refuses greedy decoding),
`ArpoLossConfig` (the trainer's optimisation keys, also the `config` argument of every registered policy loss and
advantage estimator), `rollout_config_from_args` (`RolloutConfig`) and `tools_config_from_args` (`ToolsConfig`, the
executor's settings). None of these classes declares a field default: code without a recipe builds them from the
declared defaults with `default_rollout_config` and `default_loss_config`. Values are checked by
`llamafactory_agentic.validation`, the parser's validator.
"""

import os
from dataclasses import dataclass, fields
from types import SimpleNamespace
from typing import Any

from ...algorithms.policy_loss_variants import resolve_loss_settings
from ...rewards.registry import check_tool_bonus
from ...rollout.trajectory import STOP_STRINGS, RolloutConfig
from ...train.trl_compat import GRPOConfig
from ...validation import check_async_keys, check_optimisation_ranges, check_rl_sampling, validate_loss_keys
from ..presets import resolved_arguments


def _unresolved(values: dict[str, Any], optional: tuple[str, ...] = ()) -> None:
    missing = [k for k, v in values.items() if v is None and k not in optional]
    if missing:
        raise ValueError(f"Unresolved keys {missing}: call `resolve_presets(finetuning_args)` first.")


@dataclass(frozen=True, slots=True)
class ArpoLossConfig:
    r"""The resolved (no `None`) optimisation keys the trainer reads (docs/algorithms.md §4 and §5.3-§5.4).

    Built from the plugin's `FinetuningArguments` after `resolve_presets` by `from_args`; the stage name is never read,
    so `aepo` with every AEPO key at its `arpo` value is exactly `arpo`. Field names drop the `rl_`/`aepo_`/`arpo_`
    prefix of their key (`epsilon_low` is `rl_epsilon`, `policy_loss` is `rl_policy_loss`).
    """

    policy_loss: str  # name in the policy-loss registry (`algorithms.get_policy_loss`)
    epsilon_low: float
    epsilon_high: float
    dual_clip: float | None  # None: no dual clip
    balanced_clip: bool
    balanced_clip_scope: str  # "all" or "high_entropy"
    high_entropy_z: float
    entropy_advantage: bool
    entropy_advantage_coef: float
    kl_coef: float
    entropy_coef: float
    attribution: str  # advantage estimator name in the registry (`algorithms.get_advantage_estimator`)
    hard_dedup: bool
    rollout_log_ratio: float  # share of groups written to rollouts.jsonl
    val_max_samples: int | None  # None: every validation prompt
    logprob_chunk_size: int  # `rl_logprob_chunk_size`: 0 = materialise the full logits
    micro_batch_tokens: int | None  # `rl_micro_batch_tokens` (0 there): None = micro-batches of b trajectories
    dynamic_sampling: bool  # `rl_dynamic_sampling`: drop equal-reward groups and roll out more prompts
    dynamic_sampling_max_batches: int  # `rl_dynamic_sampling_max_batches`: generation batches per update, at most
    # docs/algorithms.md §4.8, resolved against the loss by `algorithms.resolve_loss_settings`:
    loss_agg_mode: str  # `rl_loss_agg_mode`: token_mean, seq_mean_token_sum or seq_mean_token_mean
    advantage_std_norm: bool  # `rl_advantage_std_norm`: divide the group-centred reward by the group std
    max_response_length: int  # `arpo_max_response_length` (Dr. GRPO's constant normaliser)
    max_staleness: int  # `rl_max_staleness`: optimiser steps a rollout producer may run ahead (0: lockstep)
    off_policy_correction: str  # `rl_off_policy_correction`: tis, decoupled or none (algorithms.off_policy)
    off_policy_cap: float  # `rl_off_policy_cap`: the tis weight's upper bound

    @classmethod
    def from_args(cls, finetuning_args: Any) -> "ArpoLossConfig":
        r"""Read the resolved keys from `finetuning_args` (call `resolve_presets` first).

        The policy loss and the advantage estimator may be any name registered before this call
        (`algorithms.register_policy_loss`, `algorithms.register_advantage_estimator`); the ranges and names are
        checked by `llamafactory_agentic.validation`, the parser's validator.

        Raises:
            ValueError: if a key is still `None` (presets not resolved), has an unknown value, or the loss keys
                combine into no named method (`algorithms.resolve_loss_settings`, e.g. `rl_policy_loss: gspo` with
                `aepo_balanced_clip: true`).
        """
        a = finetuning_args
        values = dict(
            policy_loss=a.rl_policy_loss,
            epsilon_low=a.rl_epsilon,
            epsilon_high=a.rl_epsilon_high if a.rl_epsilon_high is not None else a.rl_epsilon,
            dual_clip=a.rl_dual_clip,
            balanced_clip=a.aepo_balanced_clip,
            balanced_clip_scope=a.aepo_balanced_clip_scope,
            high_entropy_z=a.aepo_high_entropy_z,
            entropy_advantage=a.aepo_entropy_advantage,
            entropy_advantage_coef=a.aepo_entropy_advantage_coef,
            kl_coef=a.rl_kl_coef,
            entropy_coef=a.rl_entropy_coef,
            attribution=a.arpo_advantage_attribution,
            hard_dedup=a.arpo_hard_dedup,
            rollout_log_ratio=a.arpo_rollout_log_ratio,
            val_max_samples=a.arpo_val_max_samples,
            logprob_chunk_size=a.rl_logprob_chunk_size,
            micro_batch_tokens=a.rl_micro_batch_tokens or None,  # 0: cut by trajectories
            dynamic_sampling=bool(a.rl_dynamic_sampling),
            dynamic_sampling_max_batches=int(a.rl_dynamic_sampling_max_batches),
            max_staleness=int(a.rl_max_staleness),
            off_policy_correction=a.rl_off_policy_correction,
            off_policy_cap=float(a.rl_off_policy_cap),
        )
        _unresolved(values, optional=("dual_clip", "val_max_samples", "micro_batch_tokens"))
        check_optimisation_ranges(a.rl_logprob_chunk_size, a.rl_micro_batch_tokens, a.rl_dynamic_sampling_max_batches)
        check_async_keys(a.rl_max_staleness, a.rl_off_policy_correction, a.rl_off_policy_cap)
        validate_loss_keys(values["policy_loss"], values["attribution"], values["balanced_clip_scope"])
        # the loss's aggregation and advantage normalisation; refuses combinations that are not the named method
        values["loss_agg_mode"], values["advantage_std_norm"] = resolve_loss_settings(
            a.rl_policy_loss,
            a.rl_loss_agg_mode,
            a.rl_advantage_std_norm,
            bool(a.aepo_balanced_clip),
            dual_clip=a.rl_dual_clip,
            epsilon_high=values["epsilon_high"],
        )
        values["max_response_length"] = int(a.arpo_max_response_length)
        return cls(**values)


def default_loss_config(preset: str = "arpo", **keys: Any) -> ArpoLossConfig:
    r"""`ArpoLossConfig` of a run with every key at its declared default (hparams plus `preset`) and `keys` applied.

    For code that computes advantages or losses without a recipe (tests, benchmarks).

    Args:
        preset: `arpo`, `grpo`, `aepo` or `aepo-paper`.
        **keys: Plugin keys (e.g. `arpo_advantage_attribution="hard"`), set before the presets are resolved.

    Raises:
        ValueError: from `ArpoLossConfig.from_args`.
    """
    return ArpoLossConfig.from_args(resolved_arguments(preset, **keys))


def derive_steps_per_generation(
    rollout_batch_size: int,
    group_size: int,
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    world_size: int,
) -> int:
    r"""TRL's `steps_per_generation` (micro-steps fed by one rollout) from the prompts per rollout.

    One rollout produces `rollout_batch_size * group_size` trajectories over all ranks; one micro-step consumes
    `per_device_train_batch_size * world_size` of them, one optimiser update `... * gradient_accumulation_steps`. So
    `steps_per_generation = rollout_batch_size * group_size / (per_device_train_batch_size * world_size)` and the
    rollout feeds `steps_per_generation / gradient_accumulation_steps` updates (docs/algorithms.md §10: 128 prompts
    x 16 = 2048 trajectories, 256 per update = 16 prompts, 8 updates).

    Whole groups are rolled out per rank (group g on rank g % world_size), so the prompts per rollout must split
    evenly over the ranks: every rank then has groups to roll out and enters the same collectives (ZeRO-3 parameter
    gathering, weight sync) the same number of times, and no rank idles through the rollout.

    Raises:
        ValueError: if `rollout_batch_size` is not a multiple of `world_size`, or the rollout does not split into
            whole micro-steps and whole optimiser updates.
    """
    if rollout_batch_size % world_size != 0:
        raise ValueError(
            f"arpo_rollout_batch_size ({rollout_batch_size}) must be a multiple of the world size ({world_size}): "
            f"each rank rolls out whole groups, so with {rollout_batch_size % world_size} prompt(s) left over some "
            f"ranks would get fewer groups (or none). Set arpo_rollout_batch_size to a multiple of {world_size} "
            f"(e.g. {max(world_size, rollout_batch_size - rollout_batch_size % world_size)}) or change the number of "
            f"processes."
        )
    trajectories = rollout_batch_size * group_size
    per_step = per_device_train_batch_size * world_size
    per_update = per_step * gradient_accumulation_steps
    if trajectories % per_update != 0:
        raise ValueError(
            f"arpo_rollout_batch_size ({rollout_batch_size}) x arpo_rollout_n ({group_size}) = {trajectories} "
            f"trajectories per rollout must be a multiple of the trajectories per optimiser update, "
            f"per_device_train_batch_size ({per_device_train_batch_size}) x gradient_accumulation_steps "
            f"({gradient_accumulation_steps}) x world size ({world_size}) = {per_update}."
        )
    return trajectories // per_step


def build_grpo_config(
    training_args: Any, finetuning_args: Any, generating_args: Any, world_size: int | None = None
) -> GRPOConfig:
    r"""Build TRL's `GRPOConfig` from LLaMA-Factory's `Seq2SeqTrainingArguments` and the plugin's keys.

    Every `TrainingArguments` field shared by both classes is copied (output dir, batch sizes, optimiser, schedule,
    precision, DeepSpeed, logging, saving, report_to, seed, ...). Then: `num_generations` = M (`arpo_rollout_n`),
    `steps_per_generation` from `arpo_rollout_batch_size` (see `derive_steps_per_generation`), `beta` =
    `rl_kl_coef`, `epsilon`/`epsilon_high` = `rl_epsilon`/`rl_epsilon_high`, `num_iterations` = `rl_num_iterations`,
    `temperature`/`top_p`/`top_k` from the generating arguments, unused columns kept, dropout disabled.

    TRL's check that the eval batch is divisible by `num_generations` does not apply (validation uses one trajectory
    per prompt), so the config is built with evaluation off and LLaMA-Factory's evaluation settings are restored after.

    With `rl_micro_batch_tokens` the Trainer gets one micro-step per optimiser update: `per_device_train_batch_size`
    becomes `per_device_train_batch_size x gradient_accumulation_steps`, `gradient_accumulation_steps` 1 and
    `steps_per_generation` the number of updates per rollout (same rollout, same rows per update); the trainer cuts
    each update into micro-batches by tokens (docs/algorithms.md §4.6).

    Raises:
        ValueError: from `derive_steps_per_generation`, or from `check_rl_sampling` when `training_args.do_train`.
    """
    import dataclasses

    from transformers import TrainingArguments

    if world_size is None:
        world_size = training_args.world_size
    if training_args.do_train:
        check_rl_sampling(generating_args)

    shared = {f.name for f in dataclasses.fields(TrainingArguments) if f.init}
    kwargs = {}
    for f in dataclasses.fields(GRPOConfig):
        if f.init and f.name in shared and hasattr(training_args, f.name):
            kwargs[f.name] = getattr(training_args, f.name)

    steps_per_generation = derive_steps_per_generation(
        finetuning_args.arpo_rollout_batch_size,
        finetuning_args.arpo_rollout_n,
        training_args.per_device_train_batch_size,
        training_args.gradient_accumulation_steps,
        world_size,
    )
    top_k = generating_args.top_k
    eval_keys = ("eval_strategy", "eval_steps", "do_eval", "eval_on_start")
    kwargs.update(
        eval_strategy="no",
        do_eval=False,
        eval_on_start=False,
        load_best_model_at_end=False,
        num_generations=finetuning_args.arpo_rollout_n,
        steps_per_generation=steps_per_generation,
        generation_batch_size=None,
        max_prompt_length=finetuning_args.arpo_max_prompt_length,
        max_completion_length=finetuning_args.arpo_max_response_length,
        temperature=generating_args.temperature,
        top_p=generating_args.top_p,
        top_k=top_k if top_k else None,
        beta=finetuning_args.rl_kl_coef,
        epsilon=finetuning_args.rl_epsilon,
        epsilon_high=finetuning_args.rl_epsilon_high,
        num_iterations=finetuning_args.rl_num_iterations,
        loss_type="dapo",  # token mean with an explicit normaliser (our `_compute_loss` does its own)
        scale_rewards="group",
        remove_unused_columns=False,
        disable_dropout=True,
        use_vllm=False,  # the rollout engine owns vLLM, not TRL
        log_completions=False,
        mask_truncated_completions=False,
    )
    if finetuning_args.rl_micro_batch_tokens:
        # token-cut micro-batches: one Trainer micro-step is one optimiser update of b x A trajectories per rank, which
        # the trainer cuts into micro-batches by tokens itself (`ArpoTrainer.training_step`, `token_micro_batches`)
        accumulation = training_args.gradient_accumulation_steps
        kwargs.update(
            per_device_train_batch_size=training_args.per_device_train_batch_size * accumulation,
            gradient_accumulation_steps=1,
            steps_per_generation=steps_per_generation // accumulation,
        )
    config = GRPOConfig(**kwargs)
    for key in eval_keys:
        if hasattr(training_args, key):
            setattr(config, key, getattr(training_args, key))
    return config


def rollout_config_from_args(
    finetuning_args: Any, generating_args: Any, eos_token_id: int, **overrides: Any
) -> RolloutConfig:
    r"""`RolloutConfig` from the `arpo_*`, `aepo_*` and `agentic_max_tool_calls` keys and the sampling arguments.

    Args:
        finetuning_args: LLaMA-Factory's `FinetuningArguments` with the plugin's keys, presets resolved.
        generating_args: LLaMA-Factory's `GeneratingArguments`: `temperature` (0 when `do_sample` is false), `top_p`,
            `top_k` (0 = off).
        eos_token_id: End-of-turn token id (e.g. `<|im_end|>`).
        **overrides: Field values that win over the arguments (e.g. `seed=training_args.seed + rank`).

    Raises:
        ValueError: a key is still `None` (presets not resolved), or an invalid value (`RolloutConfig` checks).
    """
    a = finetuning_args
    values = dict(
        group_size=a.arpo_rollout_n,
        initial_rollouts=a.arpo_initial_rollouts,
        budget_fill=a.arpo_budget_fill,
        beam_size=a.arpo_beam_size,
        branch_rule=a.arpo_branch_rule,
        branch_tau=a.arpo_branch_tau,
        branch_alpha=a.arpo_branch_alpha,
        entropy_weight=a.arpo_entropy_weight,
        entropy_source=a.arpo_entropy_source,
        entropy_topk=a.arpo_entropy_topk,
        entropy_tokens=a.arpo_entropy_tokens,
        max_prompt_length=a.arpo_max_prompt_length,
        max_response_length=a.arpo_max_response_length,
        max_tool_calls=a.agentic_max_tool_calls,
        branch_penalty=a.aepo_branch_penalty,
        branch_penalty_scope=a.aepo_branch_penalty_scope,
        dynamic_rollouts=a.aepo_dynamic_rollouts,
        premonitor_beta=a.aepo_premonitor_beta,
        premonitor_tokens=a.aepo_premonitor_tokens,
        premonitor_rounds=a.aepo_premonitor_rounds,
        backend=a.arpo_rollout_backend,
        hf_prefix_cache=a.arpo_hf_prefix_cache,
        hf_generation_batch_size=a.arpo_hf_generation_batch_size,
        hf_lora_merge=a.arpo_hf_lora_merge,
        schedule=a.arpo_rollout_schedule,
        vllm_gpu_memory_utilization=a.arpo_vllm_gpu_memory_utilization,
        vllm_enable_sleep_mode=a.arpo_vllm_enable_sleep_mode,
        server_urls=tuple(u.strip() for u in (a.arpo_server_urls or "").split(",") if u.strip()),
        server_api_key=a.arpo_server_api_key,
        server_timeout_s=a.arpo_server_timeout,
        server_weight_transfer=a.arpo_server_weight_transfer,
        server_weight_dir=a.arpo_server_weight_dir,
        contamination_mode=a.agentic_contamination_mode,
    )
    _unresolved(values, optional=("server_api_key", "server_weight_dir"))
    types = {f.name: f.type for f in fields(RolloutConfig)}  # YAML may give 0 for a float key: cast to the field type
    values = {k: types[k](v) if types[k] in (int, float, bool) else v for k, v in values.items()}
    g = generating_args
    values.update(
        temperature=float(g.temperature or 0.0) if g.do_sample else 0.0,
        top_p=float(g.top_p or 1.0),
        top_k=int(g.top_k or 0),
        eos_token_id=int(eos_token_id),
        stop_strings=STOP_STRINGS,
        seed=0,
        contamination_tools=CONTAMINATION_TOOLS,
        **EVALUATION_SETTINGS_OFF,
    )
    values.update(overrides)
    return RolloutConfig(**values)


# The fields of `RolloutConfig` that are no recipe key: the evaluation harness sets them from its protocol
# (docs/algorithms.md §9, `evaluation.runner.rollout_config_for`); training runs with them off.
# The tools whose observations the contamination guard checks (`agentic_contamination_mode`, docs/plan.md §3).
CONTAMINATION_TOOLS = ("search",)

EVALUATION_SETTINGS_OFF: dict[str, Any] = {
    "max_round_tokens": None,  # no per-round cap: only the response budget R
    "tool_call_limits": None,  # no per-tool limits: only `agentic_max_tool_calls`
    "repeat_notice_tools": (),  # a repeated call is run again
    "repetition_penalty": 1.0,  # no penalty
    "self_result_retries": 3,  # acts only with `<result>` among the stop strings (evaluation)
    "trajectory_timeout_s": None,  # no wall-clock limit per trajectory
}

# Sampling of a training rollout with the recipes' values (temperature 1.0, top_p 1.0, top_k 0).
RECIPE_SAMPLING = SimpleNamespace(do_sample=True, temperature=1.0, top_p=1.0, top_k=0)


def default_rollout_config(stage: str = "arpo", **overrides: Any) -> RolloutConfig:
    r"""`RolloutConfig` of a run with every key at its declared default (hparams plus the stage preset).

    For code that builds a rollout without a recipe (the evaluation harness, the synthetic task's evaluation, tests,
    benchmarks): its values come from the one declaration of each key, through `rollout_config_from_args`.

    Args:
        stage: `arpo` (its preset), `grpo` (`arpo` with `arpo_variant: grpo`), `aepo` or `aepo-paper`.
        **overrides: `RolloutConfig` field values (not keys) that win, e.g. `group_size=4, eos_token_id=7`.

    Raises:
        ValueError: an unknown stage, or a field value `RolloutConfig` refuses.
    """
    args = resolved_arguments(stage)
    return rollout_config_from_args(args, RECIPE_SAMPLING, overrides.pop("eos_token_id", 0), **overrides)


@dataclass(frozen=True, slots=True)
class ToolsConfig:
    r"""The tool executor's settings, resolved (`llamafactory_agentic.tools.build_executor_from_args` reads them).

    Field names are the `agentic_*` keys of `llamafactory_agentic/hparams.py` that the executor builder reads, so the
    builder takes this object where it took the arguments; `retries` and `workers` come from the stage preset.
    """

    agentic_tool_config: str | None  # YAML tool config; None: python and search with the values below
    agentic_tool_retries: int  # attempts per call
    agentic_tool_workers: int  # concurrent tool calls
    agentic_python_timeout: float  # seconds per execution
    agentic_python_max_output_chars: int  # python output cap (characters)
    agentic_python_isolation: str  # sandbox: auto, bwrap, unshare, rlimits-only
    agentic_python_min_isolation: str  # refuse a python sandbox measured below: none, unprivileged, confined, full
    agentic_search_backend: str  # local, replay, web, retriever
    agentic_search_index: str | None  # local backend's index folder; None: $AGENTIC_SEARCH_INDEX or the cache dir
    agentic_search_topk: int  # snippets per query
    agentic_search_snippet_chars: int  # characters per snippet
    agentic_cache_path: str | None  # SQLite file or redis:// URL; None: no persistent cache
    agentic_cache_mode: str  # read_write, read_only, offline
    agentic_cache_tools: str  # comma-separated cached tools


def tools_config_from_args(finetuning_args: Any) -> ToolsConfig:
    r"""`ToolsConfig` from the `agentic_*` tool keys (presets resolved).

    Raises:
        ValueError: `agentic_tool_retries` or `agentic_tool_workers` is still `None` (presets not resolved).
    """
    values = {f.name: getattr(finetuning_args, f.name) for f in fields(ToolsConfig)}
    _unresolved(values, optional=("agentic_tool_config", "agentic_search_index", "agentic_cache_path"))
    return ToolsConfig(**values)


@dataclass(frozen=True, slots=True)
class ArpoRunConfig:
    r"""Every config object of an `arpo`/`aepo` run (`build_run_config`)."""

    grpo: GRPOConfig  # TRL's config: batch geometry, optimiser, logging, saving
    loss: ArpoLossConfig  # the trainer's optimisation keys
    rollout: RolloutConfig  # the agent loop and its engine
    tools: ToolsConfig  # the tool executor
    reward: str  # `agentic_reward`: registered name or module:function
    reward_math: str  # `agentic_reward_math`: f1, math_verify or max
    reward_tool_bonus: float  # `agentic_reward_tool_bonus`: built-in rewards' bonus for using search and python


def build_run_config(
    training_args: Any,
    finetuning_args: Any,
    generating_args: Any,
    eos_token_id: int,
    world_size: int | None = None,
    tools: ToolsConfig | None = None,
) -> ArpoRunConfig:
    r"""Turn the parsed arguments of an `arpo`/`aepo` run into its config objects (call once, after `resolve_presets`).

    Args:
        training_args: LLaMA-Factory's `Seq2SeqTrainingArguments` (the rollout seed is `seed + process_index`).
        finetuning_args: `FinetuningArguments` with the plugin's keys, presets resolved.
        generating_args: `GeneratingArguments` (rollout sampling).
        eos_token_id: The tokenizer's end-of-turn id.
        world_size: Number of processes (default `training_args.world_size`).
        tools: The run's `ToolsConfig` when already built by `tools_config_from_args` (`run_arpo` builds the tool
            executor before loading anything, so that a bad tool config stops the run at once); None: built here.

    Raises:
        ValueError: unresolved keys, unknown values, greedy training, or a batch geometry that does not split (see
            `build_grpo_config`, `ArpoLossConfig.from_args`, `rollout_config_from_args`, `tools_config_from_args`).
    """
    return ArpoRunConfig(
        grpo=build_grpo_config(training_args, finetuning_args, generating_args, world_size),
        loss=ArpoLossConfig.from_args(finetuning_args),
        rollout=rollout_config_from_args(
            finetuning_args,
            generating_args,
            eos_token_id,
            seed=training_args.seed + training_args.process_index,
            # vllm_server's disk weight transfer: a folder of the run unless the recipe names one the server reads
            server_weight_dir=finetuning_args.arpo_server_weight_dir
            or os.path.join(training_args.output_dir, "server_weights"),
        ),
        tools=tools if tools is not None else tools_config_from_args(finetuning_args),
        reward=finetuning_args.agentic_reward,
        reward_math=finetuning_args.agentic_reward_math,
        reward_tool_bonus=check_tool_bonus(finetuning_args.agentic_reward, finetuning_args.agentic_reward_tool_bonus),
    )

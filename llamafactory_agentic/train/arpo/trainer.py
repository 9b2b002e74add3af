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

r"""`ArpoTrainer`: ARPO/AEPO training on top of TRL 0.24's `GRPOTrainer`.

What is reused from TRL (unchanged): the `RepeatSampler` train sampler (each prompt repeated M times, one rollout batch
repeated `steps_per_generation` times so one rollout feeds several optimiser updates), the generation-batch dataloader,
checkpointing, `self._metrics` + `log` (averaged metrics merged into the Trainer's logs), dropout disabling,
`unwrap_model_for_generation` (ZeRO-3 parameter gathering for the hf rollout engine).

What is overridden, and why (the adapter surface for a newer TRL):

* `_prepare_inputs` - TRL shuffles the generation batch and splits it evenly; the spec (section 4) wants no shuffling
  and a token-mean normaliser per optimiser update over all ranks, so we build the micro-batches ourselves.
* `_generate_and_score_completions` - the multi-round tool rollout (`AgenticRollout`), model-view rewards, GRPO
  advantages with soft/hard attribution from the branch tree, old/ref log-probs. Whole groups are rolled out on one
  rank (branching needs every sibling, spec section 3.4).
* `_compute_loss` - our policy loss with a loss mask separate from the attention mask (observation tokens attend but
  are never trained), AEPO balanced clip and entropy-aware advantage, optional KL (k3) and entropy bonus.
* `_get_eval_sampler` / `prediction_step` - validation is greedy, one trajectory per prompt, no branching.
* `training_step` (timing only) and `log` (step-time split).

Everything the trainer knows about generation goes through `self.rollout.rollout(prompts, training)` and the engine's
`set_model` (hf) or weight-sync method (vllm); see `_rollout_call`.
"""

import json
import math
import os
import random
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from accelerate.utils import gather_object
from torch.utils.data import SequentialSampler
from transformers.trainer_callback import TrainerCallback

from ...algorithms import (
    compute_policy_loss,
    entropy_aware_advantages,
    entropy_from_logits_chunked,
    get_advantage_estimator,
    high_entropy_mask,
    low_var_kl,
    masked_mean,
)
from ...rewards import build_model_view
from ...rewards.registry import CallableReward, RewardFunction
from .trl_compat import (
    GRPOConfig,
    GRPOTrainer,
    pad,
    prepare_deepspeed,
    selective_log_softmax,
    unwrap_model_for_generation,
)


ROLLOUT_LOG_NAME = "rollouts.jsonl"
EVAL_INDEX = "_eval_index"  # row number of a validation prompt, added by `ArpoTrainer.get_eval_dataloader`


@dataclass
class ArpoLossConfig:
    r"""The resolved (no `None`) optimisation keys the trainer reads (spec sections 4 and 5.3-5.4).

    Built from the plugin's `FinetuningArguments` after `resolve_presets` by `from_args`; the stage name is never read,
    so `aepo` with every AEPO key at its `arpo` value is exactly `arpo`.
    """

    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    dual_clip: float | None = 3.0
    balanced_clip: bool = False
    balanced_clip_scope: str = "all"
    high_entropy_z: float = 0.0
    entropy_advantage: bool = False
    entropy_advantage_coef: float = 0.2
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    attribution: str = "soft"
    hard_dedup: bool = False
    rollout_log_ratio: float = 0.0
    val_max_samples: int | None = None

    @classmethod
    def from_args(cls, finetuning_args: Any) -> "ArpoLossConfig":
        r"""Read the resolved keys from `finetuning_args` (call `resolve_presets` first).

        Raises:
            ValueError: if a key is still `None` (presets not resolved) or has an unknown value.
        """
        values = dict(
            epsilon_low=finetuning_args.rl_epsilon,
            epsilon_high=(
                finetuning_args.rl_epsilon_high
                if finetuning_args.rl_epsilon_high is not None
                else finetuning_args.rl_epsilon
            ),
            dual_clip=finetuning_args.rl_dual_clip,
            balanced_clip=finetuning_args.aepo_balanced_clip,
            balanced_clip_scope=finetuning_args.aepo_balanced_clip_scope,
            high_entropy_z=finetuning_args.aepo_high_entropy_z,
            entropy_advantage=finetuning_args.aepo_entropy_advantage,
            entropy_advantage_coef=finetuning_args.aepo_entropy_advantage_coef,
            kl_coef=finetuning_args.rl_kl_coef,
            entropy_coef=finetuning_args.rl_entropy_coef,
            attribution=finetuning_args.arpo_advantage_attribution,
            hard_dedup=finetuning_args.arpo_hard_dedup,
            rollout_log_ratio=finetuning_args.arpo_rollout_log_ratio,
            val_max_samples=finetuning_args.arpo_val_max_samples,
        )
        unresolved = [k for k, v in values.items() if v is None and k not in ("dual_clip", "val_max_samples")]
        if unresolved:
            raise ValueError(f"Unresolved keys {unresolved}: call `resolve_presets(finetuning_args)` first.")
        if values["balanced_clip_scope"] not in ("all", "high_entropy"):
            raise ValueError(f"Unknown `aepo_balanced_clip_scope` {values['balanced_clip_scope']!r}.")
        if values["attribution"] not in ("soft", "hard"):
            raise ValueError(f"Unknown `arpo_advantage_attribution` {values['attribution']!r}.")
        return cls(**values)


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
    rollout feeds `steps_per_generation / gradient_accumulation_steps` updates (reference, spec section 10: 128 prompts
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


def check_rl_sampling(generating_args: Any) -> None:
    r"""Refuse greedy decoding for RL training (`arpo`/`aepo` stages).

    GRPO needs M different trajectories per prompt, and the loss divides the logits by `generating_args.temperature`
    (spec section 5.4), which must be the temperature the rollout sampled with. With `do_sample: false` or
    `temperature <= 0` the rollout would be greedy while the loss assumes sampling.

    Raises:
        ValueError: `do_sample` is false or `temperature` is not positive.
    """
    do_sample = getattr(generating_args, "do_sample", True)
    temperature = getattr(generating_args, "temperature", 1.0)
    if not do_sample or temperature is None or not float(temperature) > 0:
        raise ValueError(
            f"RL training (stage arpo/aepo) needs sampled rollouts, got do_sample={do_sample}, "
            f"temperature={temperature}: set do_sample: true and temperature > 0 (the recipes use temperature: 1.0, "
            f"top_p: 1.0, top_k: 0). Validation is greedy on its own."
        )


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

    Raises:
        ValueError: from `derive_steps_per_generation`, or from `check_rl_sampling` when `training_args.do_train`.
    """
    import dataclasses

    from transformers import TrainingArguments

    if world_size is None:
        world_size = training_args.world_size
    if getattr(training_args, "do_train", False):
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
    top_k = getattr(generating_args, "top_k", 0)
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
    config = GRPOConfig(**kwargs)
    for key in eval_keys:
        if hasattr(training_args, key):
            setattr(config, key, getattr(training_args, key))
    return config


class _MergingPool:
    r"""Wraps LogCallback's thread pool so the record it writes also carries the plugin's metrics."""

    def __init__(self, pool: Any, extra: dict[str, float]):
        self.pool, self.extra = pool, extra

    def submit(self, fn: Callable, output_dir: str, logs: dict[str, Any]):
        merged = dict(logs)
        merged.update({k: v for k, v in self.extra.items() if k not in merged})
        return self.pool.submit(fn, output_dir, merged)


_STANDARD_KEYS = {"loss", "learning_rate", "epoch", "step", "total_flos", "eval_loss", "predict_loss", "reward"}


def extend_log_callback(callbacks: list[TrainerCallback] | None) -> None:
    r"""Make LLaMA-Factory's `LogCallback` write every numeric metric of a log record to `trainer_log.jsonl`.

    LogCallback writes a fixed set of keys (loss, reward, lr, ...). The instances in `callbacks` get the subclass
    `AgenticLogCallback` (same state, one overridden method), so `rollout/...`, `tools/...`, `reward/...`,
    `loss/...`, `time/...` and `aepo/...` reach the file LLaMA-Board reads.
    """
    from llamafactory.train.callbacks import LogCallback

    class AgenticLogCallback(LogCallback):
        def on_log(self, args, state, control, **kwargs):
            record = state.log_history[-1] if state.log_history else {}
            extra = {
                k: v
                for k, v in record.items()
                if k not in _STANDARD_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            pool = self.thread_pool
            if pool is None or not extra:
                return super().on_log(args, state, control, **kwargs)
            self.thread_pool = _MergingPool(pool, extra)
            try:
                return super().on_log(args, state, control, **kwargs)
            finally:
                self.thread_pool = pool

    for callback in callbacks or []:
        if type(callback) is LogCallback:
            callback.__class__ = AgenticLogCallback


class RolloutProgress:
    r"""Engine proxy that shows rollout progress: one tqdm tick per generation round (main process only).

    Wraps any `GenerationEngine`; every attribute is delegated. `reset` (start of a rollout call) opens the bar,
    `generate` ticks it with the number of active trajectories and new tokens, `release` closes it.
    """

    def __init__(self, engine: Any, enabled: bool):
        r"""Wrap `engine`; the bar is drawn only when `enabled`."""
        self._engine, self._enabled, self._bar = engine, enabled, None

    def __getattr__(self, name: str) -> Any:
        r"""Delegate everything else to the wrapped engine."""
        return getattr(self._engine, name)

    def reset(self) -> None:
        r"""Forward to the engine and open a fresh bar."""
        self._engine.reset()
        if self._enabled:
            from tqdm.auto import tqdm

            if self._bar is not None:
                self._bar.close()
            self._bar = tqdm(desc="rollout", unit="round", leave=False, dynamic_ncols=True)

    def generate(self, requests: list, sampling: Any) -> list:
        r"""Forward to the engine and tick the bar."""
        results = self._engine.generate(requests, sampling)
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(active=len(requests), new_tokens=sum(len(r.token_ids) for r in results))
        return results

    def release(self) -> None:
        r"""Forward to the engine and close the bar."""
        self._engine.release()
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class ArpoTrainer(GRPOTrainer):
    r"""GRPO trainer whose generation is the ARPO/AEPO tool rollout and whose loss is the spec's policy loss.

    Batch geometry (TRL's, in trajectories): a micro-batch holds `per_device_train_batch_size` trajectories per rank;
    an optimiser update takes `gradient_accumulation_steps` micro-batches on every rank; one rollout of
    `arpo_rollout_batch_size` prompts x M trajectories feeds `steps_per_generation` micro-steps
    (`build_grpo_config`).

    Group-to-rank scheme (spec section 3.4: all M trajectories of a prompt are decided together): TRL's sampler spreads
    the M copies of a prompt over consecutive rows that may live on several ranks. At each rollout every rank gathers
    the generation batch's rows (`gather_object`), cuts them into whole groups of M identical prompts, takes the groups
    `g` with `g % world_size == rank`, rolls them out and scores them, then all ranks gather every trajectory back and
    order them by group. Advantages are computed on the whole batch; micro-batch k = (update u, accumulation step a) of
    rank r then takes global rows `u*U + r*A*b + a*b ... + b` (U = trajectories per update, A = accumulation steps,
    b = per-device batch), so each update is a contiguous run of whole groups when U is a multiple of M.

    Args:
        model: The policy (LLaMA-Factory's `load_model` result: full, freeze, LoRA, quantised).
        args: `GRPOConfig` from `build_grpo_config`.
        rollout: `llamafactory_agentic.rollout.AgenticRollout` (its `engine` is an hf or vllm engine).
        reward_fn: A `RewardFunction`; a plain `fn(model_text, ground_truth, metadata) -> float` is wrapped in
            `CallableReward` (format ok = score > -1, correctness = clip(score, 0, 1)).
        loss_config: `ArpoLossConfig`.
        processing_class: The tokenizer.
        train_dataset / eval_dataset: Rows with `prompt_ids` (or `input_ids`), `_ground_truth`, `_data_source`,
            `_ability` columns (`llamafactory_agentic.data.load_rl_dataset`).
        executor: The tool executor, for `tools/...` metrics (optional).
        ref_model: Reference model for the KL term (only used when `rl_kl_coef > 0`; None with LoRA = adapter off).
        callbacks: LLaMA-Factory's callbacks.
    """

    _tag_names = ["trl", "grpo", "arpo", "llamafactory-agentic"]

    def __init__(
        self,
        model: Any,
        args: GRPOConfig,
        rollout: Any,
        reward_fn: Callable[[str, Any, dict], float],
        loss_config: ArpoLossConfig,
        processing_class: Any,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        executor: Any = None,
        ref_model: Any = None,
        callbacks: list[TrainerCallback] | None = None,
        optimizers: tuple = (None, None),
    ):
        r"""Build the trainer (see the class docstring for the arguments).

        Raises:
            ValueError: `rl_kl_coef > 0` without a reference model and without a LoRA adapter to disable;
                `ds3_gather_for_generation=False` with the hf rollout backend.
        """
        backend = getattr(getattr(rollout, "config", None), "backend", "hf")
        if backend == "hf" and not getattr(args, "ds3_gather_for_generation", True):
            raise ValueError(
                "ds3_gather_for_generation: false is not supported with arpo_rollout_backend: hf: ranks decode "
                "different numbers of tokens, so ZeRO-3's per-layer parameter gathers would not match across ranks "
                "and training would hang. Keep ds3_gather_for_generation: true (the default) or use the vllm backend."
            )
        self.rollout = rollout
        if not isinstance(reward_fn, RewardFunction):  # a plain `fn(text, ground_truth, metadata) -> float`
            reward_fn = CallableReward(reward_fn, getattr(reward_fn, "__name__", "reward"))
        self.reward_fn = reward_fn
        self.loss_config = loss_config
        self.executor = executor
        self._time_accum: dict[str, float] = defaultdict(float)
        self._rollout_rng = random.Random(args.seed)
        self._rollout_count = 0
        self._eval_records: dict[Any, dict] = {}  # validation records by dataset row (see `prediction_step`)
        self._eval_tool_shards: list[dict[str, float]] = []  # executor metrics popped during validation

        if not hasattr(model, "warnings_issued"):  # Transformers 5 dropped it; TRL 0.24 still writes to it
            model.warnings_issued = {}
        kl_coef = args.beta
        args.beta = 0.0  # keep TRL from building its own reference model; ours comes from LLaMA-Factory
        try:
            super().__init__(
                model=model,
                reward_funcs=[_reward_name_holder],
                args=args,
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                processing_class=processing_class,
                callbacks=callbacks,
                optimizers=optimizers,
            )
        finally:
            args.beta = kl_coef

        self.beta = kl_coef
        self.ref_model = None
        if kl_coef != 0.0 and ref_model is not None:
            if self.is_deepspeed_enabled:
                self.ref_model = prepare_deepspeed(ref_model, self.accelerator)
            else:
                self.ref_model = self.accelerator.prepare_model(ref_model, evaluation_mode=True)
        elif kl_coef != 0.0 and not hasattr(self.accelerator.unwrap_model(self.model), "disable_adapter"):
            raise ValueError("rl_kl_coef > 0 needs a reference model (or a LoRA adapter that can be disabled).")

        engine = getattr(rollout, "engine", None)
        if engine is not None and hasattr(engine, "generate") and not isinstance(engine, RolloutProgress):
            rollout.engine = RolloutProgress(engine, enabled=self.accelerator.is_main_process)
        eos = processing_class.eos_token_id
        self._eos_ids = eos
        self._rollout_log_path = os.path.join(args.output_dir, ROLLOUT_LOG_NAME)

    # ------------------------------------------------------------------------------------------------ data plumbing
    @staticmethod
    def _prompt_ids(row: dict[str, Any]) -> list[int]:
        for key in ("prompt_ids", "input_ids"):
            if key in row and row[key] is not None:
                return list(row[key])
        raise KeyError(f"dataset row has no `prompt_ids`/`input_ids` column (columns: {sorted(row)})")

    @staticmethod
    def _metadata(row: dict[str, Any]) -> dict[str, Any]:
        return {
            "data_source": row.get("_data_source"),
            "ability": row.get("_ability"),
            "extra": row.get("_extra"),
        }

    def _get_eval_sampler(self, eval_dataset) -> torch.utils.data.Sampler:
        r"""Validation: every prompt once, in order (one greedy trajectory each)."""
        return SequentialSampler(eval_dataset)

    def get_eval_dataloader(self, eval_dataset=None):
        r"""Cap validation at `arpo_val_max_samples` prompts (first rows) and number the rows (`_eval_index`).

        The index lets `prediction_step` drop the prompts Accelerate repeats to even out the last batch over ranks.
        """
        if isinstance(eval_dataset, str):
            eval_dataset = self.eval_dataset[eval_dataset]
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        limit = self.loss_config.val_max_samples
        if limit is not None and dataset is not None and not isinstance(dataset, dict) and len(dataset) > limit:
            dataset = dataset.select(range(limit))
        column_names = getattr(dataset, "column_names", None)
        if isinstance(column_names, list) and EVAL_INDEX not in column_names and hasattr(dataset, "add_column"):
            dataset = dataset.add_column(EVAL_INDEX, list(range(len(dataset))))
        return super().get_eval_dataloader(dataset)

    # ------------------------------------------------------------------------------------------------ rollout
    def _rollout_call(self, prompts: list[list[int]], training: bool) -> Any:
        r"""One call of the rollout with up-to-date weights in its engine; every rank must call it (collectives).

        hf engine: `engine.set_model(unwrapped model)` inside TRL's `unwrap_model_for_generation` (ZeRO-3 gathers
        the parameters, a collective), model in eval mode (no gradient checkpointing during decoding). vllm engine:
        the weights are pushed with `engine.set_model(unwrapped model)` once per optimiser step (under ZeRO-3 the
        engine gathers the parameters module by module). A rank without prompts still enters the same collectives and returns None.
        """
        engine = getattr(self.rollout, "engine", None)
        backend = getattr(getattr(self.rollout, "config", None), "backend", "hf")
        if backend == "hf":
            # ds3_gather_for_generation=False is refused in __init__: the parameters are always gathered
            with unwrap_model_for_generation(
                self.model_wrapped, self.accelerator, gather_deepspeed3_params=True
            ) as unwrapped:
                was_training = unwrapped.training
                unwrapped.eval()
                try:
                    if not prompts:
                        return None
                    if engine is not None:
                        engine.set_model(unwrapped)
                    with torch.no_grad():
                        return self.rollout.rollout(prompts, training=training)
                finally:
                    unwrapped.train(was_training)

        step = self.state.global_step
        if engine is not None and getattr(self, "_last_synced_step", None) != step:
            # push the weights once per optimiser step; under ZeRO-3 the engine gathers one module at a time
            # (rollout.weight_sync), so the whole model is never materialised on one GPU for the copy
            with unwrap_model_for_generation(
                self.model_wrapped, self.accelerator, gather_deepspeed3_params=False
            ) as unwrapped:
                engine.set_model(unwrapped)
            self._last_synced_step = step
        return self.rollout.rollout(prompts, training=training) if prompts else None

    def _score(self, trajectory: Any, row: dict[str, Any]) -> tuple[float, float, bool]:
        r"""(reward, accuracy, format ok) of one trajectory on its model view (spec section 6).

        Accuracy is `correctness == 1` of the reward's `RewardResult` (exact answer after normalisation, or math
        equivalence; for a user function `score >= 1`, see `CallableReward`).
        """
        text = build_model_view(
            self.processing_class, list(trajectory.response_ids), list(trajectory.loss_mask), self._eos_ids
        )
        result = self.reward_fn.compute(text, row.get("_ground_truth"), self._metadata(row))
        return float(result.score), float(result.correctness >= 1.0), bool(result.format_ok)

    @staticmethod
    def _branch_call_index(trajectory: Any) -> int | None:
        r"""Number of tool calls the source had made when this branch was copied (None for a global rollout)."""
        if trajectory.parent is None:
            return None
        inherited = 0
        for call in trajectory.tool_calls or []:
            pos = call.get("end_pos", call.get("pos")) if isinstance(call, dict) else None
            if pos is not None and pos <= trajectory.branch_pos:
                inherited += 1
        return inherited

    def _records_from_output(self, output: Any, rows: list[dict[str, Any]], group_ids: list[int]) -> list[dict]:
        records = []
        for group, row, gid in zip(output.groups, rows, group_ids):
            for member, traj in enumerate(group):
                reward, accuracy, format_ok = self._score(traj, row)
                records.append(
                    {
                        "group": gid,
                        "member": member,
                        "prompt_ids": list(traj.prompt_ids),
                        "response_ids": list(traj.response_ids),
                        "loss_mask": list(traj.loss_mask),
                        "parent": traj.parent,
                        "branch_pos": traj.branch_pos,
                        "is_fill": bool(getattr(traj, "is_fill", False)),
                        "num_tool_calls": int(traj.num_tool_calls),
                        "hit_call_limit": bool(traj.hit_call_limit),
                        "truncated": bool(traj.truncated),
                        "finish_reason": traj.finish_reason,
                        "tool_calls": list(traj.tool_calls or []),
                        "branch_call_index": self._branch_call_index(traj),
                        "reward": reward,
                        "accuracy": accuracy,
                        "format_ok": format_ok,
                    }
                )
        return records

    def _rollout_groups(self, group_rows: list[dict[str, Any]], training: bool) -> tuple[list[dict], dict, dict]:
        r"""Roll out this rank's share of whole groups, score them, and gather every trajectory on every rank.

        Args:
            group_rows: One dataset row per group of the generation batch (same list on every rank).
            training: Training rollout (M trajectories, branching) or validation (1, greedy).

        Returns:
            `(records sorted by (group, member), rollout metrics, timing)`; metrics and timing already combined over
            ranks (metrics: mean over ranks weighted by groups; timing: max over ranks, the critical path).
        """
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        mine = [g for g in range(len(group_rows)) if g % world == rank]
        t0 = time.perf_counter()
        # every rank calls the rollout, even without groups: it enters collectives (ZeRO-3 gathers, weight sync)
        output = self._rollout_call([self._prompt_ids(group_rows[g]) for g in mine], training=training)
        if mine:
            expected = self.num_generations if training else 1
            if len(output.groups) != len(mine) or any(len(g) != expected for g in output.groups):
                raise RuntimeError(
                    f"rollout returned {[len(g) for g in output.groups]} trajectories for {len(mine)} prompts; "
                    f"expected exactly {expected} each."
                )
            metrics, timing = dict(output.metrics), dict(output.timing)
        else:
            output, metrics, timing = None, {}, {}
        timing["time/rollout"] = time.perf_counter() - t0

        t1 = time.perf_counter()
        records = self._records_from_output(output, [group_rows[g] for g in mine], mine) if mine else []
        timing["time/reward"] = time.perf_counter() - t1

        tool_metrics = self.executor.pop_metrics() if self.executor is not None else {}
        if world > 1:
            records = gather_object(records)
            shards = gather_object([(len(mine), metrics, timing, tool_metrics)])
        else:
            shards = [(len(mine), metrics, timing, tool_metrics)]
        records.sort(key=lambda r: (r["group"], r["member"]))
        return records, *_combine_shards(shards)

    # ------------------------------------------------------------------------------------------------ training batch
    def _prepare_inputs(self, generation_batch: Any) -> dict[str, Any]:
        r"""Serve the buffered micro-batches of the current rollout, rolling out anew every `steps_per_generation`.

        Overrides TRL: no shuffling (spec section 4) and micro-batches laid out per update (see class docstring).
        """
        if not self.model.training:
            return generation_batch  # evaluation goes through `prediction_step`
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            self._buffered_inputs = self._generate_and_score_completions(generation_batch)
        inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]
        self._step += 1
        return inputs

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        r"""Rollout, rewards, advantages and log-probs for one generation batch; returns this rank's micro-batches.

        Args:
            inputs: This rank's rows of the generation batch (TRL layout: each prompt repeated M times).

        Returns:
            `steps_per_generation` micro-batch dicts with `prompt_ids`/`prompt_mask` `[b, P]` (left-padded),
            `completion_ids`/`completion_mask` `[b, C]` (attention, observations included), `loss_mask` `[b, C]`,
            `advantages` `[b, C]`, `num_items_in_batch` (loss-mask tokens of the whole optimiser update, all ranks),
            and `old_per_token_logps` / `ref_per_token_logps` `[b, C]` when needed.
        """
        step_start = time.perf_counter()
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        rows = gather_object(list(inputs)) if world > 1 else list(inputs)
        group_size = self.num_generations
        if len(rows) % group_size:
            raise RuntimeError(f"generation batch of {len(rows)} rows is not whole groups of {group_size}.")
        group_rows = []
        for start in range(0, len(rows), group_size):
            chunk = rows[start : start + group_size]
            key = self._prompt_ids(chunk[0])
            if any(self._prompt_ids(r) != key for r in chunk[1:]):
                raise RuntimeError("TRL's sampler did not place the M copies of a prompt in consecutive rows.")
            group_rows.append(chunk[0])

        records, metrics, timing = self._rollout_groups(group_rows, training=True)

        t_adv = time.perf_counter()
        token_adv, loss_masks = self._advantages(records)
        for rec, adv, mask in zip(records, token_adv, loss_masks):
            rec["token_advantages"], rec["loss_mask_train"] = adv, mask

        # layout: update-major, then rank, then accumulation step (see class docstring)
        b = self.args.per_device_train_batch_size
        accum = self.args.gradient_accumulation_steps
        per_update = b * accum * world
        spg = self.args.steps_per_generation
        if len(records) != per_update * (spg // accum):
            raise RuntimeError(f"{len(records)} trajectories do not fill {spg // accum} updates of {per_update}.")
        micro_batches = []
        for k in range(spg):
            u, a = divmod(k, accum)
            start = u * per_update + rank * accum * b + a * b
            update_records = records[u * per_update : (u + 1) * per_update]
            num_tokens = sum(sum(r["loss_mask_train"]) for r in update_records)
            micro_batches.append(self._collate(records[start : start + b], num_tokens))

        self._add_log_probs(micro_batches)
        timing["time/advantage_and_logprobs"] = time.perf_counter() - t_adv
        timing["time/step_rollout_total"] = time.perf_counter() - step_start

        self._log_rollout(records, metrics, timing, mode="train")
        self._write_rollout_log(records, group_rows)
        self._rollout_count += 1
        self._time_accum["rollout_inside_step"] = time.perf_counter() - step_start
        return micro_batches

    def _advantages(self, records: list[dict]) -> tuple[list[list[float]], list[list[int]]]:
        r"""Token advantages and loss masks (soft or hard attribution, spec section 4) for all records."""
        if not records:
            return [], []
        lengths = [len(r["response_ids"]) for r in records]
        width = max(max(lengths), 1)
        mask = torch.zeros(len(records), width, dtype=torch.long)
        for i, r in enumerate(records):
            if lengths[i]:
                mask[i, : lengths[i]] = torch.tensor(r["loss_mask"], dtype=torch.long)
        estimator = get_advantage_estimator(self.loss_config.attribution)
        token_adv, new_mask = estimator(
            torch.tensor([r["reward"] for r in records], dtype=torch.float32),
            torch.tensor([r["group"] for r in records], dtype=torch.long),
            mask,
            parents=[r["parent"] for r in records],
            branch_pos=[r["branch_pos"] for r in records],
            lengths=lengths,
            dedup=self.loss_config.hard_dedup,
        )
        advs = [token_adv[i, : lengths[i]].tolist() for i in range(len(records))]
        masks = [new_mask[i, : lengths[i]].tolist() for i in range(len(records))]
        return advs, masks

    def _collate(self, records: list[dict], num_tokens: int) -> dict[str, Any]:
        device = self.accelerator.device
        prompt = [torch.tensor(r["prompt_ids"], dtype=torch.long, device=device) for r in records]
        response = [
            torch.tensor(r["response_ids"] or [self.pad_token_id], dtype=torch.long, device=device) for r in records
        ]
        attn = [torch.ones(len(r["response_ids"]) or 1, dtype=torch.long, device=device) for r in records]
        if any(not r["response_ids"] for r in records):
            attn = [a * (1 if r["response_ids"] else 0) for a, r in zip(attn, records)]
        loss_mask = [torch.tensor(r["loss_mask_train"] or [0], dtype=torch.long, device=device) for r in records]
        adv = [torch.tensor(r["token_advantages"] or [0.0], dtype=torch.float32, device=device) for r in records]
        return {
            "prompt_ids": pad(prompt, padding_value=self.pad_token_id, padding_side="left"),
            "prompt_mask": pad([torch.ones_like(p) for p in prompt], padding_value=0, padding_side="left"),
            "completion_ids": pad(response, padding_value=self.pad_token_id, padding_side="right"),
            "completion_mask": pad(attn, padding_value=0, padding_side="right"),
            "loss_mask": pad(loss_mask, padding_value=0, padding_side="right"),
            "advantages": pad(adv, padding_value=0.0, padding_side="right"),
            "num_items_in_batch": torch.tensor(float(max(num_tokens, 1)), device=device),
        }

    @torch.no_grad()
    def _add_log_probs(self, micro_batches: list[dict[str, Any]]) -> None:
        r"""Old log-probs (when an update after the first uses the rollout) and reference log-probs (KL > 0)."""
        generate_every = self.args.steps_per_generation * self.num_iterations
        need_old = self.args.gradient_accumulation_steps % generate_every != 0
        for batch in micro_batches:
            input_ids, attention_mask, width = _concat(batch)
            if need_old:
                batch["old_per_token_logps"] = self._policy_forward(self.model, input_ids, attention_mask, width)[0]
            if self.beta != 0.0:
                if self.ref_model is not None:
                    ref = self._policy_forward(self.ref_model, input_ids, attention_mask, width)[0]
                else:
                    with self.accelerator.unwrap_model(self.model).disable_adapter():
                        ref = self._policy_forward(self.model, input_ids, attention_mask, width)[0]
                batch["ref_per_token_logps"] = ref

    def _policy_forward(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        with_entropy: bool = False,
        entropy_grad: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""Per-token log-probs `[b, C]` of the response tokens and, optionally, full-vocabulary entropy `[b, C]`.

        Logits are divided by the rollout temperature (spec section 5.4). Position ids follow the attention mask, so
        left padding of the prompt does not shift positions. The entropy is computed in chunks of positions
        (`entropy_from_logits_chunked`): with `entropy_grad` (entropy bonus, `rl_entropy_coef > 0`) it is
        differentiable, otherwise (the `loss/entropy` metric, AEPO's entropy-aware advantage and `high_entropy` clip
        scope, which use it detached) it runs under `torch.no_grad()` and keeps no graph.
        """
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, "use_cache": False}
        if "position_ids" in self.model_kwarg_keys:
            kwargs["position_ids"] = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        if "logits_to_keep" in self.model_kwarg_keys:
            kwargs["logits_to_keep"] = logits_to_keep + 1
        logits = model(**kwargs).logits[:, :-1, :][:, -logits_to_keep:, :] / self.temperature
        logps = selective_log_softmax(logits, input_ids[:, -logits_to_keep:])
        entropy = None
        if with_entropy:
            if entropy_grad:
                entropy = entropy_from_logits_chunked(logits)
            else:
                with torch.no_grad():
                    entropy = entropy_from_logits_chunked(logits.detach())
        return logps, entropy

    # ------------------------------------------------------------------------------------------------ loss
    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        r"""Policy loss (+ KL, - entropy bonus) of one micro-batch, normalised by the update's global token count.

        The returned value is `sum(mask * L) * world_size / N_update`: summed over the accumulation steps and averaged
        over ranks by DDP/DeepSpeed it gives the token mean over every loss-mask token of the optimiser update (spec
        section 4, Decision). The loss mask gates the policy-gradient, KL and entropy terms and every normaliser; the
        attention mask (observations included) only feeds the forward pass.
        """
        cfg = self.loss_config
        input_ids, attention_mask, width = _concat(inputs)
        logps, entropy = self._policy_forward(
            model, input_ids, attention_mask, width, with_entropy=True, entropy_grad=cfg.entropy_coef != 0.0
        )
        mask = inputs["loss_mask"].to(logps.dtype)
        mask_bool = mask.bool()
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        entropy_detached = entropy.detach()

        advantages = inputs["advantages"]
        if cfg.entropy_advantage:
            advantages = entropy_aware_advantages(advantages, entropy_detached, mask, cfg.entropy_advantage_coef)
        clip_mask = None
        if cfg.balanced_clip and cfg.balanced_clip_scope == "high_entropy":
            clip_mask = high_entropy_mask(entropy_detached, mask, cfg.high_entropy_z)

        world = self.accelerator.num_processes
        normaliser = inputs["num_items_in_batch"].to(logps.device, torch.float32) / world
        loss, pg_metrics = compute_policy_loss(
            logps,
            old,
            advantages,
            mask,
            epsilon_low=cfg.epsilon_low,
            epsilon_high=cfg.epsilon_high,
            dual_clip=cfg.dual_clip,
            balanced_clip=cfg.balanced_clip,
            balanced_clip_mask=clip_mask,
            num_tokens=normaliser,
        )
        kl_metric = entropy_bonus_metric = None  # local token means of this micro-batch (for the logs only)
        if self.beta != 0.0:
            kl = low_var_kl(logps, inputs["ref_per_token_logps"])
            loss = loss + self.beta * masked_mean(kl, mask, normaliser)
            kl_metric = masked_mean(kl.detach(), mask)
        if cfg.entropy_coef != 0.0:
            loss = loss - cfg.entropy_coef * masked_mean(entropy, mask, normaliser)
            entropy_bonus_metric = masked_mean(entropy_detached, mask)

        self._log_loss_metrics(pg_metrics, entropy_detached, mask_bool, kl_metric, entropy_bonus_metric, clip_mask)
        return loss

    def _log_loss_metrics(self, pg_metrics, entropy, mask, kl_value, entropy_value, clip_mask) -> None:
        r"""Append this micro-batch's loss metrics to `self._metrics`, token-weighted over ranks.

        `kl_value` and `entropy_value` are local token means without gradient, like every other metric here.
        """
        mode = "train" if self.model.training else "eval"
        count = float(mask.sum().item())
        trained = entropy[mask].float()
        local = {
            "loss/clip_frac": pg_metrics.get("loss/clip_frac", 0.0),
            "loss/clip_frac_upper": pg_metrics.get("loss/clip_frac_upper", 0.0),
            "loss/clip_frac_lower": pg_metrics.get("loss/clip_frac_lower", 0.0),
            "loss/dual_clip_frac": pg_metrics.get("loss/dual_clip_frac", 0.0),
            "loss/approx_kl": pg_metrics.get("loss/approx_kl", 0.0),
            "loss/ratio_mean": pg_metrics.get("loss/ratio_mean", 0.0),
            "loss/entropy": float(trained.mean().item()) if count else 0.0,
            "aepo/grad_preserved_frac": pg_metrics.get("loss/balanced_clip_frac", 0.0),
            "aepo/trained_entropy_std": float(trained.std().item()) if count > 1 else 0.0,
            "aepo/trained_entropy_p90": float(torch.quantile(trained, 0.9).item()) if count else 0.0,
            "aepo/trained_entropy_max": float(trained.max().item()) if count else 0.0,
        }
        if clip_mask is not None:
            local["aepo/high_entropy_token_frac"] = float(clip_mask.sum().item()) / max(count, 1.0)
        if kl_value is not None:
            local["loss/kl"] = float(kl_value.item())
        if entropy_value is not None:
            local["loss/entropy_bonus_term"] = float(entropy_value.item())
        keys = sorted(local)
        # token-weighted mean over ranks in one collective
        values = torch.tensor([local[k] * count for k in keys] + [count], device=self.accelerator.device)
        if self.accelerator.num_processes > 1:
            values = self.accelerator.reduce(values, reduction="sum")
        total = max(float(values[-1].item()), 1.0)
        for i, key in enumerate(keys):
            self._metrics[mode][key].append(float(values[i].item()) / total)
        self._metrics[mode]["loss/trained_tokens"].append(float(values[-1].item()))

    # ------------------------------------------------------------------------------------------------ validation
    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        r"""Greedy validation rollout of this rank's prompts (one trajectory each, no branching, no pre-monitoring).

        Every rank calls it the same number of times (Accelerate's `even_batches`), so the gathers below match.
        Per-prompt records are gathered over ranks and kept by dataset row (`_eval_index`, added by
        `get_eval_dataloader`), so prompts that `even_batches` repeats on several ranks are counted once in
        `eval_reward/*` and `eval_rollout/*`; rows without the index (an eval dataset that is not a
        `datasets.Dataset`) cannot be told apart and repeated prompts then count twice. The tool executor's metrics
        are popped here (so validation calls never reach the next training step's `tools/*`) and reported as
        `eval_tools/*` by `evaluation_loop`; they count the repeated prompts' tool calls too. No loss is returned.
        """
        rows = list(inputs)
        t0 = time.perf_counter()
        output = self._rollout_call([self._prompt_ids(r) for r in rows], training=False)
        records = self._records_from_output(output, rows, list(range(len(rows)))) if output is not None else []
        for rec in records:
            rec["eval_index"] = rows[rec["group"]].get(EVAL_INDEX)
        timing = dict(output.timing) if output is not None else {}
        timing["time/rollout"] = time.perf_counter() - t0
        tool_metrics = self.executor.pop_metrics() if self.executor is not None else {}
        if self.accelerator.num_processes > 1:
            records = gather_object(records)
            tool_shards = gather_object([tool_metrics])
        else:
            tool_shards = [tool_metrics]
        for rec in records:
            key = rec["eval_index"] if rec["eval_index"] is not None else ("unindexed", len(self._eval_records))
            self._eval_records.setdefault(key, rec)
        self._eval_tool_shards.extend(shard for shard in tool_shards if shard)
        for key, value in timing.items():
            self._metrics["eval"][key].append(value)
        return None, None, None

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        r"""Transformers' loop, plus the validation metrics of `prediction_step` in the returned (and logged) metrics.

        Per prompt (each dataset row once): `reward` (= `reward/mean`), `reward/std`, `reward/accuracy`,
        `rollout/tool_calls_per_traj`, `rollout/response_tokens`, `rollout/call_limit_hit_rate`; per batch: the
        rollout timings; for the whole pass: `tools/*` (counters summed, rates and latencies averaged), all prefixed
        with `metric_key_prefix`.
        """
        self._eval_records, self._eval_tool_shards = {}, []
        try:
            output = super().evaluation_loop(
                dataloader,
                description,
                prediction_loss_only,
                ignore_keys=ignore_keys,
                metric_key_prefix=metric_key_prefix,
            )
            records = list(self._eval_records.values())
            tool_metrics = _combine_tool_metrics(self._eval_tool_shards)
        finally:
            self._eval_records, self._eval_tool_shards = {}, []
        values = self._metrics["eval"]
        for rec in records:
            values["reward/mean"].append(rec["reward"])
            values["reward/accuracy"].append(rec["accuracy"])
            values["rollout/tool_calls_per_traj"].append(rec["num_tool_calls"])
            values["rollout/response_tokens"].append(len(rec["response_ids"]))
            values["rollout/call_limit_hit_rate"].append(float(rec["hit_call_limit"]))
        rewards = values.get("reward/mean", [])
        if len(rewards) > 1:
            output.metrics[f"{metric_key_prefix}_reward/std"] = float(torch.tensor(rewards, dtype=torch.float64).std())
        for key, items in values.items():
            if items:
                output.metrics[f"{metric_key_prefix}_{key}"] = sum(items) / len(items)
        for key, value in tool_metrics.items():
            output.metrics[f"{metric_key_prefix}_{key}"] = value
        if rewards:
            output.metrics[f"{metric_key_prefix}_reward"] = output.metrics[f"{metric_key_prefix}_reward/mean"]
        values.clear()
        return output

    # ------------------------------------------------------------------------------------------------ observability
    def _save_rng_state(self, output_dir: str) -> None:
        r"""Transformers' RNG states plus the rollout's own generators (`rollout_rng_state_<rank>.json`).

        The branching draws (`AgenticRollout.rng`), the hf engine's sampling generator (CPU / eager decoding; CUDA
        graphs use the default CUDA generator that Transformers already saves) and the rollouts.jsonl sampler live
        outside the global RNGs, so a resumed run would otherwise replay the draws of step 0.
        """
        super()._save_rng_state(output_dir)
        state = rollout_rng_state(self.rollout, self._rollout_rng)
        with open(os.path.join(output_dir, f"rollout_rng_state_{self.args.process_index}.json"), "w") as f:
            json.dump(state, f)

    def _load_rng_state(self, checkpoint: str | None) -> None:
        r"""Restore what `_save_rng_state` wrote (a checkpoint without the rollout file is resumed with a warning)."""
        super()._load_rng_state(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, f"rollout_rng_state_{self.args.process_index}.json")
        if not os.path.isfile(path):
            print(f"[agentic-rl] {path} not found: the rollout's random draws restart from the seed")
            return
        with open(path) as f:
            set_rollout_rng_state(self.rollout, self._rollout_rng, json.load(f))

    def training_step(self, model, inputs, num_items_in_batch=None):
        r"""TRL/Transformers' micro-step, timed: `time/training` = forward/backward seconds per optimiser update.

        The rollout runs inside the first micro-step of each generation batch (`_prepare_inputs`); its time is
        subtracted here and reported as `time/rollout`, `time/generation`, `time/tools`, `time/reward`, ...
        """
        start = time.perf_counter()
        loss = super().training_step(model, inputs, num_items_in_batch)
        # the rollout happens inside super().training_step (in _prepare_inputs); it records its own time
        elapsed = time.perf_counter() - start - self._time_accum.pop("rollout_inside_step", 0.0)
        self._time_accum["training"] += elapsed
        if self._step % self.args.gradient_accumulation_steps == 0:
            self._metrics["train"]["time/training"].append(self._time_accum.pop("training"))
        return loss

    def _log_rollout(self, records: list[dict], metrics: dict, timing: dict, mode: str) -> None:
        out = self._metrics[mode]
        rewards = torch.tensor([r["reward"] for r in records], dtype=torch.float64)
        groups = defaultdict(list)
        for r in records:
            groups[r["group"]].append(r)
        n = max(len(records), 1)
        num_groups = max(len(groups), 1)
        out["reward"].append(float(rewards.mean()))
        out["reward/mean"].append(float(rewards.mean()))
        out["reward/std"].append(float(rewards.std()) if len(records) > 1 else 0.0)
        out["reward/accuracy"].append(sum(r["accuracy"] for r in records) / n)
        out["reward/format_ok_rate"].append(sum(r["format_ok"] for r in records) / n)
        out["reward/identical_groups"].append(
            sum(1 for g in groups.values() if len({x["reward"] for x in g}) == 1) / num_groups
        )
        trained = sum(sum(r["loss_mask"]) for r in records)
        total = sum(len(r["response_ids"]) for r in records)
        out["rollout/tool_calls_per_traj"].append(sum(r["num_tool_calls"] for r in records) / n)
        out["rollout/call_limit_hits"].append(float(sum(r["hit_call_limit"] for r in records)))
        out["rollout/call_limit_hit_rate"].append(sum(r["hit_call_limit"] for r in records) / n)
        out["rollout/truncated_rate"].append(sum(r["truncated"] for r in records) / n)
        out["rollout/trained_tokens"].append(float(trained))  # loss-mask 1 over all rows (shared prefixes d times)
        out["rollout/observation_tokens"].append(float(total - trained))  # loss-mask 0 (observations)
        out["rollout/response_length"].append(total / n)
        branches = [r for r in records if r["parent"] is not None]
        out["rollout/branches"].append(float(len(branches)))
        out["rollout/branches_per_group"].append(len(branches) / num_groups)
        consecutive, longest = consecutive_branch_stats(records)
        out["rollout/consecutive_branches"].append(float(consecutive))
        out["rollout/longest_branch_chain"].append(sum(longest.values()) / num_groups)
        out["aepo/global_samples_per_group"].append((len(records) - len(branches)) / num_groups)
        out["aepo/branch_samples_per_group"].append(len(branches) / num_groups)
        out["rollout/fills_per_group"].append(sum(r["is_fill"] for r in records) / num_groups)
        for reason in ("eos", "length", "call_limit"):
            out[f"rollout/finish_{reason}_rate"].append(sum(r["finish_reason"] == reason for r in records) / n)
        for key, value in metrics.items():
            if key not in out or not out[key]:  # values computed above from all ranks' trajectories win
                out[key].append(float(value))
        for source, alias in _ALIASES.items():
            if source in metrics:
                out[alias].append(float(metrics[source]))
        for key, value in timing.items():
            out[key].append(float(value))

        sampled = metrics.get("rollout/generated_tokens")
        if sampled is not None and timing.get("time/generation"):
            out["perf/generated_tokens_per_s"].append(float(sampled) / max(float(timing["time/generation"]), 1e-9))
        if torch.cuda.is_available():
            out["perf/peak_gpu_memory_gib"].append(torch.cuda.max_memory_allocated() / 2**30)

    def _write_rollout_log(self, records: list[dict], group_rows: list[dict]) -> None:
        r"""Append a sampled share (`arpo_rollout_log_ratio`) of groups, with their branch tree, to rollouts.jsonl."""
        ratio = self.loss_config.rollout_log_ratio
        if ratio <= 0 or not self.accelerator.is_main_process:
            return
        by_group = defaultdict(list)
        for r in records:
            by_group[r["group"]].append(r)
        chosen = [g for g in sorted(by_group) if self._rollout_rng.random() < ratio]
        if not chosen:
            return
        tok = self.processing_class
        os.makedirs(os.path.dirname(self._rollout_log_path) or ".", exist_ok=True)
        with open(self._rollout_log_path, "a", encoding="utf-8") as f:
            for g in chosen:
                row = group_rows[g]
                members = []
                for r in by_group[g]:
                    members.append(
                        {
                            "member": r["member"],
                            "parent": r["parent"],
                            "branch_pos": r["branch_pos"],
                            "branch_call_index": r["branch_call_index"],
                            "is_fill": r["is_fill"],
                            "response": tok.decode(r["response_ids"], skip_special_tokens=False),
                            "response_ids": r["response_ids"],
                            "observation_spans": _zero_spans(r["loss_mask"]),
                            "reward": r["reward"],
                            "accuracy": r["accuracy"],
                            "advantage": _trained_mean(r["token_advantages"], r["loss_mask_train"]),
                            "num_tool_calls": r["num_tool_calls"],
                            "tool_calls": r["tool_calls"],
                            "finish_reason": r["finish_reason"],
                            "hit_call_limit": r["hit_call_limit"],
                            "truncated": r["truncated"],
                        }
                    )
                record = {
                    "global_step": self.state.global_step,
                    "rollout": self._rollout_count,
                    "group": g,
                    "prompt": tok.decode(self._prompt_ids(row), skip_special_tokens=False),
                    "ground_truth": row.get("_ground_truth"),
                    "data_source": row.get("_data_source"),
                    "trajectories": members,
                }
                f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")


def _reward_name_holder(*args, **kwargs):
    r"""Placeholder for TRL's `reward_funcs` argument; rewards are computed by `ArpoTrainer._score`."""
    raise RuntimeError("ArpoTrainer computes rewards itself; TRL's reward path must not be used.")


_reward_name_holder.__name__ = "agentic_reward"


def _concat(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, int]:
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    return input_ids, attention_mask, batch["completion_ids"].size(1)


def consecutive_branch_stats(records: list[dict]) -> tuple[int, dict[Any, int]]:
    r"""Consecutive branches of a rollout, read from the branch trees (independent of the penalty's scope).

    A branch is consecutive when its source is itself a branch created at the previous tool call of the same lineage
    (`branch_call_index` one lower): the chains of branching at successive tool calls that AEPO's penalty targets
    (arXiv 2510.14545 section 3). The chain length of a branch is 1 plus its source's when consecutive, else 1.

    Args:
        records: Trajectory records with `group`, `member`, `parent` (member index of the source, None for a global
            rollout) and `branch_call_index`.

    Returns:
        `(number of consecutive branches, {group: longest chain of branches, 0 without branches})`.
    """
    by_key = {(r["group"], r["member"]): r for r in records}
    chain: dict[tuple, int] = {}
    consecutive = 0
    longest: dict[Any, int] = {r["group"]: 0 for r in records}
    for r in sorted(records, key=lambda r: (r["group"], r["member"])):  # a source precedes its branches
        if r["parent"] is None:
            continue
        source = by_key.get((r["group"], r["parent"]))
        linked = (
            source is not None
            and source["parent"] is not None
            and r["branch_call_index"] is not None
            and source["branch_call_index"] is not None
            and r["branch_call_index"] == source["branch_call_index"] + 1
        )
        consecutive += int(linked)
        chain[(r["group"], r["member"])] = chain.get((r["group"], r["parent"]), 0) + 1 if linked else 1
        longest[r["group"]] = max(longest[r["group"]], chain[(r["group"], r["member"])])
    return consecutive, longest


def _trained_mean(values: list[float], mask: list[int]) -> float:
    r"""Mean of `values` over the positions where the loss mask is 1 (0.0 when there are none)."""
    selected = [v for v, m in zip(values, mask) if m]
    return sum(selected) / len(selected) if selected else 0.0


def _zero_spans(mask: list[int]) -> list[list[int]]:
    r"""`[start, end)` token spans where the loss mask is 0 (observations)."""
    spans, start = [], None
    for i, m in enumerate(list(mask) + [1]):
        if m == 0 and start is None:
            start = i
        elif m != 0 and start is not None:
            spans.append([start, i])
            start = None
    return spans


# rollout counters that add up over ranks; every other rollout metric is a mean (weighted by the rank's groups,
# or by its branch decisions for the mean entropy change)
_ROLLOUT_COUNTS = {
    "rollout/trajectories",
    "rollout/branches",
    "rollout/fills",
    "rollout/decisions",
    "rollout/penalised_decisions",
    "rollout/call_limit_hits",
    "rollout/truncations",
    "rollout/empty_calls",
    "rollout/generated_tokens",
    "rollout/masked_tokens",
    "rollout/finish_eos",
}
_ROLLOUT_COUNT_PREFIXES = ("rollout/branch_points/", "rollout/executed_")
_ALIASES = {
    "rollout/penalised_decisions": "aepo/penalised_branch_decisions",
    "rollout/premonitor_global": "aepo/premonitor_global_samples",
    "rollout/premonitor_branch": "aepo/premonitor_branch_samples",
    "rollout/premonitor_h_root": "aepo/premonitor_h_root",
    "rollout/premonitor_h_bar": "aepo/premonitor_h_bar",
    "rollout/mean_delta_h": "rollout/delta_h_mean",
}


def _combine_shards(shards: list[tuple[int, dict, dict, dict]]) -> tuple[dict, dict]:
    r"""Combine per-rank rollout metrics (counts summed, means weighted), timings (max) and tool metrics."""
    metrics: dict[str, float] = {}
    weights = defaultdict(float)
    for n, m, _, _ in shards:
        for k, v in m.items():
            if not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                continue
            if k in _ROLLOUT_COUNTS or k.startswith(_ROLLOUT_COUNT_PREFIXES):
                metrics[k] = metrics.get(k, 0.0) + float(v)
                continue
            w = float(m.get("rollout/decisions", 0.0)) if k == "rollout/mean_delta_h" else float(max(n, 0))
            metrics[k] = metrics.get(k, 0.0) + float(v) * w
            weights[k] += w
    metrics = {k: (v / weights[k] if weights[k] > 0 else 0.0) if k in weights else v for k, v in metrics.items()}
    if metrics.get("rollout/decisions"):
        metrics["rollout/branch_rate"] = metrics.get("rollout/branches", 0.0) / metrics["rollout/decisions"]

    timing: dict[str, float] = {}
    for _, _, t, _ in shards:
        for k, v in t.items():
            timing[k] = max(timing.get(k, 0.0), float(v))

    metrics.update(_combine_tool_metrics([tm for _, _, _, tm in shards]))
    return metrics, timing


def _combine_tool_metrics(shards: list[dict[str, float]]) -> dict[str, float]:
    r"""Combine `ToolExecutor.pop_metrics` results (per rank and/or per batch).

    Rates and latency percentiles are averaged over the shards that report them, counters summed, cache hit rates
    recomputed from the summed hits and misses.
    """
    tools: dict[str, float] = {}
    counts = defaultdict(int)
    for tm in shards:
        for k, v in tm.items():
            tools[k] = tools.get(k, 0.0) + float(v)
            if k.endswith("_rate") or "latency" in k:
                counts[k] += 1
    for k, c in counts.items():
        tools[k] /= c
    for k in list(tools):
        if k.endswith("/cache_hit_rate"):
            base = k[: -len("/cache_hit_rate")]
            lookups = tools.get(base + "/cache_hits", 0.0) + tools.get(base + "/cache_misses", 0.0)
            if lookups:
                tools[k] = tools.get(base + "/cache_hits", 0.0) / lookups
    return tools


def rollout_rng_state(rollout: Any, log_rng: random.Random) -> dict[str, Any]:
    r"""JSON-serialisable states of the rollout's generators: branching (numpy), engine sampling (torch), log sampler.

    Args:
        rollout: An `AgenticRollout` (anything without `rng` / `engine._generator` is skipped).
        log_rng: The trainer's `random.Random` choosing the groups written to rollouts.jsonl.

    Returns:
        `{"branching": ..., "engine": [bytes as ints] | None, "log": ...}`.
    """
    rng = getattr(rollout, "rng", None)
    generator = getattr(getattr(rollout, "engine", None), "_generator", None)
    return {
        "branching": rng.bit_generator.state if rng is not None else None,
        "engine": generator.get_state().tolist() if generator is not None else None,
        "log": [log_rng.getstate()[0], list(log_rng.getstate()[1]), log_rng.getstate()[2]],
    }


def set_rollout_rng_state(rollout: Any, log_rng: random.Random, state: dict[str, Any]) -> None:
    r"""Inverse of `rollout_rng_state`; parts missing on either side are left as they are."""
    rng = getattr(rollout, "rng", None)
    if rng is not None and state.get("branching") is not None:
        rng.bit_generator.state = state["branching"]
    generator = getattr(getattr(rollout, "engine", None), "_generator", None)
    if generator is not None and state.get("engine") is not None:
        generator.set_state(torch.tensor(state["engine"], dtype=torch.uint8))
    if state.get("log") is not None:
        version, internal, gauss = state["log"]
        log_rng.setstate((version, tuple(internal), gauss))

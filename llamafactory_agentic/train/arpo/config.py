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

r"""Building TRL's `GRPOConfig` and the batch geometry of the `arpo`/`aepo` stages, and the trainer's loss keys.

`build_grpo_config` maps LLaMA-Factory's training arguments and the plugin's keys onto TRL's config;
`derive_steps_per_generation` checks that one rollout splits into whole micro-steps and optimiser updates over the
ranks; `check_rl_sampling` refuses greedy decoding for RL training; `ArpoLossConfig` holds the resolved keys the
trainer reads.
"""

from dataclasses import dataclass
from typing import Any

from ...integration.trl_compat import GRPOConfig


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

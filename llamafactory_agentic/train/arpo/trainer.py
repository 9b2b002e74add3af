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

r"""`ArpoTrainer`: ARPO/AEPO training on top of TRL 0.24's `GRPOTrainer`; one step's stages live in `pipeline.py`.

What is reused from TRL (unchanged): the `RepeatSampler` train sampler (each prompt repeated M times, one rollout batch
repeated `steps_per_generation` times so one rollout feeds several optimiser updates), the generation-batch dataloader,
checkpointing, `self._metrics` + `log` (averaged metrics merged into the Trainer's logs), dropout disabling,
`unwrap_model_for_generation` (ZeRO-3 parameter gathering for the hf rollout engine).

What is overridden (the adapter surface for a newer TRL); each override delegates to a stage of `pipeline.py`:

* `_prepare_inputs` / `_generate_and_score_completions` - TRL shuffles the generation batch and splits it evenly;
  docs/algorithms.md §4 wants no shuffling and a token-mean normaliser per optimiser update over all ranks, so
  `ArpoStep.generate` runs the stages sample prompts -> roll out -> score -> dynamic sampling -> advantages ->
  micro-batches -> log-probs -> log. Whole groups are rolled out on one rank (branching needs every sibling,
  docs/algorithms.md §3.4).
* `_compute_loss` - `pipeline.micro_batch_loss`: our policy loss with a loss mask separate from the attention mask
  (observation tokens attend but are never trained), AEPO balanced clip and entropy-aware advantage, optional KL (k3)
  and entropy bonus.
* `training_step` - timing (`time/training` without the rollout inside the first micro-step) and memory phases; with
  `rl_micro_batch_tokens` one Trainer micro-step is a whole update (`pipeline.accumulate_update`,
  docs/algorithms.md §4.6).
* `_get_eval_sampler` / `get_eval_dataloader` / `prediction_step` / `evaluation_loop` - validation is greedy, one
  trajectory per prompt, no branching, each dataset row counted once.
* `_save_rng_state` / `_load_rng_state` - the rollout session's own generators travel with the checkpoint.
* `_get_grad_norm` - the non-finite guard.

Everything the trainer knows about generation goes through its `RolloutSession` (`rollout/session.py`): roll out,
sync weights, progress, rng state, tool metrics. The rest lives beside it: `config.py` (arguments to `GRPOConfig`,
`ArpoLossConfig`, `RolloutConfig`, `ToolsConfig`; batch geometry), `records.py` (`ScoredTrajectory`), `batch.py`
(groups, token advantages, micro-batch layout and padding), `metrics.py` (metrics, `rollouts.jsonl` entries),
`memory.py`, and the patches of TRL and LLaMA-Factory in `integration/` (`trl_compat.py`, `log_callback.py`).
"""

import math
import os
from typing import Any

import torch
from accelerate.utils import gather_object
from torch.utils.data import SequentialSampler
from transformers.trainer_callback import TrainerCallback

from ...common.log import get_logger
from ...guards.tags import warn_no_tool_calls
from ...rewards.registry import CallableReward, RewardFunction
from ...rollout.progress import ROLLOUT_PROGRESS_NAME
from ...rollout.rng_state import rng_state_path
from ...rollout.session import RolloutSession, as_session
from ..trl_compat import GRPOConfig, GRPOTrainer, prepare_deepspeed
from .async_rollout import open_async_source
from .config import ArpoLossConfig
from .metrics import ROLLOUT_LOG_NAME, combine_tool_metrics, validation_metrics
from .pipeline import (
    ArpoStep,
    MicroBatch,
    PolicyScorer,
    StepLogger,
    StepTimer,
    accumulate_update,
    micro_batch_loss,
    rollout_due,
    step_callbacks,
    step_context,
)
from .records import ScoredTrajectory


logger = get_logger(__name__)
EVAL_INDEX = "_eval_index"  # row number of a validation prompt, added by `ArpoTrainer.get_eval_dataloader`


class ArpoTrainer(GRPOTrainer):
    r"""GRPO trainer whose generation is the ARPO/AEPO tool rollout and whose loss is that of docs/algorithms.md §4.4.

    Batch geometry (TRL's, in trajectories): a micro-batch holds `per_device_train_batch_size` trajectories per rank;
    an optimiser update takes `gradient_accumulation_steps` micro-batches on every rank; one rollout of
    `arpo_rollout_batch_size` prompts x M trajectories feeds `steps_per_generation` micro-steps
    (`build_grpo_config`).

    Group-to-rank scheme and micro-batch layout: see `pipeline.py`.

    Args:
        model: The policy (LLaMA-Factory's `load_model` result: full, freeze, LoRA, quantised).
        args: `GRPOConfig` from `build_run_config` (`build_grpo_config`).
        rollout: The `RolloutSession` (`rollout.open_rollout_session`); an agent loop (`AgenticRollout` or an object
            with its `rollout(prompts, training)`) is wrapped in one together with `executor`.
        reward_fn: A `RewardFunction`; a plain `fn(model_text, ground_truth, metadata) -> float` is wrapped in
            `CallableReward` (format ok = score > -1, correctness = clip(score, 0, 1)).
        loss_config: `ArpoLossConfig` (the policy loss by registry name, clip, KL and entropy coefficients, ...).
        processing_class: The tokenizer.
        train_dataset / eval_dataset: Rows with `prompt_ids` (or `input_ids`), `_ground_truth`, `_data_source`,
            `_ability` columns (`llamafactory_agentic.data.load_rl_dataset`).
        executor: The tool executor, for `tools/...` metrics, when `rollout` is not a session (optional).
        ref_model: Reference model for the KL term (only used when `rl_kl_coef > 0`; None with LoRA = adapter off).
        callbacks: LLaMA-Factory's callbacks.
    """

    _tag_names = ["trl", "grpo", "arpo", "llamafactory-agentic"]

    def __init__(
        self,
        model: Any,
        args: GRPOConfig,
        rollout: RolloutSession | Any,
        reward_fn: RewardFunction | Any,
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
                `ds3_gather_for_generation=False` with an engine sharing the policy's weights (hf); `rl_dynamic_sampling`
                with a streamed (length-less) training set.
        """
        session = as_session(rollout, executor)
        if session.capabilities.shares_policy_weights and not getattr(args, "ds3_gather_for_generation", True):
            raise ValueError(
                f"ds3_gather_for_generation: false is not supported with arpo_rollout_backend: {session.backend} (it "
                "decodes with the trained module: ranks decode different token counts, ZeRO-3's gathers would not "
                "match and training would hang). Keep ds3_gather_for_generation: true (the default) or use vllm."
            )
        if loss_config.dynamic_sampling and train_dataset is not None and not hasattr(train_dataset, "__len__"):
            raise ValueError(
                "rl_dynamic_sampling draws extra prompts by row index, so it needs a map-style training set: set "
                "streaming: false, or turn rl_dynamic_sampling off."
            )
        self.session = session
        if not isinstance(reward_fn, RewardFunction):  # a plain `fn(text, ground_truth, metadata) -> float`
            reward_fn = CallableReward(reward_fn, getattr(reward_fn, "__name__", "reward"))
        self.reward_fn = reward_fn
        self.loss_config = loss_config
        self._timer = StepTimer()
        self._eval_records: dict[Any, ScoredTrajectory] = {}  # validation records by row (see `prediction_step`)
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

        self.step_logger = StepLogger(
            self._metrics,
            self.accelerator,
            processing_class,
            os.path.join(args.output_dir, ROLLOUT_LOG_NAME),
            loss_config.rollout_log_ratio,
            args.seed,
        )
        for callback in step_callbacks(self, session, loss_config):  # memory split, server weight push, step clock
            self.add_callback(callback)
        status = os.path.join(args.output_dir, ROLLOUT_PROGRESS_NAME) if args.should_save else None
        session.show_progress(self.accelerator.is_main_process, status)
        self.policy = PolicyScorer(self.temperature, loss_config.logprob_chunk_size, self.model_kwarg_keys)
        self.step = ArpoStep(step_context(self), session, reward_fn, loss_config, self.policy, self.step_logger)
        if loss_config.max_staleness > 0:  # rollout k steps ahead in a producer thread (docs/algorithms.md §13)
            self.add_callback(open_async_source(self, self.step))

    # ------------------------------------------------------------------------------------------------ data plumbing
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

    # ------------------------------------------------------------------------------------------------ generation step
    def _prepare_inputs(self, generation_batch: Any) -> Any:
        r"""Serve the buffered micro-batches of the current rollout, rolling out anew every `steps_per_generation`.

        Overrides TRL: no shuffling (docs/algorithms.md §4.6) and micro-batches per update (see class docstring).
        """
        if not self.model.training:
            return generation_batch  # evaluation goes through `prediction_step`
        if rollout_due(self):
            self._buffered_inputs = self._generate_and_score_completions(generation_batch)
        inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]
        self._step += 1
        return inputs

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> list[Any]:
        r"""One generation step (`pipeline.ArpoStep.generate`); returns this rank's `steps_per_generation` items.

        Args:
            inputs: This rank's rows of the generation batch (TRL layout: each prompt repeated M times).

        Returns:
            One item per Trainer micro-step: a `pipeline.MicroBatch`, or `{"micro_batches": [...]}` with
            `rl_micro_batch_tokens`.
        """
        return self.step.generate(inputs, self._timer)

    # ------------------------------------------------------------------------------------------------ update
    def _compute_loss(self, model: Any, inputs: MicroBatch) -> torch.Tensor:
        r"""`pipeline.micro_batch_loss` of one micro-batch; its metrics are logged token-weighted over ranks."""
        world = self.accelerator.num_processes
        loss, logged = micro_batch_loss(self.policy, model, inputs, self.loss_config, self.beta, world)
        self.step_logger.log_loss("train" if self.model.training else "eval", **logged)
        return loss

    def training_step(self, model, inputs, num_items_in_batch=None):
        r"""One Trainer micro-step, timed: `time/training` = forward/backward seconds per optimiser update.

        Without `rl_micro_batch_tokens` this is TRL/Transformers' micro-step (one micro-batch). With it, one Trainer
        micro-step is a whole optimiser update (`build_grpo_config`) whose token micro-batches
        `pipeline.accumulate_update` runs. The rollout runs inside the first micro-step of each generation batch
        (`_prepare_inputs`); its time is subtracted here and reported as `time/rollout`, `time/generation`,
        `time/tools`, `time/reward`, ...
        """
        memory, timer = self.step_logger.memory, self._timer
        with timer.stage("training", accumulate=True):
            memory.phase("loss")
            if self.loss_config.micro_batch_tokens is None:
                loss = super().training_step(model, inputs, num_items_in_batch)
            else:
                loss = self._update_step(model, inputs)
            memory.phase("optimizer")  # what follows until the next micro-step: the optimiser step
        # the rollout happens inside the micro-step (in _prepare_inputs); it records its own time
        timer.seconds["training"] -= timer.pop("rollout_inside_step")
        if self._step % self.args.gradient_accumulation_steps == 0:
            self._metrics["train"]["time/training"].append(timer.pop("training"))
        return loss

    def _update_step(self, model: Any, inputs: Any) -> torch.Tensor:
        r"""Forward/backward of every token micro-batch of one optimiser update (`pipeline.accumulate_update`)."""
        model.train()
        if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
            self.optimizer.train()
        update = self._prepare_inputs(inputs)

        def loss_of(model: Any, batch: MicroBatch) -> torch.Tensor:
            with self.compute_loss_context_manager():
                return self.compute_loss(model, batch)

        return accumulate_update(model, update["micro_batches"], self.accelerator, loss_of, self.is_deepspeed_enabled)

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
        records, timing, tool_metrics = self.step.validate(list(inputs), EVAL_INDEX)
        if self.accelerator.num_processes > 1:
            records = gather_object(records)
            tool_shards = gather_object([tool_metrics])
        else:
            tool_shards = [tool_metrics]
        for rec in records:
            key = rec.eval_index if rec.eval_index is not None else ("unindexed", len(self._eval_records))
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
            tool_metrics = combine_tool_metrics(self._eval_tool_shards)
        finally:
            self._eval_records, self._eval_tool_shards = {}, []
        if self.is_world_process_zero():  # a validation without a single tool call is warned about
            warn_no_tool_calls("validation", records, self.state.global_step)
        values = self._metrics["eval"]
        for key, value in validation_metrics(records, values, tool_metrics).items():
            output.metrics[f"{metric_key_prefix}_{key}"] = value
        values.clear()
        return output

    # ------------------------------------------------------------------------------------------------ checkpoints, guards
    def _save_rng_state(self, output_dir: str) -> None:
        r"""Transformers' RNG states plus the rollout's own generators (`rollout_rng_state_<rank>.json`).

        The branching draws (`AgenticRollout.rng`), the hf engine's sampling generator (CPU / eager decoding; CUDA
        graphs use the default CUDA generator that Transformers already saves) and the rollouts.jsonl sampler live
        outside the global RNGs, so a resumed run would otherwise replay the draws of step 0.
        """
        super()._save_rng_state(output_dir)
        self.session.save_rng_state(output_dir, self.args.process_index, self.step_logger.rollout_rng)

    def _load_rng_state(self, checkpoint: str | None) -> None:
        r"""Restore what `_save_rng_state` wrote (a checkpoint without the rollout file is resumed with a warning)."""
        super()._load_rng_state(checkpoint)
        self.step.source.load_state(checkpoint, self.state.global_step)  # the async producer's position, if any
        rank = self.args.process_index
        if checkpoint is not None and not self.session.restore_rng_state(
            checkpoint, rank, self.step_logger.rollout_rng
        ):
            path = rng_state_path(checkpoint, rank)
            logger.warning(f"{path} not found: the rollout's random draws restart from the seed")

    def _get_grad_norm(self, model: Any, grad_norm: Any = None) -> Any:
        r"""The update's gradient norm (Transformers computes it before every `optimizer.step()`), checked finite.

        The non-finite guard of docs/algorithms.md §6.4: a NaN or infinite loss, or any overflow in the backward pass,
        makes this one scalar non-finite, so checking it once per optimiser update (one scalar read, which the
        Trainer's logging does anyway) stops the run before the update is applied and before anything is saved; the
        weights, checkpoints and final model are never NaN. (With DeepSpeed the engine steps inside the backward
        pass, so the guard stops the run right after that update, still before any save.)

        Raises:
            FloatingPointError: the gradient norm is NaN or infinite, naming the step and the reward function.
        """
        grad_norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        value = grad_norm.item() if hasattr(grad_norm, "item") else grad_norm
        if value is not None and not math.isfinite(float(value)):
            raise FloatingPointError(
                f"grad_norm is {value} at optimiser step {self.state.global_step + 1}: the loss or the gradients are "
                f"not finite (reward function {self.reward_fn.name}; check its scale, the learning rate and the "
                "precision). The run stops before this update and saves nothing, so no NaN weights are written."
            )
        return grad_norm


def _reward_name_holder(*args, **kwargs):
    r"""Placeholder for TRL's `reward_funcs` argument; rewards are computed by the score stage (`pipeline.py`)."""
    raise RuntimeError("ArpoTrainer computes rewards itself; TRL's reward path must not be used.")


_reward_name_holder.__name__ = "agentic_reward"

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

* `_prepare_inputs` - TRL shuffles the generation batch and splits it evenly; docs/algorithms.md §4 wants no shuffling
  and a token-mean normaliser per optimiser update over all ranks, so we build the micro-batches ourselves.
* `_generate_and_score_completions` - the multi-round tool rollout (`AgenticRollout`), model-view rewards, GRPO
  advantages with soft/hard attribution from the branch tree, old/ref log-probs. Whole groups are rolled out on one
  rank (branching needs every sibling, docs/algorithms.md §3.4). With `rl_dynamic_sampling`, extra generation batches
  replace the groups whose rewards are all equal (`_dynamic_sampling`, `dynamic_sampling.py`, docs/algorithms.md
  §4.7).
* `_compute_loss` - our policy loss with a loss mask separate from the attention mask (observation tokens attend but
  are never trained), AEPO balanced clip and entropy-aware advantage, optional KL (k3) and entropy bonus.
* `_get_eval_sampler` / `get_eval_dataloader` / `prediction_step` / `evaluation_loop` - validation is greedy, one
  trajectory per prompt, no branching, each dataset row counted once.
* `_save_rng_state` / `_load_rng_state` - the rollout's own generators travel with the checkpoint.
* `training_step` - timing (`time/training` without the rollout inside the first micro-step) and memory phases; with
  `rl_micro_batch_tokens` one Trainer micro-step is a whole update whose token micro-batches `_update_step` runs
  (docs/algorithms.md §4.6).
* `_rollout_call` puts the policy into its generation form for the hf engine (`rollout.generation_weights`: compute
  dtype, LoRA merged) and logs the engine's decode timing (`rollout.hf_engine.decode_metrics`); a callback logs the
  memory split after every optimiser step (`memory/*`, `train/arpo/memory.py`).

Everything the trainer knows about generation goes through `self.rollout.rollout(prompts, training)` and the engine's
`set_model` (hf) or weight-sync method (vllm); see `_rollout_call`. The rest lives beside it: `config.py` (arguments
to `GRPOConfig`, `ArpoLossConfig`, `RolloutConfig`, `ToolsConfig`; batch geometry), `records.py` (the per-trajectory
`ScoredTrajectory`), `batch.py` (groups, token advantages, micro-batch layout and padding), `metrics.py` (pure metric
reduction and `rollouts.jsonl` entries), `rollout/rng_state.py`, `rollout/progress.py`, and the patches of TRL and
LLaMA-Factory in `train/` (`trl_compat.py`, `log_callback.py`).
"""

import contextlib
import functools
import json
import math
import os
import random
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from accelerate.utils import gather_object
from torch.utils.data import SequentialSampler
from transformers.trainer_callback import TrainerCallback

from ...algorithms import (
    compute_entropy_loss,
    compute_kl_loss,
    entropy_aware_advantages,
    entropy_from_logits_chunked,
    get_policy_loss,
    high_entropy_mask,
)
from ...common.log import get_logger
from ...rewards import build_model_view
from ...rewards.compound import score_trajectories
from ...rewards.contamination import answer_leak_rate, observation_texts
from ...rewards.registry import CallableReward, RewardFunction
from ...rollout.generation_weights import GenerationWeights
from ...rollout.hf_engine import decode_metrics
from ...rollout.progress import ROLLOUT_PROGRESS_NAME, RolloutProgress
from ...rollout.rng_state import load_rollout_rng_state, rng_state_path, save_rollout_rng_state
from ..trl_compat import (
    GRPOConfig,
    GRPOTrainer,
    prepare_deepspeed,
    selective_log_softmax,
    unwrap_model_for_generation,
)
from .batch import collate_records, groups_of_rows, micro_batch_layout, token_advantages, token_micro_batches
from .config import ArpoLossConfig
from .dynamic_sampling import assemble_update, combine_generation_batches, count_signal_groups, extra_prompt_indices
from .engine_hooks import engine_forward_hook_handles, fsdp_unsharded, suspended_forward_hooks
from .logprobs import can_fuse, response_log_probs
from .memory import GIB, MemoryTracker, training_state_bytes
from .metrics import (
    ROLLOUT_LOG_NAME,
    combine_rank_shards,
    combine_tool_metrics,
    loss_metric_values,
    rollout_log_entries,
    rollout_log_values,
    select_logged_groups,
    validation_metrics,
)
from .records import ScoredTrajectory, prompt_ids_of


logger = get_logger(__name__)
EVAL_INDEX = "_eval_index"  # row number of a validation prompt, added by `ArpoTrainer.get_eval_dataloader`


class ArpoTrainer(GRPOTrainer):
    r"""GRPO trainer whose generation is the ARPO/AEPO tool rollout and whose loss is that of docs/algorithms.md §4.4.

    Batch geometry (TRL's, in trajectories): a micro-batch holds `per_device_train_batch_size` trajectories per rank;
    an optimiser update takes `gradient_accumulation_steps` micro-batches on every rank; one rollout of
    `arpo_rollout_batch_size` prompts x M trajectories feeds `steps_per_generation` micro-steps
    (`build_grpo_config`).

    Group-to-rank scheme (docs/algorithms.md §3.4: all M of a prompt are decided together): TRL's sampler spreads
    the M copies of a prompt over consecutive rows that may live on several ranks. At each rollout every rank gathers
    the generation batch's rows (`gather_object`), cuts them into whole groups of M identical prompts, takes the groups
    `g` with `g % world_size == rank`, rolls them out and scores them, then all ranks gather every trajectory back and
    order them by group. Advantages are computed on the whole batch; micro-batch k = (update u, accumulation step a) of
    rank r then takes global rows `u*U + r*A*b + a*b ... + b` (U = trajectories per update, A = accumulation steps,
    b = per-device batch), so each update is a contiguous run of whole groups when U is a multiple of M.

    Args:
        model: The policy (LLaMA-Factory's `load_model` result: full, freeze, LoRA, quantised).
        args: `GRPOConfig` from `build_run_config` (`build_grpo_config`).
        rollout: `llamafactory_agentic.rollout.AgenticRollout` (its `engine` is an hf or vllm engine).
        reward_fn: A `RewardFunction`; a plain `fn(model_text, ground_truth, metadata) -> float` is wrapped in
            `CallableReward` (format ok = score > -1, correctness = clip(score, 0, 1)).
        loss_config: `ArpoLossConfig` (the policy loss by registry name, clip, KL and entropy coefficients, ...).
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
                `ds3_gather_for_generation=False` with the hf rollout backend; `rl_dynamic_sampling` with a streamed
                (length-less) training set.
        """
        backend = getattr(getattr(rollout, "config", None), "backend", "hf")
        if backend == "hf" and not getattr(args, "ds3_gather_for_generation", True):
            raise ValueError(
                "ds3_gather_for_generation: false is not supported with arpo_rollout_backend: hf: ranks decode "
                "different numbers of tokens, so ZeRO-3's per-layer parameter gathers would not match across ranks "
                "and training would hang. Keep ds3_gather_for_generation: true (the default) or use the vllm backend."
            )
        if loss_config.dynamic_sampling and train_dataset is not None and not hasattr(train_dataset, "__len__"):
            raise ValueError(
                "rl_dynamic_sampling draws extra prompts by row index, so it needs a map-style training set: set "
                "streaming: false, or turn rl_dynamic_sampling off."
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

        compute_dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else None
        lora_merge = getattr(getattr(rollout, "config", None), "hf_lora_merge", "gpu")
        self._generation_weights = GenerationWeights(compute_dtype, lora_merge)
        self._memory = MemoryTracker()
        self.add_callback(_MemoryCallback(self))
        engine = getattr(rollout, "engine", None)
        if engine is not None and hasattr(engine, "generate") and not isinstance(engine, RolloutProgress):
            status = os.path.join(args.output_dir, ROLLOUT_PROGRESS_NAME) if args.should_save else None
            rollout.engine = RolloutProgress(engine, enabled=self.accelerator.is_main_process, status_path=status)
        eos = processing_class.eos_token_id
        self._eos_ids = eos
        self._rollout_log_path = os.path.join(args.output_dir, ROLLOUT_LOG_NAME)

    # ------------------------------------------------------------------------------------------------ data plumbing
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
    def _rollout_call(self, prompts: list[list[int]], training: bool, ground_truths: list | None = None) -> Any:
        r"""One call of the rollout with up-to-date weights in its engine; every rank must call it (collectives).

        hf engine: `engine.set_model(unwrapped model)` inside TRL's `unwrap_model_for_generation` (ZeRO-3 gathers
        the parameters, a collective), model in eval mode (no gradient checkpointing during decoding) and in its
        generation form (`rollout.generation_weights`: parameters in the training compute dtype, e.g. bf16 instead of
        LLaMA-Factory's float32 master weights, and LoRA adapters merged per `arpo_hf_lora_merge`; restored bit
        for bit afterwards). vllm engine:
        the weights are pushed with `engine.set_model(unwrapped model)` once per optimiser step (under ZeRO-3 the
        engine gathers the parameters module by module). A rank without prompts still enters the same collectives and returns None.
        """
        engine = getattr(self.rollout, "engine", None)
        mode = getattr(getattr(self.rollout, "config", None), "contamination_mode", "log")
        guard = {"ground_truths": ground_truths} if mode != "log" and ground_truths is not None else {}
        if isinstance(engine, RolloutProgress):
            engine.phase, engine.global_step = ("training" if training else "validation"), self.state.global_step
        backend = getattr(getattr(self.rollout, "config", None), "backend", "hf")
        if backend == "hf":
            # ds3_gather_for_generation=False is refused in __init__: the parameters are always gathered
            with unwrap_model_for_generation(
                self.model_wrapped, self.accelerator, gather_deepspeed3_params=True
            ) as unwrapped:
                was_training = unwrapped.training
                unwrapped.eval()
                try:
                    hooks = engine_forward_hook_handles(self.model_wrapped)
                    with (
                        suspended_forward_hooks(unwrapped, hooks),
                        fsdp_unsharded(self.model_wrapped, unwrapped),  # a collective: every rank enters
                        self._generation_weights.applied(unwrapped),
                    ):
                        if not prompts:
                            return None
                        if engine is not None:
                            engine.set_model(unwrapped)
                        before = dict(getattr(engine, "stats", None) or {})
                        with torch.no_grad():
                            output = self.rollout.rollout(prompts, training=training, **guard)
                        output.timing.update(decode_metrics(before, getattr(engine, "stats", None) or {}))
                        return output
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
        return self.rollout.rollout(prompts, training=training, **guard) if prompts else None

    def _records_from_output(
        self, output: Any, rows: list[dict[str, Any]], group_ids: list[int]
    ) -> list[ScoredTrajectory]:
        r"""Score every trajectory of a rollout output in one batch: one record per (group, member), in rollout order.

        The reward sees each trajectory's model view (docs/algorithms.md §6.5) and its `RewardContext` (tool calls,
        finish reason, turns, lengths); `rewards.score_trajectories` scores the batch with slow components (a judge)
        running concurrently (docs/rewards.md). Accuracy is `correctness == 1` of the (first component's)
        `RewardResult`; a compound reward's unweighted component scores go to the record (`reward/<name>` metrics).

        Raises:
            TypeError, ValueError: a score is not a number that is finite in float32 (`rewards.check_score`),
                naming the reward function; the run stops before the score reaches the advantages.
        """
        pairs = [
            (traj, row, gid, member)
            for group, row, gid in zip(output.groups, rows, group_ids)
            for member, traj in enumerate(group)
        ]
        texts = [
            build_model_view(self.processing_class, list(t.response_ids), list(t.loss_mask), self._eos_ids)
            for t, *_ in pairs
        ]
        results = score_trajectories(self.reward_fn, [p[0] for p in pairs], [p[1] for p in pairs], texts)
        return [
            ScoredTrajectory.from_trajectory(
                traj, gid, member, res.score, float(res.correctness >= 1.0), bool(res.format_ok), res.components
            )
            for (traj, _, gid, member), res in zip(pairs, results)
        ]

    def _rollout_groups(
        self, group_rows: list[dict[str, Any]], training: bool
    ) -> tuple[list[ScoredTrajectory], dict, dict]:
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
        output = self._rollout_call(
            [prompt_ids_of(group_rows[g]) for g in mine],
            training=training,
            ground_truths=[group_rows[g].get("_ground_truth") for g in mine],  # agentic_contamination_mode
        )
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
        if mine:  # share of trajectories whose observations hold the answer (rewards/contamination.py)
            metrics["tools/answer_leak_rate"] = answer_leak_rate(
                [
                    observation_texts(self.processing_class, t.response_ids, t.loss_mask)
                    for gr in output.groups
                    for t in gr
                ],
                [group_rows[g].get("_ground_truth") for g, gr in zip(mine, output.groups) for _ in gr],
            )
        timing["time/reward"] = time.perf_counter() - t1

        tool_metrics = self.executor.pop_metrics() if self.executor is not None else {}
        if world > 1:
            records = gather_object(records)
            shards = gather_object([(len(mine), metrics, timing, tool_metrics)])
        else:
            shards = [(len(mine), metrics, timing, tool_metrics)]
        records.sort(key=lambda r: (r.group, r.member))
        return records, *combine_rank_shards(shards)

    # ------------------------------------------------------------------------------------------------ training batch
    def _prepare_inputs(self, generation_batch: Any) -> dict[str, Any]:
        r"""Serve the buffered micro-batches of the current rollout, rolling out anew every `steps_per_generation`.

        Overrides TRL: no shuffling (docs/algorithms.md §4.6) and micro-batches per update (see class docstring).
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
        self._memory.phase("rollout")
        world = self.accelerator.num_processes
        rows = gather_object(list(inputs)) if world > 1 else list(inputs)
        group_rows = groups_of_rows(rows, self.num_generations)
        records, metrics, timing = self._rollout_groups(group_rows, training=True)
        cfg = self.loss_config
        sampled, sampling_metrics = records, {}
        if cfg.dynamic_sampling:
            records, group_rows, sampled, metrics, timing, sampling_metrics = self._dynamic_sampling(
                records, group_rows, metrics, timing
            )

        t_adv = time.perf_counter()
        for rec, adv, mask in zip(records, *token_advantages(records, cfg, self.reward_fn.name)):
            rec.token_advantages, rec.loss_mask_train = adv, mask
        items, micro_batches = self._micro_batches(records)
        self._add_log_probs(micro_batches)
        timing["time/advantage_and_logprobs"] = time.perf_counter() - t_adv
        timing["time/step_rollout_total"] = time.perf_counter() - step_start
        if cfg.micro_batch_tokens is not None:
            metrics["train/micro_batches_per_update"] = len(micro_batches) / max(len(items), 1)
            metrics["train/micro_batch_padded_tokens"] = sum(
                int(mb["completion_ids"].numel() + mb["prompt_ids"].numel()) for mb in micro_batches
            ) / max(len(micro_batches), 1)

        self._log_rollout(sampled, metrics, timing, mode="train")
        for key, value in sampling_metrics.items():
            self._metrics["train"][key].append(value)
        self._write_rollout_log(records, group_rows)
        self._rollout_count += 1
        self._time_accum["rollout_inside_step"] = time.perf_counter() - step_start
        self._memory.phase("loss")
        return items

    def _dynamic_sampling(
        self, records: list[ScoredTrajectory], group_rows: list[dict[str, Any]], metrics: dict, timing: dict
    ) -> tuple[list[ScoredTrajectory], list[dict[str, Any]], list[ScoredTrajectory], dict, dict, dict]:
        r"""`rl_dynamic_sampling`: roll out extra generation batches until the update has groups with reward signal.

        The first batch is TRL's; each extra batch draws `len(group_rows)` prompts from the training set
        (`extra_prompt_indices`, the same rows on every rank) and is rolled out like the first. It stops once the
        batches hold `len(group_rows)` groups whose rewards differ or after `rl_dynamic_sampling_max_batches` batches;
        `assemble_update` then takes those groups first and fills the rest with equal-reward groups
        (docs/algorithms.md §4.7).

        Returns:
            `(update records, update rows, every rolled-out record, rollout metrics, timing, dynamic_sampling
            metrics)`; metrics and timing cover every batch (`combine_generation_batches`), so `reward/...` and
            `rollout/...` describe all sampled groups and `time/rollout` includes the extra rollouts.
        """
        target = len(group_rows)
        batches = [(records, group_rows, metrics, timing)]
        have = count_signal_groups(records)
        dataset = self.train_dataset
        while have < target and len(batches) < self.loss_config.dynamic_sampling_max_batches:
            indices = extra_prompt_indices(len(dataset), target, self.args.seed, self.state.global_step, len(batches))
            rows = [dataset[i] for i in indices]
            extra, extra_metrics, extra_timing = self._rollout_groups(rows, training=True)
            batches.append((extra, rows, extra_metrics, extra_timing))
            have += count_signal_groups(extra)
        update_records, update_rows, sampled, sampling_metrics = assemble_update(
            [(b[0], b[1]) for b in batches], target
        )
        metrics, timing = combine_generation_batches([(len(b[1]), b[2], b[3]) for b in batches])
        return update_records, update_rows, sampled, metrics, timing, sampling_metrics

    def _micro_batches(self, records: list[ScoredTrajectory]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        r"""This rank's training items (one per Trainer micro-step) and the flat list of their micro-batches.

        Without `rl_micro_batch_tokens`: one micro-batch of `per_device_train_batch_size` trajectories per micro-step
        (`micro_batch_layout`). With it, `build_grpo_config` made one Trainer micro-step one optimiser update: the
        item is `{"micro_batches": [...]}`, the rank's b x A trajectories of the update cut by tokens
        (`token_micro_batches`), with the same number of micro-batches on every rank (the largest count over ranks;
        every rank holds every trajectory after the gather, so each computes every rank's count locally); a rank that
        needs fewer micro-batches splits its largest ones.
        """
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        b, accum = self.args.per_device_train_batch_size, self.args.gradient_accumulation_steps
        steps = self.args.steps_per_generation
        device = self.accelerator.device
        cap = self.loss_config.micro_batch_tokens
        if cap is None:
            micro_batches = []
            for rows_k, update_k in micro_batch_layout(len(records), rank, world, b, accum, steps):
                num_tokens = sum(sum(r.loss_mask_train) for r in records[update_k])
                micro_batches.append(collate_records(records[rows_k], num_tokens, self.pad_token_id, device))
            return micro_batches, micro_batches

        def lengths(rows: list[ScoredTrajectory]) -> list[tuple[int, int]]:
            return [(len(r.prompt_ids), len(r.response_ids)) for r in rows]

        layouts = [micro_batch_layout(len(records), r, world, b, accum, steps) for r in range(world)]
        items, flat = [], []
        for k, (rows_k, update_k) in enumerate(layouts[rank]):
            num_tokens = sum(sum(r.loss_mask_train) for r in records[update_k])
            count = max(len(token_micro_batches(lengths(records[lay[k][0]]), cap)) for lay in layouts)
            mine = records[rows_k]
            parts = [
                collate_records([mine[i] for i in indices], num_tokens, self.pad_token_id, device)
                for indices in token_micro_batches(lengths(mine), cap, count)
            ]
            items.append({"micro_batches": parts})
            flat.extend(parts)
        return items, flat

    @torch.no_grad()
    def _add_log_probs(self, micro_batches: list[dict[str, Any]]) -> None:
        r"""Old log-probs (when an update after the first uses the rollout) and reference log-probs (KL > 0).

        Only the loss-mask positions are scored (zeros elsewhere, where the loss never reads them).
        """
        generate_every = self.args.steps_per_generation * self.num_iterations
        need_old = self.args.gradient_accumulation_steps % generate_every != 0
        for batch in micro_batches:
            input_ids, attention_mask, width = _concat(batch)
            select = batch["loss_mask"]
            if need_old:
                batch["old_per_token_logps"] = self._policy_forward(
                    self.model, input_ids, attention_mask, width, select
                )[0]
            if self.beta != 0.0:
                if self.ref_model is not None:
                    ref = self._policy_forward(self.ref_model, input_ids, attention_mask, width, select)[0]
                else:
                    with self.accelerator.unwrap_model(self.model).disable_adapter():
                        ref = self._policy_forward(self.model, input_ids, attention_mask, width, select)[0]
                batch["ref_per_token_logps"] = ref

    def _policy_forward(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        select: torch.Tensor,
        with_entropy: bool = False,
        entropy_grad: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""Per-token log-probs `[b, C]` of the response tokens and, optionally, full-vocabulary entropy `[b, C]`.

        Logits are divided by the temperature (docs/algorithms.md §5.4). Position ids follow the attention mask, so
        left padding of the prompt does not shift positions. With `rl_logprob_chunk_size > 0` (default) only the
        `select` positions (the loss mask) are scored, in chunks fused with the output projection
        (`train.arpo.logprobs.response_log_probs`: no `[b, C, vocab]` logits), and the other positions are 0 (the loss,
        KL, entropy terms and metrics never read them). With 0, or a model whose logits are transformed after the
        projection (`can_fuse`), the full logits are materialised and every position is scored; the entropy is then
        computed in chunks (`entropy_from_logits_chunked`). Either way the entropy is differentiable only with
        `entropy_grad` (entropy bonus, `rl_entropy_coef > 0`); otherwise (the `loss/entropy` metric, AEPO's
        entropy-aware advantage and `high_entropy` clip scope, which use it detached) it keeps no graph.
        """
        chunk = self.loss_config.logprob_chunk_size
        if chunk > 0 and can_fuse(model):
            return response_log_probs(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                select,
                self.temperature,
                chunk,
                with_entropy=with_entropy,
                entropy_grad=entropy_grad,
                position_ids="position_ids" in self.model_kwarg_keys,
                logits_to_keep="logits_to_keep" in self.model_kwarg_keys,
            )
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

        The policy loss is the registered function named by `rl_policy_loss` (`algorithms.get_policy_loss`, as verl's
        actor selects its loss by name); the KL and entropy terms are `compute_kl_loss` and `compute_entropy_loss`.
        The returned value is `sum(mask * L) * world_size / N_update`: summed over the accumulation steps and averaged
        over ranks by DDP/DeepSpeed it gives the token mean over all loss-mask tokens of the update (docs/algorithms.md
        §4.4, Decision). The loss mask gates the policy-gradient, KL and entropy terms and every normaliser; the
        attention mask (observations included) only feeds the forward pass.
        """
        cfg = self.loss_config
        input_ids, attention_mask, width = _concat(inputs)
        logps, entropy = self._policy_forward(
            model,
            input_ids,
            attention_mask,
            width,
            inputs["loss_mask"],
            with_entropy=True,
            entropy_grad=cfg.entropy_coef != 0.0,
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
        policy_loss = get_policy_loss(cfg.policy_loss)
        loss, pg_metrics = policy_loss(
            logps,
            old,
            advantages,
            mask,
            cfg,
            balanced_clip_mask=clip_mask,
            num_tokens=normaliser,
        )
        kl_metric = entropy_bonus_metric = None  # local token means of this micro-batch (for the logs only)
        if self.beta != 0.0:
            ref = inputs["ref_per_token_logps"]
            loss = loss + self.beta * compute_kl_loss(logps, ref, mask, normaliser)
            kl_metric = compute_kl_loss(logps.detach(), ref, mask)
        if cfg.entropy_coef != 0.0:
            loss = loss - cfg.entropy_coef * compute_entropy_loss(entropy, mask, normaliser)
            entropy_bonus_metric = compute_entropy_loss(entropy_detached, mask)

        self._log_loss_metrics(pg_metrics, entropy_detached, mask_bool, kl_metric, entropy_bonus_metric, clip_mask)
        return loss

    def _log_loss_metrics(self, pg_metrics, entropy, mask, kl_value, entropy_value, clip_mask) -> None:
        r"""Append this micro-batch's loss metrics to `self._metrics`, token-weighted over ranks.

        `kl_value` and `entropy_value` are local token means without gradient, like every other metric here.
        """
        mode = "train" if self.model.training else "eval"
        count = float(mask.sum().item())
        local = loss_metric_values(pg_metrics, entropy, mask, kl_value, entropy_value, clip_mask)
        keys = list(local)
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
        output = self._rollout_call(
            [prompt_ids_of(r) for r in rows], training=False, ground_truths=[r.get("_ground_truth") for r in rows]
        )
        records = self._records_from_output(output, rows, list(range(len(rows)))) if output is not None else []
        for rec in records:
            rec.eval_index = rows[rec.group].get(EVAL_INDEX)
        timing = dict(output.timing) if output is not None else {}
        timing["time/rollout"] = time.perf_counter() - t0
        tool_metrics = self.executor.pop_metrics() if self.executor is not None else {}
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
        values = self._metrics["eval"]
        for key, value in validation_metrics(records, values, tool_metrics).items():
            output.metrics[f"{metric_key_prefix}_{key}"] = value
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
        save_rollout_rng_state(output_dir, self.args.process_index, self.rollout, self._rollout_rng)

    def _load_rng_state(self, checkpoint: str | None) -> None:
        r"""Restore what `_save_rng_state` wrote (a checkpoint without the rollout file is resumed with a warning)."""
        super()._load_rng_state(checkpoint)
        rank = self.args.process_index
        if checkpoint is not None and not load_rollout_rng_state(checkpoint, rank, self.rollout, self._rollout_rng):
            path = rng_state_path(checkpoint, rank)
            logger.warning(f"{path} not found: the rollout's random draws restart from the seed")

    def training_step(self, model, inputs, num_items_in_batch=None):
        r"""One Trainer micro-step, timed: `time/training` = forward/backward seconds per optimiser update.

        Without `rl_micro_batch_tokens` this is TRL/Transformers' micro-step (one micro-batch). With it, one Trainer
        micro-step is a whole optimiser update (`build_grpo_config`) and `_update_step` runs its token micro-batches.
        The rollout runs inside the first micro-step of each generation batch (`_prepare_inputs`); its time is
        subtracted here and reported as `time/rollout`, `time/generation`, `time/tools`, `time/reward`, ...
        """
        start = time.perf_counter()
        self._memory.phase("loss")
        if self.loss_config.micro_batch_tokens is None:
            loss = super().training_step(model, inputs, num_items_in_batch)
        else:
            loss = self._update_step(model, inputs)
        self._memory.phase("optimizer")  # what follows until the next micro-step: the optimiser step
        # the rollout happens inside the micro-step (in _prepare_inputs); it records its own time
        elapsed = time.perf_counter() - start - self._time_accum.pop("rollout_inside_step", 0.0)
        self._time_accum["training"] += elapsed
        if self._step % self.args.gradient_accumulation_steps == 0:
            self._metrics["train"]["time/training"].append(self._time_accum.pop("training"))
        return loss

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

    def _update_step(self, model: Any, inputs: Any) -> torch.Tensor:
        r"""Forward/backward of every token micro-batch of one optimiser update (`rl_micro_batch_tokens`).

        How gradient accumulation is driven: `build_grpo_config` sets the Trainer's `gradient_accumulation_steps` to 1
        (one Trainer micro-step = one update), so the Trainer synchronises and steps after this call. Inside, every
        micro-batch but the last runs under `accelerator.no_sync` (DDP/FSDP: no all-reduce) with Accelerate's
        `sync_gradients` off (DeepSpeed: `set_gradient_accumulation_boundary(False)`, no optimiser step); the last one
        synchronises. Every rank runs the same number of micro-batches (`_micro_batches`), so DeepSpeed's per-backward
        reductions and ZeRO-3's per-forward gathers match across ranks. Each micro-batch's loss is already divided by
        the update's global loss-mask token count (`_compute_loss`), so the accumulated gradient is the token mean
        over the update, whatever the number of micro-batches. Returns the summed loss (for the logs).
        """
        model.train()
        if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
            self.optimizer.train()
        update = self._prepare_inputs(inputs)
        batches = update["micro_batches"]
        state = self.accelerator.gradient_state
        sync = state.sync_gradients
        kwargs = {"scale_wrt_gas": False} if self.is_deepspeed_enabled else {}
        total = None
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            context = contextlib.nullcontext() if last else self.accelerator.no_sync(model)
            state._set_sync_gradients(sync and last)
            try:
                with context:
                    with self.compute_loss_context_manager():
                        loss = self.compute_loss(model, batch)
                    self.accelerator.backward(loss, **kwargs)
            finally:
                state._set_sync_gradients(sync)
            loss = loss.detach()
            total = loss if total is None else total + loss
        return total

    def _log_memory(self, model: Any) -> None:
        r"""`memory/*` of the update that just stepped (called right after `optimizer.step()`, before `zero_grad`).

        `weights_gib`, `gradients_gib`, `optimizer_states_gib` (tensor bytes on this rank), `static_gib` (their sum);
        with CUDA the peaks of the phases since the last update: `peak_rollout_gib` (rollout and log-prob pass),
        `peak_loss_gib` (forward/backward), `peak_optimizer_gib` (optimiser step), `peak_gib` and
        `peak_over_static` (the issue's bound is 1.25).
        """
        split = training_state_bytes(model, self.optimizer)
        values = {f"memory/{key}_gib": value / GIB for key, value in split.items()}
        static = sum(split.values()) / GIB
        values["memory/static_gib"] = static
        peaks = self._memory.take()
        for phase, peak in peaks.items():
            values[f"memory/peak_{phase}_gib"] = peak
        if peaks:
            values["memory/peak_gib"] = max(peaks.values())
            values["memory/peak_over_static"] = max(peaks.values()) / max(static, 1e-9)
        for key, value in values.items():
            self._metrics["train"][key].append(value)

    def _log_rollout(self, records: list[ScoredTrajectory], metrics: dict, timing: dict, mode: str) -> None:
        r"""Add one rollout's values (`rollout_log_values`) to the metrics TRL averages and logs."""
        peak = None
        if torch.cuda.is_available():  # process-wide peak (the memory tracker resets CUDA's per phase)
            peak = max(self._memory.overall, torch.cuda.max_memory_allocated() / GIB)
        for key, value in rollout_log_values(records, metrics, timing, peak).items():
            self._metrics[mode][key].append(value)

    def _write_rollout_log(self, records: list[ScoredTrajectory], group_rows: list[dict]) -> None:
        r"""Append a sampled share (`arpo_rollout_log_ratio`) of groups, with their branch tree, to rollouts.jsonl."""
        if not self.accelerator.is_main_process:
            return
        chosen = select_logged_groups(
            (r.group for r in records), self.loss_config.rollout_log_ratio, self._rollout_rng
        )
        if not chosen:
            return
        decode = functools.partial(self.processing_class.decode, skip_special_tokens=False)
        entries = rollout_log_entries(records, group_rows, chosen, decode, self.state.global_step, self._rollout_count)
        os.makedirs(os.path.dirname(self._rollout_log_path) or ".", exist_ok=True)
        with open(self._rollout_log_path, "a", encoding="utf-8") as f:
            for entry in entries:
                f.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")


class _MemoryCallback(TrainerCallback):
    r"""Logs the memory split of each update right after its optimiser step (`ArpoTrainer._log_memory`)."""

    def __init__(self, trainer: ArpoTrainer) -> None:
        self.trainer = trainer

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.trainer._log_memory(self.trainer.model)


def _reward_name_holder(*args, **kwargs):
    r"""Placeholder for TRL's `reward_funcs` argument; rewards are computed by `ArpoTrainer._records_from_output`."""
    raise RuntimeError("ArpoTrainer computes rewards itself; TRL's reward path must not be used.")


_reward_name_holder.__name__ = "agentic_reward"


def _concat(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, int]:
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    return input_ids, attention_mask, batch["completion_ids"].size(1)

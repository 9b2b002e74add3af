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

r"""One ARPO/AEPO step as named stages; `ArpoTrainer` (trainer.py) only delegates to them from TRL's overrides.

A generation step (`ArpoStep.generate`, run inside the first Trainer micro-step of every `steps_per_generation`):

1. **sample prompts** `sample_prompts`: the generation batch's rows of all ranks -> one row per group.
2. **roll out** `ArpoStep.roll_out`: this rank's whole groups (`g % world == rank`) through the `RolloutSession`, with
   the policy in its generation form (`PolicyGeneration`) -> `RolloutShard`.
3. **score** `score_groups` (the reward on the model view, docs/algorithms.md §6.5) and the answer-leak guard, then
   every rank gathers every record -> `GenerationBatch`.
4. **dynamic sampling** `ArpoStep.dynamic_sampling` (`rl_dynamic_sampling`, docs/algorithms.md §4.7): extra
   generation batches until the update has groups with reward signal -> `UpdateBatch`.
5. **advantages** `assign_advantages`: GRPO advantages with soft/hard attribution on the token level.
6. **micro-batches** `ArpoStep.micro_batches`: this rank's Trainer items and their `MicroBatch` tensors.
7. **log-probs** `ArpoStep.add_log_probs`: old (several updates per rollout) and reference (KL) log-probs.
8. **log** `StepLogger`: `reward/*`, `rollout/*`, `tools/*`, `time/*`, `dynamic_sampling/*`, rollouts.jsonl.

Group-to-rank scheme (docs/algorithms.md §3.4: all M of a prompt are decided together): TRL's sampler spreads
the M copies of a prompt over consecutive rows that may live on several ranks. At each rollout every rank gathers
the generation batch's rows (`gather_object`), cuts them into whole groups of M identical prompts, takes the groups
`g` with `g % world_size == rank`, rolls them out and scores them, then all ranks gather every trajectory back and
order them by group. Advantages are computed on the whole batch; micro-batch k = (update u, accumulation step a) of
rank r then takes global rows `u*U + r*A*b + a*b ... + b` (U = trajectories per update, A = accumulation steps,
b = per-device batch), so each update is a contiguous run of whole groups when U is a multiple of M.

The update (each Trainer micro-step): `micro_batch_loss` (the policy loss of one `MicroBatch`, docs/algorithms.md §4.4)
and `accumulate_update` (every token micro-batch of one optimiser update, `rl_micro_batch_tokens`). Every stage's
wall time goes through one `StepTimer`; the `time/*` names are those docs/algorithms.md lists.
"""

import contextlib
import functools
import json
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypedDict

import torch
from accelerate.utils import gather_object
from transformers.trainer_callback import TrainerCallback

from ...algorithms import (
    accepts_keyword,
    compute_entropy_loss,
    compute_kl_loss,
    entropy_aware_advantages,
    entropy_from_logits_chunked,
    get_policy_loss,
    high_entropy_mask,
)
from ...algorithms.off_policy import off_policy_weights
from ...rewards import build_model_view
from ...rewards.compound import score_trajectories
from ...rewards.contamination import answer_leak_rate, observation_texts
from ...rewards.registry import RewardFunction
from ...rollout.generation_weights import GenerationWeights
from ...rollout.session import RolloutSession
from ..trl_compat import selective_log_softmax, unwrap_model_for_generation
from .batch import collate_records, groups_of_rows, micro_batch_layout, token_advantages, token_micro_batches
from .config import ArpoLossConfig
from .dynamic_sampling import assemble_update, combine_generation_batches, count_signal_groups, extra_prompt_indices
from .engine_hooks import engine_forward_hook_handles, fsdp_unsharded, suspended_forward_hooks
from .logprobs import can_fuse, response_log_probs
from .memory import GIB, MemoryTracker, training_state_bytes
from .metrics import (
    combine_rank_shards,
    loss_metric_values,
    rollout_log_entries,
    rollout_log_values,
    select_logged_groups,
)
from .records import ScoredTrajectory, prompt_ids_of


# ---------------------------------------------------------------------------------------------- typed records
class MicroBatch(TypedDict, total=False):
    r"""One forward/backward's tensors (`batch.collate_records`); a dict, as Transformers passes it to the loss.

    `prompt_ids`/`prompt_mask` `[b, P]` (left-padded), `completion_ids`/`completion_mask` `[b, C]` (attention,
    observations included), `loss_mask` `[b, C]`, `advantages` `[b, C]`, `num_items_in_batch` (loss-mask tokens of the
    whole optimiser update over all ranks), `num_sequences_in_batch` (its trajectories, docs/algorithms.md §4.8), and
    `old_per_token_logps` / `ref_per_token_logps` `[b, C]` when needed.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor
    num_items_in_batch: torch.Tensor
    num_sequences_in_batch: torch.Tensor
    old_per_token_logps: torch.Tensor
    ref_per_token_logps: torch.Tensor


@dataclass
class RolloutShard:
    r"""This rank's share of one rollout: its group ids, their rows and the rollout output (None without groups)."""

    group_rows: list[dict[str, Any]]  # one dataset row per group of the whole generation batch
    group_ids: list[int]  # groups g of the generation batch with g % world == rank
    rows: list[dict[str, Any]]  # one dataset row per group of `group_ids`
    output: Any  # `RolloutOutput` (groups, metrics, timing); None when this rank has no group
    timer: "StepTimer"  # `time/rollout` so far; `time/reward` is added by the score stage


@dataclass
class GenerationBatch:
    r"""One scored generation batch, the same on every rank.

    `records` are sorted by (group, member); `metrics` are combined over ranks (mean weighted by groups), `timing`
    too (max over ranks: the critical path), see `metrics.combine_rank_shards`.
    """

    rows: list[dict[str, Any]]  # one dataset row per group
    records: list[ScoredTrajectory]
    metrics: dict[str, float]
    timing: dict[str, float]


@dataclass
class UpdateBatch:
    r"""What one generation step trains on (after dynamic sampling) and what it logs.

    `records`/`rows` are the groups of the update; `sampled` every rolled-out record (for `reward/*` and
    `rollout/*`); `sampling_metrics` the `dynamic_sampling/*` values (empty without dynamic sampling).
    """

    rows: list[dict[str, Any]]
    records: list[ScoredTrajectory]
    sampled: list[ScoredTrajectory]
    metrics: dict[str, float]
    timing: dict[str, float]
    sampling_metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class MicroBatches:
    r"""This rank's Trainer items (one per Trainer micro-step) and the flat list of their `MicroBatch`es.

    Without `rl_micro_batch_tokens` both lists hold the same micro-batches; with it, an item is
    `{"micro_batches": [...]}`, one optimiser update cut by tokens.
    """

    items: list[Any]
    flat: list[MicroBatch]


# ---------------------------------------------------------------------------------------------- timer
class StepTimer:
    r"""Wall-clock seconds of named stages (`time.perf_counter`), the one timer of the step."""

    def __init__(self) -> None:
        r"""An empty timer; `elapsed` counts from now."""
        self.seconds: dict[str, float] = {}
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        r"""Seconds since the timer was made."""
        return time.perf_counter() - self.start

    @contextlib.contextmanager
    def stage(self, name: str, accumulate: bool = False) -> Iterator[None]:
        r"""Time the block as `name` (added to what `name` holds with `accumulate`)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.seconds[name] = self.seconds.get(name, 0.0) + elapsed if accumulate else elapsed

    def pop(self, name: str, default: float = 0.0) -> float:
        r"""Remove and return `name`'s seconds (`default` when absent)."""
        return self.seconds.pop(name, default)


def wait_for_stream(device: Any) -> None:
    r"""Block until the kernels queued on `device`'s current CUDA stream have run (nothing on other devices).

    CUDA launches are asynchronous: without this, the old- and reference-log-prob forwards of
    `time/advantage_and_logprobs` were only queued when the stage's clock stopped, and their GPU time was charged to
    the first update after each rollout (`time/training` 2.97 s against 1.24 s at steady state, H200, 2026-12-04;
    docs/scaling.md, "The first update after each rollout"). Only the current stream is waited for, so an
    asynchronous producer's generation on its own stream keeps running.
    """
    if getattr(device, "type", None) == "cuda" and torch.cuda.is_available():
        torch.cuda.current_stream(device).synchronize()


def rollout_due(trainer: Any) -> bool:
    r"""Whether the trainer's next training micro-step rolls out (`ArpoTrainer._prepare_inputs`).

    True when TRL's micro-step counter `_step` is a multiple of `steps_per_generation * num_iterations`, or when
    nothing is buffered yet.
    """
    generate_every = trainer.args.steps_per_generation * trainer.num_iterations
    return trainer._step % generate_every == 0 or trainer._buffered_inputs is None


class MemoryCallback(TrainerCallback):
    r"""Logs the memory split of each update right after its optimiser step (`StepLogger.log_memory`).

    Args:
        trainer: The `ArpoTrainer` (its `step_logger`, `model` and `optimizer`, read at each step).
    """

    def __init__(self, trainer: Any) -> None:
        r"""See the class docstring."""
        self.trainer = trainer

    def on_optimizer_step(self, args, state, control, **kwargs):
        r"""Record weights, gradients, optimiser states and the phases' peaks of this update."""
        self.trainer.step_logger.log_memory(self.trainer.model, self.trainer.optimizer)


class ServerWeightPush(TrainerCallback):
    r"""Pushes the new weights into a server engine right after an optimiser step that something will read them after.

    For engines in another process (`EngineCapabilities.separate_process`, the `vllm_server` backend) in lockstep
    (`rl_max_staleness: 0`): version s goes to the server as soon as step s ends when the next step starts a
    generation batch (`rollout_due`, the rule `ArpoTrainer._prepare_inputs` rolls out by), when a validation follows
    (`control.should_evaluate`) or when training stops (the server ends with the final weights). The later updates
    of a generation batch push nothing: no rollout reads those versions (H100, Qwen2.5-0.5B over CUDA IPC: 1.4 s of
    a 1.9 s update, benchmarks/results/server_h100). Any rollout still finds its version there:
    `PolicyGeneration.push` sends it first when the engine holds another one. Added before
    `StepClock`: the push is part of `time/step`, and its seconds are logged as `time/weight_push`. With
    `rl_max_staleness > 0` the producer pushes the versions it samples with instead.

    Args:
        trainer: The `ArpoTrainer` (its `step.generation`, `model_wrapped` and `_metrics`, read at each step).
    """

    def __init__(self, trainer: Any) -> None:
        r"""See the class docstring."""
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        r"""Push version `state.global_step` when it is read next (every rank: ZeRO-3 gathers are collectives)."""
        if not (rollout_due(self.trainer) or control.should_evaluate or control.should_training_stop):
            return
        start = time.perf_counter()
        self.trainer.step.generation.push(self.trainer.model_wrapped, state.global_step)
        self.trainer._metrics["train"]["time/weight_push"].append(time.perf_counter() - start)


class StepClock(TrainerCallback):
    r"""Logs `time/step`: wall seconds of each optimiser step, from `on_step_begin` to `on_step_end`.

    The step's log follows `on_step_end`. Inside: its rollout when it has one (with the weight push before it),
    every micro-step's forward and backward, and the optimiser step. A step without a rollout (the later updates of a
    generation batch) is the update's whole cost; the peer benchmark compares it with TRL's
    (`benchmarks/bench_vs_trl_gpu.py`).

    Args:
        metrics: The trainer's `_metrics["train"]` (name -> list of values, averaged per logging step).
    """

    def __init__(self, metrics: dict[str, list[float]]) -> None:
        r"""See the class docstring."""
        self.metrics = metrics
        self.start: float | None = None

    def on_step_begin(self, args, state, control, **kwargs):
        r"""The step starts (before its first micro-step, so before a rollout inside it)."""
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        r"""The optimiser stepped: append the step's seconds (logged with the step)."""
        if self.start is not None:
            self.metrics["time/step"].append(time.perf_counter() - self.start)
            self.start = None


def step_callbacks(trainer: Any, session: RolloutSession, loss_config: Any) -> list[TrainerCallback]:
    r"""The trainer's per-step callbacks, in their order.

    `MemoryCallback`, then `ServerWeightPush` for an engine in another process at `rl_max_staleness: 0` (before the
    clock, so the push counts in `time/step`), then `StepClock`.
    """
    callbacks: list[TrainerCallback] = [MemoryCallback(trainer)]
    if session.capabilities.separate_process and loss_config.max_staleness == 0:
        callbacks.append(ServerWeightPush(trainer))
    return [*callbacks, StepClock(trainer._metrics["train"])]


# ---------------------------------------------------------------------------------------------- score
def score_groups(
    reward_fn: RewardFunction, tokenizer: Any, eos_ids: Any, groups: list[list[Any]], rows: list[dict], group_ids: Any
) -> list[ScoredTrajectory]:
    r"""The score stage: one `ScoredTrajectory` per (group, member) of a rollout output, in rollout order.

    The reward sees each trajectory's model view (docs/algorithms.md §6.5) and its `RewardContext` (tool calls,
    finish reason, turns, lengths); `rewards.score_trajectories` scores the whole batch, slow components (a judge)
    running concurrently (docs/rewards.md). Accuracy is `correctness == 1` of the (first component's)
    `RewardResult`; a compound reward's unweighted component scores go to the record (`reward/<name>` metrics).

    Raises:
        TypeError, ValueError: a score is not a number that is finite in float32 (`rewards.check_score`), naming the
            reward function; the run stops before the score reaches the advantages.
        RewardTimeoutError: a user reward call ran past `agentic_reward_timeout` (docs/rewards.md §3).
    """
    pairs = [
        (traj, row, gid, member)
        for group, row, gid in zip(groups, rows, group_ids)
        for member, traj in enumerate(group)
    ]
    texts = [build_model_view(tokenizer, list(t.response_ids), list(t.loss_mask), eos_ids) for t, *_ in pairs]
    results = score_trajectories(reward_fn, [p[0] for p in pairs], [p[1] for p in pairs], texts)
    return [
        ScoredTrajectory.from_trajectory(
            traj, gid, member, res.score, float(res.correctness >= 1.0), bool(res.format_ok), res.components
        )
        for (traj, _, gid, member), res in zip(pairs, results)
    ]


# ---------------------------------------------------------------------------------------------- sample prompts
def gather_objects(items: list[Any], group: Any = None) -> list[Any]:
    r"""Every rank's `items` concatenated in rank order, on every rank (Accelerate's `gather_object` on `group`).

    Args:
        items: This rank's picklable objects.
        group: A `torch.distributed` process group; None: the default group (`accelerate.utils.gather_object`).
    """
    if group is None:
        return gather_object(items)
    import torch.distributed as dist

    parts: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(parts, list(items), group=group)
    return [item for part in parts for item in part]


def sample_prompts(inputs: list[dict[str, Any]], group_size: int, world_size: int) -> list[dict[str, Any]]:
    r"""One row per group of the generation batch, the same list on every rank (TRL's rows of all ranks gathered)."""
    rows = gather_object(list(inputs)) if world_size > 1 else list(inputs)
    return groups_of_rows(rows, group_size)


# ---------------------------------------------------------------------------------------------- advantages
def assign_advantages(update: UpdateBatch, loss_config: ArpoLossConfig, reward_name: str) -> None:
    r"""Fill every update record's `token_advantages` and `loss_mask_train` (`batch.token_advantages`)."""
    cfg = loss_config
    values = token_advantages(update.records, cfg, reward_name)
    for rec, adv, mask in zip(update.records, *values):
        rec.token_advantages, rec.loss_mask_train = adv, mask


# ---------------------------------------------------------------------------------------------- policy in generation
class PolicyGeneration:
    r"""Runs the session's rollout with up-to-date weights in its engine; every rank must call it (collectives).

    hf engine: `session.sync_weights(unwrapped model)` inside TRL's `unwrap_model_for_generation` (ZeRO-3 gathers
    the parameters, a collective), model in eval mode (no gradient checkpointing during decoding) and in its
    generation form (`rollout.generation_weights`: parameters in the training compute dtype, e.g. bf16 instead of
    LLaMA-Factory's float32 master weights, and LoRA adapters merged per `arpo_hf_lora_merge`; restored bit for bit
    afterwards). vllm and vllm_server engines: the weights are pushed with `session.sync_weights` once per optimiser
    step (`push`; a server engine right after the step, `ServerWeightPush`; under ZeRO-3
    the engine gathers the parameters module by module; under FSDP the whole model is gathered for the copy). A rank
    without prompts still enters the same collectives and gets None.

    Args:
        session: The `RolloutSession`.
        accelerator: The trainer's Accelerate `Accelerator`.
        compute_dtype: The training compute dtype (bf16/fp16) or None.
    """

    def __init__(self, session: RolloutSession, accelerator: Any, compute_dtype: torch.dtype | None) -> None:
        r"""See the class docstring."""
        self.session, self.accelerator = session, accelerator
        self.weights = GenerationWeights(compute_dtype, session.lora_merge)
        self._synced_step: int | None = None

    def __call__(
        self,
        model_wrapped: Any,
        prompts: list[list[int]],
        training: bool,
        global_step: int,
        ground_truths: list[Any] | None = None,
    ) -> Any:
        r"""The `RolloutOutput` of `prompts` (None when `prompts` is empty).

        `ground_truths` (one per prompt) reach the agent loop for `agentic_contamination_mode` `mask`/`drop`.
        """
        session = self.session
        session.set_phase(training, global_step)
        if session.capabilities.shares_policy_weights:  # the hf engine decodes with the trained module itself
            # ds3_gather_for_generation=False is refused by the trainer: the parameters are always gathered
            with unwrap_model_for_generation(model_wrapped, self.accelerator, gather_deepspeed3_params=True) as model:
                was_training = model.training
                model.eval()
                try:
                    hooks = engine_forward_hook_handles(model_wrapped)
                    with (
                        suspended_forward_hooks(model, hooks),
                        fsdp_unsharded(model_wrapped, model),  # a collective: every rank enters
                        self.weights.applied(model),
                    ):
                        if not prompts:
                            return None
                        session.sync_weights(model, version=global_step)
                        with torch.no_grad():
                            return session.rollout(prompts, training=training, ground_truths=ground_truths)
                finally:
                    model.train(was_training)

        self.push(model_wrapped, global_step)
        return session.rollout(prompts, training=training, ground_truths=ground_truths) if prompts else None

    def push(self, model_wrapped: Any, global_step: int) -> None:
        r"""Push the weights into an engine that holds its own copy, once per version (every rank calls it).

        Nothing is sent when the engine holds `global_step` already: built on the policy (version 0, pushed by the
        engine itself), or pushed by this caller. Pushed again when the engine holds another version than this caller's
        last push (a second caller on the same engine, e.g. validation while an asynchronous producer owns the server:
        `rl_max_staleness > 0`).
        """
        session = self.session
        if session.engine is None or session.capabilities.shares_policy_weights:
            return
        held = getattr(getattr(session.engine, "_engine", session.engine), "weight_version", None)
        if held == global_step and self._synced_step in (None, global_step):
            return  # the engine holds this version already (pushed when it was built, or by this caller)
        # under ZeRO-3 the engine gathers one module at a time (rollout.weight_sync), so the whole model is never
        # materialised on one GPU for the copy. Under FSDP the parameters the module holds are shards (FSDP2:
        # DTensors; v1: views of the flat shard, names with `_fsdp_wrapped_module.`): `fsdp_unsharded` gathers the
        # whole model for the copy (a collective)
        with (
            unwrap_model_for_generation(model_wrapped, self.accelerator, gather_deepspeed3_params=False) as model,
            fsdp_unsharded(model_wrapped, model),
        ):
            session.sync_weights(model, version=global_step)
        self._synced_step = global_step


# ---------------------------------------------------------------------------------------------- policy forward
@dataclass
class PolicyScorer:
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

    temperature: float
    chunk_size: int  # rl_logprob_chunk_size
    model_kwarg_keys: Any  # the forward's keyword names (TRL's `model_kwarg_keys`)

    def __call__(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        select: torch.Tensor,
        with_entropy: bool = False,
        entropy_grad: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""`(log-probs [b, C], entropy [b, C] or None)` of the last `logits_to_keep` tokens."""
        if self.chunk_size > 0 and can_fuse(model):
            return response_log_probs(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                select,
                self.temperature,
                self.chunk_size,
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


def concat_batch(batch: MicroBatch) -> tuple[torch.Tensor, torch.Tensor, int]:
    r"""`(input_ids [b, P+C], attention_mask [b, P+C], C)` of a micro-batch."""
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    return input_ids, attention_mask, batch["completion_ids"].size(1)


# ---------------------------------------------------------------------------------------------- step context
@dataclass
class StepContext:
    r"""What the generation step reads from its trainer: fixed values and accessors of the live state.

    `ArpoStep` gets this instead of the trainer (issue 36: the stages are usable without a `Trainer`, e.g. by a
    rollout producer). The accessors are called at use time because the Trainer re-wraps its model when training
    starts and advances its step.

    Attributes:
        accelerator: The Accelerate `Accelerator` (rank, world size, device, collectives).
        per_device_train_batch_size / gradient_accumulation_steps / steps_per_generation / num_iterations / seed:
            The batch geometry (`build_grpo_config`) and the run's seed.
        num_generations: M, trajectories per prompt.
        pad_token_id: Padding id of the micro-batches.
        tokenizer: The tokenizer (reward's model view, rollouts.jsonl).
        compute_dtype: The training compute dtype (bf16/fp16) or None (the hf engine's generation form).
        train_dataset: The training rows (dynamic sampling draws extra prompts from it by index).
        beta: The KL coefficient (reference log-probs are computed when it is not 0).
        model / model_wrapped / ref_model / global_step: Accessors of the live policy (unwrapped and wrapped), the
            reference model (None) and the optimiser steps done.
        collective_group: The process group of the step's record gathers; None: the default group (the trainer's
            thread). An asynchronous producer (`rl_max_staleness > 0`, several ranks) gathers on a gloo group of its
            own, since its thread runs beside the optimiser's collectives.
    """

    accelerator: Any
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    steps_per_generation: int
    num_iterations: int
    seed: int
    num_generations: int
    pad_token_id: int
    tokenizer: Any
    compute_dtype: torch.dtype | None
    train_dataset: Any
    beta: float
    model: Callable[[], Any]
    model_wrapped: Callable[[], Any]
    ref_model: Callable[[], Any]
    global_step: Callable[[], int]
    collective_group: Any = None


def step_context(trainer: Any) -> StepContext:
    r"""The `StepContext` of an `ArpoTrainer`: its batch geometry and accessors of its live state."""
    args = trainer.args
    compute_dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else None
    return StepContext(
        accelerator=trainer.accelerator,
        per_device_train_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        steps_per_generation=args.steps_per_generation,
        num_iterations=trainer.num_iterations,
        seed=args.seed,
        num_generations=trainer.num_generations,
        pad_token_id=trainer.pad_token_id,
        tokenizer=trainer.processing_class,
        compute_dtype=compute_dtype,
        train_dataset=trainer.train_dataset,
        beta=trainer.beta,
        model=lambda: trainer.model,
        model_wrapped=lambda: trainer.model_wrapped,
        ref_model=lambda: trainer.ref_model,
        global_step=lambda: trainer.state.global_step,
    )


class SyncRolloutSource:
    r"""The default rollout source (`rl_max_staleness: 0`): rolls out, scores and dynamic-samples on the spot.

    `take(group_rows)` returns the `UpdateBatch` of those prompts, produced now with the current weights, so every
    token is on-policy (staleness 0); this is exactly the lockstep step of earlier versions.

    Args:
        step: The `ArpoStep` whose stages produce the groups.
    """

    def __init__(self, step: "ArpoStep") -> None:
        r"""See the class docstring."""
        self.step = step

    def take(self, group_rows: list[dict[str, Any]]) -> UpdateBatch:
        r"""Scored (and dynamically sampled) groups of `group_rows`, rolled out with the current weights."""
        step = self.step.ctx.global_step()
        batch = self.step.roll_out_and_score(group_rows, training=True, global_step=step)
        return self.step.dynamic_sampling(batch, step)

    def close(self) -> None:
        r"""Nothing to stop."""

    def load_state(self, directory: str | None, global_step: int) -> bool:
        r"""Nothing to resume: every group is produced when it is taken (False)."""
        return False

    def paused(self) -> contextlib.AbstractContextManager:
        r"""Nothing runs in the background."""
        return contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------- the generation step
class ArpoStep:
    r"""The generation step's stages for one trainer (see the module docstring); `generate` runs them in order.

    Args:
        ctx: The `StepContext` (batch geometry and the live model, reference model and step).
        session: The `RolloutSession`.
        reward_fn: The `RewardFunction`.
        loss_config: `ArpoLossConfig`.
        policy: The `PolicyScorer` (old/ref log-probs).
        logger: The `StepLogger`.
    """

    def __init__(
        self,
        ctx: StepContext,
        session: RolloutSession,
        reward_fn: RewardFunction,
        loss_config: ArpoLossConfig,
        policy: PolicyScorer,
        logger: "StepLogger",
    ) -> None:
        r"""See the class docstring; the rollout source is `SyncRolloutSource` until `source` is replaced."""
        self.ctx, self.session, self.reward_fn, self.loss_config = ctx, session, reward_fn, loss_config
        self.policy, self.logger = policy, logger
        self.generation = PolicyGeneration(session, ctx.accelerator, ctx.compute_dtype)
        self.tokenizer = ctx.tokenizer
        self.eos_ids = self.tokenizer.eos_token_id
        self.source: Any = SyncRolloutSource(self)

    # -------------------------------------------------------------------------------------------- composite
    def generate(self, inputs: list[dict[str, Any]], timer: StepTimer) -> list[Any]:
        r"""Every stage of one generation step; returns this rank's `steps_per_generation` Trainer items.

        Args:
            inputs: This rank's rows of the generation batch (TRL layout: each prompt repeated M times).
            timer: The trainer's timer; `rollout_inside_step` is set to the step's seconds (for `time/training`).
        """
        ctx = self.ctx
        step = StepTimer()
        self.logger.memory.phase("rollout")
        group_rows = sample_prompts(inputs, ctx.num_generations, ctx.accelerator.num_processes)
        update = self.source.take(group_rows)  # scored groups from the rollout source (issue 36)
        with step.stage("time/advantage_and_logprobs"):
            assign_advantages(update, self.loss_config, self.reward_fn.name)
            micro = self.micro_batches(update.records)
            self.add_log_probs(micro.flat)
            wait_for_stream(ctx.accelerator.device)
        update.timing["time/advantage_and_logprobs"] = step.seconds["time/advantage_and_logprobs"]
        update.timing["time/step_rollout_total"] = step.elapsed()
        if self.loss_config.micro_batch_tokens is not None:
            update.metrics["train/micro_batches_per_update"] = len(micro.flat) / max(len(micro.items), 1)
            update.metrics["train/micro_batch_padded_tokens"] = sum(
                int(mb["completion_ids"].numel() + mb["prompt_ids"].numel()) for mb in micro.flat
            ) / max(len(micro.flat), 1)
        self.logger.log_update(update, ctx.global_step())
        timer.seconds["rollout_inside_step"] = step.elapsed()
        self.logger.memory.phase("loss")
        return micro.items

    def roll_out_and_score(
        self, group_rows: list[dict[str, Any]], training: bool, global_step: int | None = None
    ) -> GenerationBatch:
        r"""Roll out this rank's share of whole groups, score them, and gather every record on every rank.

        `global_step`: the optimiser step the rollout belongs to (None: the trainer's current one).
        """
        return self.gather(self.score(self.roll_out(group_rows, training, global_step)))

    def validate(self, rows: list[dict[str, Any]], index_key: str) -> tuple[list[ScoredTrajectory], dict, dict]:
        r"""Validation: roll out and score this rank's prompts (one greedy trajectory each, no branching).

        Args:
            rows: This rank's validation rows.
            index_key: The rows' dataset-row column (`trainer.EVAL_INDEX`), copied to each record's `eval_index`.

        Returns:
            `(records, timing, tool metrics)` of this rank (`time/rollout` covers rolling out and scoring).
        """
        ctx, timer = self.ctx, StepTimer()
        with timer.stage("time/rollout"), self.source.paused():  # an async producer waits meanwhile
            truths = [r.get("_ground_truth") for r in rows]  # agentic_contamination_mode
            output = self.generation(
                ctx.model_wrapped(), [prompt_ids_of(r) for r in rows], False, ctx.global_step(), truths
            )
            records = []
            if output is not None:
                groups = output.groups
                records = score_groups(self.reward_fn, self.tokenizer, self.eos_ids, groups, rows, range(len(rows)))
            for rec in records:
                rec.eval_index = rows[rec.group].get(index_key)
        timing = dict(output.timing) if output is not None else {}
        timing.update(timer.seconds)
        return records, timing, self.session.pop_metrics()

    # -------------------------------------------------------------------------------------------- stages
    def roll_out(
        self, group_rows: list[dict[str, Any]], training: bool, global_step: int | None = None
    ) -> RolloutShard:
        r"""The roll-out stage: this rank's groups (`g % world == rank`) through the session.

        Every rank calls the rollout, even without groups: it enters collectives (ZeRO-3 gathers, weight sync).

        Raises:
            RuntimeError: the rollout did not return exactly M trajectories (1 for validation) per prompt.
        """
        ctx = self.ctx
        world, rank = ctx.accelerator.num_processes, ctx.accelerator.process_index
        mine = [g for g in range(len(group_rows)) if g % world == rank]
        rows = [group_rows[g] for g in mine]
        step = ctx.global_step() if global_step is None else global_step
        timer = StepTimer()
        with timer.stage("time/rollout"):
            truths = [r.get("_ground_truth") for r in rows]  # agentic_contamination_mode
            output = self.generation(ctx.model_wrapped(), [prompt_ids_of(r) for r in rows], training, step, truths)
        if mine:
            expected = ctx.num_generations if training else 1
            if len(output.groups) != len(mine) or any(len(g) != expected for g in output.groups):
                raise RuntimeError(
                    f"rollout returned {[len(g) for g in output.groups]} trajectories for {len(mine)} prompts; "
                    f"expected exactly {expected} each."
                )
        else:
            output = None
        return RolloutShard(group_rows, mine, rows, output, timer)

    def score(self, shard: RolloutShard) -> tuple[RolloutShard, list[ScoredTrajectory], dict, dict]:
        r"""The score stage: rewards of this rank's trajectories and the answer-leak guard (`time/reward`).

        Returns:
            `(shard, records, rollout metrics, timing)` of this rank.
        """
        output = shard.output
        metrics = dict(output.metrics) if output is not None else {}
        timing = dict(output.timing) if output is not None else {}
        timing.update(shard.timer.seconds)
        records: list[ScoredTrajectory] = []
        with shard.timer.stage("time/reward"):
            if output is not None:
                records = score_groups(
                    self.reward_fn, self.tokenizer, self.eos_ids, output.groups, shard.rows, shard.group_ids
                )
                # share of trajectories whose observations hold the answer (rewards/contamination.py)
                metrics["tools/answer_leak_rate"] = answer_leak_rate(
                    [observation_texts(self.tokenizer, t.response_ids, t.loss_mask) for g in output.groups for t in g],
                    [row.get("_ground_truth") for row, g in zip(shard.rows, output.groups) for _ in g],
                )
        timing["time/reward"] = shard.timer.seconds["time/reward"]
        return shard, records, metrics, timing

    def gather(self, scored: tuple[RolloutShard, list[ScoredTrajectory], dict, dict]) -> GenerationBatch:
        r"""Every rank's records (sorted by group, member), metrics and timing combined (`combine_rank_shards`)."""
        shard, records, metrics, timing = scored
        tool_metrics = self.session.pop_metrics()
        local = (len(shard.group_ids), metrics, timing, tool_metrics)
        if self.ctx.accelerator.num_processes > 1:
            records = gather_objects(records, self.ctx.collective_group)
            shards = gather_objects([local], self.ctx.collective_group)
        else:
            shards = [local]
        records.sort(key=lambda r: (r.group, r.member))
        metrics, timing = combine_rank_shards(shards)
        return GenerationBatch(shard.group_rows, records, metrics, timing)

    def dynamic_sampling(self, batch: GenerationBatch, global_step: int) -> UpdateBatch:
        r"""`rl_dynamic_sampling`: roll out extra generation batches until the update has groups with reward signal.

        Without it the batch is the update. The first batch is TRL's; each extra batch draws `len(batch.rows)`
        prompts from the training set (`extra_prompt_indices`, the same rows on every rank) and is rolled out like
        the first. It stops once the batches hold `len(batch.rows)` groups whose rewards differ or after
        `rl_dynamic_sampling_max_batches` batches; `assemble_update` then takes those groups first and fills the rest
        with equal-reward groups (docs/algorithms.md §4.7). Metrics and timing cover every batch
        (`combine_generation_batches`), so `reward/...` and `rollout/...` describe all sampled groups and
        `time/rollout` includes the extra rollouts. `global_step` (the step the update belongs to) seeds the draw.
        """
        if not self.loss_config.dynamic_sampling:
            return UpdateBatch(batch.rows, batch.records, batch.records, batch.metrics, batch.timing)
        ctx = self.ctx
        target = len(batch.rows)
        batches = [batch]
        have = count_signal_groups(batch.records)
        dataset = ctx.train_dataset
        while have < target and len(batches) < self.loss_config.dynamic_sampling_max_batches:
            indices = extra_prompt_indices(len(dataset), target, ctx.seed, global_step, len(batches))
            extra = self.roll_out_and_score([dataset[i] for i in indices], training=True)
            batches.append(extra)
            have += count_signal_groups(extra.records)
        records, rows, sampled, sampling_metrics = assemble_update([(b.records, b.rows) for b in batches], target)
        metrics, timing = combine_generation_batches([(len(b.rows), b.metrics, b.timing) for b in batches])
        return UpdateBatch(rows, records, sampled, metrics, timing, sampling_metrics)

    def micro_batches(self, records: list[ScoredTrajectory]) -> MicroBatches:
        r"""The micro-batch stage: this rank's Trainer items and the flat list of their micro-batches.

        Without `rl_micro_batch_tokens`: one micro-batch of `per_device_train_batch_size` trajectories per micro-step
        (`micro_batch_layout`). With it, `build_grpo_config` made one Trainer micro-step one optimiser update: the
        item is `{"micro_batches": [...]}`, the rank's b x A trajectories of the update cut by tokens
        (`token_micro_batches`), with the same number of micro-batches on every rank (the largest count over ranks;
        every rank holds every trajectory after the gather, so each computes every rank's count locally); a rank that
        needs fewer micro-batches splits its largest ones.
        """
        ctx = self.ctx
        world, rank = ctx.accelerator.num_processes, ctx.accelerator.process_index
        b, accum = ctx.per_device_train_batch_size, ctx.gradient_accumulation_steps
        steps = ctx.steps_per_generation
        device, pad = ctx.accelerator.device, ctx.pad_token_id
        cap = self.loss_config.micro_batch_tokens
        version = ctx.global_step()  # the proximal weights: those the update starts from (docs/algorithms.md §13)
        if cap is None:
            flat = []
            for rows_k, update_k in micro_batch_layout(len(records), rank, world, b, accum, steps):
                num_tokens = sum(sum(r.loss_mask_train) for r in records[update_k])
                num_sequences = len(records[update_k])  # the sequence-mean normaliser (§4.8)
                flat.append(collate_records(records[rows_k], num_tokens, pad, device, num_sequences=num_sequences,
                                            proximal_version=version))  # fmt: skip
            return MicroBatches(flat, flat)

        def lengths(rows: list[ScoredTrajectory]) -> list[tuple[int, int]]:
            return [(len(r.prompt_ids), len(r.response_ids)) for r in rows]

        layouts = [micro_batch_layout(len(records), r, world, b, accum, steps) for r in range(world)]
        items, flat = [], []
        for k, (rows_k, update_k) in enumerate(layouts[rank]):
            num_tokens = sum(sum(r.loss_mask_train) for r in records[update_k])
            num_sequences = len(records[update_k])  # the sequence-mean normaliser (§4.8)
            count = max(len(token_micro_batches(lengths(records[lay[k][0]]), cap)) for lay in layouts)
            mine = records[rows_k]
            parts = [
                collate_records(
                    [mine[i] for i in indices],
                    num_tokens,
                    pad,
                    device,
                    num_sequences=num_sequences,
                    proximal_version=version,
                )  # fmt: skip
                for indices in token_micro_batches(lengths(mine), cap, count)
            ]
            items.append({"micro_batches": parts})
            flat.extend(parts)
        return MicroBatches(items, flat)

    @torch.no_grad()
    def add_log_probs(self, micro_batches: list[MicroBatch]) -> None:
        r"""Old log-probs (when an update after the first uses the rollout) and reference log-probs (KL > 0).

        Only the loss-mask positions are scored (zeros elsewhere, where the loss never reads them).
        """
        ctx = self.ctx
        generate_every = ctx.steps_per_generation * ctx.num_iterations
        need_old = ctx.gradient_accumulation_steps % generate_every != 0
        # stale groups (rl_max_staleness > 0) need the proximal log-probs for the off-policy correction
        need_old = need_old or any("behaviour_stale" in batch for batch in micro_batches)
        model, ref_model = ctx.model(), ctx.ref_model()
        for batch in micro_batches:
            input_ids, attention_mask, width = concat_batch(batch)
            select = batch["loss_mask"]
            if need_old:
                batch["old_per_token_logps"] = self.policy(model, input_ids, attention_mask, width, select)[0]
            if ctx.beta != 0.0:
                if ref_model is not None:
                    ref = self.policy(ref_model, input_ids, attention_mask, width, select)[0]
                else:
                    with ctx.accelerator.unwrap_model(model).disable_adapter():
                        ref = self.policy(model, input_ids, attention_mask, width, select)[0]
                batch["ref_per_token_logps"] = ref


# ---------------------------------------------------------------------------------------------- update
def micro_batch_loss(
    policy: PolicyScorer, model: Any, batch: MicroBatch, cfg: ArpoLossConfig, beta: float, world_size: int
) -> tuple[torch.Tensor, dict[str, Any]]:
    r"""Policy loss (+ KL, - entropy bonus) of one micro-batch, normalised by the update's global token count.

    The policy loss is the registered function named by `rl_policy_loss` (`algorithms.get_policy_loss`, as verl's
    actor selects its loss by name); the KL and entropy terms are `compute_kl_loss` and `compute_entropy_loss`.
    A loss whose signature names `num_sequences` also gets the update's trajectory count (the normaliser of the
    sequence aggregation modes, docs/algorithms.md §4.8), scaled by the world size like the token count.
    The returned value is `sum(mask * L) * world_size / N_update`: summed over the accumulation steps and averaged
    over ranks by DDP/DeepSpeed it gives the token mean over all loss-mask tokens of the update (docs/algorithms.md
    §4.4, Decision). The loss mask gates the policy-gradient, KL and entropy terms and every normaliser; the
    attention mask (observations included) only feeds the forward pass.

    Returns:
        `(loss, metric inputs)`: the keyword arguments of `StepLogger.log_loss` (`pg_metrics`, detached `entropy`,
        boolean `mask`, the local token means `kl_value` and `entropy_value` or None, `clip_mask`).
    """
    input_ids, attention_mask, width = concat_batch(batch)
    logps, entropy = policy(
        model,
        input_ids,
        attention_mask,
        width,
        batch["loss_mask"],
        with_entropy=True,
        entropy_grad=cfg.entropy_coef != 0.0,
    )
    mask = batch["loss_mask"].to(logps.dtype)
    old = batch.get("old_per_token_logps")
    old = logps.detach() if old is None else old
    entropy_detached = entropy.detach()

    advantages = batch["advantages"]
    if cfg.entropy_advantage:
        advantages = entropy_aware_advantages(advantages, entropy_detached, mask, cfg.entropy_advantage_coef)
    off_policy = None
    if "behaviour_stale" in batch:  # tokens sampled by older weights (rl_max_staleness > 0)
        advantages, off_policy = off_policy_corrected(advantages, old, batch, mask, cfg)
    clip_mask = None
    if cfg.balanced_clip and cfg.balanced_clip_scope == "high_entropy":
        clip_mask = high_entropy_mask(entropy_detached, mask, cfg.high_entropy_z)

    normaliser = batch["num_items_in_batch"].to(logps.device, torch.float32) / world_size
    policy_loss = get_policy_loss(cfg.policy_loss)
    extra = {}
    if accepts_keyword(policy_loss, "num_sequences"):  # the sequence aggregation modes' normaliser (§4.8)
        extra["num_sequences"] = batch["num_sequences_in_batch"].to(logps.device, torch.float32) / world_size
    loss, pg_metrics = policy_loss(
        logps,
        old,
        advantages,
        mask,
        cfg,
        balanced_clip_mask=clip_mask,
        num_tokens=normaliser,
        **extra,
    )
    kl_metric = entropy_bonus_metric = None  # local token means of this micro-batch (for the logs only)
    if beta != 0.0:
        ref = batch["ref_per_token_logps"]
        loss = loss + beta * compute_kl_loss(logps, ref, mask, normaliser)
        kl_metric = compute_kl_loss(logps.detach(), ref, mask)
    if cfg.entropy_coef != 0.0:
        loss = loss - cfg.entropy_coef * compute_entropy_loss(entropy, mask, normaliser)
        entropy_bonus_metric = compute_entropy_loss(entropy_detached, mask)
    logged = {
        "pg_metrics": pg_metrics,
        "entropy": entropy_detached,
        "mask": mask.bool(),
        "kl_value": kl_metric,
        "entropy_value": entropy_bonus_metric,
        "clip_mask": clip_mask,
    }
    if off_policy is not None:
        logged["off_policy"] = off_policy
    return loss, logged


def off_policy_corrected(
    advantages: torch.Tensor, proximal: torch.Tensor, batch: MicroBatch, mask: torch.Tensor, cfg: ArpoLossConfig
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""Advantages `[b, C]` times the off-policy weights `pi_prox / pi_behav` of the stale rows' tokens.

    `algorithms.off_policy.off_policy_weights` (`rl_off_policy_correction`, `rl_off_policy_cap`); every registered
    policy loss is positively homogeneous in the advantage, so this weights each token's loss (docs/algorithms.md
    §13.2). Rows sampled by the proximal weights keep weight 1 exactly.

    Returns:
        `(weighted advantages, off_policy/* metrics)`.
    """
    weights, metrics = off_policy_weights(
        proximal,
        batch["behaviour_per_token_logps"],
        batch["behaviour_stale"],
        mask,
        cfg.off_policy_correction,
        cfg.off_policy_cap,
    )
    return advantages * weights.to(advantages.dtype), metrics


def accumulate_update(
    model: Any,
    micro_batches: list[MicroBatch],
    accelerator: Any,
    loss_of: Callable[[Any, MicroBatch], torch.Tensor],
    deepspeed: bool,
) -> torch.Tensor:
    r"""Forward/backward of every token micro-batch of one optimiser update (`rl_micro_batch_tokens`).

    How gradient accumulation is driven: `build_grpo_config` sets the Trainer's `gradient_accumulation_steps` to 1
    (one Trainer micro-step = one update), so the Trainer synchronises and steps after this call. Inside, every
    micro-batch but the last runs under `accelerator.no_sync` (DDP/FSDP: no all-reduce) with Accelerate's
    `sync_gradients` off (DeepSpeed: `set_gradient_accumulation_boundary(False)`, no optimiser step); the last one
    synchronises. Every rank runs the same number of micro-batches (`ArpoStep.micro_batches`), so DeepSpeed's
    per-backward reductions and ZeRO-3's per-forward gathers match across ranks. Each micro-batch's loss is already
    divided by the update's global loss-mask token count (`micro_batch_loss`), so the accumulated gradient is the
    token mean over the update, whatever the number of micro-batches.

    Args:
        model: The wrapped policy (DDP/FSDP/DeepSpeed module).
        micro_batches: The update's micro-batches on this rank.
        accelerator: The Accelerate `Accelerator`.
        loss_of: `(model, micro-batch) -> loss` inside the Trainer's loss context (`compute_loss`).
        deepspeed: DeepSpeed is enabled (its backward is not scaled by the accumulation steps again).

    Returns:
        The summed loss (detached, for the logs).
    """
    state = accelerator.gradient_state
    sync = state.sync_gradients
    kwargs = {"scale_wrt_gas": False} if deepspeed else {}
    total = None
    for i, batch in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        context = contextlib.nullcontext() if last else accelerator.no_sync(model)
        state._set_sync_gradients(sync and last)
        try:
            with context:
                loss = loss_of(model, batch)
                accelerator.backward(loss, **kwargs)
        finally:
            state._set_sync_gradients(sync)
        loss = loss.detach()
        total = loss if total is None else total + loss
    return total


# ---------------------------------------------------------------------------------------------- log
class StepLogger:
    r"""The log stage: appends a step's values to TRL's `_metrics` (averaged and logged by TRL) and to rollouts.jsonl.

    Args:
        metrics: The trainer's `_metrics` (`{"train": defaultdict(list), "eval": defaultdict(list)}`).
        accelerator: The Accelerate `Accelerator` (rank, collectives).
        tokenizer: Decodes the rollouts.jsonl entries.
        log_path: rollouts.jsonl (`metrics.ROLLOUT_LOG_NAME` in `output_dir`).
        log_ratio: `arpo_rollout_log_ratio`, the share of groups written there.
        seed: Seeds the sampler of those groups (saved with the checkpoints, `rollout_rng`).
    """

    def __init__(
        self, metrics: dict, accelerator: Any, tokenizer: Any, log_path: str, log_ratio: float, seed: int
    ) -> None:
        r"""See the class docstring."""
        self.metrics, self.accelerator, self.tokenizer = metrics, accelerator, tokenizer
        self.log_path, self.log_ratio = log_path, log_ratio
        self.rollout_rng = random.Random(seed)
        self.rollout_count = 0
        self.memory = MemoryTracker()

    def log_update(self, update: UpdateBatch, global_step: int) -> None:
        r"""A generation step's `reward/*`, `rollout/*`, `tools/*`, `time/*`, `dynamic_sampling/*` and rollouts.jsonl."""
        self.log_rollout(update.sampled, update.metrics, update.timing, mode="train")
        for key, value in update.sampling_metrics.items():
            self.metrics["train"][key].append(value)
        self.write_rollout_log(update.records, update.rows, global_step)
        self.rollout_count += 1

    def log_rollout(self, records: list[ScoredTrajectory], metrics: dict, timing: dict, mode: str) -> None:
        r"""Add one rollout's values (`rollout_log_values`) to the metrics TRL averages and logs."""
        peak = None
        if torch.cuda.is_available():  # process-wide peak (the memory tracker resets CUDA's per phase)
            peak = max(self.memory.overall, torch.cuda.max_memory_allocated() / GIB)
        for key, value in rollout_log_values(records, metrics, timing, peak).items():
            self.metrics[mode][key].append(value)

    def write_rollout_log(self, records: list[ScoredTrajectory], group_rows: list[dict], global_step: int) -> None:
        r"""Append a sampled share (`arpo_rollout_log_ratio`) of groups, with their branch tree, to rollouts.jsonl."""
        if not self.accelerator.is_main_process:
            return
        chosen = select_logged_groups((r.group for r in records), self.log_ratio, self.rollout_rng)
        if not chosen:
            return
        decode = functools.partial(self.tokenizer.decode, skip_special_tokens=False)
        entries = rollout_log_entries(records, group_rows, chosen, decode, global_step, self.rollout_count)
        os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
        with open(self.log_path, "a", encoding="utf-8") as f:
            for entry in entries:
                f.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")

    def log_loss(
        self, mode: str, pg_metrics, entropy, mask, kl_value, entropy_value, clip_mask, off_policy=None
    ) -> None:
        r"""Append one micro-batch's loss metrics (`loss_metric_values`), token-weighted over ranks.

        `kl_value` and `entropy_value` are local token means without gradient, like every other metric here.
        `off_policy`: the `off_policy/*` values of a micro-batch with stale rows (this rank's, averaged per step).
        """
        for key, value in (off_policy or {}).items():
            self.metrics[mode][key].append(value)
        count = float(mask.sum().item())
        local = loss_metric_values(pg_metrics, entropy, mask, kl_value, entropy_value, clip_mask)
        keys = list(local)
        # token-weighted mean over ranks in one collective
        values = torch.tensor([local[k] * count for k in keys] + [count], device=self.accelerator.device)
        if self.accelerator.num_processes > 1:
            values = self.accelerator.reduce(values, reduction="sum")
        total = max(float(values[-1].item()), 1.0)
        for i, key in enumerate(keys):
            self.metrics[mode][key].append(float(values[i].item()) / total)
        self.metrics[mode]["loss/trained_tokens"].append(float(values[-1].item()))

    def log_memory(self, model: Any, optimizer: Any) -> None:
        r"""`memory/*` of the update that just stepped (called right after `optimizer.step()`, before `zero_grad`).

        `weights_gib`, `gradients_gib`, `optimizer_states_gib` (tensor bytes on this rank), `static_gib` (their sum);
        with CUDA the peaks of the phases since the last update: `peak_rollout_gib` (rollout and log-prob pass),
        `peak_loss_gib` (forward/backward), `peak_optimizer_gib` (optimiser step), `peak_gib` and
        `peak_over_static` (the issue's bound is 1.25).
        """
        split = training_state_bytes(model, optimizer)
        values = {f"memory/{key}_gib": value / GIB for key, value in split.items()}
        static = sum(split.values()) / GIB
        values["memory/static_gib"] = static
        peaks = self.memory.take()
        for phase, peak in peaks.items():
            values[f"memory/peak_{phase}_gib"] = peak
        if peaks:
            values["memory/peak_gib"] = max(peaks.values())
            values["memory/peak_over_static"] = max(peaks.values()) / max(static, 1e-9)
        for key, value in values.items():
            self.metrics["train"][key].append(value)

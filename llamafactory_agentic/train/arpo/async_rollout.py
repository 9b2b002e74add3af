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

r"""`rl_max_staleness: k > 0`: a rollout producer that runs up to k optimiser steps ahead of the trainer.

docs/algorithms.md §13. The producer is a background thread with its own rollout stack: a copy of the policy, its
own engine of the same registered backend, and an agent loop sharing the run's tool executor (so the tool cache,
branching, dynamic sampling and the reward are those of the lockstep step). It rolls out and scores whole generation
batches (`UpdateBatch`) and queues them; the step takes them with `AsyncRolloutSource.take` instead of rolling out.

* **Prompt order.** The producer owns it: generation batch j holds the prompts of the j-th block of TRL's own
  `RepeatSampler` (same seed, same permutation per epoch as a lockstep run), so it can roll out batches the Trainer
  has not asked for yet; the Trainer's generation batch only paces the steps.
* **Weights and versions.** After every optimiser step the trainer publishes a CPU copy of the weights with its
  version (`global_step`): every parameter once, then the trainable ones (LoRA adapters included, so the producer
  never decodes with a stale adapter; the frozen base is not copied again). Batch j
  is first trained at version `V(j) = V0 + (j - j0) * U` (U: optimiser steps per generation batch); the producer
  rolls it out with exactly version `max(V(j) - k, V0)`, waiting for it, so staleness is at most k and the run is
  as deterministic as the lockstep one. Weights change only between batches: a trajectory in flight always
  finishes on the version it started with (one version per trajectory, recorded on every record).
* **End.** The producer rolls out no batch past the last one the run trains (`TrainerState.max_steps`), so the end of
  a run wastes no rollout and no tool call.
* **Staleness bound.** `take` refuses a batch older than k (counted in `async/groups_dropped_stale`) and rolls
  those prompts out again with the current weights; it never trains a group older than k.
* **Checkpoints.** `save_state` writes `async_rollout_state.json` (generation batches taken, the version, and the
  batches produced but not trained, which are dropped and recorded there); a resumed run restarts the producer at
  the first untrained batch, so every prompt of the epoch is trained exactly once. Save at generation-batch
  boundaries (`save_steps` a multiple of U): a checkpoint inside a generation batch is refused with an error.
* **Metrics** (`async/*`, per generation step): `staleness_mean`, `staleness_max` (optimiser steps between the
  sampling and the training weights, over trajectories), `groups_dropped_stale`, `producer_idle_s` (the producer
  waited for weights or buffer room since the last take), `trainer_wait_s` (the step waited for the batch),
  `buffer_depth` (batches ready when the step took its own).

Engines: the hf engine (its own copy of the module, decoded in the producer thread) and the `vllm_server` engine (the
producer pushes its copy's weights, version by version, into the server, `rollout/server_engine.py`; the trainer
pushes nothing after its steps).

Several ranks (torchrun; DDP or ZeRO-1/2, not ZeRO-3 or FSDP, which leave no rank a whole policy to copy): each rank's
producer rolls out its share of each batch's groups as the lockstep step does and gathers the records on a gloo group
of the producers' own, so its collectives never interleave with the optimiser's on the trainer's group; before each
batch the producers agree to start it (`_agree`: the same batch on every rank, no pause asked anywhere), so a pause
for validation stops all of them at the same boundary.
"""

import contextlib
import copy
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch
from transformers.trainer_callback import TrainerCallback

from ...common.log import get_logger
from ...rollout.session import RolloutSession
from ...rollout.weight_sync import collective_group


logger = get_logger(__name__)
STATE_NAME = "async_rollout_state.json"


class PromptFeed:
    r"""Dataset indices of generation batch j, in the order TRL's `RepeatSampler` hands them to a lockstep run.

    Args:
        sampler: A fresh `RepeatSampler` of the run (`trainer._get_train_sampler()`); epoch e is its e-th pass.
        prompts_per_batch: Prompts per generation batch (`arpo_rollout_batch_size`).
        group_size: M (the sampler repeats each index M times in a row).
    """

    def __init__(self, sampler: Any, prompts_per_batch: int, group_size: int) -> None:
        r"""See the class docstring."""
        self.sampler, self.prompts, self.group_size = sampler, int(prompts_per_batch), int(group_size)
        self.repeat = int(getattr(sampler, "repeat_count", 1))
        self._batches: list[list[int]] = []

    def _next_epoch(self) -> None:
        indices = list(iter(self.sampler))
        block = self.prompts * self.group_size * self.repeat
        added = 0
        for start in range(0, len(indices) - block + 1, block):
            self._batches.append(indices[start : start + self.prompts * self.group_size : self.group_size])
            added += 1
        if not added:
            raise ValueError(
                "the training set holds fewer prompts than one generation batch (arpo_rollout_batch_size)"
            )

    def batch(self, j: int) -> list[int]:
        r"""Dataset indices (one per group) of generation batch `j` (0-based over all epochs)."""
        while len(self._batches) <= j:
            self._next_epoch()
        return list(self._batches[j])


class AsyncRolloutSource:
    r"""Scored groups from a producer thread, at most `max_staleness` optimiser steps old (module docstring).

    Args:
        step: The trainer's `ArpoStep` (its reward, loss config and context are shared with the producer's step).
        producer_session: The producer's `RolloutSession` (own engine, shared executor).
        producer_model: The producer's copy of the policy (the module its engine decodes with).
        feed: The `PromptFeed`.
        dataset: The training rows (`feed` indices point into it).
        max_staleness: k (>= 1).
        updates_per_batch: U, optimiser steps per generation batch.
        group: Several ranks: the gloo process group of the producers' collectives (their record gathers, weight-push
            barriers and the start of each batch, `_agree`); None on one process.
        copy_weights: False where the producer neither decodes nor sends weights (a `vllm_server` rank other than
            0): `publish` then records each version without copying, and `producer_model` is never written.
    """

    def __init__(
        self,
        step: Any,
        producer_session: RolloutSession,
        producer_model: Any,
        feed: PromptFeed,
        dataset: Any,
        max_staleness: int,
        updates_per_batch: int,
        group: Any = None,
        copy_weights: bool = True,
    ) -> None:
        r"""See the class docstring; the producer thread starts at the first `take`."""
        from .pipeline import ArpoStep  # the stages of the lockstep step, on the producer's stack

        self.step, self.model, self.feed, self.dataset = step, producer_model, feed, dataset
        self.k, self.updates = int(max_staleness), max(int(updates_per_batch), 1)
        self.producing_version = 0  # the version the producer's engine decodes with (stamped on every token)
        ctx = replace(
            step.ctx,
            model=lambda: producer_model,
            model_wrapped=lambda: producer_model,
            global_step=lambda: self.producing_version,
            collective_group=group,
        )
        self.producer = ArpoStep(ctx, producer_session, step.reward_fn, step.loss_config, step.policy, step.logger)
        self.group, self.copy_weights = group, copy_weights
        self.cond = threading.Condition()
        # pausing (validation, a redone stale batch): the trainer's thread raises `pause_requests` and waits while the
        # producer is in a batch, or deciding to start one without having seen the request (`_agree`)
        self.pause_requests = 0
        self.phase = "idle"  # "idle" | "deciding" (may start a batch) | "batch"
        self.snapshots: dict[int, dict[str, torch.Tensor]] = {}
        self.loaded_version: int | None = None
        self.full_snapshot_taken = False  # `publish` copies every parameter once, then the trainable ones
        self.ready: dict[int, tuple[Any, int]] = {}  # batch j -> (UpdateBatch, version that sampled it)
        self.base_batch = 0  # j0: first batch of this process (0, or the resumed position)
        self.base_version = 0  # V0
        self.taken = 0  # batches taken so far (all epochs), the next one to train is `taken`
        self.next_to_produce = 0
        self.max_steps = 0  # the run's last optimiser step (TrainerState.max_steps); 0: unknown
        self.idle = 0.0
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.stopped = False
        self.dropped_at_checkpoint: list[int] = []

    # ---------------------------------------------------------------------------------------------- trainer side
    def train_version(self, j: int) -> int:
        r"""V(j): the version batch j is first trained at."""
        return self.base_version + (j - self.base_batch) * self.updates

    def sampling_version(self, j: int) -> int:
        r"""The version batch j is rolled out with: `max(V(j) - k, V0)`."""
        return max(self.train_version(j) - self.k, self.base_version)

    def publish(self, model: Any, version: int) -> None:
        r"""Hand the producer a CPU copy of the weights after optimiser step `version` (called by the callback).

        The first copy holds every parameter; later ones only the trainable ones (`requires_grad`: with LoRA the
        adapters, not the frozen base), which the producer loads on top of the first, in version order.
        """
        version = int(version)
        with self.cond:
            keep = version in self._wanted() or not self.snapshots
        snapshot = None  # a server rank other than 0: published, nothing to load
        if keep and self.copy_weights:  # copied outside the lock: the producer's bookkeeping does not wait for it
            everything = not self.full_snapshot_taken
            snapshot = {
                name: p.detach().to("cpu", copy=True)
                for name, p in model.named_parameters()
                if everything or p.requires_grad
            }
            self.full_snapshot_taken = True
        with self.cond:
            if keep:
                self.snapshots[version] = snapshot
            wanted = self._wanted()
            for v in [v for v in self.snapshots if v < min(wanted | {version})]:
                del self.snapshots[v]
            self.cond.notify_all()

    def _wanted(self) -> set[int]:
        # the versions of the batches not rolled out yet, up to the farthest the producer may go (`_can_start`)
        return {self.sampling_version(j) for j in range(self.next_to_produce, self.taken + self.k + 2)}

    def take(self, group_rows: list[dict[str, Any]]) -> Any:
        r"""The `UpdateBatch` of the next generation batch, produced ahead, at most k optimiser steps old.

        `group_rows` (the Trainer's generation batch) only paces the step: the producer owns the prompt order.

        Raises:
            The producer's error, if its rollout failed.
        """
        self._start()
        j = self.taken
        start = time.perf_counter()
        with self.cond:
            depth = len(self.ready)
            while j not in self.ready and self.error is None:
                self.cond.wait(timeout=1.0)
            if self.error is not None:
                raise RuntimeError(f"the rollout producer failed: {self.error!r}") from self.error
            update, version = self.ready.pop(j)
            idle, self.idle = self.idle, 0.0
            self.taken += 1
            self.cond.notify_all()
        waited = time.perf_counter() - start
        now = self.step.ctx.global_step()
        dropped = 0
        if now - version > self.k:  # never train a group older than k: roll its prompts out again, now
            dropped = len(update.rows)
            logger.warning(f"generation batch {j} is {now - version} steps old (> rl_max_staleness {self.k}): redone")
            with self.paused():
                update = self.step.dynamic_sampling(
                    self.step.roll_out_and_score(self.rows(j), training=True, global_step=now), now
                )
            version = now
        ages = [now - (r.weight_version if r.weight_version is not None else version) for r in update.records]
        update.sampling_metrics.update(
            {
                "async/staleness_mean": sum(ages) / max(len(ages), 1),
                "async/staleness_max": float(max(ages, default=0)),
                "async/groups_dropped_stale": float(dropped),
                "async/producer_idle_s": idle,
                "async/trainer_wait_s": waited,
                "async/buffer_depth": float(depth),
            }
        )
        return update

    def rows(self, j: int) -> list[dict[str, Any]]:
        r"""The dataset rows (one per group) of generation batch `j`."""
        return [self.dataset[i] for i in self.feed.batch(j)]

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        r"""Hold the producer between two batches (validation uses the shared executor and server meanwhile).

        Waits for the batch in flight to end; on several ranks, the producers start a batch only when no rank has
        asked for a pause (`_agree`), so they stop at the same batch boundary and none waits in a gather for a
        producer that its trainer thread holds.
        """
        with self.cond:
            self.pause_requests += 1
            self.cond.notify_all()
            while self.phase != "idle" and self.error is None and self.thread is not None and self.thread.is_alive():
                self.cond.wait(timeout=1.0)
        try:
            yield
        finally:
            with self.cond:
                self.pause_requests -= 1
                self.cond.notify_all()

    # ---------------------------------------------------------------------------------------------- producer thread
    def _start(self) -> None:
        if self.thread is None:
            self.next_to_produce = self.taken
            self.thread = threading.Thread(target=self._run, name="arpo-rollout-producer", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        try:
            with collective_group(self.group):  # the server's weight-push barrier: the producers' group
                while True:
                    t0 = time.perf_counter()
                    with self.cond:
                        while not self.stopped and not self._can_start(self.next_to_produce):
                            self.cond.wait(timeout=1.0)
                        if self.stopped:
                            return
                        j = self.next_to_produce
                        version = self.sampling_version(j)
                        weights = self.snapshots.get(version)
                        go = self.pause_requests == 0
                        self.phase = "deciding" if go else "idle"
                        self.idle += time.perf_counter() - t0
                    go = self._agree(j, go)
                    with self.cond:
                        if self.stopped:
                            self.phase = "idle"
                            self.cond.notify_all()
                            return
                        if not go:  # a pause on some rank: wait, then agree again
                            self.phase = "idle"
                            self.cond.notify_all()
                            self.cond.wait(timeout=1.0 if self.pause_requests else 0.05)
                            continue
                        self.phase = "batch"
                    if weights is not None and self.loaded_version != version:
                        load_weights(self.model, weights)
                        self.loaded_version = version
                    self.producing_version = version  # the engine stamps it on every token; the records carry it
                    target = self.train_version(j)  # dynamic sampling draws its extra prompts as at step V(j)
                    batch = self.producer.roll_out_and_score(self.rows(j), training=True)
                    update = self.producer.dynamic_sampling(batch, target)
                    with self.cond:
                        self.ready[j] = (update, version)
                        self.next_to_produce = j + 1
                        self.phase = "idle"
                        self.cond.notify_all()
        except BaseException as err:  # handed to the trainer by `take`
            with self.cond:
                self.error = err
                self.phase = "idle"
                self.cond.notify_all()

    def _agree(self, j: int, go: bool) -> bool:
        r"""Whether every rank's producer starts batch `j` now (no rank asked for a pause); `go` on one process.

        Raises:
            RuntimeError: the producers are at different batches (their prompt feeds diverged).
        """
        if self.group is None:
            return go
        import torch.distributed as dist

        votes: list[Any] = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(votes, (int(j), bool(go)), group=self.group)
        batches = {b for b, _ in votes}
        if len(batches) != 1:
            raise RuntimeError(f"the ranks' rollout producers are at different generation batches: {sorted(batches)}")
        return all(vote for _, vote in votes)

    def plan_steps(self, max_steps: int) -> None:
        r"""The run ends after optimiser step `max_steps`: the producer rolls out no batch that would not be trained."""
        with self.cond:
            self.max_steps = max(int(max_steps), 0)
            self.cond.notify_all()

    def last_batch(self) -> int | None:
        r"""The last generation batch the run trains (first trained before step `max_steps`); None when unknown."""
        if self.max_steps <= 0:
            return None
        remaining = max(self.max_steps - self.base_version, 0)
        return self.base_batch + -(-remaining // self.updates) - 1

    def _can_start(self, j: int) -> bool:
        # end: no batch past the run's last one; room: at most k/U + 1 batches ahead of the one being trained;
        # weights: the sampling version is published
        last = self.last_batch()
        if last is not None and j > last:
            return False
        if j - self.taken > self.k // self.updates + 1:
            return False
        return self.sampling_version(j) in self.snapshots

    def close(self) -> None:
        r"""Stop the producer thread (it finishes the batch it is rolling out, which is dropped).

        On several ranks the producers' gloo group is then shut down here, while every rank is still running (the
        trainer's collectives after training follow), instead of with the default group at the process's end.
        """
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join(timeout=600)
        if self.group is not None and not (self.thread is not None and self.thread.is_alive()):
            import torch.distributed as dist

            dist.destroy_process_group(self.group)
            self.group = None

    # ---------------------------------------------------------------------------------------------- checkpoints
    def save_state(self, directory: str, global_step: int, write: bool = True) -> None:
        r"""Write `async_rollout_state.json`: batches taken, version, and the produced-but-untrained batches dropped.

        `write`: False on the ranks other than the main one (every rank checks the boundary, one writes the file).

        Raises:
            RuntimeError: the checkpoint falls inside a generation batch (some of its updates not done yet).
        """
        with self.cond:
            expected = self.train_version(self.taken)
            if global_step != expected:
                raise RuntimeError(
                    f"checkpoint at optimiser step {global_step} falls inside generation batch {self.taken - 1} "
                    f"(each takes {self.updates} optimiser steps): with rl_max_staleness > 0 set save_steps to a "
                    f"multiple of {self.updates} so that a resumed run trains every prompt exactly once"
                )
            pending = sorted(self.ready)
            state = {
                "batches_taken": self.taken,
                "global_step": global_step,
                "max_staleness": self.k,
                "updates_per_batch": self.updates,
                # produced ahead but not trained: a resumed run rolls these prompts out again
                "untrained_batches": [{"batch": j, "prompts": self.feed.batch(j)} for j in pending],
            }
        if not write:
            return
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, STATE_NAME), "w", encoding="utf-8") as f:
            json.dump(state, f, indent=1)

    def load_state(self, directory: str | None, global_step: int) -> bool:
        r"""Resume the producer at the first untrained batch of `directory`'s state; False when there is none."""
        path = os.path.join(directory, STATE_NAME) if directory else ""
        if not path or not os.path.isfile(path):
            return False
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
        with self.cond:
            self.taken = self.base_batch = self.next_to_produce = int(state["batches_taken"])
            self.base_version = int(global_step)
            self.dropped_at_checkpoint = [int(b["batch"]) for b in state.get("untrained_batches", [])]
        return True


def load_weights(model: Any, weights: dict[str, torch.Tensor]) -> None:
    r"""Copy `weights` (name -> tensor, from `AsyncRolloutSource.publish`) into `model`'s parameters in place.

    `weights` may hold a subset of the parameters (the trainable ones); the others keep their values.

    Raises:
        KeyError: a published name that `model` has no parameter of.
    """
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in weights.items():
            param = params[name]
            param.copy_(value.to(param.device, param.dtype))


class AsyncCallback(TrainerCallback):
    r"""Publishes the weights after every optimiser step, saves the source's state with each checkpoint, stops it."""

    def __init__(self, source: AsyncRolloutSource, unwrap: Any) -> None:
        r"""`unwrap(model)`: the plain module of the trainer's model (Accelerate's `unwrap_model`)."""
        self.source, self.unwrap = source, unwrap

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        r"""Publish the starting weights (version `global_step`, 0 or the resumed step)."""
        if self.source.taken == 0 and state.global_step:
            self.source.base_version = state.global_step
        self.source.plan_steps(state.max_steps)
        self.source.publish(self.unwrap(model), state.global_step)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        r"""The optimiser stepped: new weights, version `global_step`."""
        self.source.publish(self.unwrap(model), state.global_step)

    def on_save(self, args, state, control, **kwargs):
        r"""Next to the checkpoint the Trainer just wrote."""
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        self.source.save_state(folder, state.global_step, write=state.is_world_process_zero)

    def on_train_end(self, args, state, control, **kwargs):
        r"""Stop the producer."""
        self.source.close()


def open_async_source(trainer: Any, step: Any) -> AsyncCallback:
    r"""Build the producer's stack for `trainer` (`rl_max_staleness > 0`), install it as `step.source`.

    The producer gets a deep copy of the policy and an engine of the same registered backend built on it
    (`rollout.build_engine`), and an agent loop over the run's tool executor. On several ranks (torchrun, DDP or
    ZeRO-1/2) every rank runs a producer for its share of the groups (`g % world_size == rank`, as the lockstep
    step); the producers gather their records, wait at weight pushes and agree on each batch's start on a gloo group of
    their own (`torch.distributed.new_group`, created here by every rank), never on the trainer's group.

    Returns:
        The `AsyncCallback` to add to the trainer.

    Raises:
        ValueError: parameters sharded across ranks (ZeRO-3, FSDP: no rank holds the whole policy to copy), or an
            engine that cannot get a weight copy of its own in this process.
    """
    from ...rollout.agent_loop import AgenticRollout
    from ...rollout.engine import build_engine

    session = step.session
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    if getattr(trainer, "is_fsdp_enabled", False) or (plugin is not None and plugin.zero_stage == 3):
        raise ValueError(
            "rl_max_staleness > 0 gives the rollout producer a whole copy of the policy on each rank, which ZeRO-3 and "
            "FSDP shard across ranks: train with DDP or ZeRO-1/2 (deepspeed: recipes/deepspeed/ds_z2_config.json), or "
            "set rl_max_staleness: 0."
        )
    caps = session.capabilities
    if not (caps.shares_policy_weights or caps.separate_process):
        raise ValueError(
            f"rl_max_staleness > 0 needs an engine that decodes with a module of this process (hf) or a server "
            f"(vllm_server); the colocated {session.backend} engine shares the trainer's process and GPU memory: use "
            "arpo_rollout_backend: vllm_server (docs/scaling.md) or rl_max_staleness: 0."
        )
    agent = session.agent
    model = trainer.accelerator.unwrap_model(trainer.model)
    # a server rank other than 0 neither decodes nor sends (rank 0 pushes): no copy of the policy, no snapshots; its
    # producer only passes the trainer's module, untouched, to the push's barrier
    copy_weights = not caps.separate_process or trainer.accelerator.is_main_process
    producer_model = model
    if copy_weights:
        producer_model = copy.deepcopy(model).eval()
        device = torch.device(trainer.accelerator.device)
        if any(p.device != device for p in producer_model.parameters()):
            producer_model.to(device)  # under DeepSpeed the trainer's module reaches its GPU only in `train()`
        for param in producer_model.parameters():
            param.requires_grad_(False)
    if caps.separate_process:
        # the server holds one set of weights: the producer pushes its copy's version before each batch (the
        # trainer pushes only for validation or a redone stale batch, and the producer pushes again afterwards)
        engine = session.engine
    else:
        engine = build_engine(session.backend, producer_model, step.tokenizer, agent.config)
    producer_agent = AgenticRollout(
        engine, agent.executor, agent.tokenizer, agent.config, tool_format=getattr(agent, "tool_format", None)
    )
    producer_session = RolloutSession(producer_agent, session.executor)
    a = trainer.args
    updates = max(a.steps_per_generation * trainer.num_iterations // a.gradient_accumulation_steps, 1)
    sampler = trainer._get_train_sampler(trainer.train_dataset)
    feed = PromptFeed(sampler, a.generation_batch_size // trainer.num_generations, trainer.num_generations)
    group = None
    if trainer.accelerator.num_processes > 1:
        import torch.distributed as dist

        group = dist.new_group(backend="gloo")  # a collective: every rank builds its producer here
    k = step.loss_config.max_staleness
    source = AsyncRolloutSource(
        step, producer_session, producer_model, feed, trainer.train_dataset, k, updates, group, copy_weights
    )
    logger.info(
        "[agentic] rollout producer (rl_max_staleness %d) on rank %d: %s", k, trainer.accelerator.process_index,
        "a copy of the policy" if copy_weights else "no copy of the policy (rank 0 pushes the server's weights)",
    )  # fmt: skip
    step.source = source
    return AsyncCallback(source, trainer.accelerator.unwrap_model)

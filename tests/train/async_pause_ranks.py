# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""One rank of `test_async_rollout.py::test_producers_of_two_ranks_pause_at_one_boundary` (run as a process).

Usage: python async_pause_ranks.py RANK STORE_FILE STEPS SEED

The real `AsyncRolloutSource` (its thread, `_agree`, `paused`, `take`, `publish`) on two gloo ranks; only the
producer's stages are stand-ins: each batch gathers on the producers' group like `ArpoStep.gather`, after a random
delay. The trainer's thread does what the Trainer does around it: an all-reduce on the default group per step (the
optimiser), and every other step a pause with collectives inside (validation), each after a random delay, so the
two ranks reach each point at different times. The rank prints `ok STEPS PAUSES` or fails: a producer that starts a
batch while its trainer thread is inside a pause (`AssertionError`), or a hang (the test's timeout).
"""

import random
import sys
import time
from types import SimpleNamespace

import torch
import torch.distributed as dist


def main() -> None:
    rank, store, steps, seed = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    from llamafactory_agentic.train.arpo.async_rollout import AsyncRolloutSource
    from llamafactory_agentic.train.arpo.pipeline import StepContext, UpdateBatch, gather_objects
    from tests.train._helpers import record

    rng = random.Random(seed * 10 + rank)
    now = {"step": 0}
    inside_pause = {"on": False}
    ctx = StepContext(
        accelerator=SimpleNamespace(num_processes=2, process_index=rank, device="cpu"),
        per_device_train_batch_size=4, gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
        seed=0, num_generations=4, pad_token_id=0, tokenizer=SimpleNamespace(eos_token_id=0), compute_dtype=None,
        train_dataset=None, beta=0.0, model=lambda: None, model_wrapped=lambda: None, ref_model=lambda: None,
        global_step=lambda: now["step"],
    )  # fmt: skip
    step = SimpleNamespace(ctx=ctx, reward_fn=None, loss_config=None, policy=None, logger=None)
    group = dist.new_group(backend="gloo")
    model = torch.nn.Linear(2, 2)
    feed = SimpleNamespace(batch=lambda j: [j])
    source = AsyncRolloutSource(step, SimpleNamespace(lora_merge="off"), model, feed, list(range(steps)), 1, 1, group)

    class Stages:  # the producer's roll-out and scoring: a delay and the producers' gather
        def roll_out_and_score(self, rows, training, global_step=None):
            assert not inside_pause["on"], "a producer started a batch while its trainer thread was paused"
            time.sleep(rng.uniform(0.0, 0.02))
            ranks = gather_objects([rank], source.group)
            assert ranks == [0, 1], ranks
            return SimpleNamespace(rows=rows)

        def dynamic_sampling(self, batch, global_step):
            records = [record(0, m, float(m), weight_version=source.producing_version) for m in range(4)]
            return UpdateBatch(batch.rows, records, records, {}, {})

    source.producer = Stages()
    source.plan_steps(steps)
    source.publish(model, 0)
    pauses = 0
    for s in range(steps):
        update = source.take([{"row": s}])
        assert update.rows == [s] and update.sampling_metrics["async/staleness_max"] <= 1
        time.sleep(rng.uniform(0.0, 0.02))
        dist.all_reduce(torch.ones(1))  # the optimiser's collective, on the trainer's (default) group
        now["step"] = s + 1
        source.publish(model, s + 1)
        if s % 2 == 0:  # validation on every rank at the same step, reached at different times
            time.sleep(rng.uniform(0.0, 0.02))
            with source.paused():
                inside_pause["on"] = True
                assert source.phase == "idle", source.phase
                dist.all_reduce(torch.ones(1))
                time.sleep(rng.uniform(0.0, 0.01))
                assert source.phase == "idle", source.phase
                inside_pause["on"] = False
            pauses += 1
    source.close()
    assert source.error is None, repr(source.error)
    print(f"ok {steps} {pauses}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""`rl_max_staleness: k > 0` (issue 36, Deliver 3): prompt order, the staleness bound, and lossless resume.

The unit tests drive `AsyncRolloutSource` with stand-in stages (no thread started) to check the bound itself; the
end-to-end tests run the real `llamafactory-cli train` on the tiny tool-calling policy with the real tools.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from llamafactory_agentic.train.arpo.async_rollout import AsyncRolloutSource, PromptFeed
from llamafactory_agentic.train.arpo.pipeline import StepContext, UpdateBatch

from ._helpers import record


REPO = Path(__file__).resolve().parents[2]


def test_prompt_feed_follows_trls_repeat_sampler():
    """Generation batch j holds the j-th block of unique prompts of TRL's sampler, epoch after epoch."""
    from trl.trainer.utils import RepeatSampler

    data = list(range(10))
    sampler = RepeatSampler(data, mini_repeat_count=4, batch_size=2, repeat_count=3, shuffle=True, seed=5)
    reference = RepeatSampler(data, mini_repeat_count=4, batch_size=2, repeat_count=3, shuffle=True, seed=5)
    feed = PromptFeed(sampler, prompts_per_batch=2, group_size=4)
    expected = []
    for _ in range(2):  # two epochs: the sampler's generator advances like the Trainer's
        indices = list(iter(reference))
        expected += [indices[i : i + 8 : 4] for i in range(0, len(indices), 24)]
    assert [feed.batch(j) for j in range(10)] == expected
    assert sorted(sum(expected[:5], [])) == data  # one epoch: every prompt once


def _source(now: int, k: int = 1):
    """An `AsyncRolloutSource` whose stages are stand-ins; `now` is the trainer's optimiser step."""
    redone = []

    def roll_out_and_score(rows, training, global_step=None):
        redone.append(global_step)
        return SimpleNamespace(rows=rows)

    def dynamic_sampling(batch, global_step):
        records = [record(0, m, float(m), weight_version=global_step) for m in range(4)]
        return UpdateBatch(batch.rows, records, records, {}, {})

    tok = SimpleNamespace(eos_token_id=0)
    ctx = StepContext(
        accelerator=SimpleNamespace(num_processes=1, process_index=0, device="cpu"),
        per_device_train_batch_size=4, gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
        seed=0, num_generations=4, pad_token_id=0, tokenizer=tok, compute_dtype=None, train_dataset=None, beta=0.0,
        model=lambda: None, model_wrapped=lambda: None, ref_model=lambda: None, global_step=lambda: now,
    )  # fmt: skip
    session = SimpleNamespace(lora_merge="off")
    step = SimpleNamespace(ctx=ctx, reward_fn=None, loss_config=None, policy=None, logger=None)
    step.roll_out_and_score, step.dynamic_sampling = roll_out_and_score, dynamic_sampling
    feed = SimpleNamespace(batch=lambda j: [j])
    source = AsyncRolloutSource(step, session, None, feed, [{"row": i} for i in range(8)], k, 1)
    source.thread = "not started"  # the tests hand batches in themselves
    return source, redone


def test_a_batch_older_than_k_is_counted_and_rolled_out_again():
    """Before (no bound): a group sampled 3 steps ago would be trained. Now it is dropped, counted, redone."""
    source, redone = _source(now=3, k=1)
    old = [record(0, m, float(m), weight_version=0) for m in range(4)]
    source.ready[0] = (UpdateBatch([{"row": 0}], old, old, {}, {}), 0)
    update = source.take([{"row": 0}])
    assert redone == [3] and update.sampling_metrics["async/groups_dropped_stale"] == 1.0
    assert {r.weight_version for r in update.records} == {3}
    assert update.sampling_metrics["async/staleness_max"] == 0.0


def test_a_batch_within_k_is_trained_and_its_staleness_logged():
    source, redone = _source(now=2, k=1)
    recs = [record(0, m, float(m), weight_version=1) for m in range(4)]
    source.ready[0] = (UpdateBatch([{"row": 0}], recs, recs, {}, {}), 1)
    source.ready[1] = (UpdateBatch([{"row": 1}], recs, recs, {}, {}), 1)
    update = source.take([{"row": 0}])
    assert redone == [] and update.records is recs
    metrics = update.sampling_metrics
    assert metrics["async/staleness_mean"] == 1.0 and metrics["async/staleness_max"] == 1.0
    assert metrics["async/groups_dropped_stale"] == 0.0 and metrics["async/buffer_depth"] == 2.0


def test_the_producer_rolls_out_no_batch_past_the_runs_last_step():
    """Before: after the last optimiser step the producer started one more batch (never trained; CI saw its weights
    pushed to the server). Now `max_steps` bounds it: 3 steps of U = 1 train batches 0-2; with U = 2, 5 steps train
    batches 0-2 (batch 2's second update never runs); a run resumed at step 2 (batch 2) counts from there."""
    source, _ = _source(now=0, k=1)
    source.snapshots = {v: {} for v in range(6)}
    source.taken = 2
    assert source._can_start(3)  # no end known: room and weights decide
    source.plan_steps(3)
    assert source.last_batch() == 2 and source._can_start(2) and not source._can_start(3)
    source.updates = 2
    source.plan_steps(5)
    assert source.last_batch() == 2
    source.base_batch, source.base_version, source.updates = 2, 2, 1  # resumed after step 2
    source.plan_steps(4)
    assert source.last_batch() == 3 and source._can_start(3) and not source._can_start(4)


def test_a_checkpoint_inside_a_generation_batch_is_refused(tmp_path):
    """With U = 2 optimiser steps per generation batch, a checkpoint after step 1 would lose half a batch on resume."""
    source, _ = _source(now=1, k=1)
    source.updates, source.taken = 2, 1  # batch 0 taken, one of its two updates done
    with pytest.raises(RuntimeError, match="save_steps to a multiple of 2"):
        source.save_state(str(tmp_path), global_step=1)
    source.ready[1] = ("produced ahead", 1)
    source.save_state(str(tmp_path), global_step=2)  # the boundary: written, the batch produced ahead recorded
    state = json.loads((tmp_path / "async_rollout_state.json").read_text())
    assert state["batches_taken"] == 1 and state["untrained_batches"] == [{"batch": 1, "prompts": [1]}]


def test_producer_weights_follow_every_publish_including_lora_adapters(tiny_model):
    """The producer's copy follows every publish: all parameters once, then the trainable ones (LoRA: the adapters,
    never a stale adapter; the frozen base is not copied again at each step)."""
    import copy

    from peft import LoraConfig, get_peft_model

    from llamafactory_agentic.train.arpo.async_rollout import load_weights

    policy = get_peft_model(tiny_model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    producer = copy.deepcopy(policy)
    with torch.no_grad():
        for p in producer.parameters():
            p.zero_()  # the producer's copy knows nothing yet: only what is published reaches it
    source, _ = _source(now=0, k=1)
    source.publish(policy, 0)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)  # an optimiser step moved the adapter
    source.publish(policy, 1)
    trainable = {name for name, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    assert set(source.snapshots[0]) == {name for name, _ in policy.named_parameters()}  # the first: everything
    assert set(source.snapshots[1]) == trainable  # later ones: the adapters, not the frozen base
    for version in (0, 1):
        load_weights(producer, source.snapshots[version])
    for (name, a), (_, b) in zip(policy.named_parameters(), producer.named_parameters()):
        assert torch.equal(a, b), name
    with pytest.raises(KeyError):
        load_weights(producer, {"no.such.parameter": torch.zeros(1)})


# ---------------------------------------------------------------------------------------------- end to end
def _prepare(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from async_parity import prepare_with_reward

    return prepare_with_reward(tmp_path)


def _cmd(env_paths, out, *extra):
    return [
        str(Path(sys.executable).parent / "llamafactory-cli"), "train", str(REPO / "recipes/tiny/arpo_cpu.yaml"),
        f"model_name_or_path={env_paths['policy']}", f"dataset_dir={env_paths['datasets']}", f"output_dir={out}",
        f"agentic_cache_path={out.parent / 'tool_cache.sqlite'}", f"agentic_search_index={env_paths['search_index']}",
        "agentic_reward=parity_reward:score", "arpo_rollout_batch_size=1", "max_samples=6", "num_train_epochs=1",
        "max_steps=-1", "eval_strategy='no'", "plot_loss=false", "save_strategy=steps", "save_steps=1",
        "rl_max_staleness=1", *extra,
    ]  # fmt: skip


def _env(tmp_path):
    from async_parity import cli_env  # importable once `_prepare` ran

    return cli_env(tmp_path)


def _trained_prompts(out):
    groups = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    return sorted(g["prompt"] for g in groups), groups


@pytest.mark.slow
def test_two_ranks_train_asynchronously_on_the_lockstep_prompts(tmp_path):
    """`FORCE_TORCHRUN=1 NPROC_PER_NODE=2` (gloo), hf engine, k = 1, validation after every step: each rank's producer
    rolls out its groups with its own policy copy and gathers them on the producers' gloo group. The run ends, every
    step trains the prompts the lockstep run (k = 0) trains at that step, each once, at most 1 step stale; the
    validations (a pause of both producers at the same boundary) all run. Resumed from its checkpoint-2 (one state
    file, written by rank 0, read by both), the run trains the last two steps' prompts, as the lockstep run did. With
    dynamic sampling the producers roll out the extra batches together."""
    env_paths = _prepare(tmp_path)
    env = dict(_env(tmp_path), FORCE_TORCHRUN="1", NPROC_PER_NODE="2")
    runs = {}
    base = ("arpo_rollout_batch_size=2", "max_samples=8", "eval_strategy=steps", "eval_steps=1")
    checkpoint = tmp_path / "k1" / "checkpoint-2"
    for name, extra in (
        ("k0", ("save_strategy='no'", "rl_max_staleness=0")),
        ("k1", ("save_steps=2", "rl_max_staleness=1")),
        ("resumed", ("save_strategy='no'", "rl_max_staleness=1", f"resume_from_checkpoint={checkpoint}")),
        # exact match: the tiny policy's groups all score 0, so dynamic sampling rolls out two extra batches per step
        (
            "dynamic",
            (
                "save_strategy='no'",
                "rl_max_staleness=1",
                "rl_dynamic_sampling=true",
                "rl_dynamic_sampling_max_batches=3",
                "agentic_reward=em",
            ),
        ),  # fmt: skip
    ):
        out = tmp_path / name
        if name == "resumed":
            # transformers loads the optimizer state of a multi-rank run with map_location=args.device, "cpu:0" on
            # CPU ranks, which torch.load refuses (the same at rl_max_staleness 0; on GPUs it is "cuda:N"): resumed
            # without it, which leaves the prompt order and the producer's position, checked here, as they are
            (checkpoint / "optimizer.pt").unlink()
        proc = subprocess.run(_cmd(env_paths, out, *base, *extra), cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=900)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-5000:]
        prompts, groups = _trained_prompts(out)
        log = [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines()]
        runs[name] = ([(g["global_step"], g["prompt"]) for g in groups], groups, log)
    runs[0], runs[1] = runs["k0"], runs["k1"]
    assert runs[1][0] == runs[0][0] and len({p for _, p in runs[1][0]}) == 8  # 4 steps x 2 prompts, each once
    state = json.loads((checkpoint / "async_rollout_state.json").read_text())
    assert state["batches_taken"] == 2 and state["global_step"] == 2
    assert runs["resumed"][0] == runs[0][0][4:]  # steps 2 and 3: the lockstep run's prompts, each once
    dynamic = [r for r in runs["dynamic"][2] if "loss" in r]  # the producers' extra rollouts, gathered on their group
    assert [r["dynamic_sampling/generation_batches"] for r in dynamic] == [3, 3, 3, 3]
    assert [r["async/staleness_max"] for r in dynamic] == [0, 1, 1, 1]
    train = [r for r in runs[1][2] if "loss" in r]
    assert [r["async/staleness_max"] for r in train] == [0, 1, 1, 1]
    assert all(r["rollout/trajectories"] == 8 and r["async/groups_dropped_stale"] == 0 for r in train)
    assert len([r for r in runs[1][2] if "eval_reward" in r]) == 4
    versions = [sorted({t["weight_version"] for t in g["trajectories"]}) for g in runs[1][1]]
    assert versions == [[0], [0], [0], [0], [1], [1], [2], [2]]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_producers_of_two_ranks_pause_at_one_boundary(tmp_path, seed):
    """Two processes (gloo), the real `AsyncRolloutSource` with its thread; random delays put the ranks' trainer
    threads and producers at each point at different times (`tests/train/async_pause_ranks.py`). 40 steps, 20 pauses
    with collectives inside: no rank hangs, and no producer starts a batch while its trainer thread is paused."""
    script = REPO / "tests" / "train" / "async_pause_ranks.py"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    store = tmp_path / "store"
    args = [[sys.executable, str(script), str(rank), str(store), "40", str(seed)] for rank in (0, 1)]
    procs = [
        subprocess.Popen(a, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in args
    ]
    try:
        outputs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (stdout, stderr) in zip(procs, outputs):
        assert p.returncode == 0 and stdout.strip() == "ok 40 20", stdout + stderr[-3000:]


@pytest.mark.slow
def test_lora_run_trains_asynchronously(tmp_path):
    """LoRA with k = 1 through `llamafactory-cli train`: the producer's copy gets the base once and the adapters after
    every step (`publish`); batch j is sampled with version max(j - 1, 0) and the run ends."""
    env_paths = _prepare(tmp_path)
    out = tmp_path / "lora"
    cmd = _cmd(env_paths, out, "finetuning_type=lora", "lora_target=all", "max_samples=3", "save_strategy='no'")
    proc = subprocess.run(cmd, cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "rl_max_staleness 1) on rank 0: a copy of the policy" in proc.stdout + proc.stderr
    _, groups = _trained_prompts(out)
    assert [sorted({t["weight_version"] for t in g["trajectories"]}) for g in groups] == [[0], [0], [1]]
    train = [
        r for r in (json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines()) if "loss" in r
    ]
    assert [r["async/staleness_max"] for r in train] == [0, 1, 1]


def test_async_refuses_parameters_sharded_across_ranks():
    """ZeRO-3 and FSDP leave no rank a whole policy for the producer's copy: refused with the engines that work."""
    from llamafactory_agentic.train.arpo.async_rollout import open_async_source

    zero3 = SimpleNamespace(accelerator=SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=SimpleNamespace(
        zero_stage=3))), is_fsdp_enabled=False)  # fmt: skip
    fsdp = SimpleNamespace(
        accelerator=SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=None)), is_fsdp_enabled=True
    )
    for trainer in (zero3, fsdp):
        with pytest.raises(ValueError, match="ZeRO-3 and FSDP shard.*ds_z2_config.json"):
            open_async_source(trainer, SimpleNamespace(session=None))


@pytest.mark.slow
def test_sigkilled_async_run_resumes_and_trains_every_prompt_once(tmp_path):
    """6 prompts, 1 per generation batch (1 update each), k = 1, a checkpoint after every step. The first run is
    SIGKILLed while a step runs (after checkpoint-3 was written, while the producer holds batch 4 ahead); the resumed
    run trains the rest. Each prompt of the epoch is trained exactly once (rollouts.jsonl: every group, with its
    prompt; the resumed run drops the records of the steps it repeats), and the checkpoint records the batch that was
    produced ahead and dropped."""
    env_paths = _prepare(tmp_path)
    out = tmp_path / "out"
    env = _env(tmp_path)
    first = subprocess.Popen(
        _cmd(env_paths, out), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.time() + 900
    while not (out / "checkpoint-3" / "trainer_state.json").is_file() and first.poll() is None:
        assert time.time() < deadline, "no checkpoint-3 within 900 s"
        time.sleep(0.2)
    assert first.poll() is None, first.stderr.read().decode()[-4000:]
    first.send_signal(signal.SIGKILL)
    first.wait()
    state = json.loads((out / "checkpoint-3" / "async_rollout_state.json").read_text())
    assert state["batches_taken"] == 3 and state["global_step"] == 3

    second = subprocess.run(
        _cmd(env_paths, out, "overwrite_output_dir=false"), cwd=REPO, env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-5000:]
    prompts, groups = _trained_prompts(out)
    assert len(prompts) == 6 and len(set(prompts)) == 6, [g["global_step"] for g in groups]
    assert [g["global_step"] for g in groups] == [0, 1, 2, 3, 4, 5]
    log = [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines()]
    train = [r for r in log if "loss" in r]
    assert [r["current_steps"] for r in train] == [1, 2, 3, 4, 5, 6]
    assert all(r["async/staleness_max"] <= 1 and r["async/groups_dropped_stale"] == 0 for r in train)

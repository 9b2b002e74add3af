# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""ARPO learns: a short fixed-seed run of the README's main job in which the held-out reward rises.

Everything is real: the synthetic task generated from seed 0 at the demo's sizes, the demo's model built here, agentic
SFT with `llamafactory-cli train` on the shipped recipe (1000 steps, as the demo), then `llamafactory-cli train` of the
shipped ARPO recipe for `STEPS` steps with the python sandbox, the local BM25 search and the exact-match reward.

What is asserted, from the RL run's `trainer_log.jsonl`:
* the greedy held-out reward (`eval_reward`, 50 held-out questions, validation at the start and at the end of the run)
  rises by at least `MARGIN` (rewards are in [-1, 1.1]: format gate -1, wrong 0, right 1); the training reward of one
  step is a sample of 8 prompts x 8 trajectories and too noisy for a short run, so the test reads the held-out one;
* on average fewer than half of the groups of an update had identical rewards (the recipe's dynamic sampling replaces
  them with groups of extra prompts; docs/algorithms.md §4.7);
* the loss and gradient norm were not zero.
Measured on this project's slower 2-core machine (nothing else running): 348 s; the held-out reward went from 0.40 to
0.66, with 35% of the groups rolled out per step identical on average and none left in the updates (the former 4-layer,
1500-step cold start: 353 s on the faster machine, 0.48 -> 0.70; with plain sampling 514 s, 0.54 -> 0.94).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_helpers import run_group


pytestmark = [pytest.mark.slow, pytest.mark.learning]

BIN = Path(sys.executable).parent
STEPS = 10
MARGIN = 0.10


def train(workdir: Path, recipe: str, overrides: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", WANDB_DISABLED="true", HF_HUB_OFFLINE="1")
    return run_group(
        [str(BIN / "llamafactory-cli"), "train", recipe, *overrides],
        cwd=workdir,
        env=env,
        timeout=2400,  # a loaded 2-core machine took 1022 s for the cold start alone
    )


def test_arpo_heldout_reward_rises_on_the_synthetic_task(tmp_path):
    from llamafactory_agentic.tasks.demo import DEMO_SIZES, copy_recipes
    from llamafactory_agentic.tasks.model import build_task_model
    from llamafactory_agentic.tasks.synthetic import TaskConfig, generate_task

    start = time.perf_counter()
    generate_task(TaskConfig(seed=0, sizes=dict(DEMO_SIZES)), tmp_path / "data")
    build_task_model(tmp_path / "model", tmp_path / "data", size="demo", seed=0)
    copy_recipes(tmp_path)

    sft = train(tmp_path, "recipes/agentic_sft_cpu.yaml", ["seed=0", "logging_steps=100"])
    assert sft.returncode == 0, sft.stdout[-3000:] + sft.stderr[-3000:]
    rl = train(
        tmp_path,
        "recipes/arpo_cpu.yaml",
        [
            "seed=0",
            f"max_steps={STEPS}",
            f"eval_steps={STEPS}",  # validation at the start (eval_on_start) and after the last step
            "arpo_val_max_samples=50",
            "per_device_eval_batch_size=50",
            "arpo_rollout_log_ratio=0",
        ],
    )
    assert rl.returncode == 0, rl.stdout[-3000:] + rl.stderr[-3000:]

    records = [json.loads(line) for line in (tmp_path / "arpo" / "trainer_log.jsonl").read_text().splitlines()]
    heldout = [r["eval_reward"] for r in records if "eval_reward" in r]
    train_steps = [r for r in records if "reward" in r]
    identical = [r["reward/identical_groups"] for r in train_steps]  # of every group rolled out
    # the recipe's dynamic sampling: groups with identical rewards left in the update
    in_update = [r["dynamic_sampling/identical_groups_in_update"] for r in train_steps]
    print(f"held-out reward at start and end {heldout}; {time.perf_counter() - start:.0f} s")
    print(f"training reward per step {[round(r['reward'], 3) for r in train_steps]}")
    print(f"share of groups with identical rewards per step {identical}, in the update {in_update}")
    assert len(train_steps) == STEPS and len(heldout) == 2, heldout
    assert heldout[-1] >= heldout[0] + MARGIN, heldout
    assert sum(in_update) / len(in_update) < 0.5, in_update
    assert any(abs(r.get("loss", 0.0)) > 0 for r in train_steps)
    assert any(r.get("grad_norm", 0.0) > 0 for r in train_steps)

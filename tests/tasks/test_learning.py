# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""ARPO learns: a short fixed-seed `llamafactory-cli train` run on the synthetic task in which the reward rises.

Everything is real: the task generated from a seed, a small model built and cold-started here with
`llamafactory-cli train` (agentic SFT, a few dozen steps: the model has picked up the tags but still breaks the format
or answers wrongly often), then `llamafactory-cli train` of the shipped ARPO recipe with the python sandbox, the local
BM25 search and the exact-match reward. The test reads `trainer_log.jsonl` and requires the mean reward of the last
`WINDOW` steps to exceed that of the first `WINDOW` steps by `MARGIN` (rewards are in [-1, 1.1]; the format gate gives
-1). It also checks that most groups had non-identical rewards, so the policy gradient was not zero.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
STEPS = 14
WINDOW = 4
MARGIN = 0.2
SFT_STEPS = 150


def train(workdir: Path, recipe: str, overrides: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", WANDB_DISABLED="true", HF_HUB_OFFLINE="1")
    return subprocess.run(
        [str(BIN / "llamafactory-cli"), "train", recipe, *overrides],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_arpo_reward_rises_on_the_synthetic_task(tmp_path):
    from llamafactory_agentic.tasks.demo import copy_recipes
    from llamafactory_agentic.tasks.model import build_task_model
    from llamafactory_agentic.tasks.synthetic import TaskConfig, generate_task

    start = time.perf_counter()
    generate_task(TaskConfig(seed=0, sizes={"sft": 400, "train": 200, "heldout": 16}), tmp_path / "data")
    build_task_model(tmp_path / "model", tmp_path / "data", size="test", seed=0)
    copy_recipes(tmp_path)

    sft = train(tmp_path, "recipes/agentic_sft_cpu.yaml", [f"max_steps={SFT_STEPS}", "logging_steps=20"])
    assert sft.returncode == 0, sft.stdout[-3000:] + sft.stderr[-3000:]
    rl = train(
        tmp_path,
        "recipes/arpo_cpu.yaml",
        [
            f"max_steps={STEPS}",
            "arpo_rollout_batch_size=4",  # 4 prompts x M = 8 trajectories per step, one optimiser update
            "per_device_train_batch_size=16",
            "gradient_accumulation_steps=2",
            "learning_rate=1.0e-4",
            "eval_steps=1000",  # no validation inside the measured steps
            "arpo_rollout_log_ratio=0",
        ],
    )
    assert rl.returncode == 0, rl.stdout[-3000:] + rl.stderr[-3000:]

    records = [json.loads(line) for line in (tmp_path / "arpo" / "trainer_log.jsonl").read_text().splitlines()]
    rewards = [r["reward"] for r in records if "reward" in r]
    identical = [r["reward/identical_groups"] for r in records if "reward/identical_groups" in r]
    assert len(rewards) == STEPS
    first, last = sum(rewards[:WINDOW]) / WINDOW, sum(rewards[-WINDOW:]) / WINDOW
    print(f"reward first {WINDOW} steps {first:.3f}, last {WINDOW} steps {last:.3f}; per step {rewards}")
    print(f"share of groups with identical rewards per step {identical}; {time.perf_counter() - start:.0f} s")
    assert last > first + MARGIN, rewards
    assert sum(identical) / len(identical) < 0.5, identical

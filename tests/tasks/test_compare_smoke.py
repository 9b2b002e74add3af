# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The comparison benchmark (`benchmarks/compare_algorithms.py`) runs end to end and writes what docs/testing.md promises.

A real run of the script at `--scale smoke` (tiny model, 4 SFT steps, 2 RL steps, 8 held-out questions): task
generation, cold start and two RL presets with the real `llamafactory-cli`, the held-out evaluation in its own
`llamafactory-agentic task eval` process, then `runs.csv`, `curves.csv`, `summary.csv` and the PNG. The numbers of a
smoke run mean nothing; what is checked is that every column and curve the tables and the plot read is there (and
the per-kind table covers the held-out set), that `--model-extra` and `--sft-extra` reach the model and the cold start,
that a second invocation with other settings in the same work dir is refused (finished runs are reused), that both runs
start from the same cold start, and that GRPO never branches while ARPO's branch counters are logged.
"""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from process_helpers import run_group


pytestmark = [pytest.mark.slow, pytest.mark.learning]

REPO = Path(__file__).resolve().parents[2]


def test_compare_algorithms_smoke(tmp_path: Path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", WANDB_DISABLED="true", HF_HUB_OFFLINE="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    command = [sys.executable, str(REPO / "benchmarks" / "compare_algorithms.py"), "--scale", "smoke"]
    command += ["--seeds", "0", "--algorithms", "grpo", "arpo", "--work-dir", str(tmp_path)]
    command += ["--model-extra", "num_kv_heads=4", "--sft-extra", "max_steps=3"]  # how the cold-start sweep was run
    proc = run_group(command, cwd=tmp_path, env=env, timeout=900)  # a timeout kills the script's CLIs too
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    model_config = json.loads((tmp_path / "seed0" / "model" / "config.json").read_text())
    assert model_config["num_key_value_heads"] == 4  # --model-extra reached the model builder
    sft_log = [
        json.loads(line) for line in (tmp_path / "seed0" / "sft" / "trainer_log.jsonl").read_text().splitlines()
    ]
    assert sft_log[-1]["total_steps"] == 3  # --sft-extra reached the cold start

    # finished runs are reused, so other settings in the same work dir are refused instead of silently reused
    base = command[: command.index("--model-extra")]
    for changed in (
        [*base, "--model-extra", "num_kv_heads=2", "--sft-extra", "max_steps=3"],  # another cold start
        [*command, "--extra", "agentic_reward_tool_bonus=0"],  # other RL settings on the same cold start
    ):
        refused = subprocess.run(changed, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert refused.returncode != 0 and "pass another --work-dir" in refused.stderr, refused.stderr[-2000:]

    for name in ("runs.csv", "curves.csv", "summary.csv", "by_kind.csv", "compare_algorithms.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    with open(tmp_path / "runs.csv") as f:
        runs = {row["algorithm"]: row for row in csv.DictReader(f)}
    assert set(runs) == {"grpo", "arpo"}
    assert runs["grpo"]["sft_accuracy"] == runs["arpo"]["sft_accuracy"]  # one cold start per seed
    for row in runs.values():
        assert 0.0 <= float(row["final_accuracy"]) <= 1.0
        assert float(row["generated_tokens_per_step"]) > 0
        assert float(row["wall_s"]) > 0
    assert float(runs["grpo"]["branches_per_group"]) == 0.0
    assert float(runs["grpo"]["consecutive_branches_per_step"]) == 0.0

    with open(tmp_path / "curves.csv") as f:
        metrics = {(row["algorithm"], row["metric"]) for row in csv.DictReader(f)}
    for algorithm in ("grpo", "arpo"):
        for metric in ("eval_reward/accuracy", "rollout/tool_calls_per_traj", "rollout/branches_per_group",
                       "rollout/consecutive_branches", "loss/entropy", "rollout/generated_tokens"):  # fmt: skip
            assert (algorithm, metric) in metrics, (algorithm, metric)
    with open(tmp_path / "summary.csv") as f:
        summary = {row["algorithm"]: row for row in csv.DictReader(f)}
    assert summary["arpo"]["seeds"] == "1"
    assert "final_accuracy_std" in summary["arpo"]
    with open(tmp_path / "by_kind.csv") as f:
        by_kind = list(csv.DictReader(f))
    for algorithm in ("grpo", "arpo"):
        for model in ("sft", "final"):
            rows = [r for r in by_kind if (r["algorithm"], r["model"]) == (algorithm, model)]
            assert sum(int(r["questions"]) for r in rows) == 8, (algorithm, model)  # the smoke scale's held-out set

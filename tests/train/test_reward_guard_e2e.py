# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Issue 24 item 6 end to end: `llamafactory-cli train` with a user reward that returns 1e308.

A real subprocess with the tiny model, a two-row `arpo_rl` file, the real tool executor (python subprocess, a BM25
index of one page) and the hf rollout engine. Old code: rc 0, and the saved model and checkpoint were NaN (the rewards
+-1e308 became +-inf in float32, the advantages NaN). Now: a non-zero exit that names the reward function, and no model
written.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
REWARD_MODULE = """
import itertools

_calls = itertools.count()


def huge(model_text, ground_truth, metadata):  # +1e308, -1e308, ...: a group of two differs (inf - inf = NaN)
    return 1e308 if next(_calls) % 2 == 0 else -1e308


def two_args(model_text, ground_truth):
    return 1.0
"""


@pytest.fixture()
def run_dir(tmp_path):
    from llamafactory_agentic.tools.index import build_corpus_from_cache_json

    (tmp_path / "guard_reward_mod.py").write_text(REWARD_MODULE)
    data = tmp_path / "data"
    data.mkdir()
    (data / "dataset_info.json").write_text(json.dumps({"rl": {"file_name": "rl.jsonl", "formatting": "arpo_rl"}}))
    rows = [
        {"prompt": [{"role": "user", "content": q}], "reward_model": {"ground_truth": a}}
        for q, a in (("What is 1 + 2?", "3"), ("What is the capital of France?", "Paris"))
    ]
    (data / "rl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "cache.json").write_text(json.dumps({"capital of France": "Page 1: Paris is the capital of France."}))
    build_corpus_from_cache_json(tmp_path / "cache.json", tmp_path / "index")
    return tmp_path


def _train(run_dir: Path, model_dir: Path, reward: str) -> subprocess.CompletedProcess:
    config = {
        "model_name_or_path": str(model_dir),
        "stage": "arpo",
        "do_train": True,
        "finetuning_type": "full",
        "dataset": "rl",
        "dataset_dir": str(run_dir / "data"),
        "template": "qwen",
        "cutoff_len": 512,
        "overwrite_cache": True,
        "output_dir": str(run_dir / "out"),
        "per_device_train_batch_size": 2,
        "arpo_rollout_n": 2,
        "arpo_initial_rollouts": 1,
        "arpo_rollout_batch_size": 1,
        "arpo_max_response_length": 16,
        "agentic_search_index": str(run_dir / "index"),
        "agentic_reward": reward,
        "max_steps": 1,
        "save_steps": 1,
        "logging_steps": 1,
        "report_to": "none",
        "use_cpu": True,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
    }
    (run_dir / "train.yaml").write_text(yaml.safe_dump(config))
    python_path = os.pathsep.join(p for p in (str(run_dir), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=python_path)
    env.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)
    cmd = [str(BIN / "llamafactory-cli"), "train", str(run_dir / "train.yaml")]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_a_reward_of_1e308_stops_the_run_naming_the_reward_and_saves_no_model(run_dir, tiny_model_dir):
    proc = _train(run_dir, tiny_model_dir, "guard_reward_mod:huge")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-5000:]
    assert "reward function guard_reward_mod:huge returned 1e+308, which is inf in float32" in output, output[-5000:]
    out = run_dir / "out"
    saved = [p for p in out.rglob("*") if p.suffix in (".safetensors", ".bin")] if out.exists() else []
    assert not saved, saved


def test_a_reward_with_the_wrong_signature_stops_the_run_before_the_model_loads(run_dir, tiny_model_dir):
    proc = _train(run_dir, tiny_model_dir, "guard_reward_mod:two_args")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-5000:]
    assert (
        "`agentic_reward: guard_reward_mod:two_args`: the reward is called as fn(model_text, ground_truth, metadata)"
        in (output)
    ), output[-5000:]
    assert "trainable params" not in output  # LLaMA-Factory's line after loading the model

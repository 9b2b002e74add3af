# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""End-to-end `llamafactory-cli train recipes/tiny/{arpo,aepo}_cpu.yaml` in a real subprocess (1 and 2 CPU ranks).

Rows of `train_10k.parquet` / `valid.parquet` (ARPO's released files where present, else the suite's synthetic files
in their layout: tests/conftest.py `arpo_data`), the real python tool (a subprocess per
call), a real SQLite cache file, the hf rollout engine and LLaMA-Factory's own callbacks. The policy is the tiny model
fitted for a few seconds to answer with tool calls (`fit_tool_policy`), so the rollout really calls tools and branches.
"""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest


pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

REQUIRED_KEYS = [
    "loss",
    "grad_norm",
    "reward",
    "reward/mean",
    "reward/std",
    "reward/accuracy",
    "rollout/tool_calls_per_traj",
    "rollout/call_limit_hits",
    "rollout/branches",
    "rollout/decisions",
    "rollout/delta_h_mean",
    "rollout/generated_tokens",
    "rollout/masked_tokens",
    "rollout/trained_tokens",
    "rollout/observation_tokens",
    "time/generation",
    "time/tools",
    "time/reward",
    "time/training",
    "time/premonitor",
    "loss/clip_frac",
    "loss/entropy",
    "aepo/global_samples_per_group",
    "aepo/branch_samples_per_group",
    "aepo/penalised_branch_decisions",
    "aepo/grad_preserved_frac",
    "aepo/trained_entropy_p90",
    "eval_reward",
    "eval_reward/accuracy",
]


@pytest.fixture(scope="module")
def e2e_env(tmp_path_factory, tiny_model_dir, arpo_data):
    import pyarrow.parquet as pq

    from ._helpers import fit_tool_policy

    root = tmp_path_factory.mktemp("arpo-e2e")
    datasets = root / "datasets"
    datasets.mkdir()
    shutil.copy(REPO / "data" / "dataset_info.json", datasets / "dataset_info.json")
    (datasets / "arpo").symlink_to(arpo_data / "arpo", target_is_directory=True)
    rows = pq.read_table(arpo_data / "arpo" / "rl" / "train_10k.parquet").slice(0, 16).to_pylist()
    policy = root / "policy"
    # half the rows fitted on their whole prompt: on the synthetic tier (short questions) a policy fitted on 48-token
    # tails alone wrote only empty calls after the whole prompt on two ranks
    fit_tool_policy(tiny_model_dir, policy, rows, steps=200, context=48, full_every=2)
    from llamafactory_agentic.tools.index import build_corpus_from_cache_json

    search_index = root / "search_index"  # the offline `local` search backend over the reference's snippets
    build_corpus_from_cache_json(arpo_data / "arpo" / "search_cache.json", search_index)
    return {"root": root, "datasets": datasets, "policy": policy, "search_index": search_index}


def run_cli(
    e2e_env, recipe: str, name: str, extra_env: dict | None = None, timeout: int = 600, extra_args: tuple = ()
) -> Path:
    from llamafactory_agentic.tools.cache import normalize_args, open_cache

    from ._helpers import SEARCH_QUERY, SEARCH_RESULT

    out = e2e_env["root"] / name
    out.mkdir()
    cache_path = out / "tool_cache.sqlite"
    cache = open_cache(str(cache_path))
    cache.put("search", normalize_args("search", SEARCH_QUERY), SEARCH_RESULT)
    cache.close()
    cmd = [
        str(BIN / "llamafactory-cli"),
        "train",
        str(REPO / recipe),
        f"model_name_or_path={e2e_env['policy']}",
        f"dataset_dir={e2e_env['datasets']}",
        f"output_dir={out}",
        f"agentic_cache_path={cache_path}",
        f"agentic_search_index={e2e_env['search_index']}",
        *extra_args,
    ]
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(extra_env or {}))
    env.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-5000:]}\n{proc.stderr[-8000:]}"
    return out


def check_run(out: Path, preset: str) -> list[dict]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    records = [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines()]
    keys = set().union(*records)
    missing = [k for k in REQUIRED_KEYS if k not in keys]
    assert not missing, f"missing metrics {missing} in trainer_log.jsonl"
    for tool_key in ("calls", "cache_hit_rate", "latency_p50_s"):
        assert any(k.startswith("tools/") and k.endswith(tool_key) for k in keys), tool_key
    train = [r for r in records if "loss" in r]
    assert [r["current_steps"] for r in train] == [1, 2]
    assert sum(r.get("rollout/branches", 0) for r in train) == sum(
        v for r in train for k, v in r.items() if k.startswith("rollout/branch_points/call_")
    )  # every branch is attributed to the tool-call index it was created at

    config = json.loads((out / "agentic_config.json").read_text())
    assert config["preset"] == preset and None not in config["values"].values()
    # the system prompt the prompts were rendered with (LLaMA-Board's Chat fills its system prompt from it)
    assert isinstance(config.get("system_prompt"), str) and config["system_prompt"], config.get("system_prompt")

    for path in (out, out / "checkpoint-2"):  # final model and checkpoint in Hugging Face format
        model = AutoModelForCausalLM.from_pretrained(str(path))
        assert model.config.num_hidden_layers == 2
        AutoTokenizer.from_pretrained(str(path))
    assert (out / "training_loss.png").is_file() and (out / "training_reward.png").is_file()

    groups = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert groups and all(len(g["trajectories"]) == 4 for g in groups)
    for group in groups:
        for traj in group["trajectories"]:
            assert (traj["parent"] is None) == (traj["branch_pos"] is None)
            assert all(0 <= a < b <= len(traj["response_ids"]) for a, b in traj["observation_spans"])

    with sqlite3.connect(out / "tool_cache.sqlite") as db:
        tables = [t for (t,) in db.execute("select name from sqlite_master where type='table'")]
        assert tables and sum(db.execute(f"select count(*) from {t}").fetchone()[0] for t in tables) >= 1
    return records


def test_arpo_cpu_recipe_two_steps(e2e_env):
    records = check_run(run_cli(e2e_env, "recipes/tiny/arpo_cpu.yaml", "arpo"), "arpo")
    first = next(r for r in records if "loss" in r)
    assert first["rollout/trajectories"] == 8
    # the real tools ran (python in a subprocess, search through the SQLite cache)
    assert sum(v for r in records for k, v in r.items() if k.startswith("tools/") and k.endswith("/calls")) > 0


def test_aepo_cpu_recipe_two_steps(e2e_env):
    out = run_cli(e2e_env, "recipes/tiny/aepo_cpu.yaml", "aepo")
    check_run(out, "aepo")
    values = json.loads((out / "agentic_config.json").read_text())["values"]
    assert values["aepo_balanced_clip"] is True and values["aepo_branch_penalty"] == 0.05
    assert values["aepo_branch_penalty_scope"] == "lineage"  # every preset; `question` only as an explicit key


def test_arpo_cpu_recipe_two_ranks_gloo(e2e_env):
    out = run_cli(
        e2e_env, "recipes/tiny/arpo_cpu.yaml", "arpo-2ranks", extra_env={"FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "2"}
    )
    records = check_run(out, "arpo")
    for record in (r for r in records if "reward/mean" in r):
        # both ranks' groups were gathered: 2 prompts x M = 4 trajectories per rollout over the 2 ranks
        assert record["rollout/trajectories"] == 8


def test_token_micro_batches_and_continuous_rollout_on_two_ranks(e2e_env):
    """rl_micro_batch_tokens and arpo_rollout_schedule: continuous through the real CLI on 2 gloo ranks."""
    out = run_cli(
        e2e_env,
        "recipes/tiny/arpo_cpu.yaml",
        "arpo-2ranks-tokens",
        extra_env={"FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "2"},
        extra_args=(
            "rl_micro_batch_tokens=200",
            "arpo_rollout_schedule=continuous",
            "arpo_hf_generation_batch_size=3",
        ),
    )
    records = check_run(out, "arpo")
    rollouts = [r for r in records if "reward/mean" in r]
    for record in rollouts:
        assert record["rollout/trajectories"] == 8
        assert record["train/micro_batches_per_update"] >= 1 and record["rollout/segments"] >= 8
        assert record["perf/decode_step_ms"] > 0 and record["time/decode_device"] > 0
    assert any(r["train/micro_batches_per_update"] > 1 for r in rollouts)  # the token cap really cut the updates
    for record in (r for r in records if "loss" in r):
        assert record["memory/weights_gib"] > 0 and record["memory/optimizer_states_gib"] > 0


def test_dynamic_sampling_on_two_ranks(e2e_env):
    """rl_dynamic_sampling through the real CLI on 2 gloo ranks: every rank must roll out the same extra batches (the
    rollout enters collectives), or the run hangs; the counters add up over the batches."""
    out = run_cli(
        e2e_env,
        "recipes/tiny/arpo_cpu.yaml",
        "arpo-2ranks-dynamic",
        extra_env={"FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "2"},
        timeout=400,
        extra_args=("rl_dynamic_sampling=true", "rl_dynamic_sampling_max_batches=3"),
    )
    records = check_run(out, "arpo")
    rollouts = [r for r in records if "reward/mean" in r]
    for record in rollouts:
        batches = record["dynamic_sampling/generation_batches"]
        assert batches in (1.0, 2.0, 3.0)
        assert record["rollout/trajectories"] == 8 * batches  # 2 prompts x M = 4 per batch, both ranks gathered
        assert record["dynamic_sampling/groups_rolled_out"] == 2 * batches
        assert record["dynamic_sampling/dropped_groups"] == 2 * batches - 2
        assert 0.0 <= record["dynamic_sampling/identical_groups_in_update"] <= 1.0
    # the scripted policy answers alike, so equal-reward groups occur and the extra batches really ran on both ranks
    assert any(r["dynamic_sampling/generation_batches"] > 1 for r in rollouts)


def test_arpo_lora_then_resume_from_checkpoint(e2e_env):
    """LoRA through LLaMA-Factory's loader (adapter checkpoints), then a second run resumes from checkpoint-2."""
    out = e2e_env["root"] / "arpo-lora"
    cache_path = out / "tool_cache.sqlite"
    base = [
        str(BIN / "llamafactory-cli"),
        "train",
        str(REPO / "recipes/tiny/arpo_cpu.yaml"),
        f"model_name_or_path={e2e_env['policy']}",
        f"dataset_dir={e2e_env['datasets']}",
        f"output_dir={out}",
        f"agentic_cache_path={cache_path}",
        f"agentic_search_index={e2e_env['search_index']}",
        "finetuning_type=lora",
        "lora_target=all",
        "eval_steps=100000",
    ]
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)

    first = subprocess.run(base, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-5000:]
    assert (out / "adapter_model.safetensors").is_file() and (out / "checkpoint-2" / "adapter_config.json").is_file()
    assert (out / "checkpoint-2" / "rollout_rng_state_0.json").is_file()  # the rollout's own generators

    second = subprocess.run(
        base + ["max_steps=4", "overwrite_output_dir=false"], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-5000:]
    assert "Resuming training from" in second.stdout + second.stderr
    assert (out / "checkpoint-4").is_dir()
    steps = [json.loads(line).get("current_steps") for line in (out / "trainer_log.jsonl").read_text().splitlines()]
    assert {3, 4} <= set(steps)

# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""`llamafactory-agentic plan`: every recipe of the repository planned without a model or the network."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamafactory_agentic.guards.plan import PlanError, make_plan, read_measured
from llamafactory_agentic.testing import real_size_config
from llamafactory_agentic.train.arpo.memory import GIB, MATERIALISED_HEAD_BYTES, ModelShape, estimate_step_memory


REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted(REPO.glob("recipes/**/*.yaml")) + sorted(
    REPO.glob("llamafactory_agentic/resources/recipes/**/*.yaml")
)
TRAINING = [p for p in RECIPES if "stage:" in p.read_text()]
FIGURES = ("model", "device", "memory: fits", "memory: update peak", "time: run", "disk: checkpoints")
RL_FIGURES = ("memory: rollout peak", "time: per rollout step", "time: tool waits")


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "llamafactory_agentic.cli", "plan", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.parametrize("gpu", [["--gpu", "h200", "--num-gpus", "8"], ["--gpu", "cpu"]])
def test_plan_prints_a_table_for_every_recipe(gpu):
    """The real console command on every YAML under recipes/ (and the demo's): a table per training recipe, each
    figure with its source; tool configs get a message naming the recipe key that uses them."""
    assert len(TRAINING) >= 18
    proc = _cli(*map(str, RECIPES), *gpu, "--json")
    out = proc.stdout
    blocks = out.split("plan for ")[1:]
    planned = {b.split(" (stage")[0] for b in blocks}
    for recipe in TRAINING:
        rel = str(recipe)
        if "--num-gpus" in gpu and ("/recipes/tiny/" in rel or rel.endswith(("arpo_cpu.yaml", "aepo_cpu.yaml"))):
            continue  # the tiny CPU recipes' rollouts do not split over 8 ranks: the message is checked below
        assert rel in planned, f"{rel} not planned:\n{out[-3000:]}"
    for block in blocks:
        lines = block.splitlines()
        for name in FIGURES + (RL_FIGURES if "stage arpo" in lines[0] or "stage aepo" in lines[0] else ()):
            line = next((x for x in lines if x.strip().startswith(name)), None)
            assert line is not None, f"{name} missing in:\n{block}"
            assert "<- " in line and line.split("<- ", 1)[1].strip(), f"{name} has no source: {line}"
        numbers = json.loads(next(x for x in lines if x.startswith("{")))
        assert numbers["run_s"] > 0 and numbers["peak_gib"] > 0 and numbers["disk_gib"] > 0
    for tool_cfg in REPO.glob("recipes/tools/*.yaml"):
        assert f"plan: {tool_cfg}: no `stage` key" in out and "agentic_tool_config" in out
    assert proc.returncode == 2  # the tool configs are not training recipes
    if "--num-gpus" in gpu:
        assert "is not a multiple of per_device_train_batch_size 4 x gradient_accumulation_steps 1 x 8 rank(s)" in out


def test_memory_matches_the_estimator_and_the_card():
    """The 7B full pure_bf16 row of the docs/scaling.md table: 64 slots / 16384 tokens fit 80 GB, 128 slots / 32768 do not."""
    recipe = REPO / "recipes/arpo/qwen2.5_7b_reasoning_full.yaml"
    common = {"deepspeed": None, "pure_bf16": True, "arpo_rollout_backend": "hf", "arpo_rollout_batch_size": 8,
              "arpo_rollout_n": 16, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 16}  # fmt: skip
    fits = make_plan(recipe, gpu="a100-80g", num_gpus=1, overrides=dict(
        common, arpo_hf_generation_batch_size=64, rl_micro_batch_tokens=16384))  # fmt: skip
    est = estimate_step_memory(ModelShape.from_config(real_size_config("qwen2.5-7b")), context=1536 + 4096, slots=64,
                               micro_batch_tokens=16384, prompt_length=1536)  # fmt: skip
    assert fits.numbers["peak_gib"] == pytest.approx(est.peak, rel=1e-6)
    assert fits.numbers["fits"] == 1.0
    big = make_plan(recipe, gpu="a100-80g", num_gpus=1, overrides=dict(
        common, arpo_hf_generation_batch_size=128, rl_micro_batch_tokens=32768))  # fmt: skip
    assert big.numbers["fits"] == 0.0 and "DOES NOT FIT" in big.format() and big.warnings
    assert make_plan(recipe, gpu="h200", num_gpus=1, overrides=dict(
        common, arpo_hf_generation_batch_size=128, rl_micro_batch_tokens=32768)).numbers["fits"] == 1.0  # fmt: skip
    # ZeRO-3 over 8 ranks shards weights, gradients and states
    z3 = make_plan(recipe, gpu="h200", num_gpus=8)
    z1 = make_plan(recipe, gpu="h200", num_gpus=8, overrides={"deepspeed": None})
    assert z3.numbers["static_gib"] == pytest.approx(z1.numbers["static_gib"] / 8, rel=1e-6)


def test_materialised_log_probs_are_planned_with_their_full_logits():
    """`rl_logprob_chunk_size: 0` (full `[b, C, vocab]` logits) was planned as the fused 1024-position chunk; on the
    H200 that path peaked at 127.9 GiB where the fused one peaked at 74.2 GiB (0.5B, 32 x (576 + 1024) tokens per
    micro-batch, no checkpointing; docs/plan.md). The plan now carries the logits of the scored positions."""
    recipe = REPO / "recipes/arpo/qwen2.5_7b_reasoning_full.yaml"
    common = {"deepspeed": None, "pure_bf16": True, "arpo_rollout_backend": "hf", "arpo_rollout_batch_size": 16,
              "arpo_rollout_n": 8, "per_device_train_batch_size": 32, "gradient_accumulation_steps": 2,
              "arpo_max_prompt_length": 576, "arpo_max_response_length": 1024, "arpo_hf_generation_batch_size": 128,
              "rl_micro_batch_tokens": 0, "disable_gradient_checkpointing": True}  # fmt: skip
    fused = make_plan(recipe, gpu="h200", num_gpus=1, model_shape="qwen2.5-0.5b",
                      overrides=dict(common, rl_logprob_chunk_size=1024))  # fmt: skip
    full = make_plan(recipe, gpu="h200", num_gpus=1, model_shape="qwen2.5-0.5b",
                     overrides=dict(common, rl_logprob_chunk_size=0))  # fmt: skip
    shape = ModelShape.from_config(real_size_config("qwen2.5-0.5b"))
    est = estimate_step_memory(shape, context=1600, slots=128, micro_batch_tokens=32 * 1600, gradient_checkpointing=False,
                               chunk_size=0, prompt_length=576)  # fmt: skip
    scored = 32 * 1600 * (1 - 576 / 1600)  # the response positions of the micro-batch
    assert est.logprob_head == pytest.approx(scored * shape.vocab * MATERIALISED_HEAD_BYTES / GIB, rel=1e-9)
    assert full.numbers["loss_peak_gib"] - fused.numbers["loss_peak_gib"] > 40
    for plan, measured in ((fused, 74.2), (full, 127.9)):
        assert plan.numbers["loss_peak_gib"] == pytest.approx(measured, rel=0.1)


def test_shape_from_local_config_json(tmp_path):
    """A local model folder's config.json wins over the name; an unknown name says how to fix it."""
    model = tmp_path / "qwen2.5-7b-but-tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=1000, tie_word_embeddings=True)))  # fmt: skip
    recipe = tmp_path / "r.yaml"
    recipe.write_text((REPO / "recipes/tiny/arpo_cpu.yaml").read_text().replace(
        "saves/tiny-qwen2/agentic_sft", str(model)))  # fmt: skip
    plan = make_plan(recipe, gpu="cpu")
    assert plan.numbers["params"] < 1e6
    assert str(model / "config.json") in plan.format()
    recipe.write_text("stage: arpo\nmodel_name_or_path: someone/mystery-model\n")
    with pytest.raises(PlanError, match="--model-shape"):
        make_plan(recipe, gpu="cpu")


def test_measured_log_replaces_defaults(tmp_path):
    """Response length, tool calls, cache hit rate and latency read from an earlier trainer_log.jsonl."""
    log = tmp_path / "trainer_log.jsonl"
    rows = [{"current_steps": i, "rollout/response_length": 100.0 * i, "rollout/tool_calls_per_traj": 2.0,
             "tools/search/cache_hit_rate": 0.5, "tools/search/latency_p50_s": 3.0} for i in (1, 2, 3)]  # fmt: skip
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    measured = read_measured(log)
    assert measured == {"response_tokens": 200.0, "tool_calls_per_traj": 2.0, "search_cache_hit_rate": 0.5,
                        "latency_search_s": 3.0}  # fmt: skip
    recipe = REPO / "recipes/arpo/qwen2.5_7b_reasoning_lora.yaml"
    default = make_plan(recipe, gpu="h200", num_gpus=8)
    plan = make_plan(recipe, gpu="h200", num_gpus=8, measured=measured, search_price_per_1k=2.0)
    text = plan.format()
    assert "measured (rollout/response_length)" in text and "measured (tools/search/cache_hit_rate)" in text
    assert plan.numbers["search_cost_usd"] == pytest.approx(plan.numbers["search_calls"] / 1000 * 2.0)
    assert plan.numbers["rollout_s"] < default.numbers["rollout_s"]  # 200 tokens instead of half of 4096
    assert plan.numbers["tool_s"] > default.numbers["tool_s"]  # 2 calls at 3 s


def test_plan_for_a_starting_run_from_llamafactorys_parsed_arguments(tmp_path):
    """What the `arpo` workflow logs first: the plan built from LLaMA-Factory's own parsed arguments."""
    import yaml
    from llamafactory.hparams import get_train_args

    from llamafactory_agentic.guards.plan import plan_for_run

    recipe = yaml.safe_load((REPO / "recipes/tiny/arpo_cpu.yaml").read_text())
    recipe.update(output_dir=str(tmp_path / "out"), max_steps=4, save_steps=2)
    model_args, data_args, training_args, finetuning_args, _ = get_train_args(recipe)
    plan = plan_for_run(model_args, data_args, training_args, finetuning_args)
    text = plan.format()
    assert "stage arpo" in text and "built-in table 'tiny-qwen2'" in text
    assert plan.numbers["rollout_steps"] == 2  # 4 optimiser steps / 2 updates per rollout
    assert "2 checkpoint(s)" in text  # save_steps 2 of 4 steps, from the trainer's own arguments


def test_unplanned_stage_names_the_recipe(tmp_path):
    recipe = tmp_path / "dpo.yaml"
    recipe.write_text("stage: dpo\nmodel_name_or_path: Qwen/Qwen2.5-7B-Instruct\n")
    with pytest.raises(PlanError, match=r"dpo.yaml: stage 'dpo' is not planned"):
        make_plan(recipe, gpu="h200")


@pytest.mark.slow  # two CLI subprocesses
def test_plan_names_a_deepspeed_file_that_is_not_json(tmp_path):
    # issue 34 low: `plan` on a recipe whose DeepSpeed file is not JSON raised a raw JSONDecodeError (a traceback)
    ds = tmp_path / "ds_z3.json"
    ds.write_text('{\n  "zero_optimization": {"stage": 3,}\n  "secret": "hunter2"\n}\n')
    recipe = REPO / "recipes" / "arpo" / sorted(p.name for p in (REPO / "recipes" / "arpo").glob("*.yaml"))[0]
    proc = _cli(str(recipe), "--gpu", "h200", "--set", f"deepspeed={ds}")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "JSONDecodeError" not in proc.stderr + proc.stdout
    assert f"{ds}: the DeepSpeed config is not valid JSON (line 2, column" in proc.stdout, proc.stdout
    assert "hunter2" not in proc.stdout
    ds.write_text("[1, 2]")
    proc = _cli(str(recipe), "--gpu", "h200", "--set", f"deepspeed={ds}")
    assert proc.returncode == 2 and "must be a JSON object" in proc.stdout, proc.stdout + proc.stderr[-2000:]

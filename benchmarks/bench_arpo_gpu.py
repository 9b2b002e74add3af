# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""ARPO training steps on a CUDA GPU with a random-weight model of a real size (0.5B to 14B).

    python benchmarks/bench_arpo_gpu.py [--data-dir DIR] [--model qwen2.5-7b] [--steps 4] [--stage arpo]
        [--finetuning full|lora] [--response-length 4096] [--prompts 8] [--one-gpu]

With `--data-dir`, DIR holds `rl/train_10k.parquet` and `search_cache.json` (ARPO's files) and the run has the python
tool and the search tool answering from the imported reference cache (`replay`); without it, prompts are synthetic
(`benchmarks/_single_gpu.py`, `--prompt-length` tokens) and no tool is configured. The model is built from the public
Qwen2.5 architecture with random weights (no model hub); the run goes through the real `llamafactory-cli train`. A
random policy rarely writes a tool call, so the step time is dominated by generation and training; the numbers are a
throughput and memory measurement, not a learning curve. `--one-gpu` adds the long-response settings of docs/scaling.md's
"One GPU, real sizes" section (`pure_bf16` for full fine-tuning, gradient checkpointing, `rl_micro_batch_tokens`,
`arpo_rollout_schedule: continuous`). Prints, per optimiser step, the time split, the decode step, the memory split
and generated tokens per second from `trainer_log.jsonl`.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml


KEYS = [
    "time/generation",
    "time/tools",
    "time/reward",
    "time/training",
    "time/premonitor",
    "time/rollout",
    "perf/generated_tokens_per_s",
    "perf/decode_step_ms",
    "perf/decode_rows",
    "perf/peak_gpu_memory_gib",
    "memory/static_gib",
    "memory/peak_rollout_gib",
    "memory/peak_loss_gib",
    "memory/peak_over_static",
    "rollout/generated_tokens",
    "rollout/response_length",
    "rollout/tool_calls_per_traj",
    "rollout/branches",
    "loss",
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=None, help="ARPO's files; default: synthetic prompts, no tools")
    parser.add_argument("--prompt-length", type=int, default=1024, help="synthetic prompts only")
    parser.add_argument("--finetuning", default="full", choices=["full", "lora"])
    parser.add_argument("--one-gpu", action="store_true", help="the long-response settings of docs/scaling.md")
    parser.add_argument("--slots", type=int, default=None, help="arpo_hf_generation_batch_size")
    parser.add_argument("--micro-batch-tokens", type=int, default=16384)
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--stage", default="arpo")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=16, help="prompts per rollout")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--response-length", type=int, default=1024)
    parser.add_argument("--work-dir", default="/tmp/arpo_gpu")
    parser.add_argument("--extra", nargs="*", default=[], help="extra recipe keys as key=value")
    args = parser.parse_args()

    import torch

    from llamafactory_agentic.testing import build_real_size_model
    from llamafactory_agentic.tools import open_cache

    work = Path(args.work_dir) / f"{args.stage}_{args.model}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    t0 = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model_dir = build_real_size_model(work / "model", args.model, device=device)
    if device == "cuda":
        torch.cuda.empty_cache()
    print(f"built random {args.model} in {time.perf_counter() - t0:.1f}s", flush=True)

    tool_keys: dict = {}
    if args.data_dir:
        data_dir = Path(args.data_dir).resolve()
        cache_path = work / "tool_cache.sqlite"
        cache = open_cache(str(cache_path), mode="read_write")
        print("cache import:", cache.import_json(str(data_dir / "search_cache.json")), flush=True)
        cache.close()
        (work / "data").mkdir()
        info = {"gpu_train": {"file_name": str(data_dir / "rl" / "train_10k.parquet"), "formatting": "arpo_rl"}}
        (work / "data" / "dataset_info.json").write_text(json.dumps(info))
        dataset, dataset_dir = "gpu_train", work / "data"
        tool_keys = {
            "agentic_max_tool_calls": 3,
            "agentic_python_timeout": 30,
            "agentic_search_backend": "replay",
            "agentic_cache_path": str(cache_path),
        }
        prompt_budget = 1536
    else:  # synthetic prompts of --prompt-length tokens, no tools
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _single_gpu import prompt_texts, write_dataset

        dataset_dir = write_dataset(work, prompt_texts(model_dir, max(args.prompts, 1) * 4, args.prompt_length))
        dataset = "synthetic"
        tool_keys = {"agentic_tool_config": str(dataset_dir / "no_tools.yaml")}
        prompt_budget = args.prompt_length + 64

    per_update = args.prompts * args.group_size // 2  # two optimiser updates per rollout
    recipe = {
        "model_name_or_path": str(model_dir),
        "stage": args.stage,
        "do_train": True,
        "finetuning_type": args.finetuning,
        "arpo_rollout_n": args.group_size,
        "arpo_initial_rollouts": args.group_size // 2,
        "arpo_rollout_batch_size": args.prompts,
        "arpo_max_prompt_length": prompt_budget,
        "arpo_max_response_length": args.response_length,
        "arpo_rollout_backend": "hf",
        "arpo_hf_generation_batch_size": args.slots or args.prompts * args.group_size,
        **tool_keys,
        "agentic_skip_bad_rows": True,
        "dataset": dataset,
        "dataset_dir": str(dataset_dir),
        "template": "qwen",
        "cutoff_len": prompt_budget + args.response_length,
        "max_samples": 512,
        "preprocessing_num_workers": 8,
        "output_dir": str(work / "out"),
        "logging_steps": 1,
        "save_strategy": "no",
        "plot_loss": False,
        "overwrite_output_dir": True,
        "report_to": "none",
        "per_device_train_batch_size": per_update // 4,
        "gradient_accumulation_steps": 4,
        "gradient_checkpointing": True,
        "learning_rate": 1.0e-6,
        "max_steps": args.steps,
        "lr_scheduler_type": "constant",
        "bf16": True,
        "seed": 42,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
    }
    if args.finetuning == "lora":
        recipe.update(lora_rank=64, lora_alpha=128, lora_target="all")
    if args.one_gpu:  # docs/scaling.md "One GPU, real sizes"
        recipe.update(
            gradient_checkpointing=True,
            rl_micro_batch_tokens=args.micro_batch_tokens,
            arpo_rollout_schedule="continuous",
            per_device_train_batch_size=per_update,
            gradient_accumulation_steps=1,
        )
        if args.finetuning == "full":
            recipe["pure_bf16"] = True
    for item in args.extra:
        key, value = item.split("=", 1)
        recipe[key] = yaml.safe_load(value)

    recipe_path = work / "recipe.yaml"
    recipe_path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    cli = shutil.which("llamafactory-cli", path=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    t0 = time.perf_counter()
    proc = subprocess.run([cli, "train", str(recipe_path)], cwd=work, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (work / "train.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        print((proc.stdout + proc.stderr)[-6000:])
        sys.exit(proc.returncode)

    print(f"llamafactory-cli train: {wall:.1f}s wall for {args.steps} optimiser steps")
    for line in (work / "out" / "trainer_log.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "current_steps" not in record or not any(k in record for k in KEYS):
            continue
        fields = " ".join(f"{k}={record[k]:.4g}" for k in KEYS if isinstance(record.get(k), (int, float)))
        print(f"step {record['current_steps']}: {fields}")


if __name__ == "__main__":
    main()

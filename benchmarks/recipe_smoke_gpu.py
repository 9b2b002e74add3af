# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Recipe smoke table: every engine combination the recipes use, 2 steps and a resume, on a random-weight model.

    python benchmarks/recipe_smoke_gpu.py --out DIR [--only z3-vllm-full,fsdp-hf-lora,...] [--steps 2] [--jobs 4]
    python benchmarks/recipe_smoke_gpu.py --out DIR --cpu-check     # on a machine without CUDA: plain-hf-full, 1 step

Combinations (issue 25, item 4b): engine `z2`, `z3`, `z3off` (`recipes/deepspeed/ds_z2_config.json`,
`ds_z3_config.json`, `ds_z3_offload_config.json`, launched as `FORCE_TORCHRUN=1 NPROC_PER_NODE=1 llamafactory-cli
train`), `fsdp` and `fsdp2` (`accelerate launch --config_file <FSDP config> <LLaMA-Factory's launcher.py>`, the config
LLaMA-Factory's examples use: FULL_SHARD, TRANSFORMER_BASED_WRAP, use_orig_params, cpu_ram_efficient_loading, bf16,
1 process; `fsdp2` sets `fsdp_version: 2`) and `plain` (one process, no engine: the reference row) x rollout backend
`hf` / `vllm` x `full` / `lora`. The default set is every DeepSpeed and FSDP combination; `--only` takes names or
`fnmatch` patterns (`z3-*`, `*-vllm-*`).

Data and model are built here without the hub: the synthetic tool-use task (`llamafactory_agentic.tasks.synthetic`,
with its BM25 search index) and a random-weight Qwen2 model with a tokenizer trained on the task's text
(`llamafactory_agentic.tasks.model.build_task_model`, `--size`). The recipe is the demo's ARPO recipe
(`resources/recipes/synthetic/arpo_cpu.yaml`) at a small batch, so the step exercises rollout with tools, reward,
the loss, the optimiser step, saving and resuming; it measures that the engines work, not speed at scale.

Each combination runs `--steps` optimiser steps and saves `checkpoint-<steps>`, then a second run resumes from that
checkpoint (`resume_from_checkpoint`) for one more step. Row fields:
started (the trainer began its loop), trained (the log reached step `--steps`), saved (the checkpoint holds
`trainer_state.json` at that step), resumed (the second run logged step `--steps + 1` and no earlier step), step time (seconds per step
from the plugin's `time/step_rollout_total` + `time/training`, else the trainer's elapsed time over the steps), peak
memory (largest `memory/peak_gib` / `perf/peak_gpu_memory_gib` logged, GiB), the largest gradient norm (the reward
is a graded length reward, `SMOKE_REWARD`, so that a random model's updates have gradients: 0 here means nothing was
trained) and the first error line of a failed run. A `vllm` row on a machine without vLLM reads `vllm not installed`, a DeepSpeed row without DeepSpeed `deepspeed
not installed`. Writes `DIR/smoke.csv`, `DIR/smoke.md` (with date and machine) and the runs' logs under `DIR/runs/`.
Exit code 0 when every selected row passed (skipped rows do not count as failures).
"""

import argparse
import csv
import datetime
import fnmatch
import importlib.util
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml


REPO = Path(__file__).resolve().parents[1]
DEEPSPEED = {
    "z2": REPO / "recipes" / "deepspeed" / "ds_z2_config.json",
    "z3": REPO / "recipes" / "deepspeed" / "ds_z3_config.json",
    "z3off": REPO / "recipes" / "deepspeed" / "ds_z3_offload_config.json",
}
FSDP = {"fsdp": 1, "fsdp2": 2}
ENGINES = [*DEEPSPEED, *FSDP, "plain"]
BACKENDS = ["hf", "vllm"]
TUNING = ["full", "lora"]
DEFAULT_ENGINES = [*DEEPSPEED, *FSDP]
FIELDS = [
    "combo", "started", "trained", "saved", "resumed", "step_s", "peak_gib", "grad_norm", "resume_step_s", "seconds",
    "error",
]  # fmt: skip
TASK_SIZES = {"sft": 32, "train": 64, "heldout": 16}
ERROR = re.compile(r"(Error|Exception|error:|CUDA error|Traceback|Killed|OutOfMemory)")


def combos(only: str | None, cpu_check: bool) -> list[str]:
    """Names `engine-backend-tuning` selected by `--only` (names or fnmatch patterns, comma-separated)."""
    if cpu_check:
        return ["plain-hf-full"]
    every = [f"{e}-{b}-{t}" for e in ENGINES for b in BACKENDS for t in TUNING]
    if not only:
        return [c for c in every if c.split("-")[0] in DEFAULT_ENGINES]
    chosen = []
    for pattern in only.split(","):
        hits = [c for c in every if fnmatch.fnmatch(c, pattern.strip())]
        if not hits:
            raise SystemExit(f"--only: {pattern!r} matches no combination; names are like {every[0]} ({len(every)})")
        chosen += [c for c in hits if c not in chosen]
    return chosen


def prepare(work: Path, size: str, seed: int) -> tuple[Path, Path]:
    """Generate the task (data + search index) and the random-weight model once; return (data dir, model dir)."""
    from llamafactory_agentic.tasks.model import build_task_model
    from llamafactory_agentic.tasks.synthetic import TaskConfig, generate_task

    data, model = work / "data", work / "model"
    if not (data / "dataset_info.json").is_file():
        generate_task(TaskConfig(seed=seed, sizes=dict(TASK_SIZES)), data)
    if not (model / "config.json").is_file():
        build_task_model(model, data, size=size, seed=seed)
    return data, model


# A random-weight model never writes a well-formed answer, so the task's F1 reward is -1 for every trajectory, every
# advantage 0 and every gradient 0 (the H200 table of 2026-12-04 logged loss 0 and grad norm 0): the runs exercised
# the engines' forward and backward but applied no update. This graded reward gives every group a spread.
SMOKE_REWARD = '''"""recipe_smoke_gpu.py: a graded reward (response length up to 400 characters) for a random-weight model."""


def reward(model_text, ground_truth, metadata=None):
    return min(len(model_text), 400) / 400.0
'''


def base_recipe(work: Path, cuda: bool, steps: int) -> dict:
    """The demo's ARPO recipe at smoke size, paths absolute under `work`."""
    from llamafactory_agentic.tasks.demo import RL_RECIPE, recipe_text

    args = yaml.safe_load(recipe_text(RL_RECIPE))
    args.update(
        model_name_or_path=str(work / "model"),
        dataset_dir=str(work / "data"),
        agentic_search_index=str(work / "data" / "search_index"),
        arpo_rollout_n=4,
        arpo_initial_rollouts=2,
        arpo_rollout_batch_size=4,  # 4 prompts x 4 = 16 trajectories = one update of 8 x 2
        arpo_max_response_length=96,
        arpo_hf_generation_batch_size=16,
        arpo_rollout_log_ratio=0.0,
        agentic_reward="smoke_reward:reward",  # graded (SMOKE_REWARD): every update has gradients to apply
        rl_dynamic_sampling=False,  # a random model: every group may be equal; dynamic sampling would roll out more
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        max_steps=steps,
        max_samples=32,
        eval_strategy="no",
        eval_on_start=False,
        save_strategy="steps",
        save_steps=steps,
        save_only_model=False,
        plot_loss=False,
        logging_steps=1,
        bf16=cuda,
        report_to="none",
        arpo_vllm_gpu_memory_utilization=0.15,  # a tiny model: leave room for the combinations running beside it
    )
    for key in ("eval_dataset", "arpo_val_max_samples", "per_device_eval_batch_size", "eval_steps"):
        args.pop(key, None)
    return args


def fsdp_config(path: Path, version: int) -> Path:
    """LLaMA-Factory's accelerate FSDP config (examples/accelerate/fsdp_config.yaml) for one process."""
    config = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": "FSDP",
        "downcast_bf16": "no",
        "fsdp_config": {
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_backward_prefetch": "BACKWARD_PRE",
            "fsdp_forward_prefetch": False,
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_offload_params": False,
            "fsdp_sharding_strategy": "FULL_SHARD",
            "fsdp_state_dict_type": "FULL_STATE_DICT",
            "fsdp_sync_module_states": True,
            "fsdp_use_orig_params": True,
        },
        "machine_rank": 0,
        "main_training_function": "main",
        "mixed_precision": "bf16",
        "num_machines": 1,
        "num_processes": 1,
        "rdzv_backend": "static",
        "same_network": True,
        "tpu_env": [],
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
        "use_cpu": False,
    }
    if version == 2:  # accelerate's FSDP2: reshard_after_forward replaces the sharding strategy
        fc = config["fsdp_config"]
        fc["fsdp_version"] = 2
        fc["fsdp_reshard_after_forward"] = True
        for key in (
            "fsdp_sharding_strategy",
            "fsdp_backward_prefetch",
            "fsdp_forward_prefetch",
            "fsdp_use_orig_params",
        ):
            fc.pop(key)
        fc["fsdp_state_dict_type"] = "SHARDED_STATE_DICT"
    path.write_text(yaml.safe_dump(config))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(engine: str, recipe: Path, run_dir: Path) -> tuple[list[str], dict]:
    """The launch command and environment of one run, as a user would type it."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", MASTER_PORT=str(free_port()), DISABLE_VERSION_CHECK="1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    cli = shutil.which("llamafactory-cli") or str(Path(sys.executable).parent / "llamafactory-cli")
    if engine in DEEPSPEED:
        env.update(FORCE_TORCHRUN="1", NPROC_PER_NODE="1", MASTER_ADDR="127.0.0.1")
        return [cli, "train", str(recipe)], env
    if engine in FSDP:
        import llamafactory

        launcher = Path(llamafactory.__file__).parent / "launcher.py"
        config = fsdp_config(run_dir / "fsdp_config.yaml", FSDP[engine])
        accelerate = shutil.which("accelerate") or str(Path(sys.executable).parent / "accelerate")
        cmd = [accelerate, "launch", "--config_file", str(config), "--main_process_port", env["MASTER_PORT"]]
        return [*cmd, str(launcher), str(recipe)], env
    return [cli, "train", str(recipe)], env


def read_log(output_dir: Path) -> list[dict]:
    path = output_dir / "trainer_log.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def seconds_of(clock: str) -> float:
    parts = [float(p) for p in str(clock).split(":")]
    return sum(p * 60**i for i, p in enumerate(reversed(parts)))


def step_time(rows: list[dict], steps: int) -> float | None:
    """Seconds per optimiser step: the plugin's rollout + training time per step, else elapsed time / steps."""
    per_step = [
        r["time/step_rollout_total"] + r["time/training"]
        for r in rows
        if "time/step_rollout_total" in r and "time/training" in r
    ]
    if per_step:
        return sum(per_step) / len(per_step)
    trained = [r for r in rows if r.get("current_steps", 0) > 0 and "elapsed_time" in r]
    return seconds_of(trained[-1]["elapsed_time"]) / max(steps, 1) if trained else None


def peak_gib(rows: list[dict]) -> float | None:
    values = [float(r[k]) for r in rows for k in ("memory/peak_gib", "perf/peak_gpu_memory_gib") if k in r]
    return max(values) if values else None


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s*")
EXCEPTION_LINE = re.compile(r"^([\w.]+(Error|Exception|Interrupt)|Killed|OutOfMemory\w*)\b.*")


def largest_grad_norm(rows: list[dict]) -> float | None:
    """The largest `grad_norm` the run logged (0 for a run whose updates had nothing to apply)."""
    values = [float(r["grad_norm"]) for r in rows if r.get("grad_norm") is not None]
    return max(values) if values else None


def first_error(log: Path) -> str:
    """The first exception line (`SomeError: message`), else the first line naming an error, else the last line.

    Lines are read without terminal escapes and torchrun's `[rankN]: ` prefix; a `Traceback (most recent call last):`
    header is skipped for the exception it introduces (the first rank's exception is usually the root cause).
    """
    if not log.is_file():
        return "no log"
    lines = [RANK_PREFIX.sub("", ANSI.sub("", line)).strip() for line in log.read_text(errors="replace").splitlines()]
    for line in lines:
        if EXCEPTION_LINE.match(line) and "warn" not in line.lower():
            return line[:300]
    for line in lines:
        if ERROR.search(line) and "warn" not in line.lower() and not line.startswith("Traceback"):
            return line[:300]
    return (lines[-1] if lines else "empty log")[:300]


def run(cmd: list[str], env: dict, log: Path, timeout: int) -> tuple[int, float]:
    start = time.perf_counter()
    with open(log, "w") as f:
        try:
            code = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            f.write(f"\nTimeoutError: the run exceeded --timeout {timeout} s\n")
            code = 124
    return code, time.perf_counter() - start


def smoke(combo: str, base: dict, runs: Path, steps: int, timeout: int) -> dict:
    """Train `steps` steps, save, resume for one more; return the table row."""
    engine, backend, tuning = combo.split("-")
    row = dict.fromkeys(FIELDS, "")
    row["combo"] = combo
    if backend == "vllm" and importlib.util.find_spec("vllm") is None:
        return {**row, "error": "vllm not installed"}
    if engine in DEEPSPEED and importlib.util.find_spec("deepspeed") is None:
        return {**row, "error": "deepspeed not installed"}
    run_dir = runs / combo
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    out, resumed_out = run_dir / "out", run_dir / "resumed"
    args = dict(base, output_dir=str(out), arpo_rollout_backend=backend, finetuning_type=tuning)
    args["agentic_cache_path"] = str(run_dir / "tool_cache.sqlite")
    if tuning == "lora":
        args.update(lora_target="all", lora_rank=8, learning_rate=1e-4)
    if engine in DEEPSPEED:
        args["deepspeed"] = str(DEEPSPEED[engine])
    recipe = run_dir / "train.yaml"
    recipe.write_text(yaml.safe_dump(args, sort_keys=False))
    cmd, env = command(engine, recipe, run_dir)
    (run_dir / "command.txt").write_text(" ".join(cmd) + "\n")
    code, wall = run(cmd, env, run_dir / "train.log", timeout)
    rows = read_log(out)
    log_text = (run_dir / "train.log").read_text(errors="replace")
    row["started"] = bool(rows) or "Running training" in log_text
    row["trained"] = any(r.get("current_steps") == steps for r in rows)
    state = out / f"checkpoint-{steps}" / "trainer_state.json"
    row["saved"] = state.is_file() and json.loads(state.read_text()).get("global_step") == steps
    row["step_s"] = step_time(rows, steps)
    row["peak_gib"] = peak_gib(rows)
    row["grad_norm"] = largest_grad_norm(rows)
    row["seconds"] = round(wall, 1)
    if code != 0 or not row["saved"]:
        row["resumed"] = False
        row["error"] = first_error(run_dir / "train.log") if code != 0 else f"no {state.relative_to(run_dir)}"
        return row

    resume = dict(args, output_dir=str(resumed_out), max_steps=steps + 1, save_strategy="no")
    resume["resume_from_checkpoint"] = str(out / f"checkpoint-{steps}")
    recipe = run_dir / "resume.yaml"
    recipe.write_text(yaml.safe_dump(resume, sort_keys=False))
    cmd, env = command(engine, recipe, run_dir)
    code, wall2 = run(cmd, env, run_dir / "resume.log", timeout)
    rows2 = read_log(resumed_out)
    logged = sorted({r["current_steps"] for r in rows2 if r.get("current_steps", 0) > 0})
    row["resumed"] = code == 0 and logged == [steps + 1]  # a run started afresh would log steps 1..steps+1
    row["resume_step_s"] = step_time([r for r in rows2 if r.get("current_steps", 0) > steps], 1)
    row["peak_gib"] = max(v for v in (row["peak_gib"], peak_gib(rows2), 0.0) if v is not None) or None
    row["seconds"] = round(wall + wall2, 1)
    if not row["resumed"]:
        row["error"] = first_error(run_dir / "resume.log") if code != 0 else f"resume logged steps {logged}"
    return row


def fmt(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    return "" if value is None else str(value)


def machine() -> str:
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
        versions = f"torch {torch.__version__}"
    except ImportError:
        gpu, versions = "?", "no torch"
    for name in ("transformers", "deepspeed", "vllm", "accelerate"):
        spec = importlib.util.find_spec(name)
        if spec is not None:
            from importlib.metadata import version

            versions += f", {name} {version(name)}"
    return f"{platform.node()} ({gpu}; Python {platform.python_version()}; {versions})"


def write_table(rows: list[dict], out: Path, header: str) -> str:
    with open(out / "smoke.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows({k: fmt(v) for k, v in r.items()} for r in rows)
    lines = [header, "", "| " + " | ".join(FIELDS) + " |", "|" + " --- |" * len(FIELDS)]
    for r in rows:
        cells = [fmt(r[k]).replace("|", "\\|") for k in FIELDS]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    (out / "smoke.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output folder (data, model, runs, smoke.csv, smoke.md)")
    parser.add_argument("--only", help="comma-separated combinations or patterns, e.g. 'z3-*,fsdp-hf-full'")
    parser.add_argument("--steps", type=int, default=2, help="optimiser steps before the checkpoint (default 2)")
    parser.add_argument("--jobs", type=int, default=1, help="combinations run at once on the GPU (default 1)")
    parser.add_argument("--timeout", type=int, default=400, help="seconds per run before it is stopped (default 400)")
    parser.add_argument("--size", default="demo", help="model size of llamafactory_agentic.tasks.model (demo)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpu-check", action="store_true", help="plain-hf-full for 1 step on CPU (dry run)")
    parser.add_argument("--list", action="store_true", help="print the selected combinations and exit")
    args = parser.parse_args(argv)

    selected = combos(args.only, args.cpu_check)
    if args.list:
        print("\n".join(selected))
        return 0
    import torch

    cuda = torch.cuda.is_available()
    if args.cpu_check:
        args.steps = 1
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        cuda = False
    elif not cuda:
        raise SystemExit("no CUDA device: run with --cpu-check for the CPU dry run")
    out = Path(args.out).resolve()
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    data, model = prepare(out, args.size, args.seed)
    base = base_recipe(out, cuda, args.steps)
    (out / "smoke_reward.py").write_text(SMOKE_REWARD)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(out), os.environ.get("PYTHONPATH")) if p)
    print(f"{len(selected)} combinations, {args.steps} steps + 1 resumed, model {model}, data {data}", flush=True)

    def one(combo: str) -> dict:
        row = smoke(combo, base, runs, args.steps, args.timeout)
        print(" ".join(f"{k}={fmt(v)}" for k, v in row.items()), flush=True)
        return row

    # vLLM profiles the free GPU memory at start and fails when another process changes it meanwhile: the vllm
    # combinations run one at a time, after the others (which run --jobs at once)
    serial = [c for c in selected if c.split("-")[1] == "vllm"]
    with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        done = dict(
            zip([c for c in selected if c not in serial], pool.map(one, [c for c in selected if c not in serial]))
        )
    done.update({c: one(c) for c in serial})
    rows = [done[c] for c in selected]
    header = (
        f"Recipe smoke table, {started:%Y-%m-%d %H:%M} UTC, {machine()}; model `{args.size}` "
        f"(random weights), {args.steps} steps + 1 resumed per combination"
    )
    print("\n" + write_table(rows, out, header))
    skipped = [r for r in rows if r["error"] in ("vllm not installed", "deepspeed not installed")]
    failed = [r for r in rows if r not in skipped and not (r["trained"] and r["saved"] and r["resumed"])]
    print(f"{len(rows) - len(failed) - len(skipped)} passed, {len(failed)} failed, {len(skipped)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

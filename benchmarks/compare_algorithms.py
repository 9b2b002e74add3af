# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""GRPO vs ARPO vs AEPO (released) vs AEPO (paper) on the synthetic tool-use task, from the same cold start.

`--algorithms` also takes the policy losses of docs/algorithms.md §4.8 on ARPO's rollout: `gspo`, `dr_grpo`, `cispo`
(`arpo` is their PPO-clip baseline).

    python benchmarks/compare_algorithms.py                          # CPU, the demo's task, seeds 0 1 2
    python benchmarks/compare_algorithms.py --scale gpu --gpus 0 --runs-per-gpu 6   # larger model, 6 runs per GPU
    python benchmarks/compare_algorithms.py --algorithms arpo --sft-extra max_steps=1200   # cold-start variants
    python benchmarks/compare_algorithms.py --algorithms arpo --model-extra num_kv_heads=4   # (how the demo's was chosen)

Per seed: the task is generated (`llamafactory-agentic task generate`), a model is built from scratch
(`task build-model`, size `demo` on CPU (at the 4 layers and 1500 SFT steps of the published tables; the demo itself
now trains 2 layers for 1000 steps), `gpu` on GPU) and cold-started once with agentic SFT; every algorithm then
trains from that same checkpoint with `llamafactory-cli train` on the demo's RL recipe, with equal M, prompts per step,
steps, learning rate and seed, and plain group sampling as in the papers (each scale sets `rl_dynamic_sampling=false`,
and 30 steps validated every 10 on CPU; `--extra` comes after and wins); only the preset differs (`arpo_variant: grpo`,
`stage: arpo`, `stage: aepo`, `stage: aepo` + `aepo_variant: paper`). Validation runs on held-out questions every 10
steps (greedy; `eval_steps` of the scale, or `--extra eval_steps=N`), and the final model is evaluated on the whole
held-out set.

Writes to `--work-dir` (default saves/compare_algorithms/<scale>):
    runs.csv     one row per (algorithm, seed): final held-out accuracy, tool calls per question, step means of tool
                 calls per trajectory, branches, consecutive branches, entropy, generated tokens, wall time
    curves.csv   one row per (algorithm, seed, step, metric)
    summary.csv  mean and std over seeds per algorithm
    by_kind.csv  held-out accuracy and tool calls per question of each question kind, cold start and final model
    compare_algorithms.png   held-out accuracy curve, tool calls per trajectory, branches, consecutive branches, mean
                 token entropy, generated tokens, wall time
Finished runs are kept and skipped when the script is run again (split the work with --seeds / --algorithms).

`--mix`, `--sft-mix` and `--skip-tool-rate` (KIND=VALUE, added to the generator's defaults, as in `llamafactory-agentic
task generate`) change the task; a stateful kind (`python_session_count`, docs/tasks.md §2) with weight makes every RL
run and held-out evaluation of the seed use a tool config with `python`, `search` and `python_session`
(`<seed>/tools.yaml`), and runs.csv gains the held-out rate of second `python_session` calls that use the variable the
first defined (docs/tasks.md §6, "Stateful variant").
"""

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
# the tool config of a task with a stateful kind: the demo's two tools plus the `python_session` environment
# (docs/tools.md "Environments"); python and python_session take the recipe's agentic_python_* limits
SESSION_TOOLS = "tools:\n  - name: python\n  - name: search\n  - name: python_session\n"
STAGES = ("grpo", "arpo", "aepo", "aepo-paper")
# the policy losses of docs/algorithms.md §4.8 on ARPO's rollout (`stage: arpo` preset), each by its recipe keys;
# GSPO with the paper's sequence-ratio clip ranges, CISPO without a lower bound on the IS weight (as in the paper) and
# the PPO baseline's upper range 0.2
LOSSES = {
    "gspo": ["rl_policy_loss=gspo", "rl_epsilon=3.0e-4", "rl_epsilon_high=4.0e-4"],
    "dr_grpo": ["rl_policy_loss=dr_grpo"],
    "cispo": ["rl_policy_loss=cispo", "rl_epsilon=1.0", "rl_epsilon_high=0.2"],
}
ALGORITHMS = STAGES + tuple(LOSSES)
CURVE_KEYS = {
    "eval_reward/accuracy": "held-out accuracy (greedy)",
    "rollout/tool_calls_per_traj": "tool calls / trajectory",
    "rollout/branches_per_group": "branches / group",
    "rollout/consecutive_branches": "consecutive branches / step",
    "loss/entropy": "mean token entropy",
    "rollout/generated_tokens": "generated tokens / step",
    "reward/accuracy": "training accuracy",
    "reward/identical_groups": "groups with identical rewards",
    "loss/clip_frac": "clipped loss-mask tokens",
}
SCALES = {
    # CPU: the demo's task and recipes with the cold start and RL run of the published tables: the demo's model at its
    # former 4 layers, 1500 SFT steps at lr 3e-3 (the demo now trains 2 layers for 1000 steps at 4e-3; pass
    # `--model-extra num_layers=2 --sft-extra max_steps=1000 learning_rate=4e-3` for its cold start), and the RL run
    # as the papers compare: 30 steps of plain group sampling, validated every 10, no dynamic sampling
    # (`--extra rl_dynamic_sampling=true` for it)
    "cpu": {
        "model": "demo",
        "model_extra": {"num_layers": 4},
        "sizes": None,
        "sft": ["max_steps=1500", "learning_rate=3.0e-3"],
        "rl": ["max_steps=30", "rl_dynamic_sampling=false", "eval_steps=10"],
    },
    # smoke run of the script itself (seconds of training; the numbers mean nothing)
    "smoke": {
        "model": "test",
        "sizes": {"sft": 64, "train": 32, "heldout": 8},
        "sft": ["max_steps=4"],
        "rl": [
            "max_steps=2",
            "eval_steps=1",
            "arpo_val_max_samples=4",
            "per_device_eval_batch_size=4",
            "arpo_rollout_batch_size=2",
            "per_device_train_batch_size=16",
            "gradient_accumulation_steps=1",
        ],
    },
    # GPU: a larger model trained from scratch on more cold-start data, bigger rollouts (16 prompts x M = 8)
    "gpu": {
        "model": "gpu",
        "sizes": {"sft": 8000, "train": 1500, "heldout": 300},
        "sft": ["max_steps=1200", "per_device_train_batch_size=64", "learning_rate=1.0e-3", "bf16=true"],
        "rl": [
            "max_steps=20",
            "rl_dynamic_sampling=false",
            "arpo_rollout_batch_size=16",
            "per_device_train_batch_size=64",
            "gradient_accumulation_steps=2",
            "arpo_hf_generation_batch_size=128",
            "learning_rate=1.0e-4",
            "bf16=true",
            "eval_steps=10",
            "arpo_val_max_samples=300",
            "per_device_eval_batch_size=50",
        ],
    },
}


def stage_overrides(algorithm: str) -> list[str]:
    from llamafactory_agentic.tasks.demo import stage_overrides as overrides

    if algorithm in LOSSES:  # a policy loss on ARPO's rollout
        return overrides("arpo") + LOSSES[algorithm]
    return overrides(algorithm)


def cli(name: str = "llamafactory-cli") -> str:
    here = Path(sys.executable).parent / name
    return str(here) if here.is_file() else (shutil.which(name) or name)


def train(workdir: Path, recipe: str, overrides: list[str], log: Path, env: dict) -> float:
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(
            [cli(), "train", recipe, *overrides], cwd=workdir, stdout=f, stderr=subprocess.STDOUT, env=env
        )
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{recipe} {' '.join(overrides)} failed in {workdir}:\n{tail}")
    return time.perf_counter() - start


def heldout(workdir: Path, model: str, env: dict) -> dict:
    """Greedy held-out accuracy and tool calls per question of `workdir/model` (`llamafactory-agentic task eval`).

    A subprocess with the run's own environment: it decodes on the run's GPU (or the CPU at CPU scale), and runs of
    one invocation do not share the benchmark's interpreter. The result is kept in `workdir/model/heldout.json`.
    """
    result = workdir / model / "heldout.json"
    if not result.is_file():
        command = [cli("llamafactory-agentic"), "task", "eval", model, "--data", "data/heldout.jsonl"]
        command += ["--search-index", "data/search_index", "--by-kind", "--json", f"{model}/heldout.json"]
        if (workdir / "tools.yaml").is_file():
            command += ["--tool-config", "tools.yaml"]
        with open(workdir / f"{model}_heldout.log", "w") as f:
            proc = subprocess.run(command, cwd=workdir, stdout=f, stderr=subprocess.STDOUT, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed in {workdir}: see {workdir / f'{model}_heldout.log'}")
    return json.loads(result.read_text())[0]


def prepare_seed(root: Path, seed: int, scale: dict, env: dict) -> Path:
    """Task, model and cold start of one seed (shared by every algorithm); skipped when already done."""
    from llamafactory_agentic.tasks.demo import DEMO_SIZES, copy_recipes
    from llamafactory_agentic.tasks.model import build_task_model
    from llamafactory_agentic.tasks.synthetic import STATEFUL_KINDS, TaskConfig, generate_task

    workdir = root / f"seed{seed}"
    settings = {"model": scale["model"], "model_extra": scale["model_extra"], "sft": scale["sft"]}
    task = scale.get("task") or {}
    if task:  # recorded only when set, so that work dirs of the default task stay reusable
        settings["task"] = task
    if (workdir / "sft" / "config.json").is_file():
        recorded = workdir / "cold_start.json"
        if recorded.is_file() and json.loads(recorded.read_text()) != settings:
            raise SystemExit(
                f"{workdir} holds a cold start built with {recorded.read_text().strip()}, not {json.dumps(settings)}: "
                "finished runs are reused, so pass another --work-dir for other cold-start settings"
            )
        heldout(workdir, "sft", env)
        return workdir
    workdir.mkdir(parents=True, exist_ok=True)
    generate_task(TaskConfig(seed=seed, sizes=dict(scale["sizes"] or DEMO_SIZES), **task), workdir / "data")
    mixes = [task.get("mix") or {}, task.get("sft_mix") or {}]
    if any(mix.get(kind, 0) > 0 for mix in mixes for kind in STATEFUL_KINDS):
        (workdir / "tools.yaml").write_text(SESSION_TOOLS)
    build_task_model(
        workdir / "model", workdir / "data", size=scale["model"], seed=seed, overrides=scale["model_extra"]
    )
    copy_recipes(workdir)
    seconds = train(workdir, "recipes/agentic_sft_cpu.yaml", [f"seed={seed}", *scale["sft"]], workdir / "sft.log", env)
    (workdir / "sft_seconds.json").write_text(json.dumps({"seconds": seconds}))
    (workdir / "cold_start.json").write_text(json.dumps(settings))
    heldout(workdir, "sft", env)  # once per seed: every algorithm starts from it
    return workdir


def run_algorithm(workdir: Path, seed: int, algorithm: str, scale: dict, extra: list[str], env: dict) -> dict:
    out = workdir / algorithm
    done = out / "compare_result.json"
    if done.is_file():
        result = json.loads(done.read_text())
        if result.get("extra", extra) != extra:
            raise SystemExit(
                f"{out} was trained with --extra {' '.join(result['extra']) or '(none)'}, not {' '.join(extra) or '(none)'}: "
                "finished runs are reused, so pass another --work-dir for other RL settings"
            )
        return result
    overrides = [
        f"seed={seed}",
        f"output_dir={algorithm}",
        f"agentic_cache_path={algorithm}/tool_cache.sqlite",
        "eval_on_start=true",
        "arpo_rollout_log_ratio=0",
        *stage_overrides(algorithm),
        *scale["rl"],
        *(["agentic_tool_config=tools.yaml"] if (workdir / "tools.yaml").is_file() else []),
        *extra,
    ]
    seconds = train(workdir, "recipes/arpo_cpu.yaml", overrides, workdir / f"{algorithm}.log", env)
    records = [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines() if line.strip()]
    final = heldout(workdir, algorithm, env)
    start = heldout(workdir, "sft", env)
    curves = {
        key: [(r["current_steps"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        for key in CURVE_KEYS
    }
    result = {
        "algorithm": algorithm,
        "seed": seed,
        "wall_s": seconds,
        "extra": list(extra),
        "sft_accuracy": start["accuracy"],
        "final_accuracy": final["accuracy"],
        "final_tool_calls_per_question": final["tool_calls_per_question"],
        "sft_by_kind": start["by_kind"],
        "final_by_kind": final["by_kind"],
        "sft_session_reuse": start.get("session_reuse", {}),
        "final_session_reuse": final.get("session_reuse", {}),
        "curves": curves,
    }
    done.write_text(json.dumps(result))
    return result


def mean(values: list[float]) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return sum(values) / len(values) if values else float("nan")


def std(values: list[float]) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    if len(values) < 2:
        return 0.0
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def step_mean(result: dict, key: str) -> float:
    return mean([v for _, v in result["curves"].get(key, [])])


def write_outputs(root: Path, results: list[dict]) -> list[dict]:
    run_rows = []
    for r in results:
        run_rows.append(
            {
                "algorithm": r["algorithm"],
                "seed": r["seed"],
                "sft_accuracy": round(r["sft_accuracy"], 4),
                "final_accuracy": round(r["final_accuracy"], 4),
                "final_tool_calls_per_question": round(r["final_tool_calls_per_question"], 3),
                "tool_calls_per_traj": round(step_mean(r, "rollout/tool_calls_per_traj"), 3),
                "branches_per_group": round(step_mean(r, "rollout/branches_per_group"), 3),
                "consecutive_branches_per_step": round(step_mean(r, "rollout/consecutive_branches"), 3),
                "mean_token_entropy": round(step_mean(r, "loss/entropy"), 4),
                "entropy_std_over_steps": round(std([v for _, v in r["curves"].get("loss/entropy", [])]), 4),
                "generated_tokens_per_step": round(step_mean(r, "rollout/generated_tokens"), 1),
                "identical_reward_groups": round(step_mean(r, "reward/identical_groups"), 3),
                "wall_s": round(r["wall_s"], 1),
            }
        )
        for model in ("sft", "final"):  # tasks with a stateful kind: second calls using the first call's variable
            reuse = r.get(f"{model}_session_reuse") or {}
            if reuse.get("two_calls"):
                run_rows[-1][f"{model}_session_reuse"] = round(reuse["reused"] / reuse["two_calls"], 4)
                run_rows[-1][f"{model}_session_two_calls"] = reuse["two_calls"]
    fields = list(dict.fromkeys(key for row in run_rows for key in row))
    with open(root / "runs.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(run_rows)
    with open(root / "curves.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["algorithm", "seed", "step", "metric", "value"])
        for r in results:
            for key, points in r["curves"].items():
                for step, value in points:
                    writer.writerow([r["algorithm"], r["seed"], step, key, value])
    with open(root / "by_kind.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["algorithm", "seed", "model", "kind", "questions", "accuracy", "tool_calls_per_question"])
        for r in results:
            for model, key in (("sft", "sft_by_kind"), ("final", "final_by_kind")):
                for kind, entry in sorted(r.get(key, {}).items()):
                    row = [r["algorithm"], r["seed"], model, kind, int(entry["questions"])]
                    writer.writerow(row + [round(entry["accuracy"], 4), round(entry["tool_calls"], 3)])
    summary = []
    for algorithm in ALGORITHMS:
        rows = [row for row in run_rows if row["algorithm"] == algorithm]
        if not rows:
            continue
        entry = {"algorithm": algorithm, "seeds": len(rows)}
        for key in fields[2:]:
            values = [row.get(key) for row in rows]
            entry[key] = round(mean(values), 4)
            entry[key + "_std"] = round(std(values), 4)
        summary.append(entry)
    with open(root / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(summary[0]))
        writer.writeheader()
        writer.writerows(summary)
    plot(root, results)
    return summary


def plot(root: Path, results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [
        "eval_reward/accuracy",
        "rollout/tool_calls_per_traj",
        "rollout/branches_per_group",
        "rollout/consecutive_branches",
        "loss/entropy",
        "rollout/generated_tokens",
    ]
    fig, axes = plt.subplots(2, 4, figsize=(20, 8))
    algorithms = [a for a in ALGORITHMS if any(r["algorithm"] == a for r in results)]
    for ax, key in zip(axes.flat, keys):
        for algorithm in algorithms:
            runs = [r["curves"].get(key, []) for r in results if r["algorithm"] == algorithm]
            steps = sorted({s for run in runs for s, _ in run})
            if not steps:
                continue
            means = [mean([dict(run).get(s, float("nan")) for run in runs]) for s in steps]
            ax.plot(steps, means, marker="o", markersize=3, label=algorithm)
        ax.set_title(CURVE_KEYS[key])
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    ax = axes.flat[6]
    walls = [mean([r["wall_s"] for r in results if r["algorithm"] == a]) for a in algorithms]
    ax.bar(algorithms, walls)
    ax.set_title("wall time of the RL run (s, mean over seeds)")
    ax = axes.flat[7]
    finals = [mean([r["final_accuracy"] for r in results if r["algorithm"] == a]) for a in algorithms]
    errs = [std([r["final_accuracy"] for r in results if r["algorithm"] == a]) for a in algorithms]
    start = mean([r["sft_accuracy"] for r in results])
    ax.bar(algorithms, finals, yerr=errs, capsize=4)
    ax.axhline(start, color="gray", linestyle="--", label=f"cold start {start:.2f}")
    ax.set_title("final held-out accuracy (mean ± std over seeds)")
    ax.legend()
    fig.suptitle(f"GRPO vs ARPO vs AEPO on the synthetic tool-use task ({len(results)} runs)")
    fig.tight_layout()
    fig.savefig(root / "compare_algorithms.png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--algorithms", nargs="+", choices=ALGORITHMS, default=list(ALGORITHMS))
    parser.add_argument("--work-dir", help="default: saves/compare_algorithms/<scale>")
    parser.add_argument("--gpus", help="comma-separated CUDA devices; one run per device at a time (GPU scale)")
    parser.add_argument("--runs-per-gpu", type=int, default=1, help="runs sharing one device at a time (small models)")
    parser.add_argument("--extra", nargs="*", default=[], help="more key=value overrides for every RL run")
    parser.add_argument("--sft-extra", nargs="*", default=[], help="more key=value overrides for the cold start")
    parser.add_argument(
        "--model-extra",
        nargs="*",
        default=[],
        help="key=value integers replacing the model size's shape (hidden_size=160)",
    )
    parser.add_argument(
        "--mix",
        nargs="*",
        default=[],
        metavar="KIND=WEIGHT",
        help="RL and held-out question kinds, added to the default mix (python_session_count=1)",
    )
    parser.add_argument(
        "--sft-mix",
        nargs="*",
        default=[],
        metavar="KIND=WEIGHT",
        help="cold-start question kinds, added to the default cold-start mix",
    )
    parser.add_argument(
        "--skip-tool-rate",
        nargs="*",
        default=[],
        metavar="KIND=RATE",
        help="cold-start rate of answering KIND without a tool, added to the defaults",
    )
    parser.add_argument("--report-only", action="store_true", help="only rebuild the tables from finished runs")
    args = parser.parse_args()
    from llamafactory_agentic.tasks.cli import parse_kind_values
    from llamafactory_agentic.tasks.model import MODEL_SIZES
    from llamafactory_agentic.tasks.synthetic import DEFAULT_MIX, DEFAULT_SFT_MIX, DEFAULT_SKIP_TOOL_RATE

    scale = dict(SCALES[args.scale])
    scale["task"] = {}
    for name, items, default in (("mix", args.mix, DEFAULT_MIX), ("sft_mix", args.sft_mix, DEFAULT_SFT_MIX),
                                 ("skip_tool_rate", args.skip_tool_rate, DEFAULT_SKIP_TOOL_RATE)):  # fmt: skip
        if items:
            scale["task"][name] = parse_kind_values(items, default, "--" + name.replace("_", "-"))
    scale["sft"] = scale["sft"] + args.sft_extra
    scale["model_extra"] = dict(scale.get("model_extra", {}))  # the scale's pinned shape, then --model-extra
    for item in args.model_extra:
        key, _, value = item.partition("=")
        if not value.isdigit():
            parser.error(f"--model-extra {item}: expected KEY=INTEGER, e.g. hidden_size=192")
        if key not in MODEL_SIZES[scale["model"]]:
            parser.error(f"--model-extra {item}: {key} is not one of {', '.join(MODEL_SIZES[scale['model']])}")
        scale["model_extra"][key] = int(value)
    root = Path(args.work_dir or REPO / "saves" / "compare_algorithms" / args.scale).resolve()
    root.mkdir(parents=True, exist_ok=True)
    gpus = (args.gpus.split(",") if args.gpus else [None]) * max(args.runs_per_gpu, 1)

    def env_for(slot: int) -> dict:
        env = dict(os.environ)
        # concurrent runs share the host's cores: one share each instead of every core per run
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // len(gpus))))
        if gpus[slot % len(gpus)] is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
        else:
            env.setdefault("CUDA_VISIBLE_DEVICES", "" if args.scale == "cpu" else env.get("CUDA_VISIBLE_DEVICES", ""))
        return env

    start = time.perf_counter()
    if not args.report_only:
        # transformers resolves its classes lazily, and that is not thread-safe: resolve them here, once
        from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM  # noqa: F401

        with ThreadPoolExecutor(max_workers=len(gpus)) as pool:
            workdirs = dict(zip(args.seeds, pool.map(lambda i_s: prepare_seed(root, i_s[1], scale, env_for(i_s[0])),
                                                      enumerate(args.seeds))))  # fmt: skip
            jobs = [(seed, algorithm) for seed in args.seeds for algorithm in args.algorithms]
            list(
                pool.map(
                    lambda i_job: run_algorithm(
                        workdirs[i_job[1][0]], i_job[1][0], i_job[1][1], scale, args.extra, env_for(i_job[0])
                    ),
                    enumerate(jobs),
                )
            )
    # every finished run in the work dir (also from earlier invocations) enters the tables
    results = [json.loads(p.read_text()) for p in sorted(root.glob("seed*/*/compare_result.json"))]
    if not results:
        raise SystemExit(f"no finished run under {root}")
    summary = write_outputs(root, results)
    header = ["algorithm", "seeds", "sft_accuracy", "final_accuracy", "final_tool_calls_per_question",
              "tool_calls_per_traj", "branches_per_group", "consecutive_branches_per_step", "mean_token_entropy",
              "entropy_std_over_steps", "generated_tokens_per_step", "wall_s"]  # fmt: skip
    print(" | ".join(header))
    for entry in summary:
        cells = [entry["algorithm"], str(entry["seeds"])]
        for key in header[2:]:
            cells.append(f"{entry[key]:.3f} ± {entry[key + '_std']:.3f}")
        print(" | ".join(cells))
    base = next((e for e in summary if e["algorithm"] == "grpo"), None)
    if base:
        for entry in summary:
            if entry["algorithm"] != "grpo" and base["tool_calls_per_traj"]:
                print(
                    f"{entry['algorithm']} / grpo: tool calls per trajectory {entry['tool_calls_per_traj'] / base['tool_calls_per_traj']:.2f}, "
                    f"wall time {entry['wall_s'] / base['wall_s']:.2f}"
                )
    print(
        f"outputs in {root} (runs.csv, curves.csv, summary.csv, by_kind.csv, compare_algorithms.png); "
        f"{time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()

# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""ARPO versus AEPO (released and paper presets) on the same tiny CPU run, through `llamafactory-cli train`.

    llamafactory-agentic demo                      # once: builds the tiny model, SFT, search index, data link
    python benchmarks/compare_arpo_aepo.py [--steps 4] [--prompts 4]

Same policy (the demo's agentic-SFT output), same seed, same rows, same tools; only the stage and preset differ.
Prints per run: tool calls per trajectory, branches per group, global/branch samples, penalised branch decisions,
generation / tools / premonitor / training seconds per rollout step, and the wall time.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
RUNS = [
    ("arpo", "recipes/tiny/arpo_cpu.yaml", []),
    ("aepo (released)", "recipes/tiny/aepo_cpu.yaml", []),
    ("aepo (paper)", "recipes/tiny/aepo_cpu.yaml", ["aepo_variant=paper"]),
]
COLUMNS = [
    ("tool calls/traj", "rollout/tool_calls_per_traj"),
    ("branches/group", "rollout/branches_per_group"),
    ("global/group", "aepo/global_samples_per_group"),
    ("penalised", "rollout/penalised_decisions"),
    ("gen s", "time/generation"),
    ("tools s", "time/tools"),
    ("premon s", "time/premonitor"),
    ("train s", "time/training"),
    ("reward", "reward/mean"),
]


def mean_of(records: list[dict], key: str) -> float:
    values = [r[key] for r in records if isinstance(r.get(key), (int, float))]
    return sum(values) / len(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--model", default=str(REPO / "saves" / "tiny-qwen2" / "agentic_sft"))
    parser.add_argument("--work-dir", default=str(REPO / "saves" / "compare_arpo_aepo"))
    args = parser.parse_args()

    if not (Path(args.model) / "config.json").is_file():
        sys.exit(f"{args.model} not found: run `llamafactory-agentic demo` first")

    cli = shutil.which("llamafactory-cli", path=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    rows = []
    for name, recipe, extra in RUNS:
        out = Path(args.work_dir) / name.replace(" ", "_").replace("(", "").replace(")", "")
        shutil.rmtree(out, ignore_errors=True)
        overrides = [
            f"model_name_or_path={args.model}",
            f"output_dir={out}",
            f"agentic_cache_path={out / 'tool_cache.sqlite'}",
            f"max_steps={args.steps}",
            f"arpo_rollout_batch_size={args.prompts}",
            f"per_device_train_batch_size={args.prompts * 4 // 2}",
            "eval_steps=100000",  # no validation inside the compared steps
            "arpo_rollout_log_ratio=0",
            *extra,
        ]
        start = time.perf_counter()
        proc = subprocess.run([cli, "train", recipe, *overrides], cwd=REPO, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit(f"{name} failed:\n{(proc.stdout + proc.stderr)[-4000:]}")

        records = [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines()]
        rollout_steps = [r for r in records if "time/generation" in r]
        rows.append([name] + [mean_of(rollout_steps, key) for _, key in COLUMNS] + [wall])

    header = ["run"] + [label for label, _ in COLUMNS] + ["wall s"]
    print(" | ".join(f"{h:>15}" for h in header))
    for row in rows:
        print(" | ".join([f"{row[0]:>15}"] + [f"{v:>15.3f}" for v in row[1:]]))
    base = rows[0][-1]
    for row in rows[1:]:
        print(f"wall-time ratio {row[0]} / arpo: {row[-1] / base:.2f}")


if __name__ == "__main__":
    main()

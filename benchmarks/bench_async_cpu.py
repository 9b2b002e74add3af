# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Asynchronous rollout on CPU (issue 36, Deliver 5, CPU rows): step time and held-out accuracy, k = 1 against k = 0.

`--case speed` (shaped like deep search): the tiny tool-calling policy (`tests/train/_helpers.fit_tool_policy`)
makes a search call and a python call per trajectory; both tools answer after `--tool-seconds` (1 s), so the
rollout's wall time is mostly tool waits, and a callback adds `--update-seconds` to every optimiser step, standing in
for an update about as long as the rollout (on a GPU the update does not compete with the rollout's CPU work; on 2
shared CPU cores real compute would). The real `ArpoTrainer` runs through LLaMA-Factory's `run_exp` with
`rl_max_staleness` 0 then 1 in the same invocation; the ratio is the mean `time/step` of k = 1 over k = 0, over the
steps after the first (step 1 of k = 1 has nothing rolled out ahead yet), and over all steps.

`--case demo`: the README demo (synthetic task, agentic SFT, ARPO) per seed; after the lockstep ARPO stage the same
ARPO stage runs again from the same SFT model with `rl_max_staleness: 1`; held-out accuracy of each and the ARPO
stage's wall-time ratio. Long (two ARPO stages and one SFT per seed): run it with nohup.

Run: `python benchmarks/bench_async_cpu.py --case speed --update-seconds 1.5` (results in
benchmarks/results/async_cpu/speed_update1.5s.json),
`python benchmarks/bench_async_cpu.py --case demo --seeds 0 1 2` (benchmarks/results/async_cpu/demo.json).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from llamafactory_agentic.tools import BaseTool, ToolOutput


REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "async_cpu"
TOOL_SECONDS = float(os.environ.get("BENCH_ASYNC_TOOL_SECONDS", "1.0"))


class SlowSearch(BaseTool):
    r"""`<search>` that answers after `BENCH_ASYNC_TOOL_SECONDS` (a web search API's latency)."""

    name = "slow_search"
    default_tag = "search"

    def run(self, args: str) -> ToolOutput:
        r"""Sleep, then a fixed snippet."""
        time.sleep(TOOL_SECONDS)
        return ToolOutput("Page 1: Paris is the capital of France.")


class SlowPython(BaseTool):
    r"""`<python>` that answers after `BENCH_ASYNC_TOOL_SECONDS` (a remote sandbox's latency)."""

    name = "slow_python"
    default_tag = "python"

    def run(self, args: str) -> ToolOutput:
        r"""Sleep, then a fixed output."""
        time.sleep(TOOL_SECONDS)
        return ToolOutput("3")


def slow_update_callback(seconds: float):
    r"""A `TrainerCallback` that adds `seconds` to every optimiser step (before the weights are published)."""
    from transformers.trainer_callback import TrainerCallback

    class SlowUpdate(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            time.sleep(seconds)

    return SlowUpdate()


def prepare_speed(root: Path) -> dict:
    r"""Data folder, tool-calling policy, search index (`tests/train/async_parity.prepare`) and the slow tool config."""
    sys.path.insert(0, str(REPO / "tests" / "train"))
    from async_parity import prepare  # noqa: E402 - the trainer tests' tiny tool-calling policy

    paths = prepare(root)
    tools = root / "slow_tools.yaml"
    tools.write_text(
        "tools:\n"
        "  - name: bench_async_cpu:SlowSearch\n    tag: search\n    timeout: 30\n"
        "  - name: bench_async_cpu:SlowPython\n    tag: python\n    timeout: 30\n"
    )
    paths["tools"] = tools
    return paths


def run_speed_once(paths: dict, out: Path, staleness: int, steps: int, update_seconds: float) -> list[dict]:
    r"""One `run_exp` in a subprocess; returns the training records of trainer_log.jsonl."""
    args = {
        "model_name_or_path": str(paths["policy"]), "trust_remote_code": True, "stage": "arpo", "do_train": True,
        "finetuning_type": "full", "arpo_rollout_n": 4, "arpo_initial_rollouts": 2, "arpo_rollout_batch_size": 2,
        "arpo_max_prompt_length": 2048, "arpo_max_response_length": 96, "arpo_rollout_backend": "hf",
        "agentic_max_tool_calls": 2, "agentic_tool_workers": 16, "agentic_tool_config": str(paths["tools"]),
        "agentic_cache_path": str(out / "tool_cache.sqlite"), "agentic_skip_bad_rows": True,
        "agentic_reward": "parity_reward:score", "dataset": "arpo_rl_reasoning_10k_local",
        "dataset_dir": str(paths["datasets"]), "template": "qwen", "cutoff_len": 2048, "max_samples": 16,
        "overwrite_cache": True, "preprocessing_num_workers": 1, "output_dir": str(out), "logging_steps": 1,
        "save_strategy": "no", "plot_loss": False, "overwrite_output_dir": True, "report_to": "none",
        "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "learning_rate": 1.0e-4,
        "max_steps": steps, "lr_scheduler_type": "constant", "seed": 42, "temperature": 1.0, "top_p": 1.0,
        "top_k": 0, "rl_max_staleness": staleness,
    }  # fmt: skip
    code = (
        "import json, sys; sys.path[:0] = [sys.argv[2], sys.argv[3]];"
        "from llamafactory.train.tuner import run_exp; from bench_async_cpu import slow_update_callback;"
        "run_exp(json.loads(sys.argv[1]), callbacks=[slow_update_callback(float(sys.argv[4]))])"
    )
    # one intra-op thread: on the shared 2-core machine two OpenMP threads per process spin against each other and
    # against the producer thread (a 1-token forward of the tiny model took 0.87 s with 2 threads, 1 ms with 1)
    env = dict(os.environ, BENCH_ASYNC_TOOL_SECONDS=str(TOOL_SECONDS), OMP_NUM_THREADS="1")
    env.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)
    cmd = [sys.executable, "-c", code, json.dumps(args), str(REPO / "benchmarks"), str(paths["root"])]
    proc = subprocess.run([*cmd, str(update_seconds)], cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-4000:])
    records = [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines()]
    return [r for r in records if "loss" in r]


def speed(args: argparse.Namespace) -> dict:
    r"""The deep-search-shaped case: mean `time/step` of k = 1 over k = 0 (same invocation)."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="bench_async_"))
    paths = prepare_speed(root)
    paths["root"] = root
    sys.path.insert(0, str(REPO / "tests" / "train"))
    from async_parity import REWARD

    (root / "parity_reward.py").write_text(REWARD)
    rows = {}
    for k in (0, 1):
        train = run_speed_once(paths, root / f"k{k}", k, args.steps, args.update_seconds)
        step_s = [r["time/step"] for r in train]
        rows[k] = {
            "time_step_s": step_s,
            "time_rollout_s": [r.get("time/rollout") for r in train],
            "mean_step_after_first_s": statistics.mean(step_s[1:]),
            "mean_step_all_s": statistics.mean(step_s),
            "async": {key: [r.get(key) for r in train] for key in train[-1] if key.startswith("async/")},
            "tool_calls_per_traj": [r.get("rollout/tool_calls_per_traj") for r in train],
        }
    result = {
        "case": "speed",
        "tool_seconds": TOOL_SECONDS,
        "update_seconds": args.update_seconds,
        "steps": args.steps,
        "k0": rows[0],
        "k1": rows[1],
        "ratio_after_first": rows[1]["mean_step_after_first_s"] / rows[0]["mean_step_after_first_s"],
        "ratio_all": rows[1]["mean_step_all_s"] / rows[0]["mean_step_all_s"],
        "load_average_1min": os.getloadavg()[0],
    }
    print(
        f"time/step k=0 {rows[0]['mean_step_after_first_s']:.2f} s, k=1 {rows[1]['mean_step_after_first_s']:.2f} s "
        f"(steps 2..{args.steps}): ratio {result['ratio_after_first']:.3f} (all steps: {result['ratio_all']:.3f})"
    )
    return result


def demo(args: argparse.Namespace) -> dict:
    r"""The README demo's ARPO stage at k = 0 and k = 1 per seed: held-out accuracy and the stage's wall-time ratio."""
    from llamafactory_agentic.tasks.demo import RL_RECIPE, _train, heldout_metrics, run_demo

    rows = []
    for seed in args.seeds:
        workdir = Path(args.workdir) / f"seed{seed}"
        sync = run_demo(workdir, seed=seed)
        seconds_k1 = _train(
            workdir,
            workdir / "recipes" / RL_RECIPE,
            [f"seed={seed}", "output_dir=arpo_k1", "rl_max_staleness=1"],
            workdir / "rl_k1.log",
        )
        data = workdir / "data"
        k1 = heldout_metrics(workdir / "arpo_k1", data / "heldout.jsonl", data / "search_index")
        row = {
            "seed": seed,
            "sft_accuracy": sync["table"][0]["accuracy"],
            "k0_accuracy": sync["table"][1]["accuracy"],
            "k1_accuracy": k1["accuracy"],
            "k0_rl_seconds": sync["seconds"]["rl"],
            "k1_rl_seconds": seconds_k1,
            "wall_ratio": seconds_k1 / sync["seconds"]["rl"],
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "demo.json").write_text(json.dumps({"case": "demo", "rows": rows}, indent=1) + "\n")
    return {"case": "demo", "rows": rows}


def main() -> None:
    r"""Parse the arguments, run the case, write its JSON under benchmarks/results/async_cpu/."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=("speed", "demo"), default="speed")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--update-seconds", type=float, default=3.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--workdir", default="saves/bench_async_demo")
    args = parser.parse_args()
    result = speed(args) if args.case == "speed" else demo(args)
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = f"speed_update{args.update_seconds:g}s" if args.case == "speed" else args.case
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

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

r"""The README's main job: synthetic task, local model, agentic SFT, ARPO, and a held-out table, all on CPU.

Everything comes from the package (recipes under `llamafactory_agentic/resources/recipes/synthetic/`, the task
generator, the model builder), so it runs the same from a clone and from a plain `pip install .`. Outputs go to a
working directory (default `./saves/demo`):

    data/          the generated task (dataset_info.json, sft.jsonl, train.jsonl, heldout.jsonl, search_index/)
    model/         the randomly initialised model and its locally trained tokenizer
    recipes/       the two recipes, copied from the package (run them by hand from the working directory)
    sft/, arpo/    the checkpoints, trainer_log.jsonl and the plots of `llamafactory-cli train`
    results.json   the held-out table

With `--arpo-data DIR` the RL stage trains on ARPO's released rows instead (`DIR/rl/train_10k.parquet`, validation
and held-out table on `DIR/rl/valid.parquet`, search over `DIR/search_cache.json`): a smoke run on real data, where the
tiny model is not expected to learn.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any


RECIPE_PACKAGE = "llamafactory_agentic"
RECIPE_DIR = ("resources", "recipes", "synthetic")
SFT_RECIPE = "agentic_sft_cpu.yaml"
RL_RECIPE = "arpo_cpu.yaml"
DEMO_SIZES = {"sft": 4800, "train": 600, "heldout": 100}
HELDOUT = "heldout.jsonl"


def recipe_text(name: str) -> str:
    r"""Text of a recipe shipped with the package (`resources/recipes/synthetic/<name>`).

    Raises:
        FileNotFoundError: no such recipe in the installed package.
    """
    node = resources.files(RECIPE_PACKAGE).joinpath(*RECIPE_DIR, name)
    if not node.is_file():
        raise FileNotFoundError(f"recipe {name} is not shipped with this installation ({'/'.join(RECIPE_DIR)})")
    return node.read_text(encoding="utf-8")


def copy_recipes(workdir: Path) -> dict[str, Path]:
    r"""Copy the shipped demo recipes into `<workdir>/recipes/` and return their paths by name."""
    out = workdir / "recipes"
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in (SFT_RECIPE, RL_RECIPE):
        path = out / name
        path.write_text(recipe_text(name), encoding="utf-8")
        paths[name] = path
    return paths


def _cli() -> str:
    here = Path(sys.executable).parent / "llamafactory-cli"
    return str(here) if here.is_file() else (shutil.which("llamafactory-cli") or "llamafactory-cli")


def _train(workdir: Path, recipe: Path, overrides: list[str], log_path: Path) -> float:
    r"""`llamafactory-cli train recipe key=value...` in `workdir`; output to the console and `log_path`; returns seconds.

    Raises:
        RuntimeError: the run failed (the log's tail is in the message).
    """
    cmd = [_cli(), "train", str(recipe.relative_to(workdir)), *overrides]
    print(f"\n=== {' '.join(cmd)}   (in {workdir}, log {log_path.name})", flush=True)
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if _worth_showing(line):
                print(line.rstrip()[:200], flush=True)
        code = proc.wait()
    if code != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {code}:\n{tail}")
    return time.perf_counter() - start


def _worth_showing(line: str) -> bool:
    # the loss/reward records and the final metrics; progress bars and library chatter stay in the log file
    return line.startswith("{'loss'") or line.startswith("{'eval_") or "train_runtime" in line or "Error" in line


def _arpo_data_overrides(arpo_data: Path, data_dir: Path, workdir: Path) -> tuple[list[str], Path, Path]:
    r"""Register ARPO's released RL files in the demo's dataset_info.json and build their search index.

    Returns:
        `(recipe overrides, held-out rows path, search index folder)`.

    Raises:
        FileNotFoundError: the folder lacks `rl/train_10k.parquet`, `rl/valid.parquet` or `search_cache.json`.
    """
    from ..tools.index import build_corpus_from_cache_json

    needed = [
        arpo_data / "rl" / "train_10k.parquet",
        arpo_data / "rl" / "valid.parquet",
        arpo_data / "search_cache.json",
    ]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"--arpo-data {arpo_data}: missing {', '.join(missing)} (ARPO's released files)")
    info_path = data_dir / "dataset_info.json"
    info = json.loads(info_path.read_text(encoding="utf-8"))
    info["arpo_rl_reasoning_10k_local"] = {"file_name": str(needed[0].resolve()), "formatting": "arpo_rl"}
    info["arpo_rl_valid_local"] = {"file_name": str(needed[1].resolve()), "formatting": "arpo_rl"}
    info_path.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    index = workdir / "arpo_search_index"
    if not (index / "corpus.jsonl").is_file():
        print("search index over ARPO's recorded results:", build_corpus_from_cache_json(needed[2], index))
    overrides = [
        "dataset=arpo_rl_reasoning_10k_local",
        "eval_dataset=arpo_rl_valid_local",
        "agentic_reward=f1",
        "agentic_skip_bad_rows=true",
        f"agentic_search_index={index.relative_to(workdir)}",
        "agentic_search_topk=3",
        "max_samples=256",
    ]
    return overrides, needed[1], index


def format_table(rows: list[dict[str, Any]]) -> str:
    r"""The demo's closing table: held-out accuracy and tool calls per question for each model."""
    lines = [f"{'model':<12} {'held-out accuracy':>18} {'tool calls/question':>20} {'questions':>10}"]
    for row in rows:
        lines.append(
            f"{row['name']:<12} {100 * row['accuracy']:>17.1f}% {row['tool_calls_per_question']:>20.2f} "
            f"{row['questions']:>10}"
        )
    return "\n".join(lines)


def run_demo(
    workdir: str | os.PathLike = "saves/demo",
    seed: int = 0,
    stage: str = "arpo",
    arpo_data: str | os.PathLike | None = None,
    sft_steps: int | None = None,
    rl_steps: int | None = None,
    extra_rl: list[str] | None = None,
) -> dict[str, Any]:
    r"""Generate the task, build the model, run agentic SFT then RL with `llamafactory-cli train`, evaluate both.

    Args:
        workdir: Working directory for every output (created).
        seed: Seed of the task, the model's initialisation and both training runs.
        stage: `arpo`, `grpo` (`stage: arpo` + `arpo_variant: grpo`), `aepo` or `aepo-paper`.
        arpo_data: A folder with ARPO's released files (`rl/*.parquet`, `search_cache.json`): train the RL stage on them.
        sft_steps: Override the SFT recipe's `max_steps`.
        rl_steps: Override the RL recipe's `max_steps`.
        extra_rl: More `key=value` overrides for the RL recipe.

    Returns:
        The content of `results.json`: `{"seed", "stage", "table": [...], "seconds": {...}, "load": ...}`.

    Raises:
        RuntimeError: a training run failed; FileNotFoundError: bad `arpo_data` or recipes missing from the package.
    """
    from .model import build_task_model
    from .synthetic import TaskConfig, generate_task

    start = time.perf_counter()
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir, model_dir = workdir / "data", workdir / "model"
    config = TaskConfig(seed=seed, sizes=dict(DEMO_SIZES))
    summary = generate_task(config, data_dir)
    print(f"task: {summary['counts']} cold-start styles {summary['sft_styles']} -> {data_dir}")
    build_task_model(model_dir, data_dir, size="demo", seed=seed)
    print(f"model: {model_dir}")
    recipes = copy_recipes(workdir)
    seconds = {"prepare": time.perf_counter() - start}

    sft_overrides = [f"seed={seed}"] + ([f"max_steps={sft_steps}"] if sft_steps else [])
    seconds["sft"] = _train(workdir, recipes[SFT_RECIPE], sft_overrides, workdir / "sft.log")

    rl_overrides = [f"seed={seed}"] + stage_overrides(stage)
    heldout, search_index, search_topk, reward = (
        data_dir / HELDOUT,
        data_dir / "search_index",
        config.search_topk,
        "em",
    )
    if arpo_data is not None:
        more, heldout, search_index = _arpo_data_overrides(Path(arpo_data), data_dir, workdir)
        rl_overrides += more
        search_topk, reward = 3, "f1"
    if rl_steps:
        rl_overrides.append(f"max_steps={rl_steps}")
    rl_overrides += list(extra_rl or [])
    seconds["rl"] = _train(workdir, recipes[RL_RECIPE], rl_overrides, workdir / "rl.log")

    t_eval = time.perf_counter()
    table = []
    for name, path in (("sft", workdir / "sft"), (stage, workdir / "arpo")):
        result = heldout_metrics(path, heldout, search_index, search_topk=search_topk, reward=reward)
        table.append({"name": name, **result})
    seconds["eval"] = time.perf_counter() - t_eval
    seconds["total"] = time.perf_counter() - start
    results = {
        "seed": seed,
        "stage": stage,
        "table": table,
        "seconds": seconds,
        "load_average_1min": {"start": load_before, "end": os.getloadavg()[0] if hasattr(os, "getloadavg") else None},
        "plots": sorted(str(p.relative_to(workdir)) for p in (workdir / "arpo").glob("*.png")),
    }
    (workdir / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print("\n" + format_table(table))
    print(
        f"\n{len(table[0]['by_kind'])} question kinds; per kind in {workdir / 'results.json'}. Plots: "
        + ", ".join(results["plots"])
    )
    print(f"wall time {seconds['total']:.0f} s (sft {seconds['sft']:.0f} s, {stage} {seconds['rl']:.0f} s)")
    return results


def stage_overrides(stage: str) -> list[str]:
    r"""Recipe overrides that turn the demo's `stage: arpo` recipe into `stage` (`arpo`, `grpo`, `aepo`, `aepo-paper`).

    Raises:
        ValueError: an unknown stage.
    """
    choices = {
        "arpo": [],
        "grpo": ["arpo_variant=grpo", "arpo_initial_rollouts=null"],
        "aepo": ["stage=aepo", "aepo_variant=released"],
        "aepo-paper": ["stage=aepo", "aepo_variant=paper"],
    }
    if stage not in choices:
        raise ValueError(f"unknown stage {stage!r}; choose one of {', '.join(choices)}")
    return list(choices[stage])


def heldout_metrics(
    model_dir: str | os.PathLike,
    rows_path: str | os.PathLike,
    search_index: str | os.PathLike,
    search_topk: int = 1,
    reward: str = "em",
    max_samples: int | None = None,
) -> dict[str, Any]:
    r"""Held-out accuracy and tool calls per question of one model (the one place the demo and benchmark evaluate).

    A greedy in-process rollout through the training agent loop (`evaluate.evaluate_policy`).

    Returns:
        `{"accuracy", "tool_calls_per_question", "reward", "questions", "by_kind"}`.
    """
    from .evaluate import evaluate_policy

    result = evaluate_policy(
        model_dir, rows_path, search_index, max_samples=max_samples, search_topk=search_topk, reward=reward
    )
    return {
        "accuracy": result.accuracy,
        "tool_calls_per_question": result.tool_calls_per_question,
        "reward": result.reward,
        "questions": result.questions,
        "by_kind": result.by_kind,
    }

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

"""TRL 0.24's `GRPOTrainer` (its HF-generate rollout) against this project's GRPO (N = M) and ARPO on one GPU.

    python benchmarks/bench_vs_trl_gpu.py --out DIR [--model qwen2.5-0.5b] [--prompts 16 --group 8 --response 1024]
        [--micro 32 --accum 2] [--rollouts 2] [--sides trl,grpo,arpo] [--smoke]

One process launch per side, the same random-weight model, prompts (rendered with the `qwen` template), M, response
length, micro-batch geometry (micro x accum trajectories per update, 2 updates from one rollout) and gradient
checkpointing (off unless `--gradient-checkpointing`; until 2026-12-04 this project's sides checkpointed regardless,
since only the Trainer's key reached LLaMA-Factory, so the update ratios measured before compare a checkpointed update
with TRL's plain one), no tools:

* `trl`: `trl.GRPOTrainer` (bf16 weights, `loss_type: dapo`, `beta: 0`), in a child process of this script; under
  Transformers 5.6 it needs `model.warnings_issued = {}` and TRL's package-availability flags fixed
  (`train/trl_compat.py`, else it imports the absent `mergekit`);
* `grpo`: `llamafactory-cli train`, stage `arpo` with N = M (no branching, plain GRPO sampling), `pure_bf16`;
* `arpo`: the same with N = M / 2 and `all_at_once` budget fill (a random policy calls no tool, so the other half are
  fills).

Each side runs `--rollouts` generation batches (default 2), each followed by its updates. Prints per side: step time
(`train_runtime` per generation batch), rollout time (generation, scoring and the old-log-prob pass: everything
before a batch's first update), update time (the rest per update, optimiser step included, the first update's warm-up
of kernels and allocator included), the last update's time (the wall time of the last optimiser step, which has no
rollout in it: the update at steady state; TRL's from its step ends, this project's from `time/step`), generated
tokens per second of the rollout and the peak GPU memory; then the ratios against TRL. Writes `DIR/peer.json`.
Sides of this project may carry recipe keys (`--sides 'trl,grpo,grpo:rl_logprob_chunk_size=0'`).
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))

from _single_gpu import (  # noqa: E402
    Results,
    add_peer_geometry,
    build_model,
    cuda,
    first,
    largest,
    prompt_texts,
    recipe,
    render,
    run_train,
    total,
    use_smoke_geometry,
    write_dataset,
)


def trl_child(args: argparse.Namespace) -> None:
    r"""The TRL side, run in its own process: writes `{rollout_s, runtime_s, ...}` to `args.result`."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    # TRL 0.24 under Transformers 5 imports packages it believes installed (mergekit); trl_compat fixes only those
    # flags, GRPOTrainer itself is TRL's
    from llamafactory_agentic.train.trl_compat import GRPOConfig, GRPOTrainer

    gpu = torch.cuda.is_available()
    model_dir = Path(args.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    tokenizer.padding_side = "left"
    texts = prompt_texts(model_dir, args.prompts, args.prompt_length)
    dataset = Dataset.from_list([{"prompt": render(tokenizer, t)} for t in texts])
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.bfloat16 if gpu else torch.float32)
    model.warnings_issued = {}  # transformers 5 dropped it; TRL 0.24 writes to it

    def reward(completions, **kwargs):  # any non-constant reward: the update time does not depend on it
        return [float(len(c) % 7) / 7.0 for c in completions]

    config = GRPOConfig(
        output_dir=str(Path(args.result).parent / "trl_out"),
        per_device_train_batch_size=args.micro,
        gradient_accumulation_steps=args.accum,
        num_generations=args.group,
        generation_batch_size=args.prompts * args.group,
        max_prompt_length=None,
        max_completion_length=args.response,
        temperature=1.0,
        top_p=1.0,
        learning_rate=1.0e-6,
        lr_scheduler_type="constant",
        max_steps=args.rollouts * args.prompts * args.group // (args.micro * args.accum),
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        bf16=gpu,
        use_cpu=not gpu,
        loss_type="dapo",
        beta=0.0,
        gradient_checkpointing=args.gradient_checkpointing,
        seed=42,
        log_completions=False,
        mask_truncated_completions=False,
    )
    times: dict[str, float] = {"rollout_s": 0.0}

    class StepTimes(TrainerCallback):
        def on_train_begin(self, *a, **k):
            times["start"] = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.setdefault("steps", []).append(time.perf_counter() - times["start"])

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[StepTimes()],
    )
    generate = trainer._generate_and_score_completions

    def timed(*a, **k):  # TRL's rollout: generation, rewards, advantages (and old log-probs when needed)
        t0 = time.perf_counter()
        out = generate(*a, **k)
        if gpu:
            torch.cuda.synchronize()
        times["rollout_s"] += time.perf_counter() - t0
        return out

    trainer._generate_and_score_completions = timed
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    result = trainer.train()
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    out = {
        "runtime_s": float(result.metrics["train_runtime"]),
        "rollout_s": times["rollout_s"],
        "step_ends_s": times.get("steps", []),
        "generated_tokens": float(lengths[0]) * args.prompts * args.group if lengths else None,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if gpu else None,
        "updates": int(config.max_steps),
    }
    Path(args.result).write_text(json.dumps(out), encoding="utf-8")


def run_trl(args: argparse.Namespace, model_dir: Path, work: Path, timeout: float) -> dict:
    result = work / "trl.json"
    cmd = [sys.executable, __file__, "--child-trl", "--model-dir", str(model_dir), "--result", str(result)]
    for key in ("prompts", "group", "response", "prompt_length", "micro", "accum", "rollouts"):
        cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    if args.gradient_checkpointing:
        cmd.append("--gradient-checkpointing")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        rc, log = 124, "timeout"
    (work / "trl.log").write_text(log, encoding="utf-8")
    (Path(args.out) / "logs").mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "logs" / "trl.log").write_text(log[-200_000:], encoding="utf-8")
    if rc != 0 or not result.is_file():
        print(f"[trl] exit {rc}:\n{log[-4000:]}", flush=True)
        return {"side": "trl", "rc": rc, "wall_s": time.perf_counter() - t0}
    data = json.loads(result.read_text())
    updates = data["updates"]  # over all rollouts
    ends = data.get("step_ends_s") or []
    return {
        "side": "trl",
        "rc": 0,
        "step_s": data["runtime_s"] / args.rollouts,
        "rollout_s": data["rollout_s"] / args.rollouts,
        "update_s": (data["runtime_s"] - data["rollout_s"]) / updates,
        # the last optimiser step has no rollout in it (2 updates per rollout): the update at steady state
        "last_update_s": ends[-1] - ends[-2] if len(ends) >= 2 else None,
        "tokens_per_s": (data["generated_tokens"] or 0.0) * args.rollouts / max(data["rollout_s"], 1e-9),
        "peak_gib": data["peak_gib"],
    }


def parse_side(spec: str) -> tuple[str, dict]:
    r"""`grpo` / `arpo[:KEY=VALUE;KEY=VALUE]` -> (`grpo` or `arpo`, recipe keys to set); values are read as YAML."""
    import yaml

    side, _, rest = spec.partition(":")
    if side not in ("grpo", "arpo"):
        raise SystemExit(f"--sides: {spec!r}: a side is trl, grpo or arpo, optionally with :KEY=VALUE;KEY=VALUE")
    extra = {}
    for item in filter(None, rest.split(";")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--sides: {spec!r}: expected KEY=VALUE, got {item!r}")
        extra[key] = yaml.safe_load(value)
    return side, extra


def run_ours(
    args: argparse.Namespace, spec: str, model_dir: Path, data_dir: Path, work: Path, timeout: float, logs: Path
):
    side, extra = parse_side(spec)
    name = spec.replace(":", "_").replace(";", "_").replace("=", "-")  # a folder name
    initial = args.group if side == "grpo" else max(args.group // 2, 1)
    updates = args.rollouts * args.prompts * args.group // (args.micro * args.accum)
    values = recipe(
        model_dir,
        data_dir,
        work / f"{name}_out",
        prompts=args.prompts,
        group=args.group,
        initial=initial,
        prompt_length=args.prompt_length,
        response=args.response,
        micro=args.micro,
        accum=args.accum,
        steps=updates,
        gradient_checkpointing=args.gradient_checkpointing,
        extra=extra,
    )
    run = run_train(work, values, timeout, name, logs=logs)
    if run["rc"] != 0:
        return {"side": spec, "rc": run["rc"], "wall_s": run["wall_s"]}
    records = run["records"]
    runtime = float(run["metrics"].get("train_runtime", run["wall_s"]))
    rollout = total(records, "time/step_rollout_total")
    generation = total(records, "time/generation")
    steps = [float(r["time/step"]) for r in records if isinstance(r.get("time/step"), (int, float))]
    return {
        "side": spec,
        "rc": 0,
        "logprob_chunk": extra.get("rl_logprob_chunk_size", 1024),
        "step_s": runtime / args.rollouts,
        "rollout_s": rollout / args.rollouts,
        "update_s": (runtime - rollout) / updates,
        "last_update_s": steps[-1] if len(steps) >= 2 else None,  # `time/step` of the last step: no rollout in it
        "update_fwd_bwd_s": total(records, "time/training") / updates,
        "tokens_per_s": total(records, "rollout/generated_tokens") / max(generation, 1e-9),
        "decode_step_ms": first(records, "perf/decode_step_ms"),
        "peak_gib": largest(records, "perf/peak_gpu_memory_gib"),
        "peak_loss_gib": largest(records, "memory/peak_loss_gib"),
    }


def run_peer(args: argparse.Namespace, results: Results, deadline: float) -> list[dict]:
    work = Path(args.work) / "peer"
    work.mkdir(parents=True, exist_ok=True)
    model_dir = build_model(Path(args.work), args.model, args.smoke)
    data_dir = write_dataset(work, prompt_texts(model_dir, args.prompts, args.prompt_length))
    rows = []
    for side in args.sides.split(","):
        left = deadline - time.perf_counter()
        if left < 30:
            results.add("peer", side=side, skipped="time budget")
            continue
        if side == "trl":
            row = run_trl(args, model_dir, work, left)
        else:
            row = run_ours(args, side, model_dir, data_dir, work, left, results.out / "logs")
        row.update(model=args.model, prompts=args.prompts, group=args.group, response=args.response,
                   micro=args.micro, accum=args.accum)  # fmt: skip
        rows.append(results.add("peer", **row))
    trl = next((r for r in rows if r["side"] == "trl" and r["rc"] == 0), None)
    if trl is not None:
        for row in rows:
            if row["side"] == "trl" or row["rc"] != 0:
                continue
            ratios = {
                "rollout_speedup_vs_trl": trl["rollout_s"] / max(row["rollout_s"], 1e-9),
                "update_time_vs_trl": row["update_s"] / max(trl["update_s"], 1e-9),
                "last_update_time_vs_trl": (row["last_update_s"] / trl["last_update_s"])
                if row.get("last_update_s") and trl.get("last_update_s")
                else None,
                "step_speedup_vs_trl": trl["step_s"] / max(row["step_s"], 1e-9),
                "tokens_per_s_vs_trl": row["tokens_per_s"] / max(trl["tokens_per_s"], 1e-9),
            }
            if row.get("peak_gib") and trl.get("peak_gib"):
                ratios["peak_memory_vs_trl"] = row["peak_gib"] / trl["peak_gib"]
            results.add("peer_ratio", side=row["side"], **ratios)
    (Path(args.out) / "peer.json").write_text(json.dumps(rows, indent=1, default=str), encoding="utf-8")
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="qwen2.5-0.5b")
    add_peer_geometry(parser)
    parser.add_argument("--gradient-checkpointing", action="store_true", help="checkpoint activations on every side")
    parser.add_argument("--rollouts", type=int, default=2, help="generation batches per side (each with its updates)")
    parser.add_argument("--sides", default="trl,grpo,arpo", help="trl, grpo, arpo; ours may carry recipe keys: "
                        "'grpo:rl_logprob_chunk_size=1024' (several joined by ';')")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    parser.add_argument("--out", default="bench_out/peer")
    parser.add_argument("--work", default="/tmp/agentic_peer")
    parser.add_argument("--budget-s", type=float, default=600.0)
    parser.add_argument("--smoke", action="store_true", help="tiny model on CPU: checks every path in a minute")
    parser.add_argument("--child-trl", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_trl:
        trl_child(args)
        return
    if args.smoke:
        use_smoke_geometry(args)
    results = Results(Path(args.out))
    print(f"peer benchmark on {'cuda' if cuda() else 'cpu'}: {vars(args)}", flush=True)
    run_peer(args, results, time.perf_counter() + args.budget_s)


if __name__ == "__main__":
    main()

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

"""`plan`'s predictions against measured runs: the table of docs/plan.md.

    python benchmarks/plan_validation.py            # prints the markdown table

Each case is a recipe of this repository with the measured run's settings as overrides (no model is loaded), planned
with `llamafactory_agentic.guards.plan.make_plan`; the measured value and where it was recorded are in the case. The
measured workload (tokens generated and tool calls per trajectory) is given to the planner as a pilot run's log would
(`--measured`), so what is checked is the memory and time model, not a guess of what the policy will generate.
"""

import csv
import json
import sys
import tempfile
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llamafactory_agentic.guards.plan import make_plan  # noqa: E402


RESULTS = REPO / "benchmarks" / "results" / "compare_algorithms"
DEMO_ARPO = REPO / "llamafactory_agentic" / "resources" / "recipes" / "synthetic" / "arpo_cpu.yaml"
DEMO_SFT = REPO / "llamafactory_agentic" / "resources" / "recipes" / "synthetic" / "agentic_sft_cpu.yaml"
GPU_RECIPE = REPO / "recipes" / "arpo" / "qwen2.5_7b_reasoning_full.yaml"
AEPO_LORA = REPO / "recipes" / "aepo" / "qwen3_14b_deepsearch_lora.yaml"

# docs/scaling.md "One GPU, real sizes", measured column: `bench_single_gpu.py --parts memory` on an H200, random weights,
# M = 8 (GRPO sampling), 2 steps for full fine-tuning, gradient checkpointing, adamw_torch_fused
H200_MEMORY = [
    ("qwen2.5-0.5b", "full", 16, 1536, 4096, 128, 32768, 14.6),
    ("qwen2.5-1.5b", "full", 16, 1536, 4096, 128, 32768, 27.5),
    ("qwen2.5-7b", "full", 8, 1536, 4096, 64, 8192, 68.0),
    ("qwen2.5-14b", "lora", 4, 2000, 6192, 32, 16384, 105.3),
]


def demo_shape(tmp: Path, layers: int) -> str:
    r"""config.json of the demo's model (tasks/model.py MODEL_SIZES['demo']) with `layers` layers."""
    path = tmp / f"demo{layers}" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(hidden_size=128, intermediate_size=384, num_hidden_layers=layers,
                                    num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
                                    tie_word_embeddings=True)))  # fmt: skip
    return str(path)


def memory_rows() -> list[tuple]:
    rows = []
    for model, method, prompts, prompt, response, slots, tokens, measured in H200_MEMORY:
        overrides = {
            "deepspeed": None, "pure_bf16": method == "full", "arpo_rollout_backend": "hf", "arpo_rollout_n": 8,
            "arpo_initial_rollouts": 8, "arpo_rollout_batch_size": prompts, "per_device_train_batch_size": 8,
            "gradient_accumulation_steps": prompts, "arpo_max_prompt_length": prompt,
            "arpo_max_response_length": response, "arpo_hf_generation_batch_size": slots,
            "rl_micro_batch_tokens": tokens, "finetuning_type": method, "lora_rank": 64, "arpo_hf_lora_merge": "gpu",
        }  # fmt: skip
        plan = make_plan(GPU_RECIPE, gpu="h200", num_gpus=1, model_shape=model, overrides=overrides)
        label = f"{model} {method}, {prompt}+{response}, {slots} slots / {tokens} tokens"
        rows.append(("H200 peak memory", label, plan.numbers["peak_gib"], measured, "GiB",
                     "docs/scaling.md 'One GPU, real sizes' (bench_single_gpu.py --parts memory)"))  # fmt: skip
    return rows


# benchmarks/results/scale_h200/peer_results.jsonl (2026-12-04, `bench_vs_trl_gpu.py`, one run alone on the H200):
# Qwen2.5-0.5B shape, 16 prompts x 8, 512-token prompts, every response 1024 tokens (a random policy), 2 updates of
# 32 x 2, pure bf16, LLaMA-Factory's default gradient checkpointing, no tools. (side, initial rollouts, measured
# perf/decode_step_ms, measured step s = train_runtime of the rollout step, measured memory/peak_loss_gib)
H200_PEER = [("grpo", 8, 5.856, 16.76, 9.855), ("arpo", 4, 5.515, 20.86, 9.982)]


def gpu_step_rows() -> list[tuple]:
    rows = []
    for side, initial, decode_ms, step_s, loss_gib in H200_PEER:
        overrides = {
            "deepspeed": None, "pure_bf16": True, "arpo_rollout_backend": "hf", "arpo_rollout_n": 8,
            "arpo_initial_rollouts": initial, "arpo_budget_fill": "all_at_once", "arpo_rollout_schedule": "continuous",
            "arpo_rollout_batch_size": 16, "per_device_train_batch_size": 32, "gradient_accumulation_steps": 2,
            "arpo_max_prompt_length": 576, "arpo_max_response_length": 1024, "arpo_hf_generation_batch_size": 128,
            "rl_micro_batch_tokens": 0, "finetuning_type": "full", "max_steps": 2, "rl_dynamic_sampling": False,
        }  # fmt: skip
        # the fills of ARPO's all-at-once budget fill: M - N per group (a random policy calls no tool: no branches)
        measured = {"response_tokens": 1024, "tool_calls_per_traj": 0.0, "fills_per_step": 16 * (8 - initial),
                    "decode_step_s": decode_ms / 1e3}  # fmt: skip
        plan = make_plan(GPU_RECIPE, gpu="h200", num_gpus=1, model_shape="qwen2.5-0.5b", overrides=overrides,
                         measured=measured)  # fmt: skip
        label = f"{side}, Qwen2.5-0.5B, 16 x 8, 512 + 1024, one rollout + 2 updates (decode step from the run's log)"
        source = "results/scale_h200/peer_results.jsonl (bench_vs_trl_gpu.py)"
        rows.append(("H200 step time", label, plan.numbers["step_s"], step_s, "s", source))
        rows.append(("H200 peak memory", f"{side}, the same run (loss phase)", plan.numbers["peak_gib"], loss_gib,
                     "GiB", source))  # fmt: skip
    return rows


# The second H200 session of 2026-12-04 (benchmarks/results/scale_h200/README.md, "Second session"): the peer step
# without activation checkpointing on either side, and a 7B ARPO step (bench_vllm_gpu.py --parts step, hf engine).
PEER_NO_GC = {
    "deepspeed": None, "pure_bf16": True, "arpo_rollout_backend": "hf", "arpo_rollout_n": 8,
    "arpo_initial_rollouts": 8, "arpo_budget_fill": "all_at_once", "arpo_rollout_schedule": "continuous",
    "arpo_rollout_batch_size": 16, "per_device_train_batch_size": 32, "gradient_accumulation_steps": 2,
    "arpo_max_prompt_length": 576, "arpo_max_response_length": 1024, "arpo_hf_generation_batch_size": 128,
    "rl_micro_batch_tokens": 0, "finetuning_type": "full", "max_steps": 4, "rl_dynamic_sampling": False,
    "disable_gradient_checkpointing": True,
}  # fmt: skip
STEP_7B = dict(PEER_NO_GC, arpo_initial_rollouts=4, per_device_train_batch_size=16, gradient_accumulation_steps=4,
               disable_gradient_checkpointing=False)  # fmt: skip


def gpu_second_session_rows() -> list[tuple]:
    rows = []
    source = "results/scale_h200/peer_steady.json (bench_vs_trl_gpu.py --rollouts 2)"
    plan = make_plan(GPU_RECIPE, gpu="h200", num_gpus=1, model_shape="qwen2.5-0.5b", overrides=PEER_NO_GC,
                     measured={"response_tokens": 1024, "tool_calls_per_traj": 0.0, "fills_per_step": 0,
                               "decode_step_s": 5.831e-3})  # fmt: skip
    label = "grpo, Qwen2.5-0.5B, 16 x 8, 512 + 1024, no checkpointing, per rollout step (decode step from the log)"
    rows.append(("H200 step time", label, plan.numbers["step_s"], 15.02, "s", source))
    rows.append(("H200 peak memory", "grpo, the same run (loss phase, fused head)", plan.numbers["peak_gib"], 76.21,
                 "GiB", source))  # fmt: skip
    full = make_plan(GPU_RECIPE, gpu="h200", num_gpus=1, model_shape="qwen2.5-0.5b",
                     overrides=dict(PEER_NO_GC, rl_logprob_chunk_size=0))  # fmt: skip
    rows.append(("H200 peak memory", "grpo, one rollout, materialised logits (rl_logprob_chunk_size 0; calibration: "
                 "MATERIALISED_HEAD_BYTES was fitted to it)", full.numbers["peak_gib"], 127.9, "GiB",
                 "results/scale_h200/peer_chunk.json (bench_vs_trl_gpu.py)"))  # fmt: skip
    # no decode step given: the planner's own bandwidth model (the run's log did not come back)
    plan = make_plan(GPU_RECIPE, gpu="h200", num_gpus=1, model_shape="qwen2.5-7b", overrides=STEP_7B,
                     measured={"response_tokens": 1024, "tool_calls_per_traj": 0.0, "fills_per_step": 64})  # fmt: skip
    source = "results/scale_h200/step_7b_hf.jsonl (bench_vllm_gpu.py --parts step)"
    label = (
        "arpo, Qwen2.5-7B full, 16 x 8 (N 4), 512 + 1024, checkpointing, second rollout step (planner's decode model)"
    )
    rows.append(("H200 step time", label, plan.numbers["step_s"], 47.42, "s", source))
    rows.append(("H200 peak memory", "arpo 7B, the same run", plan.numbers["peak_gib"], 68.98, "GiB", source))
    return rows


def cpu_rows(tmp: Path) -> list[tuple]:
    rows = []
    four = demo_shape(tmp, 4)
    two = demo_shape(tmp, 2)
    # GPU-free comparison runs (benchmarks/results/compare_algorithms/cpu/runs.csv): 30 steps of 8 prompts x 8,
    # plain sampling, validation at 0, 10, 20, 30 on 100 questions; the 4-layer demo model
    by_algorithm: dict[str, list[dict]] = {}
    with open(RESULTS / "cpu" / "runs.csv") as f:
        for row in csv.DictReader(f):
            by_algorithm.setdefault(row["algorithm"], []).append(row)
    presets = {"grpo": {"stage": "arpo", "arpo_variant": "grpo", "arpo_initial_rollouts": None},
               "arpo": {}, "aepo": {"stage": "aepo"}, "aepo-paper": {"stage": "aepo", "aepo_variant": "paper"}}  # fmt: skip
    for algorithm, runs in by_algorithm.items():
        gen = sum(float(r["generated_tokens_per_step"]) for r in runs) / len(runs) / 64
        calls = sum(float(r["tool_calls_per_traj"]) for r in runs) / len(runs)
        # budget fills per rollout step as `rollout/fills` logs them: M - N - branches per group, x 8 prompts
        # (M 8, N 4 for ARPO/AEPO; GRPO samples all 8 at once and has none)
        branches = sum(float(r["branches_per_group"]) for r in runs) / len(runs)
        fills = 0.0 if algorithm == "grpo" else 8 * max(8 - 4 - branches, 0.0)
        wall = sum(float(r["wall_s"]) for r in runs) / len(runs)
        overrides = {"max_steps": 30, "rl_dynamic_sampling": False, "eval_steps": 10, **presets[algorithm]}
        overrides = {k: v for k, v in overrides.items() if v is not None}
        if algorithm == "grpo":
            overrides["arpo_initial_rollouts"] = 8
        plan = make_plan(DEMO_ARPO, gpu="cpu", model_shape=four, overrides=overrides,
                         measured={"response_tokens": gen, "tool_calls_per_traj": calls,
                                   "fills_per_step": fills})  # fmt: skip
        note = " (calibration: cpu_decode_step_s was fitted to it)" if algorithm == "grpo" else ""
        rows.append(("CPU RL run wall time", f"{algorithm}, 30 steps, 4-layer demo model, mean of 3 seeds{note}",
                     plan.numbers["run_s"], wall, "s", "compare_algorithms/cpu/runs.csv wall_s"))  # fmt: skip
    # the demo's RL run: 10 steps with dynamic sampling, 2-layer model; docs/demo.md: ARPO 104-130 s with its validations
    plan = make_plan(DEMO_ARPO, gpu="cpu", model_shape=two,
                     measured={"response_tokens": 4169 / 64, "tool_calls_per_traj": 1.1})  # fmt: skip
    rows.append(("CPU RL run wall time", "the demo's ARPO stage (10 steps, dynamic sampling), 2-layer model",
                 plan.numbers["run_s"], (104 + 130) / 2, "s", "docs/demo.md 'Time': ARPO 104-130 s, seeds 0-2"))  # fmt: skip
    # the demo's cold start: 1000 steps of 16 rows; docs/demo.md: SFT 214-247 s
    plan = make_plan(DEMO_SFT, gpu="cpu", model_shape=two)
    rows.append(("CPU SFT run wall time", "the demo's agentic SFT (1000 steps of 16), 2-layer model (calibration: "
                 "cpu_update_s was fitted to it)",
                 plan.numbers["run_s"], (214 + 247) / 2, "s", "docs/demo.md 'Time': SFT 214-247 s, seeds 0-2"))  # fmt: skip
    # the former 4-layer cold start, 1500 steps: 0.29-0.37 s per step on the slower machine, 0.18 s on the faster
    plan = make_plan(DEMO_SFT, gpu="cpu", model_shape=four)
    rows.append(("CPU SFT step time", "the former demo cold start, 4-layer model, per step of 16 rows",
                 plan.numbers["step_s"], (0.29 + 0.37) / 2, "s", "docs/demo.md 'Time': 0.29-0.37 s (0.18 s faster machine)"))  # fmt: skip
    return rows


def table() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        rows = memory_rows() + gpu_step_rows() + gpu_second_session_rows() + cpu_rows(Path(tmp))
    lines = [
        "| figure | run | predicted | measured | error | measured in |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for figure, label, predicted, measured, unit, source in rows:
        err = (predicted - measured) / measured
        lines.append(
            f"| {figure} | {label} | {predicted:.1f} {unit} | {measured:.1f} {unit} | {err:+.0%} | {source} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())

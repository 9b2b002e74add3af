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

"""One GPU, real sizes (issue 12): engine speed, the update, the rollout in the training loop, memory, and TRL.

    python benchmarks/bench_single_gpu.py --out DIR [--parts engine,update,loop,memory,peer] [--budget-s 570]
    python benchmarks/bench_single_gpu.py --out DIR --smoke          # every part on CPU with a tiny shape

Random-weight Qwen2.5 shapes (`--sizes`, 0.5B to 14B), bf16, no tools (a random policy never calls one). Parts (each
skippable with `--parts`, each bounded by what is left of `--budget-s`; subprocesses are killed at the bound):

* `engine`: the hf engine's decode step (CUDA graphs, slot KV cache) per size at a batch and prompt length, as a share
  of the weight-read floor (bf16 weight bytes / 4.8 TB/s): `floor_share`, tokens/s and the floor's tokens/s.
* `update`: what an update of 64 trajectories at TRL's geometry (2 micro-batches of 32) is made of, on 0.5B: the
  materialising path (`rl_logprob_chunk_size: 0`, the previous code) against the fused one, with and without the loss
  metrics' host syncs, gradient checkpointing, micro-batches of 16, the old-log-prob pass; and a replica of TRL 0.24's
  `_compute_loss` (dapo, beta 0) as the baseline.
* `loop`: one ARPO step through `llamafactory-cli train` (continuous schedule, GRPO sampling so the whole batch decodes
  at once) for 0.5B full with LLaMA-Factory's float32 master weights (the issue's setting; `0.5b_full` is the
  `pure_bf16` one), 0.5B LoRA, 1.5B full with gradient checkpointing and 7B LoRA; the logged decode step
  (`perf/decode_step_ms`) against the engine alone at the same batch, prompt and response length in this process:
  `loop_over_engine` (goal <= 1.2) and the rollout's tokens/s as a share of the floor.
* `memory`: 7B full-parameter (`pure_bf16`, gradient checkpointing, token micro-batches) at prompt 1536 / response
  4096 / M = 8 / 8 prompts, and 14B LoRA r64 at prompt 2000 / response 6192: the logged `memory/*` split and
  `peak_over_static` (goal <= 1.25 for the full run).
* `peer`: `bench_vs_trl_gpu.py` (TRL's GRPOTrainer, this project's GRPO and ARPO, one process each).

Output: `DIR/results.jsonl` (one object per measurement), `DIR/summary.csv`, one `RESULT <part> key=value ...` line per
measurement on stdout, the runs' logs under `--work`.
"""

import argparse
import contextlib
import gc
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_vs_trl_gpu  # noqa: E402
from _single_gpu import (  # noqa: E402
    HBM_BYTES_PER_S,
    SMOKE_SHAPE,
    Results,
    build_model,
    cuda,
    drop_model,
    first,
    largest,
    prompt_texts,
    recipe,
    run_train,
    weight_read_bytes,
    write_dataset,
)


PARTS = ("engine", "update", "loop", "memory", "peer")


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def free() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def random_model(name: str, smoke: bool):
    r"""A random-weight model in memory (bf16 on the GPU), for the in-process parts."""
    import torch
    from transformers import Qwen2ForCausalLM

    from llamafactory_agentic.testing import real_size_config

    config = real_size_config(name, attn_implementation="sdpa", **(SMOKE_SHAPE if smoke else {}))
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(config, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    return model.eval()


# ---------------------------------------------------------------------------------------------------- engine
def engine_step(model, batch: int, prompt: int, new: int) -> dict:
    r"""Decode step of the hf engine at `batch` x (`prompt` + `new`): warm run (graph capture), then a timed run."""
    import torch

    from llamafactory_agentic.rollout.engine import GenerationRequest, SamplingSettings
    from llamafactory_agentic.rollout.hf_engine import HFEngine

    vocab = model.config.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(0)
    prompts = torch.randint(10, vocab - 10, (batch, prompt), generator=gen).tolist()
    engine = HFEngine(model, None, max_batch_size=batch, max_context=prompt + new, prefix_cache=False)
    sampling = SamplingSettings(temperature=1.0, top_p=1.0, top_k=0, stop_strings=(), eos_token_ids=())

    def once() -> float:
        engine.reset()
        engine.reset_stats()
        requests = [
            GenerationRequest(key=i, prompt_ids=prompts[i], response_ids=[], max_tokens=new) for i in range(batch)
        ]
        sync()
        t0 = time.perf_counter()
        engine.generate(requests, sampling)
        sync()
        return time.perf_counter() - t0

    warm = once()
    wall = once()
    stats = dict(engine.stats)
    engine.release()
    step = stats["decode_device_s"] / max(stats["decode_steps"], 1)
    wall_step = (stats["decode_s"] - stats["capture_s"]) / max(stats["decode_steps"], 1)
    floor = weight_read_bytes(model.config) / HBM_BYTES_PER_S
    rows = stats["decode_row_steps"] / max(stats["decode_steps"], 1)
    return {
        "batch": batch,
        "prompt": prompt,
        "new": new,
        "step_ms": 1e3 * step,
        "wall_step_ms": 1e3 * wall_step,
        "floor_ms": 1e3 * floor,
        "floor_share": floor / step,
        "tokens_per_s": rows / step,
        "floor_tokens_per_s": rows / floor,
        "prefill_s": stats["prefill_s"],
        "capture_s": stats["capture_s"] if warm > 0 else 0.0,
        "warm_call_s": warm,
        "wall_s": wall,
    }


def part_engine(args, results: Results, deadline: float) -> None:
    for case in args.engine_cases.split(","):
        name, batch, prompt = case.split(":")
        if time.perf_counter() > deadline:
            results.add("engine", model=name, skipped="time budget")
            continue
        if args.smoke:
            batch, prompt = min(int(batch), 4), min(int(prompt), 32)
        model = random_model(name, args.smoke)
        row = engine_step(model, int(batch), int(prompt), args.engine_new)
        results.add("engine", model=name, **row)
        del model
        free()


# ---------------------------------------------------------------------------------------------------- update
def synthetic_records(n: int, prompt: int, response: int, vocab: int, group: int, seed: int = 0):
    r"""`n` scored trajectories of random tokens with 10% observation tokens (loss mask 0) and random rewards."""
    import random

    from llamafactory_agentic.train.arpo.batch import token_advantages
    from llamafactory_agentic.train.arpo.config import default_loss_config
    from llamafactory_agentic.train.arpo.records import ScoredTrajectory

    rng = random.Random(seed)
    records = []
    for i in range(n):
        mask = [0 if (j // 64) % 10 == 9 else 1 for j in range(response)]  # an observation span every 640 tokens
        records.append(
            ScoredTrajectory(
                group=i // group,
                member=i % group,
                prompt_ids=[rng.randrange(10, vocab - 10) for _ in range(prompt)],
                response_ids=[rng.randrange(10, vocab - 10) for _ in range(response)],
                loss_mask=mask,
                parent=None,
                branch_pos=None,
                is_fill=False,
                num_tool_calls=0,
                hit_call_limit=False,
                truncated=True,
                finish_reason="length",
                tool_calls=[],
                branch_call_index=None,
                reward=rng.random(),
                accuracy=0.0,
                format_ok=True,
            )
        )
    for rec, adv, mask in zip(records, *token_advantages(records, default_loss_config())):
        rec.token_advantages, rec.loss_mask_train = adv, mask
    return records


def update_trainer(model, micro: int, accum: int, chunk: int, work: Path):
    r"""An `ArpoTrainer` around `model` (no rollout: the update is fed synthetic trajectories)."""
    from types import SimpleNamespace

    from datasets import Dataset
    from llamafactory.hparams import GeneratingArguments
    from transformers import AutoTokenizer, Seq2SeqTrainingArguments

    from llamafactory_agentic.hparams import AgenticArguments
    from llamafactory_agentic.rewards import get_reward_function
    from llamafactory_agentic.testing import build_tiny_tokenizer
    from llamafactory_agentic.train.arpo.config import ArpoLossConfig, build_grpo_config
    from llamafactory_agentic.train.arpo.trainer import ArpoTrainer
    from llamafactory_agentic.train.presets import resolve_presets

    args = AgenticArguments()
    args.stage = args.agentic_stage = "arpo"
    resolve_presets(args, verbose=False)
    args.arpo_rollout_n, args.arpo_initial_rollouts = 8, 8
    args.arpo_rollout_batch_size = micro * accum // 8
    args.rl_logprob_chunk_size = chunk
    training = Seq2SeqTrainingArguments(
        output_dir=str(work / "update_out"),
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accum,
        learning_rate=1e-6,
        max_steps=1,
        report_to=[],
        bf16=cuda(),
        use_cpu=not cuda(),
    )
    config = build_grpo_config(training, args, GeneratingArguments(temperature=1.0, top_p=1.0, top_k=0), 1)
    tokenizer_dir = work / "tokenizer"
    if not (tokenizer_dir / "tokenizer_config.json").is_file():
        build_tiny_tokenizer(tokenizer_dir, "qwen")
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    rows = [{"prompt_ids": [1, 2, 3], "_ground_truth": "3", "_data_source": "x", "_ability": "math"}]
    rollout = SimpleNamespace(config=SimpleNamespace(backend="hf", hf_lora_merge="gpu"), engine=None)
    return ArpoTrainer(
        model=model,
        args=config,
        rollout=rollout,
        reward_fn=get_reward_function("f1"),
        loss_config=ArpoLossConfig.from_args(args),
        processing_class=tokenizer,
        train_dataset=Dataset.from_list(rows * 8),
    )


def trl_replica_loss(model, batch: dict, temperature: float = 1.0):
    r"""TRL 0.24 `GRPOTrainer._compute_loss` for `loss_type: dapo`, `beta: 0` (its per-token log-probs, entropy,
    clipped ratio and metrics, with TRL's own helpers)."""
    import torch
    from trl.trainer.utils import entropy_from_logits

    from llamafactory_agentic.train.trl_compat import selective_log_softmax

    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    width = batch["completion_ids"].size(1)
    logits = model(input_ids=input_ids, attention_mask=attention, logits_to_keep=width + 1, use_cache=False).logits
    logits = logits[:, :-1, :][:, -width:, :] / temperature
    logps = selective_log_softmax(logits, input_ids[:, -width:])
    with torch.no_grad():
        entropies = entropy_from_logits(logits)
    mask = batch["loss_mask"].float()
    old = logps.detach()
    coef_1 = torch.exp(logps - old)
    coef_2 = torch.clamp(coef_1, 0.8, 1.2)
    adv = batch["advantages"]
    per_token = -torch.min(coef_1 * adv, coef_2 * adv)
    loss = (per_token * mask).sum() / batch["num_items_in_batch"]
    # TRL's logged metrics: mean entropy and clip ratios, each gathered and read on the host
    for value in (
        (entropies * mask).sum() / mask.sum(),
        ((coef_1 < 0.8) & (adv < 0)).float().mean(),
        ((coef_1 > 1.2) & (adv > 0)).float().mean(),
    ):
        value.item()
    return loss


def time_update(fn, model, batches, optimizer) -> tuple[float, float, float]:
    r"""(forward+backward seconds, optimiser step seconds, peak GiB) of one update over `batches`."""
    import torch

    model.zero_grad(set_to_none=True)
    sync()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for batch in batches:
        fn(batch).backward()
    sync()
    t1 = time.perf_counter()
    optimizer.step()
    sync()
    t2 = time.perf_counter()
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0
    return t1 - t0, t2 - t1, peak


def part_update(args, results: Results, deadline: float) -> None:
    import torch

    work = Path(args.work) / "update"
    work.mkdir(parents=True, exist_ok=True)
    name = args.update_model
    model = random_model(name, args.smoke)
    model.config.use_cache = False
    vocab = model.config.vocab_size
    n, prompt, response = (8, 16, 48) if args.smoke else (64, args.update_prompt, args.update_response)
    micro = 4 if args.smoke else 32
    records = synthetic_records(n, prompt, response, vocab, group=8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=torch.cuda.is_available())
    cases = [
        # name, chunk, micro-batch, gradient checkpointing, metrics
        ("ours_materialised", 0, micro, False, True),
        ("ours_fused", 1024, micro, False, True),
        ("ours_fused_no_metric_syncs", 1024, micro, False, False),
        ("ours_fused_micro16", 1024, micro // 2, False, True),
        ("ours_fused_gc", 1024, micro, True, True),
        ("ours_materialised_gc", 0, micro, True, True),
        # LLaMA-Factory's full fine-tuning without pure_bf16: float32 weights under bf16 autocast
        ("ours_fused_fp32_master", 1024, micro, False, True),
    ]
    baseline = None
    for label in ["trl_replica"] + [c[0] for c in cases]:
        if time.perf_counter() > deadline:
            results.add("update", case=label, skipped="time budget")
            continue
        spec = next((c for c in cases if c[0] == label), (label, 0, micro, False, True))
        _, chunk, mb, checkpointing, metrics = spec
        fp32_master = label == "ours_fused_fp32_master" and torch.cuda.is_available()
        if label == "ours_fused_fp32_master":
            model.float()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=torch.cuda.is_available())

        def autocast(fp32_master=fp32_master):
            return torch.autocast("cuda", dtype=torch.bfloat16) if fp32_master else contextlib.nullcontext()

        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_disable()
        model.train()
        trainer = update_trainer(model, mb, n // mb, chunk, work)
        batches = trainer.step.micro_batches(records)  # the micro-batch stage (train/arpo/pipeline.py)
        items, flat = batches.items, batches.flat
        old_s = None
        if label != "trl_replica":  # the old-log-prob pass (runs when a rollout feeds more than one update)
            sync()
            t0 = time.perf_counter()
            with torch.no_grad(), autocast():
                for batch in flat:
                    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
                    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
                    width = batch["completion_ids"].size(1)
                    trainer.policy(model, ids, attention, width, batch["loss_mask"])
            sync()
            old_s = time.perf_counter() - t0
        if not metrics:
            trainer.step_logger.log_loss = lambda *a, **k: None
        update = flat[: n // mb]  # the first optimiser update: n trajectories in micro-batches of mb

        def loss_fn(batch, trainer=trainer, label=label, model=model):
            if label == "trl_replica":
                return trl_replica_loss(model, batch)
            return trainer._compute_loss(model, batch)

        with autocast():
            time_update(loss_fn, model, update[:1], optimizer)  # warm-up (kernels, allocator)
            fwd_bwd, step, peak = time_update(loss_fn, model, update, optimizer)
        row = {"case": label, "model": name, "trajectories": n, "micro_batch": mb, "prompt": prompt,
               "response": response, "gradient_checkpointing": checkpointing, "fwd_bwd_s": fwd_bwd,
               "optimizer_s": step, "peak_gib": peak, "old_logprob_pass_s": old_s}  # fmt: skip
        if label == "trl_replica":
            baseline = fwd_bwd
        elif baseline:
            row["fwd_bwd_vs_trl_replica"] = fwd_bwd / baseline
        results.add("update", **row)
        del trainer, items, flat, update
        free()
    del model, optimizer
    free()


# ---------------------------------------------------------------------------------------------------- loop / memory
def loop_run(args, results: Results, deadline: float, part: str, case: dict) -> dict:
    r"""One `llamafactory-cli train` step of `case`, its logged rollout and memory numbers."""
    left = deadline - time.perf_counter()
    if left < 60:
        return results.add(part, **{k: case[k] for k in ("model", "finetuning")}, skipped="time budget")
    smoke = args.smoke
    work = Path(args.work) / part / case["label"]
    work.mkdir(parents=True, exist_ok=True)
    model_dir = build_model(Path(args.work), case["model"], smoke)
    prompts, group = case["prompts"], case["group"]
    prompt_len, response = case["prompt"], case["response"]
    if smoke:
        prompts, group, prompt_len, response = 2, 4, 32, 24
    data_dir = write_dataset(work, prompt_texts(model_dir, prompts, prompt_len))
    extra = dict(case.get("extra", {}))
    if smoke:
        extra.pop("rl_micro_batch_tokens", None)
        extra["rl_micro_batch_tokens"] = 128 if "rl_micro_batch_tokens" in case.get("extra", {}) else None
    values = recipe(
        model_dir,
        data_dir,
        work / "out",
        prompts=prompts,
        group=group,
        initial=case.get("initial", group),
        prompt_length=prompt_len,
        response=response,
        micro=prompts * group,  # one optimiser update per rollout, cut by tokens (`rl_micro_batch_tokens`)
        accum=1,
        steps=case.get("steps", 1),
        finetuning=case["finetuning"],
        gradient_checkpointing=case.get("gc", True),
        slots=case.get("slots"),
        extra={k: v for k, v in extra.items() if v is not None},
    )
    run = run_train(work, values, left, case["label"], logs=results.out / "logs")
    records = run["records"]
    row = {
        "label": case["label"],
        "model": case["model"],
        "finetuning": case["finetuning"],
        "gc": case.get("gc", True),
        "rc": run["rc"],
        "wall_s": run["wall_s"],
        "prompts": prompts,
        "group": group,
        "prompt": prompt_len,
        "response": response,
    }
    for key in (
        "perf/decode_step_ms", "perf/decode_wall_ms", "perf/decode_host_ms", "perf/decode_rows", "perf/decode_batch", "perf/decode_kv_len",
        "perf/generated_tokens_per_s", "time/generation", "time/decode", "time/decode_device", "time/prefill",
        "time/graph_capture", "time/tool_wait", "time/rollout", "time/training", "time/step_rollout_total",
        "rollout/generated_tokens", "train/micro_batches_per_update", "memory/engine_cache_gib",
        "memory/engine_released_gib",
    ):  # fmt: skip
        value = first(records, key)
        if value is not None:
            row[key.replace("/", "_")] = value
    for key in ("memory/weights_gib", "memory/gradients_gib", "memory/optimizer_states_gib", "memory/static_gib",
                "memory/peak_rollout_gib", "memory/peak_loss_gib", "memory/peak_optimizer_gib", "memory/peak_gib",
                "memory/peak_over_static", "perf/peak_gpu_memory_gib"):  # fmt: skip
        value = largest(records, key)
        if value is not None:
            row[key.replace("/", "_")] = value
    if not args.keep_models:  # the run saved its model (15 GB for 7B full): keep the logs only
        for path in (work / "out").glob("*.safetensors"):
            path.unlink()
    return {"row": row, "model_dir": model_dir}


LOOP_CASES = [
    # LLaMA-Factory's default full fine-tuning (`bf16: true`, float32 master weights): generation runs on bf16 copies
    dict(label="0.5b_full_fp32_master", model="qwen2.5-0.5b", finetuning="full", extra={"pure_bf16": False}),
    dict(label="0.5b_full", model="qwen2.5-0.5b", finetuning="full"),
    dict(label="0.5b_lora", model="qwen2.5-0.5b", finetuning="lora"),
    dict(label="1.5b_full_gc", model="qwen2.5-1.5b", finetuning="full", gc=True),
    dict(label="7b_lora_gc", model="qwen2.5-7b", finetuning="lora", gc=True),
]


def part_loop(args, results: Results, deadline: float) -> None:
    wanted = [c for c in LOOP_CASES if c["label"] in set(args.loop_cases.split(","))]
    for i, base in enumerate(wanted):
        case = dict(base, prompts=args.loop_prompts, group=8, prompt=args.loop_prompt, response=args.loop_response)
        case["extra"] = {"rl_micro_batch_tokens": 16384, **base.get("extra", {})}
        out = loop_run(args, results, deadline, "loop", case)
        if "row" not in out:
            continue
        row = out["row"]
        if row["rc"] == 0 and deadline - time.perf_counter() > 60 and row.get("perf_decode_step_ms"):
            # the engine alone, same shape, batch, prompt and response length, in this process
            model = random_model(case["model"], args.smoke)
            batch = row["prompts"] * row["group"]
            alone = engine_step(model, batch, row["prompt"], row["response"])
            del model
            free()
            row["engine_step_ms"] = alone["step_ms"]
            row["engine_wall_step_ms"] = alone["wall_step_ms"]
            row["loop_over_engine"] = row["perf_decode_step_ms"] / alone["step_ms"]  # device time per step
            if row.get("perf_decode_wall_ms"):  # host bookkeeping included (stop strings in the loop only)
                row["loop_over_engine_wall"] = row["perf_decode_wall_ms"] / alone["wall_step_ms"]
            row["floor_ms"] = alone["floor_ms"]
            row["loop_floor_share"] = alone["floor_ms"] / row["perf_decode_step_ms"]
            rows = row.get("perf_decode_rows") or batch
            row["loop_tokens_per_s"] = rows / (row["perf_decode_step_ms"] / 1e3)
            row["floor_tokens_per_s"] = rows / (alone["floor_ms"] / 1e3)
        results.add("loop", **row)
        if i + 1 == len(wanted) or wanted[i + 1]["model"] != base["model"]:
            drop_model(out["model_dir"], args.keep_models)


MEMORY_CASES = [
    # the docs/scaling.md table's smaller rows at their 141 GB slot counts (128 slots = 16 prompts x 8)
    dict(label="0.5b_full", model="qwen2.5-0.5b", finetuning="full", gc=True, prompts=16, group=8, prompt=1536,
         response=4096, slots=128, steps=2, extra={"rl_micro_batch_tokens": 32768, "optim": "adamw_torch_fused"}),
    dict(label="1.5b_full", model="qwen2.5-1.5b", finetuning="full", gc=True, prompts=16, group=8, prompt=1536,
         response=4096, slots=128, steps=2, extra={"rl_micro_batch_tokens": 32768, "optim": "adamw_torch_fused"}),
    dict(label="3b_full_deep_search", model="qwen2.5-3b", finetuning="full", gc=True, prompts=16, group=8,
         prompt=2000, response=6192, slots=128, steps=2,
         extra={"rl_micro_batch_tokens": 32768, "optim": "adamw_torch_fused"}),
    # 7B full-parameter at the reasoning lengths: bf16 weights, gradients and AdamW states (8 bytes per parameter)
    # (2 steps: AdamW's states exist from the first optimiser step on, so the second step's loss peak is the one
    # the 1.25 x (weights + gradients + states) bound is about)
    dict(label="7b_full", model="qwen2.5-7b", finetuning="full", gc=True, prompts=8, group=8, prompt=1536,
         response=4096, slots=64, steps=2, extra={"rl_micro_batch_tokens": 8192, "optim": "adamw_torch_fused"}),
    # 14B LoRA r64 at the deep-search lengths
    dict(label="14b_lora", model="qwen2.5-14b", finetuning="lora", gc=True, prompts=4, group=8, prompt=2000,
         response=6192, slots=32, extra={"rl_micro_batch_tokens": 16384, "arpo_hf_lora_merge": "gpu"}),
]  # fmt: skip


def part_memory(args, results: Results, deadline: float) -> None:
    from llamafactory_agentic.testing import real_size_config
    from llamafactory_agentic.train.arpo.memory import ModelShape, estimate_step_memory

    wanted = set(args.memory_cases.split(","))
    for base in MEMORY_CASES:
        if base["label"] not in wanted:
            continue
        case = dict(base)
        if args.memory_arpo:  # ARPO's N = M / 2 (the other half are fills: a random policy finishes without tools)
            case["initial"] = case["group"] // 2
        shape = ModelShape.from_config(real_size_config(case["model"]))
        est = estimate_step_memory(
            shape,
            case["finetuning"],
            context=case["prompt"] + case["response"],
            slots=case["slots"],
            micro_batch_tokens=case["extra"]["rl_micro_batch_tokens"],
            prompt_length=case["prompt"],
        )
        out = loop_run(args, results, deadline, "memory", case)
        if "row" not in out:
            continue
        row = out["row"]
        row.update({f"estimate_{k}": v for k, v in est.as_dict().items()})
        if row.get("memory_peak_gib") and row.get("memory_static_gib"):
            row["bound_1_25_met"] = row["memory_peak_gib"] <= 1.25 * row["memory_static_gib"]
        results.add("memory", **row)
        drop_model(out["model_dir"], args.keep_models)


# ---------------------------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench_out/single_gpu")
    parser.add_argument("--work", default="/tmp/agentic_single_gpu")
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--budget-s", type=float, default=570.0, help="wall-clock bound of the whole run")
    parser.add_argument("--smoke", action="store_true", help="tiny shape on CPU: every part end to end")
    parser.add_argument("--keep-models", action="store_true", help="keep the random model folders (disk)")
    parser.add_argument("--engine-cases", default="qwen2.5-0.5b:128:512,qwen2.5-1.5b:64:1024,qwen2.5-7b:64:1024")
    parser.add_argument("--engine-new", type=int, default=256)
    parser.add_argument("--update-model", default="qwen2.5-0.5b")
    parser.add_argument("--update-prompt", type=int, default=512)
    parser.add_argument("--update-response", type=int, default=1024)
    parser.add_argument("--loop-cases", default="0.5b_full_fp32_master,0.5b_lora,1.5b_full_gc,7b_lora_gc")
    parser.add_argument("--loop-prompts", type=int, default=8)
    parser.add_argument("--loop-prompt", type=int, default=1024)
    parser.add_argument("--loop-response", type=int, default=1024)
    parser.add_argument("--memory-cases", default=",".join(c["label"] for c in MEMORY_CASES))
    parser.add_argument("--memory-arpo", action="store_true", help="N = M/2 in the memory runs (doubles the rollout)")
    bench_vs_trl_gpu.add_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.engine_new = 16
        args.prompts, args.group, args.response, args.prompt_length, args.micro, args.accum = 2, 4, 16, 32, 4, 1
    start = time.perf_counter()
    deadline = start + args.budget_s
    results = Results(Path(args.out))
    device = "cpu"
    if cuda():
        import torch

        device = torch.cuda.get_device_name()
    print(f"bench_single_gpu on {device}: parts {args.parts}, budget {args.budget_s:.0f}s", flush=True)
    for part in args.parts.split(","):
        if part not in PARTS:
            raise SystemExit(f"unknown part {part!r}; choose from {PARTS}")
        if time.perf_counter() > deadline:
            results.add(part, skipped="time budget")
            continue
        t0 = time.perf_counter()
        with contextlib.suppress(KeyboardInterrupt):
            if part == "peer":
                bench_vs_trl_gpu.run_peer(args, results, deadline)
            else:
                globals()[f"part_{part}"](args, results, deadline)
        print(f"part {part}: {time.perf_counter() - t0:.0f}s", flush=True)
    print(f"done in {time.perf_counter() - start:.0f}s; results in {args.out}/results.jsonl and summary.csv")


if __name__ == "__main__":
    main()

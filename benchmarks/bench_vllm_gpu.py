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

"""The `vllm` rollout backend on one GPU: parity with the hf engine on the same weights, and the ARPO step.

    python benchmarks/bench_vllm_gpu.py --out DIR [--parts parity,step] [--sizes qwen2.5-0.5b,qwen2.5-7b]
    python benchmarks/bench_vllm_gpu.py --out DIR --parts step --backends hf --smoke   # CPU check of the step part

Needs vLLM (the `[vllm]` extra; on the GPU machine `scripts/gpu/carry_wheels.sh`). Random-weight models of the named
Qwen2.5 shapes with the padded tokenizer of `build_real_size_model` (no model hub).

`parity` (first size): the policy is loaded with transformers in bf16 and its weights are changed in memory (so that
vLLM, which loads the files, only agrees with it if the push works), then `VLLMEngine` (the training backend: colocated,
sleep mode, `processed_logprobs`) is built from it. Measured, each against the transformers model on the same
weights, by teacher-forcing vLLM's sampled tokens (temperature 1, no top-k / top-p, 20 log-probs per position):
  * `full`: the pushed full weights: |log p(sampled) vLLM - transformers| (mean, p99, max, nats) and the same for
    the per-position entropy term the branching rule uses (top-20 + sampled token, `topk_entropy_terms` on the
    transformers side, `logprob_dict_entropy_term` on vLLM's);
  * `files`: the same tokens against the unchanged weights of the files (what vLLM would hold without the push): the
    difference the push removes;
  * `after_step`: the weights changed again (an optimiser step's stand-in) and pushed through `set_model`;
  * `lora`: a peft LoRA (rank 8 on every linear layer, non-zero B) pushed merged; compared with the peft model;
  * `sleep`: free GPU memory before `release()`, after it and after `wake_up()`, and the log-probs after waking.
`step`: for each size, the ARPO step of `bench_vs_trl_gpu.py`'s peer geometry (16 prompts x 8, 512-token prompts,
up to 1024 response tokens, M/2 initial rollouts with all-at-once budget fill, 2 updates of 32 x 2 per rollout, no
tools), two rollouts, with `arpo_rollout_backend: hf` and `vllm`; one row per logged rollout: rollout time
(`time/step_rollout_total`), generation time, generated tokens per second, update time, peak GPU memory (a run stopped
by `--timeout` reports the rollouts it logged, with its exit code); then the ratios vllm / hf of the last rollout both
runs logged (the second, when both got there; the first pays vLLM's and the CUDA graphs' warm-up). Writes `DIR/results.jsonl`, `DIR/summary.csv` and the runs' logs under `DIR/logs/`.
"""

import argparse
import os
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))

from _single_gpu import (  # noqa: E402
    REPO,
    Results,
    add_peer_geometry,
    build_model,
    largest,
    prompt_texts,
    recipe,
    render,
    run_train,
    use_smoke_geometry,
    write_dataset,
)


def _stats(diffs) -> dict:
    import torch

    d = torch.as_tensor(diffs, dtype=torch.float64).abs()
    return {"mean": float(d.mean()), "p99": float(d.quantile(0.99)), "max": float(d.max()), "n": int(d.numel())}


def _reference(model, prompts: list[list[int]], samples: list[list[int]], topk: int):
    r"""Teacher-forced log-prob of each sampled token and its top-k entropy term under `model` (float32 softmax)."""
    import torch

    from llamafactory_agentic.rollout.branching import topk_entropy_terms

    lps, terms = [], []
    device = next(model.parameters()).device
    with torch.no_grad():
        for prompt, tokens in zip(prompts, samples):
            ids = torch.tensor([prompt + tokens], device=device)
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
            log_probs = torch.log_softmax(logits, dim=-1)
            sampled = torch.tensor(tokens, device=device)
            lps.append(log_probs.gather(-1, sampled[:, None]).squeeze(-1).cpu())
            terms.append(topk_entropy_terms(log_probs, sampled, topk).cpu())
    return lps, terms


def _sample(engine, prompts: list[list[int]], new: int, topk: int, seed: int):
    r"""vLLM samples (temperature 1) with its processed log-probs: token ids, log p(sampled), entropy terms."""
    import torch

    from llamafactory_agentic.rollout.branching import logprob_dict_entropy_term

    params = [
        engine.vllm.SamplingParams(
            n=1, temperature=1.0, top_p=1.0, top_k=0, max_tokens=new, logprobs=topk, seed=seed + i, ignore_eos=True
        )
        for i in range(len(prompts))
    ]
    outs = engine.llm.generate([{"prompt_token_ids": p} for p in prompts], sampling_params=params, use_tqdm=False)
    tokens, lps, terms = [], [], []
    for out in outs:
        c = out.outputs[0]
        ids = list(c.token_ids)
        tokens.append(ids)
        lps.append(torch.tensor([float(c.logprobs[j][t].logprob) for j, t in enumerate(ids)]))
        terms.append(torch.tensor([logprob_dict_entropy_term(c.logprobs[j]) for j in range(len(ids))]))
    return tokens, lps, terms


def _compare(results: Results, case: str, vllm_side, ref_side, **extra) -> dict:
    import torch

    lp = _stats(torch.cat([a - b for a, b in zip(vllm_side[1], ref_side[0])]))
    ent = _stats(torch.cat([a - b for a, b in zip(vllm_side[2], ref_side[1])]))
    return results.add(
        "parity",
        case=case,
        logprob_abs_mean=lp["mean"],
        logprob_abs_p99=lp["p99"],
        logprob_abs_max=lp["max"],
        entropy_term_abs_mean=ent["mean"],
        entropy_term_abs_max=ent["max"],
        tokens=lp["n"],
        **extra,
    )


def perturb(model, seed: int, scale: float) -> None:
    r"""Change every weight matrix in place by `scale` x its own std of Gaussian noise (an update's stand-in)."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                noise = torch.randn(p.shape, generator=gen).to(p.device, p.dtype)
                p.add_(noise * (p.float().std() * scale).to(p.dtype))


def run_parity(args: argparse.Namespace, results: Results, size: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llamafactory_agentic.rollout.vllm_engine import VLLMEngine

    work = Path(args.work)
    model_dir = build_model(work, size, False)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    texts = prompt_texts(model_dir, args.parity_prompts, args.parity_prompt_length, seed=1)
    prompts = [tokenizer.encode(render(tokenizer, t), add_special_tokens=False) for t in texts]
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.bfloat16).cuda().eval()
    files = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.bfloat16).cuda().eval()
    perturb(model, seed=1, scale=0.5)
    new, topk = args.parity_new, 20

    t0 = time.perf_counter()
    engine = VLLMEngine(
        model,
        tokenizer,
        gpu_memory_utilization=args.gpu_memory_utilization,
        enable_sleep_mode=True,
        max_model_len=max(len(p) for p in prompts) + new + 8,
        seed=0,
    )
    results.add("parity_setup", size=size, engine_build_and_first_push_s=time.perf_counter() - t0)

    sampled = _sample(engine, prompts, new, topk, seed=100)
    _compare(results, "full", sampled, _reference(model, prompts, sampled[0], topk), size=size)
    _compare(results, "files", sampled, _reference(files, prompts, sampled[0], topk), size=size)
    del files
    torch.cuda.empty_cache()

    perturb(model, seed=2, scale=0.5)
    t0 = time.perf_counter()
    engine.set_model(model)
    push_s = time.perf_counter() - t0
    sampled = _sample(engine, prompts, new, topk, seed=200)
    _compare(results, "after_step", sampled, _reference(model, prompts, sampled[0], topk), size=size, push_s=push_s)

    free = [torch.cuda.mem_get_info()[0]]
    engine.release()
    free.append(torch.cuda.mem_get_info()[0])
    engine.wake_up()
    free.append(torch.cuda.mem_get_info()[0])
    sampled = _sample(engine, prompts, new, topk, seed=300)
    _compare(
        results,
        "sleep",
        sampled,
        _reference(model, prompts, sampled[0], topk),
        size=size,
        free_gib_awake=free[0] / 2**30,
        free_gib_asleep=free[1] / 2**30,
        free_gib_woken=free[2] / 2**30,
    )

    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(
        model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0, init_lora_weights=True)
    )
    gen = torch.Generator(device="cpu").manual_seed(3)
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.copy_((torch.randn(p.shape, generator=gen) * 0.02).to(p.device, p.dtype))
    t0 = time.perf_counter()
    engine.set_model(lora)
    push_s = time.perf_counter() - t0
    sampled = _sample(engine, prompts, new, topk, seed=400)
    _compare(results, "lora", sampled, _reference(lora, prompts, sampled[0], topk), size=size, push_s=push_s)
    engine.release()
    del engine, lora, model
    torch.cuda.empty_cache()


def run_step(args: argparse.Namespace, results: Results, size: str) -> None:
    work = Path(args.work) / "step"
    work.mkdir(parents=True, exist_ok=True)
    model_dir = build_model(Path(args.work), size, args.smoke)
    data_dir = write_dataset(work / size, prompt_texts(model_dir, args.prompts, args.prompt_length))
    updates = args.prompts * args.group // (args.micro * args.accum)
    rollouts: dict[str, list[dict]] = {}
    for backend in args.backends.split(","):
        extra = {"arpo_rollout_backend": backend, "arpo_vllm_gpu_memory_utilization": args.gpu_memory_utilization}
        values = recipe(
            model_dir,
            data_dir,
            work / f"{size}_{backend}_out",
            prompts=args.prompts,
            group=args.group,
            initial=max(args.group // 2, 1),
            prompt_length=args.prompt_length,
            response=args.response,
            micro=args.micro,
            accum=args.accum,
            steps=2 * updates,  # two rollouts: the second is measured (the first pays warm-up and graph capture)
            extra=extra,
        )
        run = run_train(work, values, args.timeout, f"{size}_{backend}", logs=Path(args.out) / "logs")
        # one row per logged rollout; a run stopped by --timeout after its first rollout still reports it (rc says so)
        rollouts[backend] = []
        records = run["records"]
        starts = [i for i, r in enumerate(records) if isinstance(r.get("time/step_rollout_total"), (int, float))]
        for n, i in enumerate(starts):
            own = records[i : i + updates]  # the rollout's record and its updates' records
            first = own[0]
            generation = float(first.get("time/generation", 0.0)) or None
            tokens = float(first.get("rollout/generated_tokens", 0.0))
            update = sum(float(r.get("time/training", 0.0)) for r in own) / max(len(own), 1)
            rollouts[backend].append(
                results.add(
                    "step",
                    size=size,
                    backend=backend,
                    rc=run["rc"],
                    rollout=n + 1,
                    rollout_s=first["time/step_rollout_total"],
                    generation_s=generation,
                    generated_tokens=tokens,
                    tokens_per_s=tokens / generation if generation else None,
                    update_s=update,
                    step_s=float(first["time/step_rollout_total"]) + update * updates,
                    peak_gib=largest(own, "perf/peak_gpu_memory_gib"),
                    wall_s=run["wall_s"],
                )
            )
        if not starts:
            results.add("step", size=size, backend=backend, rc=run["rc"], wall_s=run["wall_s"])
    hf, vllm = rollouts.get("hf") or [], rollouts.get("vllm") or []
    compared = min(len(hf), len(vllm))  # like with like: the last rollout both runs logged (the 2nd when both did)
    if compared:
        a, b = hf[compared - 1], vllm[compared - 1]
        ratio = {f"{k}_vllm_over_hf": b[k] / a[k] for k in ("rollout_s", "generation_s", "update_s", "step_s", "peak_gib")
                 if a.get(k) and b.get(k)}  # fmt: skip
        if a.get("tokens_per_s") and b.get("tokens_per_s"):
            ratio["tokens_per_s_vllm_over_hf"] = b["tokens_per_s"] / a["tokens_per_s"]
        results.add("step_ratio", size=size, rollout=compared, **ratio)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench_out/vllm")
    parser.add_argument("--work", default="/tmp/agentic_vllm")
    parser.add_argument("--parts", default="parity,step")
    parser.add_argument("--sizes", default="qwen2.5-0.5b", help="comma-separated REAL_SIZE_CONFIGS names")
    parser.add_argument("--backends", default="hf,vllm")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    parser.add_argument("--parity-prompts", type=int, default=16)
    parser.add_argument("--parity-prompt-length", type=int, default=256)
    parser.add_argument("--parity-new", type=int, default=128)
    add_peer_geometry(parser)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per training run (vLLM's start: ~2 min)")
    parser.add_argument("--smoke", action="store_true", help="step part on a tiny model (CPU: --backends hf)")
    args = parser.parse_args()
    if args.smoke:
        use_smoke_geometry(args)
    os.environ.setdefault("PYTHONPATH", str(REPO))
    results = Results(Path(args.out))
    sizes = args.sizes.split(",")
    parts = args.parts.split(",")
    print(f"vLLM benchmark: {vars(args)}", flush=True)
    if "parity" in parts:
        run_parity(args, results, sizes[0])
    if "step" in parts:
        for size in sizes:
            run_step(args, results, size)


if __name__ == "__main__":
    main()

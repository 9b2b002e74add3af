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

"""The vLLM engines' behaviour log-probs against a teacher-forced forward on the same weights (issue 36, Deliver 2).

    python benchmarks/check_behaviour_logprobs_gpu.py --out DIR [--engines server,vllm] [--size qwen2.5-0.5b]
    python benchmarks/check_behaviour_logprobs_gpu.py --out DIR --engines server --smoke   # CPU: the test stand-in

The CPU test `tests/rollout/test_behaviour_logprobs.py` checks the hf engine; vLLM needs a GPU, so this script checks
its two engines there: `server` (`VLLMServerEngine` against `llamafactory-agentic rollout-server` on a memory fraction
of the same GPU, weights pushed over CUDA IPC) and `vllm` (`VLLMEngine`, colocated, sleep mode). Random weights of the
named Qwen2.5 shape (no model hub), changed in memory before the engine is built, so that the engine agrees with the
transformers model only if the push worked. For each engine, through the rollout's own `generate` (the
`GenerationRequest`/`SamplingSettings` the agent loop sends, seeded per request, no stop strings):

* `t1.0` / `t0.7`: `--new` tokens for each of `--prompts` prompts at temperature 1.0, then 0.7 continuing a response
  prefix (a later round). Each returned `GenerationResult.logprobs[j]` is compared with
  `log_softmax(logits / T)[token_j]` of one teacher-forced transformers forward over prompt + response, bf16 weights
  (the trainer's dtype), float32 softmax. Also checked: one log-prob per token, the result's `weight_version`.
* `after_push`: the weights change again (an optimiser step's stand-in), are pushed as version 1, and the comparison
  repeats; `stale_weights` compares those same samples with the weights before the change: the gap that a log-prob
  of the wrong version would show.

Pass (printed per row, exit status 1 when a row fails): mean |delta| <= 0.03 nats and p99 <= 0.15 nats for the
matching weights, and the stale row's mean at least 5x the matching row's. The bound is bf16's: vLLM's and
transformers' kernels round differently (2026-12-04, H200: mean 0.013, p99 0.041 through `LLM.generate` directly,
benchmarks/results/scale_h200/vllm_parity.jsonl); at staleness 0 the trainer never divides the two (the correction
is exactly 1, docs/algorithms.md §13). Writes `DIR/results.jsonl` and `DIR/summary.csv`.
"""

import argparse
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))

from _single_gpu import Results, build_model, cuda, prompt_texts, render  # noqa: E402
from bench_server_gpu import start_server  # noqa: E402
from bench_vllm_gpu import perturb  # noqa: E402


MEAN_BOUND, P99_BOUND, STALE_FACTOR = 0.03, 0.15, 5.0


def teacher_forced(model, context: list[int], tokens: list[int], temperature: float):
    r"""`[len(tokens)]` float32 log-probs of `tokens` after `context` under `model` at `temperature`."""
    import torch

    device = next(model.parameters()).device
    with torch.no_grad():
        ids = torch.tensor([context + tokens], device=device)
        logits = model(input_ids=ids).logits[0, len(context) - 1 : -1].float() / temperature
        logps = torch.log_softmax(logits, dim=-1)
        return logps.gather(-1, torch.tensor(tokens, device=device)[:, None])[:, 0].cpu()


def sample(engine, prompts: list[list[int]], prefixes: list[list[int]], new: int, temperature: float, seed: int):
    r"""One round through `engine.generate`; returns `[(context, result)]`."""
    from llamafactory_agentic.rollout import GenerationRequest, SamplingSettings

    sampling = SamplingSettings(temperature=temperature, stop_strings=(), eos_token_ids=(), entropy_tokens=0)
    requests = [GenerationRequest(i, p, x, new, seed=seed + i) for i, (p, x) in enumerate(zip(prompts, prefixes))]
    results = engine.generate(requests, sampling)
    return [(list(r.prompt_ids) + list(r.response_ids), res) for r, res in zip(requests, results)]


def compare(results: Results, engine: str, case: str, model, samples, temperature: float, version: int, **extra):
    r"""|engine log-prob - teacher-forced log-prob| over every sampled token; one `parity` row."""
    import torch

    diffs, problems = [], []
    for context, res in samples:
        if len(res.logprobs) != len(res.token_ids) or not res.token_ids:
            problems.append(f"{len(res.logprobs)} log-probs for {len(res.token_ids)} tokens")
            continue
        if res.weight_version != version:
            problems.append(f"weight_version {res.weight_version}, pushed {version}")
        want = teacher_forced(model, context, list(res.token_ids), temperature)
        diffs.append((torch.tensor(res.logprobs, dtype=torch.float32) - want).abs())
    d = torch.cat(diffs) if diffs else torch.tensor([float("nan")])
    row = dict(engine=engine, case=case, temperature=temperature, tokens=int(d.numel()),
               mean=float(d.mean()), p99=float(d.quantile(0.99)), max=float(d.max()),
               problems="; ".join(sorted(set(problems))), **extra)  # fmt: skip
    return results.add("parity", **row)


def check(rows: list[dict]) -> list[str]:
    r"""The failed conditions of one engine's rows (module docstring's bounds)."""
    failed = [f"{r['engine']}/{r['case']}: {r['problems']}" for r in rows if r["problems"]]
    matching = [r for r in rows if r["case"] != "stale_weights"]
    for r in matching:
        if not (r["mean"] <= MEAN_BOUND and r["p99"] <= P99_BOUND):
            failed.append(f"{r['engine']}/{r['case']}: mean {r['mean']:.4f} p99 {r['p99']:.4f} nats over the bound")
    stale = [r for r in rows if r["case"] == "stale_weights"]
    after = [r for r in rows if r["case"] == "after_push"]
    if stale and after and not stale[0]["mean"] >= STALE_FACTOR * after[0]["mean"]:
        failed.append(f"{stale[0]['engine']}: stale weights differ by {stale[0]['mean']:.4f}, matching by "
                      f"{after[0]['mean']:.4f}: the comparison cannot tell versions apart")  # fmt: skip
    return failed


def run_engine(args, results: Results, name: str, engine, model, prompts: list[list[int]]) -> list[dict]:
    r"""The three cases of the module docstring on one engine (its weights pushed as version 0 already)."""
    import copy

    rows = []
    empty = [[] for _ in prompts]
    engine.weight_version = 0
    out = sample(engine, prompts, empty, args.new, 1.0, seed=100)
    rows.append(compare(results, name, "t1.0", model, out, 1.0, 0, size=args.size))
    prefixes = [list(res.token_ids[: args.new // 4]) for _, res in out]
    out = sample(engine, prompts, prefixes, args.new, 0.7, seed=200)
    rows.append(compare(results, name, "t0.7_prefix", model, out, 0.7, 0, size=args.size))
    before = copy.deepcopy(model)
    perturb(model, seed=2, scale=0.5)
    t0 = time.perf_counter()
    engine.weight_version = 1
    engine.set_model(model)
    push_s = time.perf_counter() - t0
    out = sample(engine, prompts, empty, args.new, 1.0, seed=300)
    rows.append(compare(results, name, "after_push", model, out, 1.0, 1, size=args.size, push_s=push_s))
    rows.append(compare(results, name, "stale_weights", before, out, 1.0, 1, size=args.size))
    del before
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench_out/behaviour_logprobs")
    parser.add_argument("--work", default="/tmp/agentic_behaviour")
    parser.add_argument("--engines", default="server,vllm")
    parser.add_argument("--size", default="qwen2.5-0.5b")
    parser.add_argument("--fraction", type=float, default=0.25, help="GPU memory share of vLLM")
    parser.add_argument("--port", type=int, default=8013)
    parser.add_argument("--server-args", default="", help="more `vllm serve` arguments, space-separated")
    parser.add_argument("--server-timeout", type=float, default=300.0)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--prompt-length", type=int, default=256)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--smoke", action="store_true", help="tiny shape on the CPU, the stand-in as the server")
    args = parser.parse_args()
    if args.smoke:
        args.prompts, args.prompt_length, args.new = 4, 32, 16
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = Results(out)
    model_dir = build_model(Path(args.work), args.size, args.smoke)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    texts = prompt_texts(model_dir, args.prompts, args.prompt_length, seed=1)
    prompts = [tokenizer.encode(render(tokenizer, t), add_special_tokens=False) for t in texts]
    max_len = max(len(p) for p in prompts) + args.new + args.new // 4 + 8
    dtype, device = (torch.bfloat16, "cuda") if cuda() else (torch.float32, "cpu")
    failed: list[str] = []
    for name in args.engines.split(","):
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype).to(device).eval()
        perturb(model, seed=1, scale=0.5)  # the engine loads the files: it matches only through the push
        server = engine = None
        try:
            t0 = time.perf_counter()
            if name == "server":
                from llamafactory_agentic.rollout.server_engine import VLLMServerEngine

                server, url = start_server(args, model_dir, max_len, out / "server.log")
                engine = VLLMServerEngine(model, tokenizer, [url], weight_transfer="disk" if args.smoke else "ipc",
                                          weight_dir=str(Path(args.work) / "push"), max_model_len=max_len)  # fmt: skip
            elif name == "vllm":
                from llamafactory_agentic.rollout.vllm_engine import VLLMEngine

                engine = VLLMEngine(model, tokenizer, gpu_memory_utilization=args.fraction, max_model_len=max_len)
            else:
                raise SystemExit(f"--engines: unknown engine {name!r} (server, vllm)")
            results.add("setup", engine=name, size=args.size, build_and_first_push_s=time.perf_counter() - t0)
            rows = run_engine(args, results, name, engine, model, prompts)
        finally:
            if engine is not None and hasattr(engine, "close"):
                engine.close()
            if server is not None:
                server.terminate()
                server.wait(timeout=60)
        for row in rows:
            print(f"{row['engine']:6s} {row['case']:13s} T={row['temperature']} tokens={row['tokens']} mean="
                  f"{row['mean']:.4f} p99={row['p99']:.4f} max={row['max']:.4f} {row['problems']}", flush=True)  # fmt: skip
        failed += check(rows)
        del engine, model
        if cuda():
            torch.cuda.empty_cache()
    for line in failed:
        print("FAILED", line, flush=True)
    print("PASSED" if not failed else f"{len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

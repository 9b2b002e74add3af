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

"""Device memory outside PyTorch's allocator while attention sees many shapes, with and without cuDNN SDPA (one GPU).

Why: on an H200, `compare_algorithms.py --scale gpu` runs grew to 96-113 GiB per process while `memory/peak_gib`
(`torch.cuda.max_memory_allocated`) stayed at ~4.7 GiB. PyTorch prefers its cuDNN SDPA backend on sm90 with
cuDNN > 9.15 and keeps one cuDNN plan per exact attention shape and thread; the `hf` engine's prefills come in a new
(rows, tokens) shape at almost every admission, and training forwards/backwards in a new (batch, length) shape per
micro-batch. This script measures that growth directly: `used - reserved` (driver-level use minus what the caching
allocator holds) before and after N calls with distinct shapes, each setting in its own process (the plan cache lives
as long as the process).

What it runs, on the model of `compare_algorithms.py --scale gpu` (random Qwen2: hidden 512, 8 layers, 8 heads,
4 KV heads, vocab 1000, bf16, sdpa):
  * `engine`: `HFEngine.generate` N times, each with a random number of rows (1-64) and prompt lengths (20-128
    tokens), 2 new tokens (prefill shapes dominate), `cudnn_attention` on (PyTorch's choice, the old behaviour) or off
    (the engine's default now);
  * `train`: N forward+backward passes of padded batches of random (batch 8-64, length 64-320), cuDNN allowed or not
    (`torch.backends.cuda.enable_cudnn_sdp`), as the trainer's log-prob and loss passes do.
Prints one line per setting and the ratio of the growths. Measured on an H200 (torch 2.11, cuDNN 9.19, 150 calls):
engine 24.0 MiB with cuDNN vs 12.0 MiB without (14.4 s vs 5.3 s), train 50.0 vs 6.0 MiB (32.9 s vs 7.6 s): cuDNN
plans cost time, not the ~100 GiB once suspected (that was JAX's 75% preallocation, see `tools/index.py`). Usage:
`python benchmarks/bench_attention_memory_gpu.py [--calls 200] [--what engine,train]` (`--device cpu --calls 3`: a
smoke run of the script itself, no memory numbers).
"""

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MIB = 2**20


def _model(device: str):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=1000,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    with torch.device(device):
        return Qwen2ForCausalLM(cfg).to(torch.bfloat16)


def _outside_allocator() -> float:
    import torch

    if not torch.cuda.is_initialized():  # the CPU smoke run (--device cpu): no device memory to read
        return float("nan")
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return (total - free - torch.cuda.memory_reserved()) / MIB


def child(what: str, cudnn: bool, calls: int, device: str) -> dict:
    import torch

    from llamafactory_agentic.rollout.engine import GenerationRequest, SamplingSettings
    from llamafactory_agentic.rollout.hf_engine import HFEngine

    rng = random.Random(0)
    model = _model(device)
    shapes = set()
    t0 = time.perf_counter()
    if what == "engine":
        model.eval()
        engine = HFEngine(model, None, max_batch_size=128, max_context=320, prefix_cache=False, cudnn_attention=cudnn)
        sampling = SamplingSettings(temperature=0.0, stop_strings=())
        engine.generate([GenerationRequest(0, [1] * 32, [], 2)], sampling)  # CUDA context, graphs, cache allocated
        start = _outside_allocator()
        for i in range(calls):
            rows = rng.randint(1, 64)
            lengths = [rng.randint(20, 128) for _ in range(rows)]
            requests = [
                GenerationRequest(1000 * i + r, [rng.randint(1, 999) for _ in range(n)], [], 2)
                for r, n in enumerate(lengths)
            ]
            engine.generate(requests, sampling)
            engine.reset()
            shapes.add((rows, max(lengths)))
    else:
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
        model.train()
        start = None
        for i in range(calls + 1):
            batch, length = (rng.randint(8, 64), rng.randint(64, 320)) if device == "cuda" else (2, rng.randint(8, 32))
            ids = torch.randint(1, 1000, (batch, length), device=device)
            mask = torch.ones_like(ids)
            mask[0, : length // 2] = 0  # one left-padded row: a 4-D mask reaches SDPA
            out = model(input_ids=ids, attention_mask=mask)
            out.logits.float().mean().backward()
            model.zero_grad(set_to_none=True)
            if start is None:
                start = _outside_allocator()
            else:
                shapes.add((batch, length))
    end = _outside_allocator()
    return {
        "what": what,
        "cudnn": cudnn,
        "distinct_shapes": len(shapes),
        "outside_allocator_growth_mib": end - start,
        "max_allocated_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan"),
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="calls with random shapes per setting")
    parser.add_argument("--what", default="engine,train", help="comma-separated: engine, train")
    parser.add_argument("--device", default="cuda", help="`cpu` only checks that the script runs (no memory numbers)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what, cudnn = args.child.split(":")
        print(json.dumps(child(what, cudnn == "on", args.calls, args.device)))
        return

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU (or --device cpu for a smoke run)")
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {name}")
    for what in args.what.split(","):
        growth = {}
        for setting in ("on", "off"):
            proc = subprocess.run(
                [sys.executable, __file__, "--child", f"{what}:{setting}", "--calls", str(args.calls)]
                + ["--device", args.device],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                print(f"{what} cudnn={setting}: failed\n{proc.stderr[-3000:]}")
                continue
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            growth[setting] = result["outside_allocator_growth_mib"]
            print(
                f"{what:6s} cudnn={setting:3s} shapes={result['distinct_shapes']:4d} "
                f"outside-allocator growth={result['outside_allocator_growth_mib']:9.1f} MiB "
                f"max allocated={result['max_allocated_gib']:.2f} GiB  {result['seconds']:.1f} s"
            )
        if len(growth) == 2:
            if math.isnan(growth["off"]):
                continue
            ratio = growth["on"] / growth["off"] if abs(growth["off"]) > 1 else float("inf")
            print(f"{what}: growth with cuDNN / without = {ratio:.1f}x (without: {growth['off']:.1f} MiB)")


if __name__ == "__main__":
    main()

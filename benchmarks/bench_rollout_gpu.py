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

"""GPU decode-step benchmark of the `hf` rollout engine (run on one CUDA GPU; torch + transformers only).

Builds random-weight Qwen2.5-0.5B and 1.5B from their configs in bf16 and measures, per decode step at batch 128
with a 512-token prompt:
  1. plain `model.generate` with sampling (per step = (t(N new) - t(1 new)) / (N - 1)),
  2. a bare eager forward of one decode step on a `DynamicCache`,
  3. our `HFEngine` decode step (slot KV cache, CUDA graphs, one host sync every 8 steps), and the same engine eager.
Prints every number and the ratios. Usage: `python benchmarks/bench_rollout_gpu.py [--sizes 0.5b,1.5b] [--new 128]`.
"""

import argparse
import os
import sys
import time

import torch
from transformers import DynamicCache, Qwen2ForCausalLM


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from llamafactory_agentic.rollout.engine import GenerationRequest, SamplingSettings  # noqa: E402
from llamafactory_agentic.rollout.hf_engine import HFEngine  # noqa: E402
from llamafactory_agentic.testing import real_size_config  # noqa: E402


CONFIGS = {"0.5b": "qwen2.5-0.5b", "1.5b": "qwen2.5-1.5b"}  # architectures from llamafactory_agentic.testing


def build(size: str) -> Qwen2ForCausalLM:
    cfg = real_size_config(CONFIGS[size], attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval()


def timed(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


@torch.no_grad()
def bench_generate(model, prompt: torch.Tensor, new: int) -> float:
    kw = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, pad_token_id=0)
    mask = torch.ones_like(prompt)
    model.generate(prompt, attention_mask=mask, max_new_tokens=4, min_new_tokens=4, **kw)  # warm-up
    t1 = timed(lambda: model.generate(prompt, attention_mask=mask, max_new_tokens=1, min_new_tokens=1, **kw))
    tn = timed(lambda: model.generate(prompt, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, **kw))
    return (tn - t1) / (new - 1)


@torch.no_grad()
def bench_eager_forward(model, prompt: torch.Tensor, steps: int = 20) -> float:
    cache = DynamicCache(config=model.config)
    out = model(prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    tok = out.logits[:, -1].argmax(-1, keepdim=True)
    for _ in range(3):
        model(tok, past_key_values=cache, use_cache=True, logits_to_keep=1)

    def run():
        for _ in range(steps):
            model(tok, past_key_values=cache, use_cache=True, logits_to_keep=1)

    return timed(run) / steps


def bench_engine(model, prompt: torch.Tensor, new: int, graphs: bool) -> tuple[float, float, float]:
    batch, plen = prompt.shape
    engine = HFEngine(model, None, max_batch_size=batch, max_context=plen + new, cuda_graphs=graphs, prefix_cache=True)
    sampling = SamplingSettings(temperature=1.0, top_p=1.0, top_k=0, stop_strings=(), eos_token_ids=())
    rows = prompt.tolist()

    def once():
        engine.reset()
        engine.reset_stats()
        requests = [
            GenerationRequest(key=i, prompt_ids=rows[i], response_ids=[], max_tokens=new) for i in range(batch)
        ]
        out = engine.generate(requests, sampling)
        assert all(len(o.token_ids) == new for o in out)

    t_capture = timed(once)  # includes graph capture
    total = timed(once)
    stats = engine.stats
    per_step = stats["decode_s"] / stats["decode_steps"]
    engine.release()
    return per_step, stats["prefill_s"], t_capture - total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="0.5b,1.5b")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=128)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, device {torch.cuda.get_device_name()}, batch {args.batch}, "
        f"prompt {args.prompt}, new tokens {args.new}"
    )
    for size in args.sizes.split(","):
        model = build(size)
        gen = torch.Generator(device="cuda").manual_seed(0)
        prompt = torch.randint(10, 150000, (args.batch, args.prompt), device="cuda", generator=gen)
        t_gen = bench_generate(model, prompt, args.new)
        t_fwd = bench_eager_forward(model, prompt)
        t_eng, t_prefill, t_cap = bench_engine(model, prompt, args.new, graphs=True)
        t_eng_eager, _, _ = bench_engine(model, prompt, args.new, graphs=False)
        print(
            f"[{size}] per decode step (ms): model.generate {t_gen * 1e3:.2f} | bare eager forward "
            f"{t_fwd * 1e3:.2f} | hf engine (CUDA graphs) {t_eng * 1e3:.2f} | hf engine eager {t_eng_eager * 1e3:.2f}"
        )
        print(
            f"[{size}] engine prefill of {args.batch}x{args.prompt} tokens: {t_prefill:.3f} s; first-call graph "
            f"capture overhead {t_cap:.2f} s"
        )
        print(
            f"[{size}] ratio generate/engine = {t_gen / t_eng:.2f}x ; eager-forward/engine = {t_fwd / t_eng:.2f}x ; "
            f"engine-eager/engine-graphs = {t_eng_eager / t_eng:.2f}x"
        )
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

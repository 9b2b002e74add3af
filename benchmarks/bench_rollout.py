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

"""CPU rollout benchmark on the tiny Qwen2 model (prints ratios measured in one run).

Compares, with the same group size M and the same policy:
  * ARPO branching (N = M/2 global rollouts + entropy-gated branches) vs plain GRPO sampling (N = M);
  * the `hf` backend with vs without prefix KV reuse (branches copy their source's cache rows vs re-run the prefill).
The random tiny model never writes tool calls by itself, so the policy is the real model plus a bias that makes it
follow a small Markov chain over the tokens of `<search> ... </search>` (it still samples, so
rounds have different lengths and entropies). Tool results come from a fixed-text executor: tool latency is not what
this measures. Usage: `python benchmarks/bench_rollout.py [--prompts 4 --group 8 --response 256 --repeats 2]`.
"""

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass

import torch


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from llamafactory_agentic.rollout import AgenticRollout, RolloutConfig, build_engine  # noqa: E402
from llamafactory_agentic.testing import build_tiny_model  # noqa: E402


TEMPLATE = "<search> capital of France </search>"


class MarkovBiasedModel(torch.nn.Module):
    """The real model's logits plus `bias` on the template successor of the last input token."""

    def __init__(self, model, tokenizer, bias: float = 9.0):
        super().__init__()
        self.inner, self.config = model, model.config
        ids = tokenizer.encode(TEMPLATE, add_special_tokens=False)
        table = torch.full((len(tokenizer),), ids[0], dtype=torch.long)  # off-chain tokens restart the template
        seen = set()
        for a, b in zip(ids, ids[1:]):
            if a not in seen:
                seen.add(a)
                table[a] = b
        self.register_buffer("table", table, persistent=False)
        self.bias = bias

    def forward(self, **kwargs):
        out = self.inner(**kwargs)
        nxt = self.table[kwargs["input_ids"][:, -1]]
        out.logits[:, -1].scatter_add_(
            1, nxt.unsqueeze(1), torch.full_like(nxt, self.bias, dtype=out.logits.dtype).unsqueeze(1)
        )
        return out


@dataclass
class _Result:
    text: str
    status: str = "ok"
    latency_s: float = 0.0
    cached: bool = False


class FixedExecutor:
    def execute(self, calls):
        return [_Result("Page 1: Paris is the capital of France.") for _ in calls]


def run(model, tok, prompts, *, group, initial, response, prefix_cache, repeats, seed=0):
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    cfg = RolloutConfig(
        group_size=group,
        initial_rollouts=initial,
        max_response_length=response,
        max_prompt_length=64,
        max_tool_calls=3,
        eos_token_id=eos,
        hf_prefix_cache=prefix_cache,
        hf_generation_batch_size=len(prompts) * group,
        seed=seed,
    )
    engine = build_engine("hf", model, tok, cfg)
    rollout = AgenticRollout(engine, FixedExecutor(), tok, cfg)
    torch.manual_seed(seed)
    rollout.rollout(prompts)  # warm-up
    engine.reset_stats()
    wall = gen = 0.0
    tokens = 0.0
    metrics = {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = rollout.rollout(prompts)
        wall += time.perf_counter() - t0
        gen += out.timing["time/generation"]
        tokens += out.metrics["rollout/generated_tokens"]
        metrics = out.metrics
    stats = dict(engine.stats)
    return {
        "step_s": wall / repeats,
        "tok_s": tokens / gen,
        "tokens": tokens / repeats,
        "stats": stats,
        "branches": metrics["rollout/branches"],
        "calls": metrics["rollout/tool_calls_per_traj"],
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--response", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(os.path.join(tmp, "tiny"), hidden_size=128, num_layers=4)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
        model = MarkovBiasedModel(AutoModelForCausalLM.from_pretrained(path).eval(), tok)
    prompts = [
        tok.encode(f"<|im_start|>user\nQuestion {i}: where is Paris?<|im_end|>\n<|im_start|>assistant\n")
        for i in range(args.prompts)
    ]
    m = args.group
    common = dict(group=m, response=args.response, repeats=args.repeats)
    grpo = run(model, tok, prompts, initial=m, prefix_cache=True, **common)
    arpo = run(model, tok, prompts, initial=m // 2, prefix_cache=True, **common)
    arpo_nocache = run(model, tok, prompts, initial=m // 2, prefix_cache=False, **common)
    print(
        f"tiny Qwen2 (4 layers, hidden 128), {args.prompts} prompts x M={m}, R={args.response}, "
        f"{torch.get_num_threads()} threads"
    )
    for name, r in [
        ("GRPO (N=M)", grpo),
        ("ARPO (N=M/2) prefix KV reuse", arpo),
        ("ARPO no prefix KV reuse", arpo_nocache),
    ]:
        s = r["stats"]
        print(
            f"{name:32s} step {r['step_s']:.3f} s | {r['tok_s']:.0f} generated tok/s | {r['tokens']:.0f} tok/step | "
            f"branches {r['branches']:.0f} | calls/traj {r['calls']:.2f} | prefilled {s['prefill_tokens']} "
            f"copied {s['copied_tokens']} | prefill {s['prefill_s']:.2f} s decode {s['decode_s']:.2f} s"
        )
    print(
        f"ratio ARPO/GRPO step time = {arpo['step_s'] / grpo['step_s']:.2f} ; tokens/s = "
        f"{arpo['tok_s'] / grpo['tok_s']:.2f}"
    )
    print(
        f"ratio prefix KV reuse on/off: step time = {arpo['step_s'] / arpo_nocache['step_s']:.2f} ; prefill time = "
        f"{arpo['stats']['prefill_s'] / max(arpo_nocache['stats']['prefill_s'], 1e-9):.2f} ; prefilled tokens = "
        f"{arpo['stats']['prefill_tokens'] / max(arpo_nocache['stats']['prefill_tokens'], 1):.2f}"
    )


if __name__ == "__main__":
    main()

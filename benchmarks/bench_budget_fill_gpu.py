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

"""GPU rollout benchmark of the budget fill modes (`arpo_budget_fill`) with a policy that never calls a tool.

Random-weight Qwen2.5-0.5B (bf16, from its config; torch + transformers only) on the `hf` engine: no stop strings and
an EOS id that cannot be sampled, so every trajectory ends in its first round at the length budget R and the M - N
missing members of each group all come from the budget fill. Measures, interleaved in one run, `per_round`
(reference: one fill per round, M - N extra rounds), `all_at_once` (arXiv 2507.19849 section 3.1: one extra round) and
plain GRPO sampling (N = M, no fill), and prints rounds, step time, generated tokens/s and the ratios.
Usage: `python benchmarks/bench_budget_fill_gpu.py [--prompts 16 --group 8 --initial 4 --response 1024]`
(`--layers 2 --device cpu` for a smoke run without a GPU).
"""

import argparse
import os
import sys
import time

import torch
from transformers import Qwen2ForCausalLM


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from llamafactory_agentic.rollout import AgenticRollout, build_engine  # noqa: E402
from llamafactory_agentic.testing import real_size_config  # noqa: E402
from llamafactory_agentic.train.arpo.config import default_rollout_config  # noqa: E402


VOCAB = 151936


class VocabOnlyTokenizer:
    """Just `get_vocab` (|V| for the round entropy): with no stop strings and no tool calls nothing is decoded."""

    def get_vocab(self):
        return {str(i): i for i in range(VOCAB)}


class NoExecutor:
    def execute(self, calls):
        raise AssertionError("this policy makes no tool calls")


def build(layers: int | None, device: str) -> Qwen2ForCausalLM:
    overrides = {"num_hidden_layers": layers} if layers else {}
    cfg = real_size_config("qwen2.5-0.5b", vocab_size=VOCAB, attn_implementation="sdpa", **overrides)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16 if device == "cuda" else torch.float32)
    return model.eval()


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--initial", type=int, default=4)
    parser.add_argument("--response", type=int, default=1024)
    parser.add_argument("--prompt-length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = args.device
    model = build(args.layers, device)
    tok = VocabOnlyTokenizer()
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(100, VOCAB - 100, (args.prompts, args.prompt_length), generator=gen).tolist()
    m = args.group
    cases = {
        "per_round": dict(initial=args.initial, budget_fill="per_round"),
        "all_at_once": dict(initial=args.initial, budget_fill="all_at_once"),
        "grpo": dict(initial=m, budget_fill="per_round"),
    }
    setups = {}
    for name, case in cases.items():
        cfg = default_rollout_config(
            group_size=m,
            initial_rollouts=case["initial"],
            budget_fill=case["budget_fill"],
            max_response_length=args.response,
            max_prompt_length=args.prompt_length,
            eos_token_id=-1,  # never sampled: every trajectory runs to R
            stop_strings=(),
            hf_generation_batch_size=args.prompts * m,
            seed=0,
        )
        engine = build_engine("hf", model, tok, cfg)
        rollout = AgenticRollout(engine, NoExecutor(), tok, cfg)
        rollout.rollout(prompts)  # warm-up (CUDA graph capture)
        setups[name] = (rollout, {"wall": 0.0, "gen": 0.0, "tokens": 0.0, "rounds": 0.0, "fills": 0.0, "sizes": set()})
    for _ in range(args.repeats):
        for rollout, acc in setups.values():
            sync(device)
            t0 = time.perf_counter()
            out = rollout.rollout(prompts)
            sync(device)
            acc["wall"] += time.perf_counter() - t0
            acc["gen"] += out.timing["time/generation"]
            acc["tokens"] += out.metrics["rollout/generated_tokens"]
            acc["rounds"] += out.metrics["rollout/rounds"]
            acc["fills"] += out.metrics["rollout/fills"]
            acc["sizes"] |= {len(g) for g in out.groups}
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(
        f"random Qwen2.5-0.5B ({args.layers or 24} layers) on {name}: {args.prompts} prompts x M={m}, "
        f"N={args.initial}, R={args.response}, prompt {args.prompt_length} tokens, no tool calls"
    )
    res = {}
    for key, (_, acc) in setups.items():
        r = {k: acc[k] / args.repeats for k in ("wall", "gen", "tokens", "rounds", "fills")}
        r["tok_s"] = acc["tokens"] / acc["gen"]
        assert acc["sizes"] == {m}, acc["sizes"]
        res[key] = r
        print(
            f"{key:12s} step {r['wall']:.2f} s | generation {r['gen']:.2f} s | {r['tokens']:.0f} tokens | "
            f"{r['tok_s']:.0f} tok/s | rounds {r['rounds']:.0f} | fills {r['fills']:.0f}"
        )
    pr, ao, grpo = res["per_round"], res["all_at_once"], res["grpo"]
    print(
        f"ratio per_round/all_at_once: rounds = {pr['rounds'] / ao['rounds']:.2f} ; step time = "
        f"{pr['wall'] / ao['wall']:.2f} ; tokens/s = {pr['tok_s'] / ao['tok_s']:.2f}"
    )
    print(
        f"ratio all_at_once/GRPO: step time = {ao['wall'] / grpo['wall']:.2f} ; tokens/s = "
        f"{ao['tok_s'] / grpo['tok_s']:.2f}"
    )


if __name__ == "__main__":
    main()

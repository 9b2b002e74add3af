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
  * the `hf` backend with vs without prefix KV reuse (branches copy their source's cache rows vs re-run the prefill);
  * the budget fill `arpo_budget_fill: per_round` (reference, one fresh global rollout per round) vs `all_at_once`
    (arXiv 2507.19849 section 3.1) for a policy that never calls a tool, so every trajectory ends in its first round
    at the length budget and the M - N missing members of each group all come from the budget fill.
For the first two, the random tiny model never writes tool calls by itself, so the policy is the real model plus a
bias that makes it follow a small Markov chain over the tokens of `<search> ... </search>` (it still samples, so
rounds have different lengths and entropies). For the budget-fill case the real model is used with EOS and every token
that could complete a stop string masked out (no tool call, no early end). Tool results come from a fixed-text
executor: tool latency is not what this measures. Usage:
`python benchmarks/bench_rollout.py [--prompts 4 --group 8 --response 256 --repeats 2 --cases branch,fill]`.
Cases are measured interleaved (one call of each per repeat); on a CPU shared with other processes prefer
`--threads 1` (2-thread OpenMP regions stall erratically when a core is taken).
"""

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass

import torch


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from llamafactory_agentic.rollout import (  # noqa: E402
    STOP_STRINGS,
    AgenticRollout,
    build_engine,
)
from llamafactory_agentic.testing import build_tiny_model  # noqa: E402
from llamafactory_agentic.train.arpo.config import default_rollout_config  # noqa: E402


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


class NoToolModel(torch.nn.Module):
    """The real model's logits with EOS and every token that could complete a stop string set to -inf.

    Such a policy never calls a tool and never ends early: each trajectory runs to the length budget in one round
    (what a random-weight policy does on a GPU at R = 1024).
    """

    def __init__(self, model, tokenizer, stop_strings=STOP_STRINGS):
        super().__init__()
        self.inner, self.config = model, model.config
        last_chars = {stop[-1] for stop in stop_strings}
        vocab_ids = sorted(tokenizer.get_vocab().values())
        texts = tokenizer.batch_decode([[i] for i in vocab_ids], skip_special_tokens=False)
        # a stop string can only be completed by a token holding its last character (or a partial UTF-8 byte)
        blocked = [i for i, t in zip(vocab_ids, texts) if not t or "\ufffd" in t or any(c in t for c in last_chars)]
        blocked.append(tokenizer.convert_tokens_to_ids("<|im_end|>"))
        blocked.extend(i for i in (tokenizer.eos_token_id, tokenizer.pad_token_id) if i is not None)
        self.register_buffer("blocked", torch.tensor(sorted(set(blocked)), dtype=torch.long), persistent=False)

    def forward(self, **kwargs):
        out = self.inner(**kwargs)
        out.logits[:, -1, self.blocked] = float("-inf")
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


def run(model, tok, prompts, cases, *, group, response, repeats, seed=0):
    """Measure several rollout configurations, interleaved (one call of each per repeat) so that load from other
    processes on a shared CPU affects them alike. `cases`: name -> dict(initial=N, prefix_cache=..., budget_fill=...).
    """
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    setups = {}
    for name, case in cases.items():
        cfg = default_rollout_config(
            group_size=group,
            initial_rollouts=case["initial"],
            max_response_length=response,
            max_prompt_length=64,
            max_tool_calls=3,
            eos_token_id=eos,
            hf_prefix_cache=case.get("prefix_cache", True),
            budget_fill=case.get("budget_fill", "per_round"),
            hf_generation_batch_size=len(prompts) * group,
            seed=seed,
        )
        engine = build_engine("hf", model, tok, cfg)
        rollout = AgenticRollout(engine, FixedExecutor(), tok, cfg)
        torch.manual_seed(seed)
        rollout.rollout(prompts)  # warm-up
        engine.reset_stats()
        setups[name] = (engine, rollout, {"wall": [], "gen": 0.0, "tokens": 0.0, "rounds": 0.0, "out": None})
    for _ in range(repeats):
        for engine, rollout, acc in setups.values():
            t0 = time.perf_counter()
            out = rollout.rollout(prompts)
            acc["wall"].append(time.perf_counter() - t0)
            acc["gen"] += out.timing["time/generation"]
            acc["tokens"] += out.metrics["rollout/generated_tokens"]
            acc["rounds"] += out.metrics["rollout/rounds"]
            acc["out"] = out
    results = {}
    for name, (engine, _, acc) in setups.items():
        out = acc["out"]
        results[name] = {
            "step_s": sum(acc["wall"]) / repeats,
            "tok_s": acc["tokens"] / acc["gen"],
            "tokens": acc["tokens"] / repeats,
            "stats": dict(engine.stats),
            "branches": out.metrics["rollout/branches"],
            "calls": out.metrics["rollout/tool_calls_per_traj"],
            "fills": out.metrics["rollout/fills"],
            "rounds": acc["rounds"] / repeats,
            "group_sizes": sorted({len(g) for g in out.groups}),
        }
    return results


def report(name, r):
    s = r["stats"]
    print(
        f"{name:32s} step {r['step_s']:.3f} s | {r['tok_s']:.0f} generated tok/s | {r['tokens']:.0f} tok/step | "
        f"rounds {r['rounds']:.1f} | branches {r['branches']:.0f} | fills {r['fills']:.0f} | "
        f"calls/traj {r['calls']:.2f} | prefilled {s['prefill_tokens']} copied {s['copied_tokens']} | "
        f"prefill {s['prefill_s']:.2f} s decode {s['decode_s']:.2f} s"
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--response", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cases", default="branch,fill", help="comma-separated subset of `branch`, `fill`")
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(os.path.join(tmp, "tiny"), hidden_size=128, num_layers=4)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
        base = AutoModelForCausalLM.from_pretrained(path).eval()
    prompts = [
        tok.encode(f"<|im_start|>user\nQuestion {i}: where is Paris?<|im_end|>\n<|im_start|>assistant\n")
        for i in range(args.prompts)
    ]
    m = args.group
    common = dict(group=m, response=args.response, repeats=args.repeats)
    print(
        f"tiny Qwen2 (4 layers, hidden 128), {args.prompts} prompts x M={m}, R={args.response}, "
        f"{torch.get_num_threads()} threads"
    )
    if "branch" in cases:
        model = MarkovBiasedModel(base, tok)
        res = run(
            model,
            tok,
            prompts,
            {
                "grpo": dict(initial=m),
                "arpo": dict(initial=m // 2, prefix_cache=True),
                "arpo_nocache": dict(initial=m // 2, prefix_cache=False),
            },
            **common,
        )
        grpo, arpo, arpo_nocache = res["grpo"], res["arpo"], res["arpo_nocache"]
        report("GRPO (N=M)", grpo)
        report("ARPO (N=M/2) prefix KV reuse", arpo)
        report("ARPO no prefix KV reuse", arpo_nocache)
        print(
            f"ratio ARPO/GRPO step time = {arpo['step_s'] / grpo['step_s']:.2f} ; tokens/s = "
            f"{arpo['tok_s'] / grpo['tok_s']:.2f}"
        )
        print(
            f"ratio prefix KV reuse on/off: step time = {arpo['step_s'] / arpo_nocache['step_s']:.2f} ; prefill "
            f"time = {arpo['stats']['prefill_s'] / max(arpo_nocache['stats']['prefill_s'], 1e-9):.2f} ; prefilled "
            f"tokens = {arpo['stats']['prefill_tokens'] / max(arpo_nocache['stats']['prefill_tokens'], 1):.2f}"
        )
    if "fill" in cases:
        model = NoToolModel(base, tok)
        res = run(
            model,
            tok,
            prompts,
            {
                "per_round": dict(initial=m // 2, budget_fill="per_round"),
                "all_at_once": dict(initial=m // 2, budget_fill="all_at_once"),
                "grpo": dict(initial=m),
            },
            **common,
        )
        per_round, at_once, grpo = res["per_round"], res["all_at_once"], res["grpo"]
        print("policy without tool calls (every trajectory ends at the length budget in one round), N=M/2:")
        report("budget fill per_round", per_round)
        report("budget fill all_at_once", at_once)
        report("GRPO (N=M), no fill", grpo)
        for r in (per_round, at_once, grpo):
            assert r["group_sizes"] == [m] and r["tokens"] == len(prompts) * m * args.response, r
        print(
            f"ratio per_round/all_at_once: rounds = {per_round['rounds'] / at_once['rounds']:.2f} ; step time = "
            f"{per_round['step_s'] / at_once['step_s']:.2f} ; tokens/s = {per_round['tok_s'] / at_once['tok_s']:.2f}"
        )
        print(
            f"ratio all_at_once/GRPO: step time = {at_once['step_s'] / grpo['step_s']:.2f} ; tokens/s = "
            f"{at_once['tok_s'] / grpo['tok_s']:.2f}"
        )


if __name__ == "__main__":
    main()

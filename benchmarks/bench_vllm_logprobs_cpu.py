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

"""Host cost of vLLM's per-position log-prob handling, dict container against flat (`SamplingParams.flat_logprobs`).

    python benchmarks/bench_vllm_logprobs_cpu.py [--requests 128] [--positions 1024] [--topk 20]

The rollout asks vLLM for the top-k log-probs at every generated position (the branching rule reads the first
`entropy_tokens` of a round; vLLM cannot limit them to those). vLLM's output processor turns each position's k + 1
ids into token strings and stores them with their log-probs, in the process that runs the trainer (the engine core is
in-process). This script drives vLLM's own `LogprobsProcessor._update_sample_logprobs` as its output processor does,
one call per request per decode step, with random ids and log-probs and the padded Qwen2.5 tokenizer of
`build_real_size_model`, once with `flat_logprobs=False` (a dict of `Logprob` objects per position, vLLM's default)
and once with `True`, and prints both times and their ratio. Only vLLM's pure-Python modules are needed: on a machine
without a GPU, `pip install --no-deps --target DIR vllm==0.22.1` plus the modules the import names (msgspec, pyzmq,
...) and `PYTHONPATH=DIR` suffice. It measures this host-side part only, not a GPU rollout.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(tokenizer, requests: int, positions: int, topk: int, flat: bool, seed: int = 0) -> float:
    r"""Seconds for `requests` x `positions` updates of vLLM's log-prob processor (one container kind)."""
    import numpy as np
    from vllm.logprobs import create_sample_logprobs
    from vllm.v1.engine.logprobs import LogprobsProcessor
    from vllm.v1.outputs import LogprobsLists

    rng = np.random.default_rng(seed)
    processors = [
        LogprobsProcessor(
            tokenizer=tokenizer,
            logprobs=create_sample_logprobs(flat),
            prompt_logprobs=None,
            cumulative_logprob=0.0,
            num_logprobs=topk,
            num_prompt_logprobs=None,
        )
        for _ in range(requests)
    ]
    ids = rng.integers(0, len(tokenizer), size=(requests, topk + 1)).astype(np.int32)
    logprobs = -rng.random((requests, topk + 1)).astype(np.float32)
    ranks = np.ones(requests, dtype=np.int32)
    start = time.perf_counter()
    for _ in range(positions):
        for r, processor in enumerate(processors):
            processor._update_sample_logprobs(LogprobsLists(ids[r : r + 1], logprobs[r : r + 1], ranks[r : r + 1]))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=128, help="trajectories decoded together (default 128)")
    parser.add_argument("--positions", type=int, default=1024, help="generated tokens per trajectory (default 1024)")
    parser.add_argument("--topk", type=int, default=20, help="log-probs per position (the rollout's entropy_topk)")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from llamafactory_agentic.testing import build_real_size_model

    with tempfile.TemporaryDirectory() as tmp:  # the padded Qwen2.5 vocabulary, a one-layer stand-in model
        small = dict(num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=2)
        build_real_size_model(tmp, "qwen2.5-0.5b", num_key_value_heads=1, **small)
        tokenizer = AutoTokenizer.from_pretrained(tmp)
    total = args.requests * args.positions
    times = {}
    for flat in (False, True):
        times[flat] = run(tokenizer, args.requests, args.positions, args.topk, flat)
        print(
            f"flat_logprobs={flat}: {args.requests} requests x {args.positions} positions x {args.topk + 1} "
            f"log-probs: {times[flat]:.2f} s ({times[flat] / total * 1e6:.1f} us per position)",
            flush=True,
        )
    print(f"ratio dict / flat: {times[False] / times[True]:.2f}x")


if __name__ == "__main__":
    main()

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

"""Peak memory and time of one micro-batch's log-prob + entropy forward/backward: full logits vs the fused head (CPU).

The model is one decoder layer of the Qwen2.5-0.5B shape (hidden 896, vocabulary 151936, tied embeddings) in float32;
the micro-batch is `--batch` trajectories of a 64-token prompt and a `--response`-token response with 10% observation
tokens. `full` is the trainer's materialising path (`rl_logprob_chunk_size: 0`: `[b, C, V]` logits, TRL's
`selective_log_softmax`, chunked entropy); `fused` is `train.arpo.logprobs.response_log_probs` (only loss-mask
positions, chunks of 1024 fused with the output projection). Each variant runs in a fresh subprocess so its peak
resident memory (ru_maxrss) is its own; the loss of both is printed and must agree.

Usage: python benchmarks/bench_logprobs_fused.py [--batch 2] [--response 1024] [--vocab 151936]
"""

import argparse
import json
import os
import subprocess
import sys


CHILD = r"""
import json, resource, sys, time
import torch
from transformers import Qwen2ForCausalLM
from llamafactory_agentic.train.trl_compat import selective_log_softmax
from llamafactory_agentic.algorithms import entropy_from_logits_chunked
from llamafactory_agentic.testing import real_size_config
from llamafactory_agentic.train.arpo.logprobs import response_log_probs
variant, batch, response, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
model = Qwen2ForCausalLM(real_size_config("qwen2.5-0.5b", num_hidden_layers=1, vocab_size=vocab)).train()
prompt = 64
ids = torch.randint(10, vocab - 1, (batch, prompt + response))
attention = torch.ones_like(ids)
mask = torch.ones(batch, response, dtype=torch.long)
mask[:, ::10] = 0
adv = torch.randn(batch, response)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
if variant == "full":
    logits = model(input_ids=ids, attention_mask=attention, logits_to_keep=response + 1).logits[:, :-1, :]
    logps = selective_log_softmax(logits, ids[:, -response:])
    with torch.no_grad():
        entropy = entropy_from_logits_chunked(logits.detach())
else:
    logps, entropy = response_log_probs(model, ids, attention, response, mask, 1.0, 1024, with_entropy=True)
loss = -(logps * adv * mask).sum() / mask.sum()
loss.backward()
elapsed = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"variant": variant, "extra_peak_mib": (peak - base) / 1024, "seconds": elapsed,
                  "loss": float(loss), "entropy": float((entropy * mask).sum() / mask.sum()),
                  "grad_norm": float(torch.linalg.vector_norm(model.lm_head.weight.grad))}))
"""


def run(variant: str, args) -> dict:
    cmd = [sys.executable, "-c", CHILD, variant, str(args.batch), str(args.response), str(args.vocab)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--response", type=int, default=1024)
    parser.add_argument(
        "--vocab", type=int, default=151936, help="vocabulary size (Qwen2.5's; smaller for a smoke run)"
    )
    args = parser.parse_args()
    full = run("full", args)
    fused = run("fused", args)
    print(json.dumps(full))
    print(json.dumps(fused))
    for key in ("loss", "entropy", "grad_norm"):
        assert abs(full[key] - fused[key]) <= 1e-4 * max(1.0, abs(full[key])), (key, full[key], fused[key])
    print(
        f"{args.batch} x (64 + {args.response}) tokens, vocabulary {args.vocab}, forward + backward: extra peak memory "
        f"fused/full = {fused['extra_peak_mib']:.0f}/{full['extra_peak_mib']:.0f} MiB = "
        f"{fused['extra_peak_mib'] / max(full['extra_peak_mib'], 1e-9):.3f}; time fused/full = "
        f"{fused['seconds'] / full['seconds']:.2f}; loss, entropy and lm_head gradient norm agree"
    )


if __name__ == "__main__":
    main()

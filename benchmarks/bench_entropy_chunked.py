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

"""Peak memory and time of `entropy_from_logits` vs `entropy_from_logits_chunked` on bf16 logits (CPU, no grad).

Each variant runs in a fresh subprocess so its peak resident memory (ru_maxrss) is measured on its own; the baseline
(full) is measured in the same run and the script prints chunked/full ratios.

Usage: python benchmarks/bench_entropy_chunked.py [--seq-len 1024] [--vocab 151936] [--chunk-size 256]
"""

import argparse
import json
import os
import subprocess
import sys


CHILD = r"""
import json, resource, sys, time
import torch
from llamafactory_agentic.algorithms import entropy_from_logits, entropy_from_logits_chunked
variant, seq_len, vocab, chunk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
logits = torch.randn(1, seq_len, vocab, dtype=torch.bfloat16)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
with torch.no_grad():
    out = entropy_from_logits(logits) if variant == "full" else entropy_from_logits_chunked(logits, chunk_size=chunk)
elapsed = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"variant": variant, "extra_peak_mib": (peak - base) / 1024, "seconds": elapsed,
                  "checksum": float(out.double().sum())}))
"""


def run(variant: str, args) -> dict:
    cmd = [sys.executable, "-c", CHILD, variant, str(args.seq_len), str(args.vocab), str(args.chunk_size)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--chunk-size", type=int, default=256)
    args = parser.parse_args()
    full = run("full", args)
    chunked = run("chunked", args)
    print(json.dumps(full))
    print(json.dumps(chunked))
    assert abs(full["checksum"] - chunked["checksum"]) < 1e-3 * max(1.0, abs(full["checksum"])), "results differ"
    print(
        f"logits [1, {args.seq_len}, {args.vocab}] bf16: extra peak memory chunked/full = "
        f"{chunked['extra_peak_mib']:.0f}/{full['extra_peak_mib']:.0f} MiB = "
        f"{chunked['extra_peak_mib'] / max(full['extra_peak_mib'], 1e-9):.3f}; time chunked/full = "
        f"{chunked['seconds'] / full['seconds']:.2f}"
    )


if __name__ == "__main__":
    main()

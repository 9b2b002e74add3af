# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""A smoke run of every `make bench` part (CPU_BENCHMARKS in the Makefile) with tiny sizes.

`make bench` on a fresh clone stopped at `benchmarks/bench_eval.py` with `CacheError: ... tool_cache.sqlite does not
exist (mode offline never creates one)` after 13 minutes of the benchmarks before it (issue 34). Each benchmark runs
here as `make bench` runs it (a subprocess, `CUDA_VISIBLE_DEVICES=` and `HF_HUB_OFFLINE=1`, from the repository),
with its own size flags turned down so that all of them together take well under two minutes; the numbers printed
are not checked (they are measurements), the exit status and the ratio line are.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

# tiny sizes for each benchmark of CPU_BENCHMARKS (the flags each script already has)
SMOKE_ARGS = {
    "bench_activation": ["--runs", "1"],
    "bench_tools_cache": ["--entries", "200", "--baseline-entries", "100", "--value-chars", "100", "--threads", "2"],
    "bench_tools_python": ["--calls", "3"],
    "bench_tools_executor": ["--calls", "8", "--latency", "0.01", "--workers", "1,4"],
    "bench_entropy_chunked": ["--seq-len", "64", "--vocab", "1024", "--chunk-size", "16"],
    "bench_logprobs_fused": ["--batch", "1", "--response", "32", "--vocab", "4096"],
    "bench_rollout": ["--prompts", "1", "--group", "2", "--response", "16", "--repeats", "1", "--threads", "1"],
    "bench_eval": ["--samples", "4", "--new", "4"],
}


def make_bench_parts() -> list[str]:
    r"""The names in the Makefile's `CPU_BENCHMARKS` (what `make bench` runs, continuation lines included)."""
    text = (REPO / "Makefile").read_text()
    match = re.search(r"^CPU_BENCHMARKS\s*:=\s*((?:.*\\\n)*.*)$", text, re.M)
    assert match, "no CPU_BENCHMARKS in the Makefile"
    return match.group(1).replace("\\\n", " ").split()


def test_every_make_bench_part_has_smoke_sizes():
    parts = make_bench_parts()
    assert parts and set(parts) == set(SMOKE_ARGS), (
        f"Makefile CPU_BENCHMARKS {parts} vs smoke sizes {list(SMOKE_ARGS)}"
    )


@pytest.mark.parametrize("name", list(SMOKE_ARGS))
def test_make_bench_part_runs(name, tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1", TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / f"{name}.py"), *SMOKE_ARGS[name]],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"benchmarks/{name}.py failed:\n{output[-4000:]}"
    assert re.search(r"\d+(\.\d+)?x|ratio|/", proc.stdout), f"no measurement printed:\n{proc.stdout[-2000:]}"

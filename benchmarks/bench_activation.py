# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Cold-start cost of the plugin's activation, measured against the same interpreter with the plugin disabled.

    python benchmarks/bench_activation.py [--runs 10]

1. `python -c pass`: a process that never imports LLaMA-Factory (only the tiny start-up hook is loaded).
2. `python -c "import llamafactory.train.tuner"`: what `llamafactory-cli train` imports before parsing arguments.
Baseline = the same command with LLAMAFACTORY_AGENTIC_DISABLE=1 (the hook returns at once, nothing is patched).
Also prints the hook's own import time from `python -X importtime`.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time


def timed(cmd: list[str], env: dict, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()

    on = dict(os.environ)
    on.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)
    off = dict(on, LLAMAFACTORY_AGENTIC_DISABLE="1")

    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], env=on, capture_output=True, text=True)
    hook_us = [
        int(m.group(1))
        for m in re.finditer(r"import time:\s+\d+ \|\s+(\d+) \|\s+_llamafactory_agentic_hook", proc.stderr)
    ]
    print(f"start-up hook import (cumulative, -X importtime): {hook_us[0] if hook_us else 'not loaded'} us")

    for label, code, runs in (
        ("python -c pass", "pass", args.runs * 3),
        ("import llamafactory.train.tuner", "import llamafactory.train.tuner, llamafactory.data", args.runs),
    ):
        cmd = [sys.executable, "-c", code]
        # interleave to spread machine noise evenly over both variants
        t_on, t_off = [], []
        for _ in range(runs):
            t_off += timed(cmd, off, 1)
            t_on += timed(cmd, on, 1)
        m_on, m_off = statistics.median(t_on), statistics.median(t_off)
        print(
            f"{label:<34} plugin {m_on * 1000:8.1f} ms | disabled {m_off * 1000:8.1f} ms | "
            f"ratio {m_on / m_off:.3f} (median of {runs})"
        )


if __name__ == "__main__":
    main()

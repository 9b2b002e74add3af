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

"""Python tool per-call overhead vs a bare `python -c pass` subprocess (same interpreter, same run).

Measures the mean wall time of `--calls` sequential executions of `pass` through `run_python_code` at every
sandbox available here, and of `subprocess.run([sys.executable, "-c", "pass"])`.
Run: `python benchmarks/bench_tools_python.py [--calls 50]`.
"""

import argparse
import statistics
import subprocess
import sys
import time

from llamafactory_agentic.tools.python_tool import run_python_code
from llamafactory_agentic.tools.sandbox.isolation import SANDBOXES, measure_isolation


def mean_time(fn, n):
    fn()  # warm-up
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.mean(samples), statistics.median(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    bare, bare_med = mean_time(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), args.calls)
    print(
        f"bare `python -c pass` (inherited environment): mean {bare * 1000:.1f} ms (median {bare_med * 1000:.1f} ms)"
    )
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # same kind of scrubbed environment as the tool uses
    bare, bare_med = mean_time(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True, env=env), args.calls)
    print(
        f"bare `python -c pass` (scrubbed environment, the baseline): mean {bare * 1000:.1f} ms "
        f"(median {bare_med * 1000:.1f} ms)"
    )
    print(f"default isolation here: {measure_isolation().describe()}")
    for sandbox in SANDBOXES:
        report = measure_isolation(sandbox)
        if report.sandbox != sandbox:
            print(f"{sandbox:13s}: not available here")
            continue
        mean, med = mean_time(lambda sb=sandbox: run_python_code("pass", timeout_s=30, isolation=sb), args.calls)
        print(f"{sandbox:13s}: mean {mean * 1000:.1f} ms (median {med * 1000:.1f} ms)  overhead "
              f"{(mean - bare) * 1000:+.1f} ms  ratio {mean / bare:.2f}x  level {report.level}"
              f"{' (code as uid 65534)' if report.as_nobody else ''}")  # fmt: skip


if __name__ == "__main__":
    main()

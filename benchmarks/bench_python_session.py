# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Latency of `python_session` calls against the stateless python tool, and the cost of a branch's replay.

    python benchmarks/bench_python_session.py [--calls 8] [--isolation auto]

Baseline: the python tool (`PythonTool`, a fresh sandboxed interpreter per call) running the same short calls, in the
same run, through the same executor. Measured: (1) a trajectory of `--calls` calls, per call; (2) an ARPO branch
after those calls: its first call, which replays them into a fresh session (docs/tools.md "Environments").
"""

import argparse
import statistics
import time

from llamafactory_agentic.tools import PythonTool, ToolCall, ToolExecutor
from llamafactory_agentic.tools.python_session import PythonSessionTool


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--isolation", default="auto")
    args = parser.parse_args()
    codes = [f"v{i} = {i} * 2\nv{i}" for i in range(args.calls)]

    with ToolExecutor([PythonTool(timeout_s=30, isolation=args.isolation)]) as stateless:
        start = time.perf_counter()
        tool_lat = [stateless.execute([ToolCall("python", c, "t")])[0].latency_s for c in codes]
        tool_total = time.perf_counter() - start
    with ToolExecutor([PythonSessionTool(timeout_s=30, isolation=args.isolation)]) as session:
        start = time.perf_counter()
        sess_lat = [session.execute([ToolCall("python_session", c, "t")])[0].latency_s for c in codes]
        sess_total = time.perf_counter() - start
        session.fork_trajectory("t", "branch")
        replay = session.execute([ToolCall("python_session", "v0", "branch")])[0]
        metrics = session.pop_metrics()
    level = PythonSessionTool(isolation=args.isolation).isolation_report().level
    print(f"isolation level: {level}; {args.calls} calls per trajectory")
    print(
        f"python tool (baseline):   {tool_total:.3f} s total, median {statistics.median(tool_lat) * 1e3:.1f} ms/call"
    )
    print(f"python_session:           {sess_total:.3f} s total, median {statistics.median(sess_lat) * 1e3:.1f} ms/call "
          f"(first call, with start-up: {sess_lat[0] * 1e3:.1f} ms)")  # fmt: skip
    print(f"speed-up over the baseline: {tool_total / sess_total:.1f}x (total), "
          f"{statistics.median(tool_lat) / statistics.median(sess_lat):.1f}x (median call)")  # fmt: skip
    print(f"branch's first call (start + replay of {int(metrics['tools/python_session/replayed_calls'])} calls): "
          f"{replay.latency_s * 1e3:.1f} ms, observation {replay.text!r}")  # fmt: skip


if __name__ == "__main__":
    main()

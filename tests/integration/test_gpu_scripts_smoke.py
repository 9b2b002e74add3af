# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The GPU scripts of issue 36 on the CPU (`--smoke`: tiny shape, the vLLM stand-in as the server), and the parity
script's pass rule. They measure on the GPU machine; here only their path and their verdicts are checked."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from check_behaviour_logprobs_gpu import check  # noqa: E402


def _free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def _row(case, mean, p99=None, problems=""):
    return {"engine": "server", "case": case, "mean": mean, "p99": mean * 3 if p99 is None else p99,
            "problems": problems}  # fmt: skip


def test_the_parity_rule_fails_what_it_should():
    good = [_row("t1.0", 0.013), _row("t0.7_prefix", 0.019), _row("after_push", 0.017), _row("stale_weights", 0.86)]
    assert check(good) == []
    assert check([*good[:2], _row("after_push", 0.2), good[3]])  # over the bound
    assert check([*good[:3], _row("stale_weights", 0.05)])  # cannot tell versions apart
    assert check([_row("t1.0", 0.0, problems="weight_version 0, pushed 1"), *good[1:]])


@pytest.mark.slow
def test_the_parity_script_runs_against_the_stand_in(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks/check_behaviour_logprobs_gpu.py"), "--out",
                           str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--engines", "server", "--smoke",
                           "--port", _free_port()], capture_output=True, text=True, timeout=300, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "PASSED" in proc.stdout
    rows = [json.loads(line) for line in (tmp_path / "out/results.jsonl").read_text().splitlines()]
    cases = {r["case"]: r for r in rows if r["part"] == "parity"}
    assert set(cases) == {"t1.0", "t0.7_prefix", "after_push", "stale_weights"}
    assert cases["after_push"]["mean"] < 1e-4 < cases["stale_weights"]["mean"]


@pytest.mark.slow
def test_the_server_benchmark_runs_against_the_stand_in(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks/bench_server_gpu.py"), "--out",
                           str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--modes", "hf,server,server_async",
                           "--smoke", "--port", _free_port()], capture_output=True, text=True, timeout=600, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "out/results.jsonl").read_text().splitlines()]
    modes = {r["mode"]: r for r in rows if r["part"] == "mode"}
    assert set(modes) == {"hf", "server", "server_async"} and all(
        r["rc"] == 0 and r["steps"] == 4 for r in modes.values()
    )
    assert modes["server_async"]["staleness_max"] == 1 and len(modes["hf"]["training_times"]) == 4
    assert {r["mode"] for r in rows if r["part"] == "ratio"} == {"server", "server_async"}

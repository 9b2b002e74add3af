# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""benchmarks/recipe_smoke_gpu.py without a GPU: selection, table fields, skips; its --cpu-check runs by hand.

The full `--cpu-check` (a real `llamafactory-cli train` of 1 step, then a resume) takes minutes on 2 cores, so the
suite runs the parts that decide the table: combination names, the log readers and the vLLM/DeepSpeed skip rows.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest


SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "recipe_smoke_gpu.py"


@pytest.fixture(scope="module")
def smoke():
    spec = importlib.util.spec_from_file_location("recipe_smoke_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_default_selection_is_every_engine_combination_of_the_recipes(smoke):
    names = smoke.combos(None, cpu_check=False)
    assert len(names) == 20 and "plain-hf-full" not in names
    assert {n.split("-")[0] for n in names} == {"z2", "z3", "z3off", "fsdp", "fsdp2"}
    assert smoke.combos("z3-*,fsdp-hf-full", cpu_check=False) == [
        "z3-hf-full",
        "z3-hf-lora",
        "z3-vllm-full",
        "z3-vllm-lora",
        "fsdp-hf-full",
    ]
    assert smoke.combos(None, cpu_check=True) == ["plain-hf-full"]
    with pytest.raises(SystemExit, match="matches no combination"):
        smoke.combos("z4-*", cpu_check=False)


def test_list_option():
    out = subprocess.run([sys.executable, str(SCRIPT), "--out", "/nonexistent", "--list", "--only", "*-vllm-lora"],
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert out == [
        "z2-vllm-lora",
        "z3-vllm-lora",
        "z3off-vllm-lora",
        "fsdp-vllm-lora",
        "fsdp2-vllm-lora",
        "plain-vllm-lora",
    ]


def test_log_readers(smoke, tmp_path):
    rows = [
        {"current_steps": 1, "time/step_rollout_total": 3.0, "time/training": 1.0, "memory/peak_gib": 2.5},
        {"current_steps": 2, "time/step_rollout_total": 5.0, "time/training": 1.0, "perf/peak_gpu_memory_gib": 3.0},
    ]
    (tmp_path / "trainer_log.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    assert smoke.read_log(tmp_path) == rows
    assert smoke.step_time(rows, 2) == 5.0 and smoke.peak_gib(rows) == 3.0
    assert smoke.step_time([{"current_steps": 2, "elapsed_time": "0:01:40"}], 2) == 50.0
    log = tmp_path / "train.log"
    log.write_text("loading\nUserWarning: something\nRuntimeError: Expected a 'cuda' device type\nTraceback\n")
    assert smoke.first_error(log) == "RuntimeError: Expected a 'cuda' device type"
    # what torchrun printed on the H200 (the table's error column read `\x1b[A[rank0]: Traceback (most recent ...`)
    log.write_text(
        "\x1b[A[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/x/launcher.py", line 185, in <module>\n'
        "[rank0]:     raise CheckpointError(\n"
        "[rank0]: torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: Recomputed values differ\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    )
    assert (
        smoke.first_error(log)
        == "torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: Recomputed values differ"
    )


def test_missing_packages_give_skip_rows(smoke, tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        smoke.importlib.util, "find_spec", lambda name: None if name in ("vllm", "deepspeed") else real(name)
    )
    row = smoke.smoke("fsdp-vllm-full", {}, tmp_path, 2, 10)
    assert row["error"] == "vllm not installed" and row["trained"] == ""
    assert smoke.smoke("z3-hf-lora", {}, tmp_path, 2, 10)["error"] == "deepspeed not installed"

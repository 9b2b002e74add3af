# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Issue 26 items 1 and 3: the trainer delegates to the step pipeline and talks to the rollout only via its session."""

import ast
import time
from pathlib import Path

import llamafactory_agentic.train.arpo.trainer as trainer_module
from llamafactory_agentic.train.arpo.pipeline import StepTimer


TRAINER = Path(trainer_module.__file__)


def test_the_trainer_module_stays_small():
    lines = TRAINER.read_text(encoding="utf-8").count("\n")
    assert lines <= 400, f"train/arpo/trainer.py has {lines} lines; put new step logic in train/arpo/pipeline.py"


def test_the_trainer_never_reaches_into_the_rollout_stack():
    # the engine, the executor, the agent loop and its config are the session's (rollout/session.py)
    tree = ast.parse(TRAINER.read_text(encoding="utf-8"))
    reached = [
        f"line {node.lineno}: .{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in ("engine", "executor", "agent", "config", "rng")
    ]
    reached += [
        f"line {node.lineno}: getattr(..., {node.args[1].value!r})"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "getattr"
        and len(node.args) > 1
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value in ("engine", "config", "backend", "hf_lora_merge", "stats", "rng")
    ]
    assert not reached, reached


def test_the_step_timer_times_and_accumulates_named_stages():
    timer = StepTimer()
    with timer.stage("time/reward"):
        time.sleep(0.01)
    for _ in range(2):
        with timer.stage("training", accumulate=True):
            time.sleep(0.01)
    assert 0.01 <= timer.seconds["time/reward"] < 0.5
    assert timer.seconds["training"] >= 0.02
    assert timer.pop("training") >= 0.02 and timer.pop("training") == 0.0
    assert timer.elapsed() >= timer.seconds["time/reward"]
    try:  # a stage that raises is still timed
        with timer.stage("time/rollout"):
            raise ValueError
    except ValueError:
        pass
    assert "time/rollout" in timer.seconds


def test_the_log_prob_stage_waits_for_its_own_stream_only(monkeypatch):
    """The old-log-prob pass's kernels are charged to `time/advantage_and_logprobs`, not to the first update: the
    stage ends by waiting for the current CUDA stream (not the whole device, where an asynchronous producer may be
    generating); nothing on the CPU. Before: no wait, the first update after each rollout looked 2.4x slower (H200)."""
    import torch

    import llamafactory_agentic.train.arpo.pipeline as pipeline

    waited = []

    class Stream:
        def __init__(self, device):
            self.device = device

        def synchronize(self):
            waited.append(self.device)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", Stream)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: waited.append("device-wide"))
    pipeline.wait_for_stream(torch.device("cpu"))
    assert waited == []
    pipeline.wait_for_stream(torch.device("cuda", 0))
    assert waited == [torch.device("cuda", 0)]
    source = Path(pipeline.__file__).read_text(encoding="utf-8")
    stage = source[source.index('with step.stage("time/advantage_and_logprobs"):') :]
    assert stage.index("wait_for_stream(ctx.accelerator.device)") < stage.index("update.timing")

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

# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Reward-gaming monitor: the recorded comparison runs (tool bonus on and off), planted patterns, and the live
callback writing `warnings` into LLaMA-Factory's `trainer_log.jsonl`."""

import csv
import json
import random
from collections import defaultdict
from pathlib import Path

import pytest

from llamafactory_agentic.guards.gaming import GamingMonitorCallback, scan_log, scan_records
from llamafactory_agentic.rollout.trajectory import ToolCallRecord
from llamafactory_agentic.train.arpo.metrics import repeated_call_rate


RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "compare_algorithms"


def recorded_runs(folder: str) -> dict[tuple[str, int], list[dict]]:
    """Per (algorithm, seed): the training steps of `curves.csv` as trainer_log records (step order)."""
    steps: dict[tuple[str, int], dict[int, dict]] = defaultdict(lambda: defaultdict(dict))
    with open(RESULTS / folder / "curves.csv") as f:
        for row in csv.DictReader(f):
            if row["metric"].startswith("eval_"):
                continue
            record = steps[(row["algorithm"], int(row["seed"]))][int(row["step"])]
            record["current_steps"] = int(row["step"])
            record[row["metric"]] = float(row["value"])
    return {run: [records[s] for s in sorted(records)] for run, records in steps.items()}


def test_seed0_tool_bonus_gaming_is_flagged_and_not_without_the_bonus():
    """The CPU comparison's ARPO seed 0 with the reference's +0.1 tool bonus (its one-hop answers took 2 calls where
    one search is needed, README) raises the tool-call warning; the same seed and cold start without the bonus
    (`cpu_no_tool_bonus_arpo`, identical first steps) raises nothing."""
    with_bonus = recorded_runs("cpu")
    without = recorded_runs("cpu_no_tool_bonus_arpo")
    assert with_bonus[("arpo", 0)][0] == without[("arpo", 0)][0]  # same cold start, same first rollout

    warnings = scan_records(with_bonus[("arpo", 0)], tool_bonus=0.1)
    assert [w.pattern for w in warnings] == ["tool_calls_per_correct"]
    w = warnings[0]
    assert w.metric == "rollout/tool_calls_per_traj / reward/accuracy"
    assert w.window.startswith("rollout records 1-10 (steps 1-10) vs ")
    assert "agentic_reward_tool_bonus is 0.1" in w.key
    assert "tool calls per trajectory" in w.evidence and "(flat)" in w.evidence
    assert w.step >= 20  # two full windows first

    assert scan_records(without[("arpo", 0)], tool_bonus=0.0) == []


def test_no_false_tool_call_warning_without_the_bonus_on_every_recorded_run():
    """Across all 15 recorded runs without the bonus (3 CPU ARPO seeds, 12 GPU runs of four algorithms) the
    tool-call pattern never fires; with the bonus it fires on ARPO seeds 0 and 1 on the CPU (both documented as
    gaming it) and on most CPU runs."""
    for folder in ("cpu_no_tool_bonus_arpo", "gpu_no_tool_bonus"):
        for run, records in recorded_runs(folder).items():
            patterns = [w.pattern for w in scan_records(records)]
            assert "tool_calls_per_correct" not in patterns, (folder, run)
    flagged = {run for run, records in recorded_runs("cpu").items()
               if any(w.pattern == "tool_calls_per_correct" for w in scan_records(records))}  # fmt: skip
    assert {("arpo", 0), ("arpo", 1)} <= flagged
    assert len(flagged) >= 6  # of 12 CPU runs with the bonus (8 when this test was written)


def _series(n, rng, **specs):
    """`n` records; each spec is (start, end, noise): a linear ramp with uniform noise."""
    records = []
    for i in range(n):
        record = {"current_steps": i + 1}
        for key, (start, end, noise) in specs.items():
            record[key.replace("__", "/")] = start + (end - start) * i / (n - 1) + rng.uniform(-noise, noise)
        records.append(record)
    return records


BASE = dict(reward__accuracy=(0.6, 0.6, 0.1), reward__mean=(0.6, 0.6, 0.1), reward__format_ok_rate=(0.95, 0.95, 0.03),
            rollout__tool_calls_per_traj=(1.0, 1.0, 0.2), rollout__response_length=(200, 200, 20),
            reward__identical_groups=(0.3, 0.3, 0.1), rollout__repeated_tool_calls_rate=(0.02, 0.02, 0.02))  # fmt: skip


@pytest.mark.parametrize(
    "change, pattern, key",
    [
        (dict(rollout__response_length=(200, 320, 20)), "length_flat_reward", "arpo_max_response_length"),
        (dict(reward__accuracy=(0.02, 0.02, 0.02), reward__mean=(0.3, 0.3, 0.05)), "format_only_reward",
         "agentic_reward"),
        (dict(reward__identical_groups=(0.3, 0.7, 0.1)), "identical_groups_rising", "rl_dynamic_sampling"),
        (dict(rollout__repeated_tool_calls_rate=(0.02, 0.3, 0.03)), "repeated_tool_calls", "agentic_max_tool_calls"),
        (dict(rollout__tool_calls_per_traj=(1.0, 1.8, 0.2)), "tool_calls_per_correct", "agentic_reward_tool_bonus"),
    ],
)  # fmt: skip
def test_planted_patterns_raise_their_warning_once(change, pattern, key):
    records = _series(30, random.Random(0), **{**BASE, **change})
    warnings = scan_records(records)
    assert [w.pattern for w in warnings] == [pattern]
    assert key in warnings[0].message() and warnings[0].metric in warnings[0].message()


def test_flat_run_and_rising_accuracy_raise_nothing():
    assert scan_records(_series(30, random.Random(1), **BASE)) == []
    # more calls that buy more correct answers are learning, not gaming
    learning = dict(BASE, rollout__tool_calls_per_traj=(0.6, 1.2, 0.1), reward__accuracy=(0.4, 0.8, 0.05),
                    reward__mean=(0.4, 0.8, 0.05))  # fmt: skip
    assert scan_records(_series(30, random.Random(2), **learning)) == []
    # shorter than two windows: nothing to compare yet
    assert scan_records(_series(19, random.Random(3), **dict(BASE, rollout__response_length=(100, 900, 1)))) == []


def test_repeated_call_rate_counts_repeats_within_a_trajectory():
    def calls(*pairs):
        return [ToolCallRecord(tool, text, 0, "ok", 0.1, False, 3) for tool, text in pairs]

    class Record:  # the one field repeated_call_rate reads of a ScoredTrajectory
        def __init__(self, tool_calls):
            self.tool_calls = tool_calls

    records = [
        Record(calls(("search", "capital of x"), ("search", "capital of x"), ("python", "print(1)"))),
        Record(calls(("search", "capital of x"), ("python", "capital of x"), ("search", ""))),  # other tool, empty
    ]
    assert repeated_call_rate(records) == pytest.approx(1 / 5)
    assert repeated_call_rate([Record([])]) == 0.0


def test_live_callback_writes_warnings_to_trainer_log(tmp_path):
    """The monitor before LLaMA-Factory's LogCallback (extended by the plugin) in transformers' callback handler, fed
    the recorded seed-0 run step by step: `trainer_log.jsonl` carries `warnings` in the record that raised it only."""
    from llamafactory.train.callbacks import LogCallback
    from transformers import TrainerControl, TrainerState, TrainingArguments
    from transformers.trainer_callback import CallbackHandler

    from llamafactory_agentic.train.log_callback import extend_log_callback

    log_callback = LogCallback()
    callbacks = [GamingMonitorCallback(tool_bonus=0.1), log_callback]
    extend_log_callback(callbacks)
    handler = CallbackHandler(callbacks, None, None, None, None)
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    records = recorded_runs("cpu")[("arpo", 0)]
    state, control = TrainerState(max_steps=len(records)), TrainerControl()
    handler.on_train_begin(args, state, control)
    for record in records:
        state.global_step = record["current_steps"]
        state.log_history.append({"loss": 0.1, **{k: v for k, v in record.items() if k != "current_steps"}})
        handler.on_log(args, state, control, logs=dict(state.log_history[-1]))
    handler.on_train_end(args, state, control)

    written = [json.loads(line) for line in (tmp_path / "trainer_log.jsonl").read_text().splitlines()]
    assert len(written) == len(records)
    flagged = [i for i, row in enumerate(written) if row.get("warnings")]
    assert len(flagged) == 1
    assert written[flagged[0]]["warnings"][0].startswith("reward gaming? [tool_calls_per_correct]")
    assert written[flagged[0]]["rollout/tool_calls_per_traj"] == records[flagged[0]]["rollout/tool_calls_per_traj"]
    # the offline scan of the written log finds the same warning
    assert [w.pattern for w in scan_log(tmp_path / "trainer_log.jsonl")] == ["tool_calls_per_correct"]
    # LLaMA-Board's monitor lists it under the RL plot, with its step (webui/monitor.py, wired in the browser test)
    from llamafactory_agentic.webui.monitor import gaming_warnings, read_jsonl

    shown = gaming_warnings(read_jsonl(str(tmp_path / "trainer_log.jsonl")))
    step = written[flagged[0]]["current_steps"]
    assert shown.startswith("⚠ **Run monitor** (reward gaming, learning signal): 1 warning(s)"), shown
    assert f"- step {step}: reward gaming? [tool_calls_per_correct]" in shown, shown
    # the numbers are kept beside the message, so a page in Chinese says it again in Chinese (issue 35)
    assert written[flagged[0]]["warning_details"][0]["pattern"] == "tool_calls_per_correct"
    chinese = gaming_warnings(read_jsonl(str(tmp_path / "trainer_log.jsonl")), "zh")
    assert f"第 {step} 步：疑似奖励投机 [tool_calls_per_correct]" in chinese and "reward gaming?" not in chinese, (
        chinese
    )
    assert gaming_warnings(records) == ""  # the recorded run's own records carry no warnings


@pytest.mark.slow
def test_gaming_scan_command(tmp_path):
    """`llamafactory-agentic gaming-scan` on written logs: exit 1 and the warning for the gamed run, 0 for the other."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    for name, folder in (("bonus", "cpu"), ("no_bonus", "cpu_no_tool_bonus_arpo")):
        rows = recorded_runs(folder)[("arpo", 0)]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(repo))
    cmd = [sys.executable, "-m", "llamafactory_agentic.cli", "gaming-scan"]
    gamed = subprocess.run([*cmd, str(tmp_path / "bonus.jsonl")], capture_output=True, text=True, env=env, cwd=repo)
    assert gamed.returncode == 1 and "[tool_calls_per_correct]" in gamed.stdout
    clean = subprocess.run([*cmd, str(tmp_path / "no_bonus.jsonl")], capture_output=True, text=True, env=env, cwd=repo)
    assert clean.returncode == 0 and "0 warning(s)" in clean.stdout


def _rollout_record(step: int, identical: float, grad_norm: float = 0.5, **extra) -> dict:
    return {"current_steps": step, "loss": 0.0, "grad_norm": grad_norm, "reward/accuracy": 0.0, "reward/mean": -1.0,
            "reward/identical_groups": identical, **extra}  # fmt: skip


def test_no_learning_signal_when_every_group_is_identical_from_the_start():
    """A run whose first two rollouts have every group's rewards equal (the random-model RL run of issue 35: reward
    -1 everywhere, loss and grad norm 0) gets the `no_learning_signal` warning at the second rollout, with the cause
    and the fix; one rollout is not enough, and a group that differs in either rollout keeps it quiet."""
    records = [_rollout_record(1, 1.0, 0.0), _rollout_record(2, 1.0, 0.0), _rollout_record(3, 1.0, 0.0)]
    warnings = scan_records(records)
    assert [(w.pattern, w.step) for w in warnings] == [("no_learning_signal", 2)]
    message = warnings[0].message()
    assert message.startswith("no learning signal [no_learning_signal]"), message
    assert "every group's rewards were identical in each of the first 2 rollouts (reward mean -1, -1)" in message
    assert "stage: agentic_sft" in message and "rl_dynamic_sampling" in message
    assert scan_records(records[:1]) == []
    assert scan_records([_rollout_record(1, 1.0), _rollout_record(2, 0.875)]) == []
    assert scan_records([_rollout_record(1, 0.5), _rollout_record(2, 1.0), _rollout_record(3, 1.0)]) == []


def test_no_learning_signal_respects_dynamic_sampling_and_reads_grad_norm():
    """With dynamic sampling the update may hold groups that differ although every rolled-out group of the first
    batch was equal: no warning then. A zero gradient at the first two optimiser steps (an update record without a
    rollout counts) warns on its own, naming the steps."""
    sampled = [_rollout_record(s, 1.0, **{"dynamic_sampling/identical_groups_in_update": 0.25}) for s in (1, 2)]
    assert scan_records(sampled) == []
    filled = [_rollout_record(s, 1.0, **{"dynamic_sampling/identical_groups_in_update": 1.0}) for s in (1, 2)]
    assert [w.pattern for w in scan_records(filled)] == ["no_learning_signal"]

    zero_grad = [_rollout_record(1, 0.5, 0.0), {"current_steps": 2, "loss": 0.0, "grad_norm": 0.0}]
    (warning,) = scan_records(zero_grad)
    assert warning.evidence == "grad_norm was 0 at each of the first 2 optimiser steps"
    assert warning.window == "optimiser steps 1-2" and warning.step == 2
    assert scan_records([_rollout_record(1, 0.5, 0.0), {"current_steps": 2, "grad_norm": 0.01}]) == []


def test_no_false_no_signal_warning_on_the_recorded_runs():
    """None of the recorded comparison runs (CPU and GPU, bonus on and off) starts without a learning signal."""
    for folder in ("cpu", "cpu_no_tool_bonus_arpo", "gpu", "gpu_no_tool_bonus"):
        for run, records in recorded_runs(folder).items():
            assert "no_learning_signal" not in [w.pattern for w in scan_records(records)], (folder, run)

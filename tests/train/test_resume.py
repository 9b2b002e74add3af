# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Resuming `stage: arpo` (issue 24): an interrupted checkpoint is skipped, and no step is logged twice.

`test_resume_skips_the_interrupted_checkpoint_and_logs_each_step_once` runs the real `llamafactory-cli train` twice
on the tiny model (CPU, real python and search tools, SQLite cache): 3 steps with a checkpoint after each, then the
last checkpoint is made to look like a save killed before `trainer_state.json` (the file Transformers writes last),
and a second run with `max_steps: 4` auto-resumes. The unit test drives LLaMA-Factory's own `LogCallback` (with the
plugin's extension) as a resumed Trainer would.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest


REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_resumed_run_drops_the_log_records_of_the_steps_it_repeats(tmp_path):
    """Before: LogCallback appended to trainer_log.jsonl, so after resuming from checkpoint-2 of a run that had
    logged step 3, step 3 appeared twice (and the rollout of global step 2 twice in rollouts.jsonl)."""
    from llamafactory.train.callbacks import LogCallback
    from transformers import TrainerControl, TrainerState

    from llamafactory_agentic.train.log_callback import extend_log_callback

    out = tmp_path / "out"
    out.mkdir()
    log = [{"current_steps": s, "total_steps": 3, "loss": 1.0 / s} for s in (1, 2, 3)]
    log.insert(2, {"current_steps": 2, "total_steps": 3, "eval_reward": 0.5})  # evaluation at step 2 is kept
    (out / "trainer_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log) + '{"current_st')  # cut line
    (out / "rollouts.jsonl").write_text("".join(json.dumps({"global_step": s, "group": 0}) + "\n" for s in (0, 1, 2)))

    callback = LogCallback()
    extend_log_callback([callback])
    args = SimpleNamespace(should_save=True, output_dir=str(out))
    state = TrainerState(global_step=2, max_steps=4)  # as Trainer sets it from checkpoint-2 before on_train_begin
    callback.on_train_begin(args, state, TrainerControl())
    callback.on_train_end(args, state, TrainerControl())

    assert [(r["current_steps"], "loss" in r) for r in _lines(out / "trainer_log.jsonl")] == [
        (1, True),
        (2, True),
        (2, False),
    ]
    assert [r["global_step"] for r in _lines(out / "rollouts.jsonl")] == [0, 1]

    # a fresh start (step 0) in a folder whose earlier run stopped before its first checkpoint starts the files anew
    callback.on_train_begin(args, TrainerState(global_step=0, max_steps=4), TrainerControl())
    callback.on_train_end(args, state, TrainerControl())
    assert (out / "trainer_log.jsonl").read_text() == "" and (out / "rollouts.jsonl").read_text() == ""


@pytest.mark.slow
def test_resume_skips_the_interrupted_checkpoint_and_logs_each_step_once(tmp_path, tiny_model_dir):
    """Before: the second run picked checkpoint-3 and failed after the model loaded with FileNotFoundError
    (trainer_state.json); resuming from a complete checkpoint logged the repeated steps twice."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "dataset_info.json").write_text(json.dumps({"rl": {"file_name": "rl.jsonl", "formatting": "arpo_rl"}}))
    rows = [
        {"prompt": [{"role": "user", "content": f"What is {i} + 2?"}], "reward_model": {"ground_truth": str(i + 2)}}
        for i in range(4)
    ]
    (data / "rl.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "out"
    base = [
        str(BIN / "llamafactory-cli"),
        "train",
        str(REPO / "recipes/tiny/arpo_cpu.yaml"),
        f"model_name_or_path={tiny_model_dir}",
        f"dataset_dir={data}",
        "dataset=rl",
        "eval_dataset=null",
        "eval_strategy='no'",  # YAML reads a bare no as false
        f"output_dir={out}",
        f"agentic_cache_path={tmp_path / 'tool_cache.sqlite'}",
        "agentic_search_backend=replay",
        "arpo_rollout_batch_size=1",  # 1 prompt x M = 4 trajectories = one update: one rollout per step
        "arpo_max_response_length=24",
        "save_steps=1",
        "plot_loss=false",
    ]
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)

    first = subprocess.run(base + ["max_steps=3"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-5000:]
    assert [r["current_steps"] for r in _lines(out / "trainer_log.jsonl") if "loss" in r] == [1, 2, 3]
    assert [r["global_step"] for r in _lines(out / "rollouts.jsonl")] == [0, 1, 2]
    # the save of checkpoint-3 was killed before its last file
    (out / "checkpoint-3" / "trainer_state.json").unlink()
    assert (out / "checkpoint-3" / "rollout_rng_state_0.json").is_file()  # what the plugin saves came before

    second = subprocess.run(
        base + ["max_steps=4", "overwrite_output_dir=false"], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    output = second.stdout + second.stderr
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-5000:]
    assert f"Skipping checkpoint {out / 'checkpoint-3'} for auto-resume: it has no trainer_state.json" in output
    assert f"Resuming training from {out / 'checkpoint-2'}." in output
    assert json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())["global_step"] == 4
    assert [r["current_steps"] for r in _lines(out / "trainer_log.jsonl") if "loss" in r] == [1, 2, 3, 4]
    assert [r["global_step"] for r in _lines(out / "rollouts.jsonl")] == [0, 1, 2, 3]


def test_resume_from_checkpoint_true_takes_the_last_complete_checkpoint(tmp_path):
    """`resume_from_checkpoint: true` is resolved by run_arpo before the model loads; Transformers' Trainer.train
    would take the last folder by name (checkpoint-4 here, whose save was interrupted)."""
    from transformers.trainer_utils import get_last_checkpoint

    from llamafactory_agentic.train.checkpoints import resolve_resume_checkpoint

    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (tmp_path / "checkpoint-4").mkdir()
    assert get_last_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-4")
    assert resolve_resume_checkpoint(True, str(tmp_path)) == str(tmp_path / "checkpoint-2")
    assert resolve_resume_checkpoint(None, str(tmp_path)) is None
    assert resolve_resume_checkpoint(str(tmp_path / "checkpoint-2"), str(tmp_path)) == str(tmp_path / "checkpoint-2")
    (tmp_path / "checkpoint-2" / "trainer_state.json").unlink()
    with pytest.raises(ValueError, match=r"resume_from_checkpoint: true, but .* holds no complete checkpoint\."):
        resolve_resume_checkpoint(True, str(tmp_path))
    with pytest.raises(ValueError, match=r"Delete it and remove resume_from_checkpoint to start afresh\.$"):
        resolve_resume_checkpoint(str(tmp_path / "checkpoint-4"), str(tmp_path))


def test_an_rl_run_refuses_a_checkpoint_of_another_stage(tmp_path):
    # issue 34 medium 12: the SFT checkpoint's optimiser and scheduler were loaded silently (learning rate 0)
    from llamafactory_agentic.train.checkpoints import check_rl_resume, rl_checkpoint_problem

    sft = tmp_path / "sft" / "checkpoint-2"
    sft.mkdir(parents=True)
    history = [{"loss": 1.0, "grad_norm": 0.5, "learning_rate": 0.0, "epoch": 1.0, "step": 2}]
    (sft / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": history}))
    with pytest.raises(ValueError, match=r"checkpoint .*checkpoint-2 is not an arpo/aepo checkpoint") as info:
        check_rl_resume(str(sft), "arpo")
    assert f"model_name_or_path: {sft}" in str(info.value) and "learning rate 0" in str(info.value)
    # an RL checkpoint: the rollout's RNG file, or (older versions) rollout metrics in the log history
    rl = tmp_path / "arpo" / "checkpoint-2"
    rl.mkdir(parents=True)
    (rl / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": history}))
    (rl / "rollout_rng_state_0.json").write_text("{}")
    assert rl_checkpoint_problem(str(rl), "arpo") is None
    (rl / "rollout_rng_state_0.json").unlink()
    rl_history = [{**history[0], "rollout/trajectories": 8}]
    (rl / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": rl_history}))
    assert rl_checkpoint_problem(str(rl), "arpo") is None
    check_rl_resume(None, "arpo")  # no checkpoint: nothing to check


@pytest.mark.slow
def test_arpo_resumed_from_an_sft_checkpoint_stops_before_loading(tmp_path, tiny_model_dir):
    """Before: `llamafactory-cli train` ARPO with resume_from_checkpoint = an SFT checkpoint loaded its optimiser
    and scheduler (an SFT schedule ending at learning rate 0) and trained, saying nothing. Now it stops at once."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)
    sft_out = tmp_path / "sft"
    sft = subprocess.run(
        [str(BIN / "llamafactory-cli"), "train", str(REPO / "recipes/tiny/agentic_sft_cpu.yaml"),
         f"model_name_or_path={tiny_model_dir}", f"dataset_dir={REPO / 'data'}", f"output_dir={sft_out}",
         "max_steps=2", "save_steps=2", "plot_loss=false", "max_samples=4", "cutoff_len=256"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert sft.returncode == 0, sft.stdout[-3000:] + sft.stderr[-5000:]
    checkpoint = sft_out / "checkpoint-2"
    assert (checkpoint / "optimizer.pt").is_file()
    data = tmp_path / "data"
    data.mkdir()
    (data / "dataset_info.json").write_text(json.dumps({"rl": {"file_name": "rl.jsonl", "formatting": "arpo_rl"}}))
    row = {"prompt": [{"role": "user", "content": "What is 1 + 2?"}], "reward_model": {"ground_truth": "3"}}
    (data / "rl.jsonl").write_text(json.dumps(row) + "\n")
    arpo = subprocess.run(
        [str(BIN / "llamafactory-cli"), "train", str(REPO / "recipes/tiny/arpo_cpu.yaml"),
         f"model_name_or_path={tiny_model_dir}", f"dataset_dir={data}", "dataset=rl", "eval_dataset=null",
         "eval_strategy='no'", f"output_dir={tmp_path / 'arpo'}", f"resume_from_checkpoint={checkpoint}",
         f"agentic_cache_path={tmp_path / 'tool_cache.sqlite'}", "agentic_search_backend=replay", "max_steps=3"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = arpo.stdout + arpo.stderr
    assert arpo.returncode != 0, output[-3000:]
    assert f"checkpoint {checkpoint} is not an arpo/aepo checkpoint" in output, output[-3000:]
    assert not (tmp_path / "arpo" / "checkpoint-3").exists()

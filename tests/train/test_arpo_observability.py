# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""What LLaMA-Board reads from an ARPO run: the RL log line of every step, the rollout progress file and the round
entropies in rollouts.jsonl.

The trainer runs the real agent loop (`AgenticRollout`, branching, budget fill) on the scripted engine of the rollout
tests (known round entropies, tool calls in rounds 0 and 1) and the recording executor; LLaMA-Factory's own
`LogCallback` runs in LLaMA-Board mode (LLAMABOARD_ENABLED=1), writing the running log LLaMA-Board shows.
"""

import json
import logging
import os
import signal

import pytest


pytest.importorskip("trl")

from rollout.helpers import RecordingExecutor, ScriptedEngine  # noqa: E402

from llamafactory_agentic.rollout import AgenticRollout  # noqa: E402
from llamafactory_agentic.rollout.progress import ROLLOUT_PROGRESS_NAME  # noqa: E402
from llamafactory_agentic.train.arpo.config import default_rollout_config  # noqa: E402
from llamafactory_agentic.train.log_callback import extend_log_callback  # noqa: E402
from llamafactory_agentic.webui.rollouts import delta_h, render_group  # noqa: E402

from ._helpers import agentic_args  # noqa: E402
from .test_arpo_trainer import M, make_trainer  # noqa: E402


H0, DH = 1.0, 0.5


def plan(r):
    if r < 2:
        return f"<think> step </think> <search> query {r} </search>", "stop", H0 if r == 0 else H0 + DH
    return "<answer> \\boxed{3} </answer>", "eos", H0 + DH


class StatusReadingEngine(ScriptedEngine):
    """The scripted engine, reading the rollout progress file each time it is asked to generate a round."""

    def __init__(self, tokenizer, status_path):
        super().__init__(tokenizer, plan, tokenizer.convert_tokens_to_ids("<|im_end|>"))
        self.status_path, self.seen = status_path, []

    def generate(self, requests, sampling):
        if os.path.exists(self.status_path):
            with open(self.status_path) as f:
                self.seen.append(json.load(f))
        return super().generate(requests, sampling)


def build(tmp_path, model_dir, tokenizer, **trainer_kwargs):
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = default_rollout_config(
        eos_token_id=eos,
        group_size=M,
        initial_rollouts=2,
        beam_size=2,
        branch_rule="deterministic",  # alpha + beta * dH > tau always: branch at every decision while room is left
        branch_alpha=0.5,
        branch_tau=0.1,
        max_tool_calls=3,
        max_response_length=256,
    )
    engine = StatusReadingEngine(tokenizer, str(tmp_path / ROLLOUT_PROGRESS_NAME))
    rollout = AgenticRollout(engine, RecordingExecutor("42"), tokenizer, config)
    args = agentic_args("arpo", arpo_rollout_log_ratio=1.0)
    return make_trainer(tmp_path, model_dir, tokenizer, args, rollout=rollout, **trainer_kwargs), engine


@pytest.fixture()
def llamaboard_log_callback(tmp_path, monkeypatch):
    """LLaMA-Factory's LogCallback as LLaMA-Board's training process builds it, extended by the workflow."""
    from llamafactory.train.callbacks import LogCallback

    monkeypatch.setenv("LLAMABOARD_ENABLED", "1")
    monkeypatch.setenv("LLAMABOARD_WORKDIR", str(tmp_path))
    previous = signal.getsignal(signal.SIGABRT)
    callback = LogCallback()
    extend_log_callback([callback])
    yield callback
    for name in ("llamafactory", "transformers"):  # transformers' remove_handler asserts the opposite of its job
        logging.getLogger(name).removeHandler(callback.logger_handler)
    callback.logger_handler.close()
    signal.signal(signal.SIGABRT, previous)


@pytest.mark.slow
def test_rl_line_every_step_and_why_reward_was_missing(tmp_path, tiny_model_dir, tiny_tokenizer,
                                                       llamaboard_log_callback):  # fmt: skip
    # 2 prompts x M = 8 trajectories per rollout, 2 x 2 per update: one rollout feeds steps 1 and 2
    trainer, _ = build(tmp_path, tiny_model_dir, tiny_tokenizer, batch=2, accum=2, max_steps=2)
    trainer.add_callback(llamaboard_log_callback)
    trainer.train()
    llamaboard_log_callback.logger_handler.close()  # flush the running log
    lines = (tmp_path / "running_log.txt").read_text().splitlines()
    loss_lines = [line for line in lines if "'loss'" in line]
    rl_lines = [line for line in lines if "'tool_calls'" in line]
    assert len(loss_lines) == 2 and len(rl_lines) == 2
    # the cause: the rollout's metrics exist only in step 1's record (TRL logs a metric in the window it was
    # appended in), and LogCallback prints `reward` only when it is truthy
    history = [r for r in trainer.state.log_history if "loss" in r]
    assert "reward" in history[0] and "reward" not in history[1]
    assert "'reward'" not in loss_lines[1]
    # the RL line carries the rollout's values on every step, marked on the steps that reuse them
    for line in rl_lines:
        assert all(f"'{key}'" in line for key in ("reward", "accuracy", "tool_calls", "branches", "entropy"))
        assert "'identical_groups'" in line  # issue 24: the README's lead metric (share of equal-reward groups)
        assert "'clip_frac'" in line and "kl'" in line
    assert "'rollout_of_step'" not in rl_lines[0] and "'rollout_of_step': 1" in rl_lines[1]
    assert rl_lines[0].split("'reward': ")[1].split(",")[0] == rl_lines[1].split("'reward': ")[1].split(",")[0]


@pytest.mark.slow
def test_progress_file_and_round_entropies_for_the_viewer(tmp_path, tiny_model_dir, tiny_tokenizer):
    trainer, engine = build(tmp_path, tiny_model_dir, tiny_tokenizer, batch=4, accum=2, max_steps=1)
    trainer.train()

    # the progress file, as LLaMA-Board reads it between rounds: round, active trajectories, new tokens
    first, second = engine.seen[0], engine.seen[1]
    assert first["rollout"] == 1 and first["round"] == 0 and first["done"] is False
    assert second["round"] == 1 and second["active"] == 4 and second["new_tokens"] > 0
    with open(tmp_path / ROLLOUT_PROGRESS_NAME) as f:
        final = json.load(f)
    assert final["done"] is True and final["phase"] == "training" and final["round"] >= 3
    assert final["total_tokens"] == sum(s["new_tokens"] for s in engine.seen[1:]) + final["new_tokens"]

    # rollouts.jsonl carries each lineage's round entropies: the viewer's dH at each branch decision
    groups = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    members = groups[0]["trajectories"]
    source = members[0]
    assert source["round_entropies"][:2] == pytest.approx([H0, H0 + DH]) and source["entropy_base"] == H0
    assert delta_h(source, 1) == pytest.approx(0.0) and delta_h(source, 2) == pytest.approx(DH)
    # issue 24: the progress line and the viewer count the same way, by the step the rollout feeds
    from llamafactory_agentic.webui.monitor import progress_line
    from llamafactory_agentic.webui.rollouts import rollout_index

    assert final["global_step"] == groups[0]["global_step"] == 0
    assert progress_line(str(tmp_path)).startswith("Last: Rollout of step 1,")
    assert rollout_index(str(tmp_path / "rollouts.jsonl")).choices()[0][0].startswith("step 1 · ")
    branches = [m for m in members if m["parent"] is not None]
    assert branches and all(m["entropy_base"] == H0 for m in branches)
    assert f"ΔH +{DH:.3f}" in render_group(groups[0])

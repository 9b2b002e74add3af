# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Issue 24: a reward of 1e308 or a non-finite gradient stops the run with a clear error, never a NaN model.

The trainer is the real `ArpoTrainer` on the tiny model with the hand-built rollout of the other trainer tests (a
scripted group of four trajectories, see `_helpers.ScriptedRollout`).
"""

import pytest
import torch

from llamafactory_agentic.rewards import RewardFunction, RewardResult, get_reward_function  # noqa: E402
from llamafactory_agentic.train.arpo import batch  # noqa: E402
from llamafactory_agentic.train.arpo.config import default_loss_config  # noqa: E402

from ._helpers import agentic_args, record  # noqa: E402
from .test_arpo_trainer import make_trainer, trl_generation_batch  # noqa: E402


def huge(model_text, ground_truth, metadata):
    return 1e308


class HugeResult(RewardFunction):
    name = "huge_result"

    def compute(self, model_text, ground_truth, metadata=None):
        return RewardResult(score=-1e308, format_ok=True)


@pytest.mark.parametrize(
    ("reward_fn", "name"), [(huge, "huge"), (HugeResult(), "huge_result")], ids=["function", "RewardFunction"]
)
def test_a_reward_of_1e308_stops_the_step_naming_the_reward(tmp_path, tiny_model_dir, tiny_tokenizer, reward_fn, name):
    """Old code: no error; the float32 rewards held inf and every advantage of the group was NaN."""
    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, agentic_args("arpo"), reward_fn=reward_fn)
    with pytest.raises(ValueError, match=rf"reward function {name} returned -?1e\+308, which is inf in float32"):
        trainer._generate_and_score_completions(trl_generation_batch(tiny_tokenizer, 2))


def test_advantages_are_checked_in_float32():
    """The last line of defence in `batch.token_advantages`: old code returned NaN advantages without a word."""
    records = [record(0, 0, 1.0), record(0, 1, 1e308), record(0, 2, 0.0)]
    with pytest.raises(FloatingPointError, match=r"reward function mymod:fn: the reward of trajectory \(group 0, "):
        batch.token_advantages(records, default_loss_config(), "mymod:fn")
    advs, _ = batch.token_advantages([record(0, 0, 3e38), record(0, 1, -3e38)], default_loss_config(), "f1")
    assert all(abs(a) < 10 for row in advs for a in row)  # large but float32-finite rewards normalise fine


def test_a_non_finite_gradient_stops_the_run_before_the_update(tmp_path, tiny_model_dir, tiny_tokenizer):
    """A NaN loss (here forced by scaling the real loss) gives a NaN grad_norm: the run stops before the optimiser
    step, so the weights stay as they were. Old code: training went on (Transformers logs a filtered loss) and every
    weight became NaN."""
    trainer = make_trainer(
        tmp_path, tiny_model_dir, tiny_tokenizer, agentic_args("arpo"), reward_fn=get_reward_function("f1")
    )
    before = [p.detach().clone() for p in trainer.model.parameters()]
    compute_loss = trainer.compute_loss

    def nan_loss(*args, **kwargs):
        return compute_loss(*args, **kwargs) * float("nan")

    trainer.compute_loss = nan_loss
    with pytest.raises(FloatingPointError, match=r"grad_norm is nan at optimiser step 1: .*reward function f1"):
        trainer.train()
    after = list(trainer.model.parameters())
    assert all(torch.isfinite(p).all() for p in after)
    assert all(torch.equal(a, b) for a, b in zip(before, after))

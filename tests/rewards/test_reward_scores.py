# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Issue 24: reward scores must be finite in float32; a reward's name, import and signature are checked up front."""

import sys

import pytest

from llamafactory_agentic.rewards import RewardResult, get_reward_function
from llamafactory_agentic.rewards.registry import CallableReward


@pytest.mark.parametrize(
    "value",
    [1e308, -1e308, 3.5e38, {"score": 1e308}, RewardResult(score=-1e300), 10**400],
    ids=["1e308", "-1e308", "just-past-float32", "dict", "RewardResult", "huge-int"],
)
def test_a_score_that_is_inf_in_float32_is_refused_naming_the_function(value):
    """Old code: 1e308 passed `math.isfinite` and went on to become inf in the float32 advantages."""
    reward = CallableReward(lambda text, gt, meta: value, "mymod:huge")
    with pytest.raises(ValueError, match=r"reward function mymod:huge returned .*inf in float32"):
        reward.compute("text", "gt", {})


def test_scores_within_float32_pass_and_other_bad_values_keep_their_type_error():
    import numpy

    for value, expected in ((3.4e38, 3.4e38), (-1, -1.0), (numpy.float32(0.5), 0.5), (numpy.int64(1), 1.0)):
        assert CallableReward(lambda t, g, m, v=value: v, "ok").compute("t", "g", {}).score == expected
    for value in (float("nan"), float("inf"), None, [1.0], True):
        with pytest.raises(TypeError, match="reward function bad returned a non-finite or non-numeric score"):
            CallableReward(lambda t, g, m, v=value: v, "bad").compute("t", "g", {})


def test_a_tool_bonus_that_overflows_float32_is_refused():
    """Old code: 1e308 accepted (a correct answer then scored 1e308 + 1); "high" and None raised float()'s own error."""
    for bad in (1e308, "high", None, True):
        with pytest.raises(ValueError, match="agentic_reward_tool_bonus must be a finite number >= 0"):
            get_reward_function("f1", tool_bonus=bad)


@pytest.fixture()
def reward_module(tmp_path, monkeypatch):
    (tmp_path / "signature_reward_mod.py").write_text(
        "def good(model_text, ground_truth, metadata):\n    return 1.0\n\n\n"
        "def flexible(*args, **kwargs):\n    return 1.0\n\n\n"
        "def two(model_text, ground_truth):\n    return 1.0\n\n\n"
        "def needs_key(model_text, ground_truth, metadata, *, scale):\n    return scale\n\n\n"
        "class Scorer:\n    def __call__(self, model_text, ground_truth, metadata=None):\n        return 0.0\n\n\n"
        "scorer = Scorer()\n"
        "not_callable = 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "signature_reward_mod"
    sys.modules.pop("signature_reward_mod", None)


def test_check_reward_arguments_accepts_what_can_be_called(reward_module):
    from llamafactory_agentic.rewards import check_reward_arguments

    for name in ("f1", "em", "math", f"{reward_module}:good", f"{reward_module}:flexible", f"{reward_module}:scorer"):
        assert check_reward_arguments(name).name == name


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nosuchmod:fn", r"`agentic_reward: nosuchmod:fn`: cannot import reward module 'nosuchmod'"),
        ("signature_reward_mod:missing", r"'signature_reward_mod' has no attribute 'missing'"),
        ("signature_reward_mod:not_callable", r"is not callable"),
        ("f2", r"`agentic_reward: f2`: unknown reward 'f2'"),
        ("signature_reward_mod:two", r"called as fn\(model_text, ground_truth, metadata\), but two\(model_text"),
        ("signature_reward_mod:needs_key", r"needs_key\(.*\*, scale\) cannot take those three arguments"),
    ],
)
def test_check_reward_arguments_names_the_key_and_the_problem(reward_module, name, message):
    from llamafactory_agentic.rewards import check_reward_arguments

    with pytest.raises(ValueError, match=message):
        check_reward_arguments(name)

# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Dynamic sampling's pure parts: which groups the update takes, the extra prompts' rows, the combined metrics."""

import pytest

from llamafactory_agentic.train.arpo.dynamic_sampling import (
    assemble_update,
    choose_update_groups,
    combine_generation_batches,
    count_signal_groups,
    extra_prompt_indices,
    has_reward_signal,
)
from llamafactory_agentic.train.arpo.records import ScoredTrajectory

from ._helpers import record as rec


def batch(*group_rewards: tuple[float, ...]) -> list[ScoredTrajectory]:
    return [rec(g, m, r) for g, rewards in enumerate(group_rewards) for m, r in enumerate(rewards)]


def test_signal_is_any_difference_between_rewards():
    assert not has_reward_signal([rec(0, 0, 1.0), rec(0, 1, 1.0)])
    assert has_reward_signal([rec(0, 0, 1.0), rec(0, 1, 1.1)])  # the tool bonus alone separates them
    assert count_signal_groups(batch((1, 1), (0, 1), (-1, -1), (0, 0.5))) == 2


def test_signal_groups_first_in_rollout_order_then_equal_reward_fill():
    first = batch((1, 1), (0, 1), (0, 0))  # groups 0 and 2 flat
    second = batch((1, 0), (1, 1), (0, 1))  # group 1 flat
    assert choose_update_groups([first, second], 3) == [(0, 1), (1, 0), (1, 2)]
    assert choose_update_groups([first], 3) == [(0, 1), (0, 0), (0, 2)]  # one signal group, two fills in order
    with pytest.raises(ValueError, match="3 groups rolled out, the update needs 4"):
        choose_update_groups([first], 4)


def test_assemble_update_renumbers_groups_and_keeps_rows_and_all_sampled_records():
    first = batch((1, 1), (0, 1))
    second = batch((1, 0), (0, 0))
    rows_a, rows_b = [{"q": "a0"}, {"q": "a1"}], [{"q": "b0"}, {"q": "b1"}]
    update, rows, sampled, metrics = assemble_update([(first, rows_a), (second, rows_b)], 2)
    assert [(r.group, r.member, r.reward) for r in update] == [(0, 0, 0), (0, 1, 1), (1, 0, 1), (1, 1, 0)]
    assert rows == [{"q": "a1"}, {"q": "b0"}]
    assert first[2].group == 1  # the input records are not modified
    assert sorted({r.group for r in sampled}) == [0, 1, 2, 3]  # batch 1's groups moved to 2 and 3
    assert metrics == {
        "dynamic_sampling/generation_batches": 2.0,
        "dynamic_sampling/groups_rolled_out": 4.0,
        "dynamic_sampling/dropped_groups": 2.0,
        "dynamic_sampling/filled_groups": 0.0,
        "dynamic_sampling/identical_groups_in_update": 0.0,
    }
    _, _, _, short = assemble_update([(batch((1, 1), (0, 1)), rows_a)], 2)
    assert (
        short["dynamic_sampling/filled_groups"] == 1.0 and short["dynamic_sampling/identical_groups_in_update"] == 0.5
    )


def test_extra_prompts_depend_only_on_seed_step_and_attempt():
    a = extra_prompt_indices(100, 8, seed=0, step=3, attempt=1)
    assert a == extra_prompt_indices(100, 8, seed=0, step=3, attempt=1)
    assert len(set(a)) == 8 and all(0 <= i < 100 for i in a)
    assert a != extra_prompt_indices(100, 8, seed=0, step=3, attempt=2)
    assert a != extra_prompt_indices(100, 8, seed=0, step=4, attempt=1)
    small = extra_prompt_indices(3, 5, seed=1, step=0, attempt=1)
    assert sorted(set(small)) == [0, 1, 2] and small[3:] == small[:2]  # every row once, then again in order
    with pytest.raises(ValueError, match="non-empty training set"):
        extra_prompt_indices(0, 8, seed=0, step=0, attempt=1)


def test_batches_in_sequence_sum_counters_and_times_and_weight_means_by_groups():
    metrics, timing = combine_generation_batches(
        [
            (
                2,
                {"rollout/generated_tokens": 100.0, "rollout/rounds": 1.0, "tools/python/calls": 3.0},
                {"time/rollout": 2.0, "perf/decode_step_ms": 4.0},
            ),
            (
                6,
                {"rollout/generated_tokens": 50.0, "rollout/rounds": 2.0, "tools/python/calls": 1.0},
                {"time/rollout": 1.5, "perf/decode_step_ms": 2.0},
            ),
        ]
    )
    assert metrics["rollout/generated_tokens"] == 150.0
    assert metrics["rollout/rounds"] == pytest.approx((2 * 1.0 + 6 * 2.0) / 8)
    assert metrics["tools/python/calls"] == 4.0
    assert timing == {"time/rollout": 3.5, "perf/decode_step_ms": 3.0}

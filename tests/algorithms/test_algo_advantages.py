# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Advantages: GRPO normalisation, lineage sharing, soft and hard attribution (hand-computed values)."""

import math
from types import SimpleNamespace

import pytest
import torch

from llamafactory_agentic.algorithms import (
    batch_shared_lengths,
    compute_grpo_advantages,
    compute_hard_attribution_advantages,
    get_advantage_estimator,
    lineage_shared_lengths,
    list_advantage_estimators,
)


def test_grpo_group_normalisation_hand_values():
    rewards = torch.tensor([1.0, 0.0, 2.0, 0.0, 1.0, 3.0, 0.5, 0.5, 7.0])
    group_ids = torch.tensor([0, 0, 1, 0, 0, 1, 2, 2, 3])
    adv = compute_grpo_advantages(rewards, group_ids)
    # group 0: rewards 1, 0, 0, 1 -> mean 0.5, unbiased std sqrt(1/3)
    a0 = 0.5 / (math.sqrt(1.0 / 3.0) + 1e-6)
    # group 1: rewards 2, 3 -> mean 2.5, unbiased std sqrt(0.5)
    a1 = 0.5 / (math.sqrt(0.5) + 1e-6)
    expected = torch.tensor([a0, -a0, -a1, -a0, a0, a1, 0.0, 0.0, 0.0])
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-6)
    assert adv.dtype == torch.float32


def test_grpo_identical_rewards_and_singletons_are_exactly_zero():
    rewards = torch.tensor([0.1, 0.1, 0.1, 0.7, 0.3])
    adv = compute_grpo_advantages(rewards, torch.tensor([4, 4, 4, 5, 6]))
    assert torch.equal(adv, torch.zeros(5))


def test_grpo_eps_is_added_to_std():
    rewards = torch.tensor([1.0, 2.0, 3.0])
    adv = compute_grpo_advantages(rewards, torch.zeros(3, dtype=torch.long), eps=0.5)
    torch.testing.assert_close(adv, torch.tensor([-1 / 1.5, 0.0, 1 / 1.5]))


def test_grpo_rejects_float_group_ids():
    with pytest.raises(ValueError):
        compute_grpo_advantages(torch.ones(2), torch.zeros(2))


def test_lineage_shared_lengths_chain_and_global():
    # row 0 global (10), row 1 branch of 0 at p=4 (9), row 2 branch of 1 at p=6 (8), row 3 global (5)
    shared = lineage_shared_lengths([None, 0, 1, None], [None, 4, 6, None], [10, 9, 8, 5])
    expected = torch.tensor([[10, 4, 4, 0], [4, 9, 6, 0], [4, 6, 8, 0], [0, 0, 0, 5]])
    assert torch.equal(shared, expected)


def test_lineage_shared_lengths_siblings_and_parent_after_child():
    # row 0 is a branch of row 2 at p=3; row 1 a branch of row 2 at p=5; row 2 global
    shared = lineage_shared_lengths([2, 2, None], [3, 5, None], [6, 7, 8])
    expected = torch.tensor([[6, 3, 3], [3, 7, 5], [3, 5, 8]])
    assert torch.equal(shared, expected)


@pytest.mark.parametrize(
    "parents, branch_pos, lengths",
    [
        ([1, 0], [1, 1], [3, 3]),  # cycle
        ([None, 0], [None, 5], [4, 6]),  # copy position beyond the source's length
        ([None, 0], [None, None], [4, 6]),  # branch without copy position
        ([None, 3], [None, 1], [4, 6]),  # parent out of range
        ([0], [0], [2]),  # own parent
    ],
)
def test_lineage_shared_lengths_rejects_bad_lineage(parents, branch_pos, lengths):
    with pytest.raises(ValueError):
        lineage_shared_lengths(parents, branch_pos, lengths)


def _example_tree():
    # T = 6. row 0 global (6), row 1 branch of 0 at p=2 (5), row 2 branch of 1 at p=4 (6), row 3 global (3).
    shared = lineage_shared_lengths([None, 0, 1, None], [None, 2, 4, None], [6, 5, 6, 3])
    advantages = torch.tensor([1.0, -1.0, 2.0, 0.5])
    mask = torch.tensor(
        [
            [1, 1, 1, 0, 1, 1],  # token 3 of row 0 is an observation token
            [1, 1, 1, 1, 1, 0],
            [1, 1, 1, 1, 1, 1],
            [1, 1, 1, 0, 0, 0],
        ]
    )
    return advantages, shared, mask


def test_hard_attribution_hand_values():
    advantages, shared, mask = _example_tree()
    token_adv, loss_mask = compute_hard_attribution_advantages(advantages, shared, mask)
    third = 2.0 / 3.0  # segment {0, 1, 2}: (1 - 1 + 2) / 3
    expected = torch.tensor(
        [
            [third, third, 1.0, 0.0, 1.0, 1.0],
            [third, third, 0.5, 0.5, -1.0, 0.0],  # segment {1, 2} at t = 2, 3: (-1 + 2) / 2
            [third, third, 0.5, 0.5, 2.0, 2.0],
            [0.5, 0.5, 0.5, 0.0, 0.0, 0.0],  # global rollout keeps its own advantage
        ]
    )
    torch.testing.assert_close(token_adv, expected)
    assert torch.equal(loss_mask, mask)


def test_hard_attribution_dedup_keeps_lowest_index_row():
    advantages, shared, mask = _example_tree()
    token_adv, loss_mask = compute_hard_attribution_advantages(advantages, shared, mask, dedup=True)
    expected_mask = torch.tensor(
        [
            [1, 1, 1, 0, 1, 1],
            [0, 0, 1, 1, 1, 0],  # t < 2 shared with row 0
            [0, 0, 0, 0, 1, 1],  # t < 4 shared with row 1 (and t < 2 with row 0)
            [1, 1, 1, 0, 0, 0],
        ]
    )
    assert torch.equal(loss_mask, expected_mask)
    assert bool((token_adv[expected_mask == 0] == 0).all())
    torch.testing.assert_close(token_adv[1, 2:5], torch.tensor([0.5, 0.5, -1.0]))


def test_hard_attribution_summed_credit_equals_soft():
    # Per token identity (segment, position) the summed advantage of all its copies equals soft's sum of A_j
    # (equal gradients without clipping); with dedup the single kept copy carries the segment mean (weight 1).
    torch.manual_seed(0)
    advantages = torch.randn(5)
    shared = lineage_shared_lengths([None, 0, 0, 2, None], [None, 3, 5, 7, None], [9, 8, 9, 9, 6])
    mask = torch.ones(5, 9, dtype=torch.long)
    mask[1, 8:] = 0
    mask[4, 6:] = 0
    hard, _ = compute_hard_attribution_advantages(advantages, shared, mask)
    hard_dedup, dedup_mask = compute_hard_attribution_advantages(advantages, shared, mask, dedup=True)
    for i in range(5):
        for t in range(9):
            if not mask[i, t]:
                continue
            members = (shared[i] > t).nonzero().flatten()
            assert math.isclose(hard[members, t].sum().item(), advantages[members].sum().item(), abs_tol=1e-5)
            kept = dedup_mask[members, t].nonzero().flatten()
            assert len(kept) == 1 and members[kept[0]] == members.min()
            mean = advantages[members].mean().item()
            assert math.isclose(hard_dedup[members[kept[0]], t].item(), mean, abs_tol=1e-5)


def test_estimator_registry_soft_and_hard_over_two_groups():
    assert {"soft", "hard"} <= set(list_advantage_estimators())
    # group 7: rows 0, 2, 3 (members 0, 1, 2); group 9: rows 1, 4. Member 1 of group 7 is a branch of member 0 at p=2.
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0])
    group_ids = torch.tensor([7, 9, 7, 7, 9])
    mask = torch.ones(5, 4)
    parents = [None, None, 0, None, None]
    branch_pos = [None, None, 2, None, None]
    settings, dedup = SimpleNamespace(hard_dedup=False), SimpleNamespace(hard_dedup=True)  # the config the run passes
    soft, soft_mask = get_advantage_estimator("soft")(rewards, group_ids, mask, settings)
    a7 = (1 - 1 / 3) / (math.sqrt(1 / 3) + 1e-6)  # rewards 1, 0, 0: mean 1/3, unbiased std sqrt(1/3)
    b7 = (0 - 1 / 3) / (math.sqrt(1 / 3) + 1e-6)
    a9 = 0.5 / (math.sqrt(0.5) + 1e-6)
    torch.testing.assert_close(soft[:, 0], torch.tensor([a7, -a9, b7, b7, a9]))
    assert torch.equal(soft_mask, mask)
    hard, hard_mask = get_advantage_estimator("hard")(
        rewards, group_ids, mask, settings, parents=parents, branch_pos=branch_pos, lengths=[4] * 5
    )
    shared_mean = (a7 + b7) / 2
    torch.testing.assert_close(hard[0], torch.tensor([shared_mean, shared_mean, a7, a7]))
    torch.testing.assert_close(hard[2], torch.tensor([shared_mean, shared_mean, b7, b7]))
    torch.testing.assert_close(hard[[1, 3, 4]], soft[[1, 3, 4]])
    _, dedup_mask = get_advantage_estimator("hard")(
        rewards, group_ids, mask, dedup, parents=parents, branch_pos=branch_pos
    )
    assert dedup_mask[2].tolist() == [0, 0, 1, 1] and dedup_mask.sum() == 18
    # no lineage: hard equals soft
    plain, _ = get_advantage_estimator("hard")(rewards, group_ids, mask, settings)
    torch.testing.assert_close(plain, soft)


def test_batch_shared_lengths_is_block_diagonal():
    shared = batch_shared_lengths([3, 5, 3], [None, None, 0], [None, None, 2], [4, 6, 5])
    assert shared.tolist() == [[4, 0, 2], [0, 6, 0], [2, 0, 5]]


def test_unknown_estimator_raises():
    with pytest.raises(KeyError):
        get_advantage_estimator("nope")

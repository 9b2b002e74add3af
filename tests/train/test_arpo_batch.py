# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""From scored trajectories to micro-batches as pure functions: groups, advantages, layout, padding."""

import pytest
import torch


pytest.importorskip("trl")

from llamafactory_agentic.algorithms import compute_grpo_advantages  # noqa: E402
from llamafactory_agentic.train.arpo import batch  # noqa: E402
from llamafactory_agentic.train.arpo.config import default_loss_config  # noqa: E402
from llamafactory_agentic.train.arpo.records import ScoredTrajectory  # noqa: E402


def scored(group, reward, response, mask, prompt=(1, 2, 3), parent=None, branch_pos=None):
    return ScoredTrajectory(
        group=group, member=0, prompt_ids=list(prompt), response_ids=list(response), loss_mask=list(mask),
        parent=parent, branch_pos=branch_pos, is_fill=False, num_tool_calls=0, hit_call_limit=False, truncated=False,
        finish_reason="eos", tool_calls=[], branch_call_index=None, reward=reward, accuracy=0.0, format_ok=True,
    )  # fmt: skip


def test_groups_of_rows_needs_whole_groups_of_consecutive_copies():
    a, b = {"prompt_ids": [1, 2]}, {"input_ids": [3]}
    assert batch.groups_of_rows([a, a, b, b], 2) == [a, b]
    with pytest.raises(RuntimeError, match="not whole groups"):
        batch.groups_of_rows([a, a, b], 2)
    with pytest.raises(RuntimeError, match="consecutive"):
        batch.groups_of_rows([a, b, a, b], 2)


def test_micro_batch_layout_is_update_major_then_rank_then_accumulation_step():
    # 2 ranks, b = 2, A = 2: U = 8 trajectories per update; 16 trajectories = 2 updates = 4 micro-steps per rank
    rank1 = batch.micro_batch_layout(16, rank=1, world_size=2, per_device_batch=2, accumulation_steps=2, steps=4)
    assert [(s.start, s.stop) for s, _ in rank1] == [(4, 6), (6, 8), (12, 14), (14, 16)]
    assert [(u.start, u.stop) for _, u in rank1] == [(0, 8), (0, 8), (8, 16), (8, 16)]
    rank0 = batch.micro_batch_layout(16, rank=0, world_size=2, per_device_batch=2, accumulation_steps=2, steps=4)
    rows = sorted(i for layout in (rank0, rank1) for s, _ in layout for i in range(s.start, s.stop))
    assert rows == list(range(16))  # every trajectory trained exactly once
    with pytest.raises(RuntimeError, match="do not fill 2 updates of 8"):
        batch.micro_batch_layout(12, 0, 2, 2, 2, 4)


def test_token_advantages_soft_attribution_is_grpo_on_every_trained_token():
    records = [scored(0, 1.0, [5, 6, 7], [1, 0, 1]), scored(0, 0.0, [5], [1]), scored(1, 2.0, [], [])]
    advs, masks = batch.token_advantages(records, default_loss_config())
    expected = compute_grpo_advantages(torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0, 0, 1]))
    assert [len(a) for a in advs] == [3, 1, 0] and masks == [[1, 0, 1], [1], []]
    assert advs[0][0] == advs[0][2] == pytest.approx(float(expected[0])) and advs[0][1] == 0.0
    assert advs[1] == [pytest.approx(float(expected[1]))]
    assert batch.token_advantages([], default_loss_config()) == ([], [])


def test_collate_pads_prompts_left_and_responses_right():
    first = scored(0, 1.0, [5, 6, 7], [1, 0, 1], prompt=(1, 2, 3))
    empty = scored(0, 0.0, [], [], prompt=(4,))
    for rec in (first, empty):
        rec.loss_mask_train, rec.token_advantages = list(rec.loss_mask), [0.5] * len(rec.loss_mask)
    out = batch.collate_records([first, empty], num_tokens=0, pad_token_id=0, device="cpu")
    assert out["prompt_ids"].tolist() == [[1, 2, 3], [0, 0, 4]] and out["prompt_mask"].tolist() == [
        [1, 1, 1],
        [0, 0, 1],
    ]
    assert out["completion_ids"].tolist() == [[5, 6, 7], [0, 0, 0]]
    assert out["completion_mask"].tolist() == [[1, 1, 1], [0, 0, 0]]  # an empty response attends nothing
    assert out["loss_mask"].tolist() == [[1, 0, 1], [0, 0, 0]]
    assert out["advantages"].tolist() == [[0.5, 0.5, 0.5], [0.0, 0.0, 0.0]]
    assert float(out["num_items_in_batch"]) == 1.0  # never a zero normaliser

# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Metric reduction and `rollouts.jsonl` entries as pure functions: hand-built records, no trainer, no model."""

import dataclasses
import json
import random

import pytest
import torch

from llamafactory_agentic.rollout.trajectory import Trajectory
from llamafactory_agentic.train.arpo import metrics as arpo_metrics
from llamafactory_agentic.train.arpo.records import ScoredTrajectory, prompt_ids_of

from ._helpers import CALL, record


def two_groups():
    return [
        record(0, 0, 1.0),
        record(0, 1, 0.0, parent=0),
        record(1, 0, 0.0, finish="length", mask=(1, 1, 1)),
        record(1, 1, 0.0, is_fill=True, hit_call_limit=True, finish="call_limit"),
    ]


def test_rollout_log_values_from_records_metrics_and_timing():
    metrics = {
        "rollout/branches": 99.0,  # the rank-combined counter loses against the value counted from the records
        "rollout/rounds": 3.0,
        "rollout/generated_tokens": 40.0,
        "rollout/penalised_decisions": 2.0,
        "rollout/mean_delta_h": 0.25,
    }
    timing = {"time/generation": 2.0, "time/reward": 0.1}
    values = arpo_metrics.rollout_log_values(two_groups(), metrics, timing, peak_gpu_memory_gib=1.5)

    assert values["reward"] == values["reward/mean"] == pytest.approx(0.25)
    assert values["reward/std"] == pytest.approx(0.5)  # unbiased std of (1, 0, 0, 0)
    assert values["reward/accuracy"] == 0.25 and values["reward/format_ok_rate"] == 1.0
    assert values["reward/identical_groups"] == 0.5  # group 1 has one reward value
    assert values["rollout/trained_tokens"] == 3 + 3 + 3 + 3 and values["rollout/observation_tokens"] == 2 + 2 + 2
    assert values["rollout/response_length"] == pytest.approx((5 + 5 + 3 + 5) / 4)
    assert values["rollout/branches"] == 1.0 and values["rollout/branches_per_group"] == 0.5
    assert values["aepo/global_samples_per_group"] == 1.5 and values["aepo/branch_samples_per_group"] == 0.5
    assert values["rollout/fills_per_group"] == 0.5
    assert values["rollout/call_limit_hits"] == 1.0 and values["rollout/call_limit_hit_rate"] == 0.25
    assert values["rollout/truncated_rate"] == 0.25
    assert [values[f"rollout/finish_{r}_rate"] for r in ("eos", "length", "call_limit")] == [0.5, 0.25, 0.25]
    assert values["rollout/rounds"] == 3.0  # a rollout metric not computed from the records passes through
    assert values["aepo/penalised_branch_decisions"] == 2.0 and values["rollout/delta_h_mean"] == 0.25  # aliases
    assert values["time/generation"] == 2.0 and values["time/reward"] == 0.1
    assert values["perf/generated_tokens_per_s"] == 20.0 and values["perf/peak_gpu_memory_gib"] == 1.5
    assert "perf/peak_gpu_memory_gib" not in arpo_metrics.rollout_log_values(two_groups(), {}, {})
    assert "perf/generated_tokens_per_s" not in arpo_metrics.rollout_log_values(
        two_groups(), {"rollout/generated_tokens": 1}, {}
    )


def test_combine_rank_shards_sums_counts_weights_means_and_takes_the_slowest_rank():
    shards = [
        (
            3,
            {"rollout/branches": 2, "rollout/decisions": 4, "rollout/mean_delta_h": 0.5, "rollout/rounds": 2.0},
            {"time/generation": 1.0},
            {"tools/python/calls": 3.0, "tools/python/failure_rate": 0.0},
        ),
        (
            1,
            {
                "rollout/branches": 1,
                "rollout/decisions": 1,
                "rollout/mean_delta_h": -1.0,
                "rollout/rounds": 6.0,
                "rollout/branch_points/call_1": 1,
                "rollout/bad": float("nan"),
            },
            {"time/generation": 3.0, "time/tools": 0.5},
            {"tools/python/calls": 1.0, "tools/python/failure_rate": 1.0},
        ),
    ]
    metrics, timing = arpo_metrics.combine_rank_shards(shards)
    assert metrics["rollout/branches"] == 3 and metrics["rollout/decisions"] == 5
    assert metrics["rollout/branch_rate"] == pytest.approx(3 / 5)
    assert metrics["rollout/mean_delta_h"] == pytest.approx((0.5 * 4 - 1.0 * 1) / 5)  # weighted by decisions
    assert metrics["rollout/rounds"] == pytest.approx((2.0 * 3 + 6.0 * 1) / 4)  # weighted by groups
    assert metrics["rollout/branch_points/call_1"] == 1 and "rollout/bad" not in metrics
    assert metrics["tools/python/calls"] == 4.0 and metrics["tools/python/failure_rate"] == 0.5
    assert timing == {"time/generation": 3.0, "time/tools": 0.5}


def test_combine_tool_metrics_recomputes_the_cache_hit_rate_from_the_sums():
    shards = [
        {"tools/search/cache_hits": 1.0, "tools/search/cache_misses": 3.0, "tools/search/cache_hit_rate": 0.25},
        {"tools/search/cache_hits": 3.0, "tools/search/cache_misses": 1.0, "tools/search/cache_hit_rate": 0.75},
        {"tools/search/cache_hits": 4.0, "tools/search/cache_misses": 0.0, "tools/search/latency_p50_s": 2.0},
    ]
    tools = arpo_metrics.combine_tool_metrics(shards)
    assert tools["tools/search/cache_hits"] == 8.0 and tools["tools/search/cache_hit_rate"] == pytest.approx(8 / 12)
    assert tools["tools/search/latency_p50_s"] == 2.0  # averaged over the shards that report it


def test_select_logged_groups_draws_once_per_group_in_order():
    assert arpo_metrics.select_logged_groups([0, 1], 0.0, random.Random(0)) == []
    assert arpo_metrics.select_logged_groups([3, 1, 1, 2], 1.0, random.Random(0)) == [1, 2, 3]
    rng, reference = random.Random(5), random.Random(5)
    chosen = arpo_metrics.select_logged_groups([2, 0, 1, 0], 0.5, rng)
    assert chosen == [g for g in (0, 1, 2) if reference.random() < 0.5]
    assert rng.random() == reference.random()  # exactly one draw per distinct group


def test_rollout_log_entries_branch_tree_spans_and_trained_advantage():
    records = two_groups()
    for r in records:
        r.loss_mask_train = list(r.loss_mask)
        r.token_advantages = [0.5 if m else 9.0 for m in r.loss_mask]  # observations carry garbage, never averaged
    rows = [
        {"prompt_ids": [1, 2], "_ground_truth": "3", "_data_source": "unit"},
        {"input_ids": [7], "_ground_truth": 1},
    ]
    entries = arpo_metrics.rollout_log_entries(records, rows, [0, 1], lambda ids: " ".join(map(str, ids)), 12, 4)
    json.dumps(entries)  # JSON-serialisable as it is
    first, second = entries
    assert (first["global_step"], first["rollout"], first["group"], first["prompt"]) == (12, 4, 0, "1 2")
    assert first["ground_truth"] == "3" and first["data_source"] == "unit" and second["prompt"] == "7"
    branch = first["trajectories"][1]
    assert branch["parent"] == 0 and branch["branch_pos"] == 2 and branch["branch_call_index"] == 1
    assert branch["observation_spans"] == [[2, 4]] and branch["response"] == "10 11 12 13 14"
    assert branch["advantage"] == 0.5 and branch["tool_calls"] == [dataclasses.asdict(CALL)]
    assert second["trajectories"][1]["finish_reason"] == "call_limit" and second["trajectories"][1]["is_fill"]
    assert arpo_metrics.rollout_log_entries(records, rows, [], str, 0, 0) == []


def test_records_reject_a_misspelt_field_where_it_is_written():
    r = record(0, 0, 1.0)
    with pytest.raises(AttributeError):
        r.token_advantage = [0.0]  # slots: no silent new key
    with pytest.raises(TypeError):
        dataclasses.replace(r, rewards=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        CALL.status = "error"
    assert prompt_ids_of({"input_ids": (5, 6)}) == [5, 6]
    with pytest.raises(KeyError, match="prompt_ids"):
        prompt_ids_of({"text": "x"})


def test_loss_metric_values_are_means_over_the_micro_batchs_trained_tokens():
    entropy = torch.tensor([[1.0, 2.0, 100.0], [3.0, 4.0, 100.0]])  # 100: masked positions never count
    mask = torch.tensor([[True, True, False], [True, True, False]])
    pg = {"loss/clip_frac": 0.25, "loss/balanced_clip_frac": 0.5}
    clip = torch.tensor([[False, True, False], [True, True, False]])
    values = arpo_metrics.loss_metric_values(pg, entropy, mask, torch.tensor(0.1), torch.tensor(2.5), clip)
    assert list(values) == sorted(values)
    assert values["loss/clip_frac"] == 0.25 and values["aepo/grad_preserved_frac"] == 0.5
    assert values["loss/ratio_mean"] == 0.0  # absent from the policy loss's metrics
    assert values["loss/entropy"] == 2.5 and values["aepo/trained_entropy_max"] == 4.0
    assert values["aepo/trained_entropy_std"] == pytest.approx(torch.tensor([1.0, 2, 3, 4]).std().item())
    assert values["aepo/high_entropy_token_frac"] == 0.75
    assert values["loss/kl"] == pytest.approx(0.1) and values["loss/entropy_bonus_term"] == 2.5
    bare = arpo_metrics.loss_metric_values({}, entropy, torch.zeros_like(mask), None, None, None)
    assert bare["loss/entropy"] == 0.0 and not {"loss/kl", "aepo/high_entropy_token_frac"} & set(bare)


def test_validation_metrics_per_prompt_and_per_batch():
    records = [record(0, 0, 1.0), record(1, 0, 0.0, hit_call_limit=True), record(2, 0, -1.0, mask=(1,))]
    metrics = arpo_metrics.validation_metrics(records, {"time/rollout": [1.0, 3.0]}, {"tools/python/calls": 3.0})
    assert metrics["reward"] == metrics["reward/mean"] == 0.0 and metrics["reward/std"] == 1.0
    assert metrics["reward/accuracy"] == pytest.approx(1 / 3) and metrics["rollout/call_limit_hit_rate"] == 1 / 3
    assert metrics["rollout/response_tokens"] == pytest.approx((5 + 5 + 1) / 3)
    assert metrics["time/rollout"] == 2.0 and metrics["tools/python/calls"] == 3.0
    assert "reward/std" not in arpo_metrics.validation_metrics(records[:1], {}, {})
    assert arpo_metrics.validation_metrics([], {}, {}) == {}


def test_a_record_copies_its_trajectory_and_counts_the_inherited_calls():
    calls = [CALL, dataclasses.replace(CALL, pos=9)]
    branch = Trajectory("0-0-1", 0, [1, 2], list(range(12)), [1] * 12, parent=0, branch_pos=5, num_tool_calls=2,
                        tool_calls=calls, finish_reason="eos", index=1)  # fmt: skip
    rec = ScoredTrajectory.from_trajectory(branch, group=3, member=1, reward=0.5, accuracy=0.0, format_ok=True)
    assert (rec.group, rec.member, rec.parent, rec.branch_pos, rec.branch_call_index) == (3, 1, 0, 5, 1)
    assert rec.response_ids == branch.response_ids and rec.response_ids is not branch.response_ids
    root = Trajectory("0-0-0", 0, [1, 2], tool_calls=calls)
    assert ScoredTrajectory.from_trajectory(root, 0, 0, 0.0, 0.0, False).branch_call_index is None

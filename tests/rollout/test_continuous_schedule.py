# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The `continuous` rollout schedule (`arpo_rollout_schedule`): ARPO's group semantics without global rounds, and the
hf engine's continuous batching (a freed slot is refilled at the next host sync)."""

import threading
import time
from collections import Counter

import pytest
import torch

from llamafactory_agentic.rollout import AgenticRollout, GenerationRequest, SamplingSettings
from llamafactory_agentic.rollout.engine import RequestSource
from llamafactory_agentic.rollout.hf_engine import HFEngine
from llamafactory_agentic.train.arpo.config import default_rollout_config

from .helpers import FakeResult, RecordingExecutor, ScriptedEngine
from .test_hf_engine import prompt, sharpen
from .test_rollout_loop import binomial_ok, prompts, two_calls_then_answer


def make(tokenizer, plan, schedule="continuous", executor=None, **cfg):
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = default_rollout_config(eos_token_id=eos, schedule=schedule, **cfg)
    engine = ScriptedEngine(tokenizer, plan, eos)
    executor = executor or RecordingExecutor()
    return AgenticRollout(engine, executor, tokenizer, config), engine, executor


def check_tree(groups, m, rollout):
    obs = rollout.encode_observation("42")
    for g in groups:
        assert len(g) == m
        for i, t in enumerate(g):
            assert t.index == i
            if t.parent is not None:
                src = g[t.parent]
                assert t.parent < i
                assert t.response_ids[: t.branch_pos] == src.response_ids[: t.branch_pos]
                assert t.loss_mask[: t.branch_pos] == src.loss_mask[: t.branch_pos]
                # branched at a round boundary, right after the source's observation
                assert src.response_ids[t.branch_pos - len(obs) : t.branch_pos] == obs
                assert t.loss_mask[t.branch_pos - 1] == 0


def test_groups_exactly_m_with_branching_and_tree(tiny_tokenizer):
    rollout, _, executor = make(
        tiny_tokenizer, two_calls_then_answer(1.0, 1.0), group_size=6, initial_rollouts=2, beam_size=3,
        max_tool_calls=5, seed=1,
    )  # fmt: skip
    out = rollout.rollout(prompts(tiny_tokenizer, 5))
    check_tree(out.groups, 6, rollout)
    own_calls = sum(1 for g in out.groups for t in g for c in t.tool_calls if t.parent is None or c.pos > t.branch_pos)
    assert own_calls == len(executor.calls) > 0  # branches never re-run their inherited calls
    log = rollout.last_state.decision_log
    assert out.metrics["rollout/decisions"] == len(log) > 0
    # every decision was made by a source at one of its own round boundaries, at most beam_size - 1 per boundary
    per_boundary = Counter((d.group, d.source, d.round) for d in log)
    assert max(per_boundary.values()) <= 2
    for (g, source, rnd), _ in per_boundary.items():
        assert 1 <= rnd <= len(out.groups[g][source].round_entropies)


@pytest.mark.parametrize("fill, n_init", [("all_at_once", 3), ("per_round", 3), ("per_round", 8)])
def test_budget_fill_waits_for_the_group_and_fills_to_m(tiny_tokenizer, fill, n_init):
    # no tool calls: every trajectory ends in its first round, so the missing members all come from the fill
    rollout, engine, _ = make(
        tiny_tokenizer, lambda r: ("<answer> 1 </answer>", "eos", 1.0), group_size=8, initial_rollouts=n_init,
        budget_fill=fill,
    )  # fmt: skip
    out = rollout.rollout(prompts(tiny_tokenizer, 3))
    assert [len(g) for g in out.groups] == [8, 8, 8]
    for g in out.groups:
        assert [t.is_fill for t in g] == [False] * n_init + [True] * (8 - n_init)
    fills_per_group = 8 - n_init
    events = 0 if fills_per_group == 0 else (3 if fill == "all_at_once" else 3 * fills_per_group)
    assert out.metrics["rollout/fills"] == 3 * fills_per_group and out.metrics["rollout/fill_rounds"] == events


@pytest.mark.parametrize("dh", [0.0, 1.0])
def test_stochastic_branch_frequency(tiny_tokenizer, dh):
    rollout, _, _ = make(
        tiny_tokenizer, two_calls_then_answer(1.0, dh), group_size=64, initial_rollouts=8, max_tool_calls=5, seed=123
    )
    rollout.rollout(prompts(tiny_tokenizer, 12))
    log = rollout.last_state.decision_log
    for delta, expected in [(0.0, 0.5), (dh, min(max(0.5 + 0.2 * dh, 0), 1))]:
        sel = [d for d in log if abs(d.delta_h - delta) < 1e-9]
        assert len(sel) >= 80
        assert binomial_ok(sum(d.branched for d in sel), len(sel), expected)


def signature(groups):
    return [
        sorted((t.parent is None, t.is_fill, t.num_tool_calls, len(t.response_ids), t.branch_pos or 0) for t in g)
        for g in groups
    ]


@pytest.mark.parametrize("group_size", [16, 5])
def test_deterministic_rule_builds_the_groups_of_the_rounds_schedule(tiny_tokenizer, group_size):
    plan = lambda r: (f"<search> q{r} </search>", "stop", 1.0 + 0.5 * r) if r < 3 else ("x", "eos", 1.0)  # noqa: E731
    outs = []
    for schedule in ("rounds", "continuous"):
        rollout, _, executor = make(
            tiny_tokenizer, plan, schedule, group_size=group_size, initial_rollouts=2, branch_rule="deterministic",
            max_tool_calls=5,
        )  # fmt: skip
        outs.append((rollout.rollout(prompts(tiny_tokenizer, 3)), len(executor.calls)))
    (rounds, calls_r), (continuous, calls_c) = outs
    assert signature(continuous.groups) == signature(rounds.groups)
    assert calls_c == calls_r and continuous.metrics["rollout/branches"] == rounds.metrics["rollout/branches"]


class SlowFirstCall(RecordingExecutor):
    """Answers at once, except the first trajectory's first call, which takes a while (a slow tool)."""

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()

    def execute(self, calls):
        if any(c.trajectory_id.endswith("-0-0") and c.content == "query 0" for c in calls):
            time.sleep(0.5)
        with self.lock:
            self.calls.extend(calls)
            self.batches.append(len(calls))
        return [FakeResult(text="42") for _ in calls]


def test_a_slow_tool_call_does_not_hold_back_the_other_trajectories(tiny_tokenizer):
    executor = SlowFirstCall()
    rollout, engine, _ = make(
        tiny_tokenizer, two_calls_then_answer(1.0, 0.0), executor=executor, group_size=2, initial_rollouts=2,
        beam_size=1, max_tool_calls=5,
    )  # fmt: skip
    out = rollout.rollout(prompts(tiny_tokenizer, 2))
    slow_key = out.groups[0][0].engine_key
    order = [(r.key, len(r.response_ids) > 0) for r in engine.requests]
    slow_second = order.index((slow_key, True))
    # every other trajectory finished all three rounds before the slow one started its second
    others_done = [i for i, (key, cont) in enumerate(order) if key != slow_key]
    assert len(others_done) == 3 * 3 and max(others_done) < slow_second
    assert all(t.finish_reason == "eos" for g in out.groups for t in g)
    assert out.timing["time/tool_wait"] > 0.3  # the engine idled only once nothing else was left


def test_question_scope_is_refused():
    with pytest.raises(ValueError, match="question"):
        default_rollout_config(schedule="continuous", branch_penalty=0.05, branch_penalty_scope="question")


# ------------------------------------------------------------------------------------------------ hf engine
class Feeder(RequestSource):
    """Hands out its requests two at a time and records when each result came back."""

    def __init__(self, requests):
        self.todo = list(requests)
        self.results = {}
        self.order = []

    def take(self, limit):
        out, self.todo = self.todo[: min(limit, 2)], self.todo[min(limit, 2) :]
        return out

    def put(self, request, result):
        self.results[request.key] = result
        self.order.append(request.key)


def test_rows_admitted_while_others_decode_match_decoding_alone(tiny_model, tiny_tokenizer):
    model = sharpen(tiny_model, seed=2)
    p = prompt(tiny_tokenizer)
    greedy = SamplingSettings(temperature=0.0, stop_strings=(), eos_token_ids=())
    lengths = [3, 17, 5, 11, 2, 9]
    requests = [GenerationRequest(i, p + [10 + i], [], n) for i, n in enumerate(lengths)]
    engine = HFEngine(model, tiny_tokenizer, max_batch_size=2, max_context=64, sync_every=2, length_bucket=16)
    feeder = Feeder(requests)
    engine.serve(feeder, greedy)
    assert engine.stats["admissions"] >= 4  # slots were refilled while the other row kept decoding
    assert feeder.order.index(0) < feeder.order.index(1)  # a short row came back before the long one ...
    assert feeder.order.index(2) < feeder.order.index(1)  # ... and its slot already served the next request
    for req in requests:
        alone = HFEngine(model, tiny_tokenizer, max_batch_size=1, max_context=64).generate([req], greedy)[0]
        assert feeder.results[req.key].token_ids == alone.token_ids, req.key


def test_engine_stats_split_decode_time(tiny_model, tiny_tokenizer):
    engine = HFEngine(tiny_model, tiny_tokenizer, max_batch_size=4, max_context=64, sync_every=4)
    p = prompt(tiny_tokenizer)
    engine.generate([GenerationRequest(i, p, [], 8 + i) for i in range(3)], SamplingSettings(stop_strings=()))
    st = engine.stats
    assert st["decode_steps"] > 0 and 0 < st["decode_device_s"] <= st["decode_s"]
    assert st["decode_row_steps"] <= 3 * st["decode_steps"] and st["decode_batch_steps"] >= st["decode_row_steps"]
    assert st["capture_s"] == 0.0  # no CUDA graphs on CPU
    assert engine.cache_bytes() > 0
    engine.release()
    assert engine.cache_bytes() == 0 and engine.stats["cache_bytes"] > 0
    torch.testing.assert_close(torch.tensor(1.0), torch.tensor(1.0))

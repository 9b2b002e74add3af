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

"""Agent-loop tests (docs/algorithms.md §2, §3.4, §5.1, §5.2, §12) with a scripted engine of known entropy shift."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from llamafactory_agentic.rollout import (
    AgenticRollout,
    observation_string,
    premonitor_initial_rollouts,
    should_branch,
)
from llamafactory_agentic.train.arpo.config import default_rollout_config

from .helpers import RecordingExecutor, ScriptedEngine


def make(tokenizer, plan, **cfg):
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = default_rollout_config(eos_token_id=eos, **cfg)
    engine = ScriptedEngine(tokenizer, plan, eos)
    executor = RecordingExecutor()
    return AgenticRollout(engine, executor, tokenizer, config), engine, executor


def prompts(tokenizer, n):
    return [tokenizer.encode(f"<|im_start|>user\nquestion {i}<|im_end|>\n<|im_start|>assistant\n") for i in range(n)]


def two_calls_then_answer(h0, dh):
    def plan(r):
        if r < 2:
            return f"<think> step </think> <search> query {r} </search>", "stop", h0 if r == 0 else h0 + dh
        return "<answer> \\boxed{1} </answer>", "eos", h0 + dh

    return plan


def binomial_ok(k, n, p, z=4.5):
    return abs(k - n * p) <= z * math.sqrt(max(n * p * (1 - p), 1e-9)) + 1


@pytest.mark.parametrize("dh", [-1.0, 0.0, 1.0, 2.0])
def test_stochastic_branch_frequency(tiny_tokenizer, dh):
    rollout, _, _ = make(
        tiny_tokenizer, two_calls_then_answer(1.0, dh), group_size=64, initial_rollouts=8, max_tool_calls=5, seed=123
    )
    rollout.rollout(prompts(tiny_tokenizer, 12))
    log = rollout.last_state.decision_log
    for delta, expected in [(0.0, 0.5), (dh, min(max(0.5 + 0.2 * dh, 0), 1))]:
        sel = [d for d in log if abs(d.delta_h - delta) < 1e-9]
        assert len(sel) >= 80
        k = sum(d.branched for d in sel)
        assert binomial_ok(k, len(sel), expected), (delta, k, len(sel), expected)


def test_deterministic_rule_branches_iff_entropy_rises(tiny_tokenizer):
    for dh, expect in [(0.5, True), (-0.5, False)]:
        rollout, _, _ = make(
            tiny_tokenizer,
            two_calls_then_answer(1.0, dh),
            group_size=16,
            initial_rollouts=4,
            branch_rule="deterministic",
            max_tool_calls=5,
        )
        out = rollout.rollout(prompts(tiny_tokenizer, 3))
        log = rollout.last_state.decision_log
        assert all(d.branched == (d.delta_h > 0) for d in log)
        assert any(d.branched for d in log) == expect
        assert all(len(g) == 16 for g in out.groups)


def test_rule_functions():
    assert should_branch("stochastic", 0.0, 0, tau=0.5, beta=0.2, u=0.5)
    assert not should_branch("stochastic", 0.0, 0, tau=0.5, beta=0.2, u=0.49)
    assert should_branch("stochastic", 0.0, 2, tau=0.5, beta=0.2, branch_penalty=0.05, u=0.56)
    assert not should_branch("stochastic", 0.0, 2, tau=0.5, beta=0.2, branch_penalty=0.05, u=0.55)
    assert not should_branch("deterministic", 0.0, 0, tau=0.5, beta=0.2, alpha=0.5)
    assert should_branch("deterministic", 0.01, 0, tau=0.5, beta=0.2, alpha=0.5)
    # docs/algorithms.md §5.2: P(branch) at dH = 0 for l = 0..6 with lambda 0.05
    u = np.random.default_rng(0).random(200_000)
    got = [np.mean((u + 0.0) * (1 - 0.05 * l) >= 0.5) for l in range(7)]
    assert np.allclose(got, [0.50, 0.47, 0.44, 0.41, 0.38, 0.33, 0.29], atol=0.01)


def test_premonitor_table():
    for big_m, expected in [(16, [2, 5, 7, 9, 10, 12, 15]), (12, [2, 4, 5, 7, 8, 9, 11])]:
        got = [premonitor_initial_rollouts(big_m, d, 0.0, 0.5) for d in (-4, -2, -1, 0, 1, 2, 4)]
        assert got == expected
    assert premonitor_initial_rollouts(16, -100, 0, 0.5) == 1
    assert premonitor_initial_rollouts(16, 100, 0, 0.5) == 16


@pytest.mark.parametrize("n_init", [1, 3, 8])
def test_groups_exactly_m_and_fill(tiny_tokenizer, n_init):
    # no tool calls at all: nobody is ever alive after round 1, so the budget is filled one global per round
    rollout, engine, _ = make(
        tiny_tokenizer, lambda r: ("<answer> 1 </answer>", "eos", 1.0), group_size=8, initial_rollouts=n_init
    )
    out = rollout.rollout(prompts(tiny_tokenizer, 3))
    assert [len(g) for g in out.groups] == [8, 8, 8]
    assert out.metrics["rollout/fills"] == 3 * (8 - n_init)
    assert out.metrics["rollout/rounds"] == 1 + (8 - n_init)
    for g in out.groups:
        assert all(t.parent is None for t in g)
        assert [t.is_fill for t in g] == [False] * n_init + [True] * (8 - n_init)


def test_groups_exactly_m_with_branching_and_tree(tiny_tokenizer):
    rollout, _, executor = make(
        tiny_tokenizer,
        two_calls_then_answer(1.0, 1.0),
        group_size=6,
        initial_rollouts=2,
        beam_size=3,
        max_tool_calls=5,
        seed=1,
    )
    out = rollout.rollout(prompts(tiny_tokenizer, 5))
    assert all(len(g) == 6 for g in out.groups)
    for g in out.groups:
        for i, t in enumerate(g):
            assert t.index == i
            if t.parent is not None:
                src = g[t.parent]
                assert t.parent < i
                # shared prefix equals the source's tokens up to the copy point
                assert t.response_ids[: t.branch_pos] == src.response_ids[: t.branch_pos]
                assert t.loss_mask[: t.branch_pos] == src.loss_mask[: t.branch_pos]
    # all tool calls of a round go to the executor at once; branches never re-run their inherited calls
    assert len(executor.batches) <= out.metrics["rollout/rounds"]
    own_calls = sum(1 for g in out.groups for t in g for c in t.tool_calls if t.parent is None or c.pos > t.branch_pos)
    assert own_calls == len(executor.calls) > 0


def test_branch_copies_state_and_never_reruns_tool(tiny_tokenizer):
    rollout, engine, executor = make(
        tiny_tokenizer,
        two_calls_then_answer(1.0, 5.0),
        group_size=2,
        initial_rollouts=1,
        branch_rule="deterministic",
        max_tool_calls=5,
    )
    out = rollout.rollout(prompts(tiny_tokenizer, 1))
    src, child = out.groups[0]
    # deterministic: no branch at the first call (dH = 0), branch after the second (dH = 5)
    assert child.parent == 0 and child.branch_pos is not None
    assert child.tool_calls[:2] == src.tool_calls[:2] and child.num_tool_calls == src.num_tool_calls == 2
    assert child.entropy_base == src.entropy_base
    assert child.round_entropies[:2] == src.round_entropies[:2]
    # the copy contains the just-inserted observation and the child's next request continued from it
    obs = rollout.encode_observation("42")
    assert src.response_ids[child.branch_pos - len(obs) : child.branch_pos] == obs
    # 2 calls for the source only: the branch never re-ran a tool
    assert len(executor.calls) == 2
    branch_req = [r for r in engine.requests if r.parent_key is not None]
    assert len(branch_req) == 1 and list(branch_req[0].response_ids) == src.response_ids[: child.branch_pos]


def test_call_limit_appends_eos(tiny_tokenizer):
    plan = lambda r: (f"<python> print({r}) </python>", "stop", 1.0)  # noqa: E731
    rollout, _, executor = make(tiny_tokenizer, plan, group_size=1, initial_rollouts=1, max_tool_calls=2)
    out = rollout.rollout(prompts(tiny_tokenizer, 1))
    t = out.groups[0][0]
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert t.hit_call_limit and t.finish_reason == "call_limit" and not t.truncated
    assert t.num_tool_calls == 2 and len(executor.calls) == 2
    assert t.response_ids[-1] == eos and t.loss_mask[-1] == 1
    assert tiny_tokenizer.decode(t.response_ids).count("</python>") == 3
    assert out.metrics["rollout/call_limit_hits"] == 1


def test_empty_call_observation_counts(tiny_tokenizer):
    plan = lambda r: ("<search>  </search>", "stop", 1.0) if r == 0 else ("done", "eos", 1.0)  # noqa: E731
    rollout, _, executor = make(tiny_tokenizer, plan, group_size=1, initial_rollouts=1, max_tool_calls=3)
    t = rollout.rollout(prompts(tiny_tokenizer, 1)).groups[0][0]
    assert executor.calls == []
    assert t.num_tool_calls == 1 and t.tool_calls[0].status == "empty"
    assert "Error: empty <search> call." in tiny_tokenizer.decode(t.response_ids)


def test_observation_mask_token_level(tiny_tokenizer):
    plan = lambda r: ("<search> capital of France </search>", "stop", 1.0) if r == 0 else ("ok", "eos", 1.0)  # noqa: E731
    rollout, _, executor = make(tiny_tokenizer, plan, group_size=1, initial_rollouts=1)
    executor.text = "Page 1: Paris"
    t = rollout.rollout(prompts(tiny_tokenizer, 1)).groups[0][0]
    model1 = tiny_tokenizer.encode("<search> capital of France </search>", add_special_tokens=False)
    obs = tiny_tokenizer.encode(" <result>\nPage 1: Paris\n</result>", add_special_tokens=False)
    model2 = tiny_tokenizer.encode("ok", add_special_tokens=False) + [
        tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    ]
    assert t.response_ids == model1 + obs + model2
    assert t.loss_mask == [1] * len(model1) + [0] * len(obs) + [1] * len(model2)
    assert observation_string("x") == " <result>\nx\n</result>"
    # the masked span decodes to exactly the observation string: leading space, both tags, the newlines
    masked = [i for i, m in zip(t.response_ids, t.loss_mask) if m == 0]
    assert tiny_tokenizer.decode(masked) == " <result>\nPage 1: Paris\n</result>"
    assert executor.calls[0].content == "capital of France" and executor.calls[0].tool == "search"


def test_max_tokens_never_overshoot(tiny_tokenizer):
    plan = lambda r: ("<search> q </search>", "stop", 1.0) if r < 3 else ("", "length", 1.0)  # noqa: E731
    budget = 40
    rollout, engine, _ = make(
        tiny_tokenizer, plan, group_size=4, initial_rollouts=2, max_response_length=budget, max_tool_calls=10, seed=3
    )
    out = rollout.rollout(prompts(tiny_tokenizer, 2))
    for req in engine.requests:
        assert req.max_tokens == budget - len(req.response_ids) and req.max_tokens > 0
    for g in out.groups:
        for t in g:
            assert len(t.response_ids) <= budget and len(t.loss_mask) == len(t.response_ids)
            assert t.truncated and t.finish_reason == "length"


def test_validation_greedy_single_no_branch(tiny_tokenizer):
    rollout, engine, _ = make(
        tiny_tokenizer, two_calls_then_answer(1.0, 3.0), group_size=8, initial_rollouts=4, dynamic_rollouts=True
    )
    out = rollout.rollout(prompts(tiny_tokenizer, 3), training=False)
    assert [len(g) for g in out.groups] == [1, 1, 1]
    assert out.metrics["rollout/decisions"] == 0 and out.timing["time/premonitor"] == 0.0


def test_question_scope_counters(tiny_tokenizer):
    rollout, _, _ = make(
        tiny_tokenizer,
        two_calls_then_answer(1.0, 0.5),
        group_size=6,
        initial_rollouts=2,
        branch_penalty=0.05,
        branch_penalty_scope="question",
        max_tool_calls=5,
        seed=5,
    )
    rollout.rollout(prompts(tiny_tokenizer, 4))
    state = rollout.last_state
    counters, expected_at_round = [0] * 4, {}
    for r, created in enumerate(state.created_log, start=1):
        expected_at_round[r] = list(counters)
        if any(created):
            counters = [c + 1 if n else 0 for c, n in zip(counters, created)]
    assert any(d.consecutive > 0 for d in state.decision_log)
    for d in state.decision_log:
        assert d.consecutive == expected_at_round[d.round][d.group]


def test_lineage_scope_counters(tiny_tokenizer):
    plan = lambda r: (f"<search> q{r} </search>", "stop", 1.0 + 0.5 * r) if r < 4 else ("x", "eos", 1.0)  # noqa: E731
    rollout, _, _ = make(
        tiny_tokenizer,
        plan,
        group_size=12,
        initial_rollouts=2,
        branch_penalty=0.05,
        branch_rule="deterministic",
        max_tool_calls=6,
    )
    out = rollout.rollout(prompts(tiny_tokenizer, 1))
    log = rollout.last_state.decision_log
    g = out.groups[0]
    # deterministic and dH rising: every evaluation after the first call branches, so l climbs along each lineage
    for d in log:
        later = [e for e in log if e.source == d.source and e.round > d.round]
        if later:
            assert later[0].consecutive == (d.consecutive + 1 if d.branched else 0)
    # each child starts with its source's incremented value (children appear in the order of branching decisions)
    children = [t for t in g if t.parent is not None]
    created_by = [d for d in log if d.branched]
    assert len(children) == len(created_by) > 0
    assert any(d.consecutive >= 2 for d in log)
    for child, d in zip(children, created_by):
        assert child.parent == d.source
        first = [e for e in log if e.source == child.index]
        if first:
            assert first[0].consecutive == d.consecutive + 1


def test_premonitor_sets_initial_counts(tiny_tokenizer):
    # first round H = 2, later rounds H = 0: H_root (first 20 tokens of the bare prompt) = 2, H_bar (all) = 2/3
    plan = lambda r: (
        ("<search> q </search>", "stop", 2.0)
        if r == 0
        # noqa: E731
        else (("<search> q </search>", "stop", 0.0) if r == 1 else ("x", "eos", 0.0))
    )
    rollout, _, executor = make(
        tiny_tokenizer,
        plan,
        group_size=16,
        initial_rollouts=8,
        dynamic_rollouts=True,
        premonitor_rounds="all",
        max_tool_calls=5,
    )
    out = rollout.rollout(prompts(tiny_tokenizer, 2))
    m = premonitor_initial_rollouts(16, 2.0, 2.0 / 3, 0.5)
    assert out.metrics["rollout/premonitor_global"] == m == 11  # floor(16 * sigmoid(0.5 * 4 / 3)) + 1
    assert all(sum(not t.is_fill and t.parent is None for t in g) == m for g in out.groups)
    assert all(len(g) == 16 for g in out.groups)
    assert out.timing["time/premonitor"] > 0


def test_grpo_preset_rollout_never_branches(tiny_tokenizer):
    """`arpo_variant: grpo` (N = M) gives M independent trajectories; the same plan under ARPO (N < M) branches."""

    from llamafactory_agentic.hparams import AgenticArguments
    from llamafactory_agentic.train.arpo.config import rollout_config_from_args
    from llamafactory_agentic.train.presets import resolve_presets

    def agentic_args(**overrides):
        args = AgenticArguments(**overrides)
        args.stage = args.agentic_stage = "arpo"
        return args

    args = agentic_args(arpo_variant="grpo", arpo_rollout_n=6)
    resolve_presets(args, verbose=False)
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")

    def plan(r):  # two tool calls with a large entropy rise, then an answer: ARPO would branch
        if r < 2:
            return "<python> print(1) </python>", "stop", 1.0 + 3.0 * r
        return "<answer> \\boxed{1} </answer>", "eos", 4.0

    arpo = agentic_args(arpo_rollout_n=6, arpo_initial_rollouts=2)
    for variant_args, expect_branches in ((args, False), (arpo, True)):
        resolve_presets(variant_args, verbose=False)
        sampling = SimpleNamespace(do_sample=True, temperature=1.0, top_p=1.0, top_k=0)
        config = rollout_config_from_args(variant_args, sampling, eos, seed=0)
        rollout = AgenticRollout(
            ScriptedEngine(tiny_tokenizer, plan, eos), RecordingExecutor(), tiny_tokenizer, config
        )
        prompt = tiny_tokenizer.encode("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n")
        out = rollout.rollout([prompt, prompt], training=True)
        parents = [t.parent for g in out.groups for t in g]
        assert all(len(g) == 6 for g in out.groups)
        assert any(p is not None for p in parents) == expect_branches
        if not expect_branches:
            assert out.metrics["rollout/decisions"] == 0 and out.metrics["rollout/fills"] == 0

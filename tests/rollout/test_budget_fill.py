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

"""Budget fill modes (`arpo_budget_fill`, docs/algorithms.md §3.4 vs arXiv 2507.19849 §3.1) with a scripted engine."""

import pytest

from llamafactory_agentic.rollout import AgenticRollout
from llamafactory_agentic.train.arpo.config import default_rollout_config

from .helpers import RecordingExecutor, ScriptedEngine


class BatchRecordingEngine(ScriptedEngine):
    """ScriptedEngine that also records the number of requests of every round (one `generate` call per round)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batch_sizes = []

    def generate(self, requests, sampling):
        self.batch_sizes.append(len(requests))
        return super().generate(requests, sampling)


def make(tokenizer, plan, **cfg):
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = default_rollout_config(eos_token_id=eos, **cfg)
    engine = BatchRecordingEngine(tokenizer, plan, eos)
    return AgenticRollout(engine, RecordingExecutor(), tokenizer, config), engine


def prompts(tokenizer, n):
    return [tokenizer.encode(f"<|im_start|>user\nquestion {i}<|im_end|>\n<|im_start|>assistant\n") for i in range(n)]


def answer_now(r):
    return "<answer> 1 </answer>", "eos", 1.0


def calls_then_answer(num_calls, h0, dh):
    def plan(r):
        if r < num_calls:
            return f"<search> query {r} </search>", "stop", h0 if r == 0 else h0 + dh
        return "<answer> \\boxed{1} </answer>", "eos", h0 + dh

    return plan


@pytest.mark.parametrize("n_init", [1, 3, 8])
def test_no_tool_calls_fill_counts_and_rounds(tiny_tokenizer, n_init):
    # a policy that never calls a tool: every trajectory ends in its first round, so each prompt is short of M with
    # no active trajectory after round 1
    missing, num_prompts = 8 - n_init, 3
    per_round, eng_pr = make(tiny_tokenizer, answer_now, group_size=8, initial_rollouts=n_init)
    at_once, eng_ao = make(
        tiny_tokenizer, answer_now, group_size=8, initial_rollouts=n_init, budget_fill="all_at_once"
    )
    out_pr = per_round.rollout(prompts(tiny_tokenizer, num_prompts))
    out_ao = at_once.rollout(prompts(tiny_tokenizer, num_prompts))
    for out in (out_pr, out_ao):
        assert [len(g) for g in out.groups] == [8] * num_prompts
        assert out.metrics["rollout/fills"] == num_prompts * missing
        assert out.metrics["rollout/trajectories"] == num_prompts * 8
        for g in out.groups:
            assert all(t.parent is None for t in g)
            assert [t.is_fill for t in g] == [False] * n_init + [True] * missing
            assert [t.index for t in g] == list(range(8))
    # per_round: one fill per prompt per round -> 1 + (M - N) rounds; all_at_once: one extra round at most
    assert out_pr.metrics["rollout/rounds"] == 1 + missing
    assert out_pr.metrics["rollout/fill_rounds"] == missing
    assert eng_pr.batch_sizes == [num_prompts * n_init] + [num_prompts] * missing
    assert out_ao.metrics["rollout/rounds"] == 1 + (missing > 0)
    assert out_ao.metrics["rollout/fill_rounds"] == (missing > 0)
    assert eng_ao.batch_sizes == [num_prompts * n_init] + ([num_prompts * missing] if missing else [])
    assert per_round.last_state.created_log[0] == [1 if missing else 0] * num_prompts
    assert at_once.last_state.created_log[0] == [missing] * num_prompts


def test_fill_waits_for_active_trajectories(tiny_tokenizer):
    # deterministic rule with falling entropy never branches; each lineage makes two calls and answers in round 3,
    # so no fill happens while the initial rollouts are active, and each fill then lives for three rounds
    kwargs = dict(group_size=6, initial_rollouts=2, branch_rule="deterministic", max_tool_calls=5)
    plan = calls_then_answer(2, 1.0, -0.5)
    per_round, eng_pr = make(tiny_tokenizer, plan, **kwargs)
    at_once, eng_ao = make(tiny_tokenizer, plan, budget_fill="all_at_once", **kwargs)
    out_pr = per_round.rollout(prompts(tiny_tokenizer, 2))
    out_ao = at_once.rollout(prompts(tiny_tokenizer, 2))
    for out in (out_pr, out_ao):
        assert [len(g) for g in out.groups] == [6, 6]
        assert out.metrics["rollout/fills"] == 2 * 4 and out.metrics["rollout/branches"] == 0
        assert all(t.finish_reason == "eos" and t.num_tool_calls == 2 for g in out.groups for t in g)
    assert out_pr.metrics["rollout/rounds"] == 3 + 4 * 3
    assert eng_pr.batch_sizes == [4, 4, 4] + [2, 2, 2] * 4
    assert out_ao.metrics["rollout/rounds"] == 3 + 3
    assert (out_pr.metrics["rollout/fill_rounds"], out_ao.metrics["rollout/fill_rounds"]) == (4, 1)
    assert eng_ao.batch_sizes == [4, 4, 4, 8, 8, 8]
    assert at_once.last_state.created_log == [[0, 0], [0, 0], [4, 4], [0, 0], [0, 0], [0, 0]]


def test_fills_branch_later_and_group_stays_m(tiny_tokenizer):
    # rising entropy: the deterministic rule branches at every second call (never at the first, where dH = 0)
    kwargs = dict(group_size=6, initial_rollouts=2, branch_rule="deterministic", max_tool_calls=5)
    plan = calls_then_answer(2, 1.0, 0.5)
    per_round, _ = make(tiny_tokenizer, plan, **kwargs)
    at_once, _ = make(tiny_tokenizer, plan, budget_fill="all_at_once", **kwargs)
    out_pr = per_round.rollout(prompts(tiny_tokenizer, 1))
    out_ao = at_once.rollout(prompts(tiny_tokenizer, 1))
    # round 2: both initial rollouts branch (group 4); round 3: all four answer; then the fill
    g_pr, g_ao = out_pr.groups[0], out_ao.groups[0]
    assert len(g_pr) == len(g_ao) == 6
    # per_round: one fill (index 4) after round 3; it branches at its second call (round 5) -> index 5
    assert [t.is_fill for t in g_pr] == [False, False, False, False, True, False]
    assert [t.parent for t in g_pr] == [None, None, 0, 1, None, 4]
    assert out_pr.metrics["rollout/fills"] == 1 and out_pr.metrics["rollout/branches"] == 3
    assert out_pr.metrics["rollout/rounds"] == 3 + 3
    # all_at_once: both missing members are fills created after round 3; the group is full, so they cannot branch
    assert [t.is_fill for t in g_ao] == [False, False, False, False, True, True]
    assert [t.parent for t in g_ao] == [None, None, 0, 1, None, None]
    assert out_ao.metrics["rollout/fills"] == 2 and out_ao.metrics["rollout/branches"] == 2
    assert out_ao.metrics["rollout/rounds"] == 3 + 3


def test_budget_fill_validation():
    with pytest.raises(ValueError, match="budget fill"):
        default_rollout_config(budget_fill="sometimes")

# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The reward API for agents (issue 28 item 2, docs/rewards.md): context, weighted components, batched concurrent
scoring, the LLM-judge reward.

The judge is a local OpenAI-compatible HTTP server started by the test (`testing.FakeJudgeServer`, real HTTP on
127.0.0.1): a hosted judge model cannot run here (no model hub, no web API).
"""

import sqlite3
import sys
import time

import pytest

from llamafactory_agentic.rewards import (
    CompoundReward,
    JudgeSettings,
    RewardItem,
    build_reward,
    get_reward_function,
    parse_reward_funcs,
    score_batch,
    score_trajectories,
)
from llamafactory_agentic.rewards.compound import RewardContext, build_item
from llamafactory_agentic.rewards.judge import VerdictCache
from llamafactory_agentic.rollout.trajectory import ToolCallRecord, Trajectory
from llamafactory_agentic.testing import FakeJudgeServer


def answer(value: str, tools: str = "") -> str:
    return f"<think> r </think>{tools}<answer> The final answer is \\[ \\boxed{{{value}}} \\] </answer>"


CALLS = [
    ToolCallRecord("search", "capital of France", 10, "ok", 0.25, True, 7),
    ToolCallRecord("python", "print(1/0)", 30, "error", 1.5, False, 12),
    ToolCallRecord("python", "print(1/0)", 50, "repeat", 0.0, False, 5),
]


def trajectory(calls=CALLS, finish="eos") -> Trajectory:
    # 40 response tokens, 24 of them observations (loss mask 0)
    return Trajectory(
        uid="0-0-0",
        group_index=0,
        prompt_ids=[1, 2],
        response_ids=list(range(40)),
        loss_mask=[1] * 16 + [0] * 24,
        tool_calls=list(calls),
        num_tool_calls=len(calls),
        finish_reason=finish,
    )


ROW = {
    "_ground_truth": "Paris",
    "_data_source": "unit",
    "_ability": "qa",
    "_extra": None,
    "_prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "Capital of France?"}],
}


@pytest.fixture()
def reward_module(tmp_path, monkeypatch):
    (tmp_path / "api_reward_mod.py").write_text(
        "import asyncio\n"
        "SEEN = []\n\n"
        "def old(model_text, ground_truth, metadata):\n"
        "    SEEN.append(('old', metadata['executed_tools']))\n"
        "    return 1.0\n\n"
        "def positional(model_text, ground_truth, metadata, context):\n"
        "    SEEN.append(('positional', context))\n"
        "    return -0.1 * context.num_tool_calls\n\n"
        "def keyword(model_text, ground_truth, metadata, *, context=None):\n"
        "    SEEN.append(('keyword', context))\n"
        "    return float(context.finish_reason == 'eos')\n\n"
        "async def slow(model_text, ground_truth, metadata, context):\n"
        "    await asyncio.sleep(0.5)\n"
        "    return 0.5\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield sys.modules.setdefault("api_reward_mod", __import__("api_reward_mod"))
    sys.modules.pop("api_reward_mod", None)


def test_a_reward_receives_the_trajectory_context_and_old_rewards_keep_their_three_arguments(reward_module):
    """Old code: a reward saw only text, ground truth and {data_source, ability, extra, executed_tools}."""
    reward = build_reward(reward_funcs="api_reward_mod:old,api_reward_mod:positional:2,api_reward_mod:keyword:0.5")
    [result] = score_trajectories(reward, [trajectory()], [ROW], [answer("Paris")])
    seen = dict(reward_module.SEEN)
    assert seen["old"] == ["search", "python"]  # the three-argument function, called as before
    context = seen["positional"]
    assert context is seen["keyword"]
    assert isinstance(context, RewardContext)
    assert [(c.tool, c.content, c.status, c.latency_s, c.cached) for c in context.tool_calls] == [
        ("search", "capital of France", "ok", 0.25, True),
        ("python", "print(1/0)", "error", 1.5, False),
        ("python", "print(1/0)", "repeat", 0.0, False),
    ]
    assert (context.finish_reason, context.turns, context.num_tool_calls) == ("eos", 4, 3)
    assert (context.response_tokens, context.observation_tokens, context.generated_tokens) == (40, 24, 16)
    assert context.question == "Capital of France?" and context.ability == "qa"
    assert result.components == {
        "api_reward_mod.old": 1.0,
        "api_reward_mod.positional": pytest.approx(-0.3),
        "api_reward_mod.keyword": 1.0,
    }
    assert result.score == pytest.approx(1.0 + 2 * -0.3 + 0.5 * 1.0)


def test_a_single_reward_scores_as_before_with_no_components():
    [result] = score_trajectories(get_reward_function("f1"), [trajectory()], [ROW], [answer("Paris")])
    assert (result.score, result.correctness, result.format_ok, result.components) == (
        1.1,
        1.0,
        True,
        {},
    )  # both tools ran: bonus


def test_correctness_format_and_tool_efficiency_combine_with_their_weights():
    reward = build_reward(reward_funcs="f1:1.0,format:0.2,tool_efficiency:0.5")
    assert isinstance(reward, CompoundReward)
    good, bad_format, no_calls = score_trajectories(
        reward,
        [trajectory(), trajectory(), trajectory(calls=[])],
        [ROW, ROW, ROW],
        [answer("Paris"), "<answer> Paris </answer>", answer("Lyon")],
    )
    # one of three calls was useful (ok); the error and the repeat were wasted
    assert good.components == {"f1": 1.1, "format": 1.0, "tool_efficiency": pytest.approx(1 / 3)}
    assert good.score == pytest.approx(1.1 + 0.2 + 0.5 / 3)
    assert (good.correctness, good.format_ok) == (1.0, True)  # the first component's
    assert bad_format.components == {"f1": -1.0, "format": 0.0, "tool_efficiency": pytest.approx(1 / 3)}
    assert not bad_format.format_ok
    assert no_calls.components == {"f1": 0.0, "format": 1.0, "tool_efficiency": 1.0}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("f1", [("f1", 1.0)]),
        ("f1:1.0, format:0.2 ,my_mod:fn:0.5", [("f1", 1.0), ("format", 0.2), ("my_mod:fn", 0.5)]),
        ("my_mod:fn", [("my_mod:fn", 1.0)]),
        ("pkg.mod:Class.method:-1e-3", [("pkg.mod:Class.method", -0.001)]),
    ],
)
def test_reward_funcs_entries_parse_into_names_and_weights(spec, expected):
    assert parse_reward_funcs(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("f1,,format", "empty entry"),
        ("f1:inf", "non-finite weight"),
        ("f1:nan", "non-finite weight"),
        ("format:x", "the weight 'x' is not a number"),
        ("f1,f1:2", "listed twice"),
    ],
)
def test_bad_reward_funcs_entries_name_the_key(spec, message):
    with pytest.raises(ValueError, match=message) as err:
        parse_reward_funcs(spec)
    assert "agentic_reward_funcs" in str(err.value)


def test_async_rewards_of_a_batch_run_concurrently(reward_module):
    """Eight 0.5 s calls of an `async def` reward take about one call's time (old code: one trajectory at a time)."""
    reward = build_reward(reward_funcs="f1,api_reward_mod:slow:1")
    items = [build_item(trajectory(), ROW, answer("Paris")) for _ in range(8)]
    start = time.perf_counter()
    results = score_batch(reward, items)
    elapsed = time.perf_counter() - start
    assert [r.score for r in results] == [1.6] * 8  # f1 1.1 (tool bonus) + 0.5
    assert elapsed < 2.5, (
        f"8 slow calls took {elapsed:.2f} s; serial would be 4 s (bound: concurrency on a loaded machine)"
    )


def _judge_rule(prompt: str) -> str:
    predicted = prompt.split("Predicted Answer:")[1].strip()
    return "<judgment>Correct</judgment>" if predicted == "the city of Paris" else "Incorrect"


def test_the_judge_reward_uses_the_evaluation_judge_and_its_verdict_cache(tmp_path):
    cache = tmp_path / "judge_cache.sqlite"
    settings = JudgeSettings(base_url="", model="judge-model", cache=str(cache))
    with FakeJudgeServer(_judge_rule) as server:
        settings = JudgeSettings(base_url=server.url, model="judge-model", cache=str(cache), workers=4)
        reward = build_reward(reward_funcs="judge", judge=settings)
        texts = [answer("the city of Paris"), answer("Lyon"), answer("Paris"), "<answer> no box </answer>"]
        items = [RewardItem(t, ["Paris"], {}, RewardContext(question="Capital of France?")) for t in texts]
        results = score_batch(reward, items)
        assert [r.components["judge"] for r in results] == [1.0, 0.0, 1.0, 0.0]
        assert [r.reason for r in results] == [
            "judge: judge (judge)",
            "judge: judge (judge)",
            "judge: judge (rule)",
            "judge: judge (no_prediction)",
        ]
        # the exact answer is equivalent by rule and the boxless one has nothing to judge: two calls, not four
        assert len(server.prompts) == 2
        assert "Question: Capital of France?" in server.prompts[0] and "Golden Answer: Paris" in server.prompts[0]
        again = score_batch(reward, items[:2])  # the verdict cache answers: no new call
        assert [r.score for r in again] == [1.0, 0.0] and len(server.prompts) == 2
    # the evaluation's own cache class reads the verdicts (same file format as eval_judge_cache)
    assert len(VerdictCache(cache)) == 2


def test_a_failing_judge_scores_zero_with_its_error_and_is_not_cached(tmp_path):
    cache = tmp_path / "judge_cache.sqlite"
    with FakeJudgeServer(lambda prompt: (400, {"error": "bad request"})) as server:
        settings = JudgeSettings(base_url=server.url, model="judge-model", cache=str(cache), retries=1)
        [result] = score_batch(
            build_reward(reward_funcs="f1,judge", judge=settings), [RewardItem(answer("Lyon"), "Paris")]
        )
    assert result.components == {"f1": 0.0, "judge": 0.0}
    assert "judge: judge error:" in result.reason and "400" in result.reason
    with sqlite3.connect(cache) as db:
        assert db.execute("select count(*) from verdicts").fetchone()[0] == 0


def test_judge_calls_of_a_batch_run_concurrently_beside_the_other_components(tmp_path, reward_module):
    """A 0.5 s judge over 8 different answers plus a 0.5 s async reward: about one call, not 8 + 8 (8 s)."""
    with FakeJudgeServer(_judge_rule, delay_s=0.5) as server:
        settings = JudgeSettings(base_url=server.url, model="m", cache=str(tmp_path / "c.sqlite"), workers=8)
        reward = build_reward(reward_funcs="f1,judge:0.5,api_reward_mod:slow", judge=settings)
        items = [RewardItem(answer(f"town {i}"), "Paris", {}, RewardContext(question="q")) for i in range(8)]
        start = time.perf_counter()
        results = score_batch(reward, items)
        elapsed = time.perf_counter() - start
    assert len(server.prompts) == 8 and server.max_concurrent >= 4
    assert [r.score for r in results] == [0.5] * 8  # f1 0 + judge 0 + slow 0.5
    assert elapsed < 4.0, f"8 judge calls and 8 async calls took {elapsed:.2f} s; serial would be 8 s"


def test_the_trainer_scores_a_rollout_in_one_batch_and_keeps_the_components(tiny_tokenizer):
    """The trainer's score stage (`pipeline.score_groups`): per-component scores reach records and metrics."""
    from llamafactory_agentic.train.arpo.metrics import rollout_log_values, validation_metrics
    from llamafactory_agentic.train.arpo.pipeline import score_groups

    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")

    def traj(text, calls):
        ids = tiny_tokenizer.encode(text, add_special_tokens=False) + [eos]
        t = trajectory(calls=calls)
        t.response_ids, t.loss_mask = ids, [1] * len(ids)
        return t

    reward = build_reward(reward_funcs="f1:1.0,format:0.2,tool_efficiency:0.1")
    groups = [[traj(answer("Paris"), CALLS[:1]), traj("no answer", [])]]
    records = score_groups(reward, tiny_tokenizer, eos, groups, [ROW], [0])
    assert [r.components for r in records] == [
        {"f1": 1.0, "format": 1.0, "tool_efficiency": 1.0},
        {"f1": -1.0, "format": 0.0, "tool_efficiency": 1.0},
    ]
    assert [r.reward for r in records] == pytest.approx([1.3, -0.9])
    logged = rollout_log_values(records, {}, {})
    assert (logged["reward/f1"], logged["reward/format"], logged["reward/tool_efficiency"]) == (0.0, 0.5, 1.0)
    assert logged["reward/mean"] == pytest.approx(0.2) and logged["reward/accuracy"] == 0.5
    assert validation_metrics(records, {}, {})["reward/format"] == 0.5


def test_the_evaluation_record_scores_a_context_reward_with_the_trajectory(tiny_tokenizer):
    """The evaluation harness's reward column passes the same context (old code: three arguments, no context)."""
    from llamafactory_agentic.evaluation.benchmarks import Sample
    from llamafactory_agentic.evaluation.runner import build_record
    from llamafactory_agentic.rewards import CallableReward

    seen = []

    def calls(model_text, ground_truth, metadata, context):
        seen.append((context.question, metadata["executed_tools"]))
        return float(context.num_tool_calls)

    t = trajectory()
    t.response_ids = tiny_tokenizer.encode(answer("Paris"), add_special_tokens=False)
    t.loss_mask = [1] * len(t.response_ids)
    sample = Sample(benchmark="unit", sample_id="0", question="Capital of France?", answers=["Paris"])
    record = build_record(sample, 0, t, tiny_tokenizer, CallableReward(calls, "calls"), 0.1, 10, False)
    assert record["scores"]["reward"] == 3.0
    assert seen == [("Capital of France?", ["search", "python"])]

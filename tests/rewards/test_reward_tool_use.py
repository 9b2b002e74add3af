# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Issue 24: the tool bonus pays only for calls that ran; a call's code may contain its own tag.

The trajectories come from the real agent loop (`AgenticRollout`) with the real tool executor: the python tool runs
its code in a subprocess and the search tool answers from a real BM25 index. The policy is a scripted engine (its
text per round is fixed), so that the test controls what the model writes; everything after generation is real.
"""

import json
from types import SimpleNamespace

import pytest
from rollout.helpers import ScriptedEngine

from llamafactory_agentic.evaluation.benchmarks import Sample
from llamafactory_agentic.evaluation.runner import build_record
from llamafactory_agentic.rewards import build_model_view, get_reward_function
from llamafactory_agentic.rollout import AgenticRollout
from llamafactory_agentic.rollout.agent_loop import extract_tool_call
from llamafactory_agentic.train.arpo.config import default_rollout_config
from llamafactory_agentic.train.arpo.pipeline import score_groups


ANSWER = "<think> done </think><answer> The final answer is \\[ \\boxed{Paris} \\] </answer>"


@pytest.fixture(scope="module")
def executor(tmp_path_factory):
    from llamafactory_agentic.tools import build_executor_from_args
    from llamafactory_agentic.tools.index import build_corpus_from_cache_json

    root = tmp_path_factory.mktemp("tool-use")
    (root / "cache.json").write_text(json.dumps({"capital of France": "Page 1: Paris is the capital of France."}))
    build_corpus_from_cache_json(root / "cache.json", root / "index")
    args = SimpleNamespace(
        agentic_tool_workers=2,
        agentic_search_backend="local",
        agentic_search_index=str(root / "index"),
        agentic_search_topk=1,
        agentic_python_timeout=20,
        agentic_cache_path=None,
    )
    with build_executor_from_args(args) as executor:
        yield executor


def _rollout(tokenizer, executor, rounds: list[str], tool_call_limits=None):
    """One trajectory whose rounds are `rounds` (each but the last ends on a tool's closing tag), run for real."""
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def plan(r):
        return (rounds[r], "stop" if r < len(rounds) - 1 else "eos", 0.5)

    config = default_rollout_config(
        group_size=1,
        initial_rollouts=1,
        max_tool_calls=4,
        max_response_length=400,
        eos_token_id=eos,
        temperature=0.0,
        tool_call_limits=tool_call_limits,
    )
    prompt = tokenizer.encode("<|im_start|>user\nCapital of France?<|im_end|>\n<|im_start|>assistant\n")
    out = AgenticRollout(ScriptedEngine(tokenizer, plan, eos), executor, tokenizer, config).rollout([prompt], False)
    return out.groups[0][0]


def _training_reward(tokenizer, trajectory, reward_name="f1"):
    """What the trainer's score stage (`pipeline.score_groups`) pays for the trajectory."""
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    row = {"_ground_truth": "Paris", "_data_source": "unit", "_ability": "qa"}
    (record,) = score_groups(get_reward_function(reward_name), tokenizer, eos, [[trajectory]], [row], [0])
    return record.reward


def _evaluation_reward(tokenizer, trajectory):
    """What the evaluation harness records as `scores.reward` for the trajectory."""
    sample = Sample(benchmark="unit", sample_id="0", question="Capital of France?", answers=["Paris"])
    record = build_record(sample, 0, trajectory, tokenizer, get_reward_function("f1"), 0.1, 10, False)
    return record["scores"]["reward"]


@pytest.mark.parametrize(
    ("rounds", "statuses", "limits"),
    [
        # bare closing tags: no call was opened, the loop answers each with "Error: empty <tag> call."
        (["<think> a </think></search>", " </python>", " " + ANSWER], ["empty", "empty"], None),
        # empty calls
        (["<think> a </think><search> </search>", " <python></python>", " " + ANSWER], ["empty", "empty"], None),
        # a real search, then a python call past its per-trajectory limit: answered by a notice, never run
        (
            ["<think> a </think><search> capital of France </search>", " <python> print(1) </python>", " " + ANSWER],
            ["ok", "limit"],
            {"python": 0},
        ),
    ],
    ids=["bare-closing-tags", "empty-calls", "python-not-run"],
)
def test_no_tool_bonus_without_both_tools_running(tiny_tokenizer, executor, rounds, statuses, limits):
    """Old code: 1.1 for all three (the bonus looked for `</search>` and `</python>` in the text)."""
    trajectory = _rollout(tiny_tokenizer, executor, rounds, tool_call_limits=limits)
    assert [c.status for c in trajectory.tool_calls] == statuses
    assert trajectory.finish_reason == "eos"
    assert _training_reward(tiny_tokenizer, trajectory) == pytest.approx(1.0)
    assert _evaluation_reward(tiny_tokenizer, trajectory) == pytest.approx(1.0)
    # a caller that has only the text (no tool-call records) gets the text rule: a body and a result per call
    view = build_model_view(
        tiny_tokenizer,
        trajectory.response_ids,
        trajectory.loss_mask,
        tiny_tokenizer.convert_tokens_to_ids("<|im_end|>"),
    )
    expected_from_text = 1.1 if "limit" in statuses else 1.0  # the text cannot tell that a notice answered
    assert get_reward_function("f1")(view, "Paris", {}) == pytest.approx(expected_from_text)


def test_tool_bonus_when_search_and_python_both_ran(tiny_tokenizer, executor):
    """The python call's code contains the string '<python>': it runs as written (old parser: the code was `')`)."""
    rounds = [
        "<think> a </think><search> capital of France </search>",
        " <python> print('<python>', 40 + 2) </python>",
        " " + ANSWER,
    ]
    trajectory = _rollout(tiny_tokenizer, executor, rounds)
    python = trajectory.tool_calls[1]
    assert (python.content, python.status) == ("print('<python>', 40 + 2)", "ok")
    observation = [t for t, m in zip(trajectory.response_ids, trajectory.loss_mask) if m == 0]
    assert "<python> 42" in tiny_tokenizer.decode(observation)
    assert [c.status for c in trajectory.tool_calls] == ["ok", "ok"]
    assert _training_reward(tiny_tokenizer, trajectory) == pytest.approx(1.1)
    assert _evaluation_reward(tiny_tokenizer, trajectory) == pytest.approx(1.1)


def test_a_call_that_ran_counts_whatever_it_answered(tiny_tokenizer, executor):
    """A search without results and code that raises both ran: their observations are real tool answers."""
    rounds = [
        "<think> a </think><search> zzzz qqqq </search>",
        " <python> 1 / 0 </python>",
        " " + ANSWER,
    ]
    trajectory = _rollout(tiny_tokenizer, executor, rounds)
    assert [c.status for c in trajectory.tool_calls] == ["empty", "error"]
    assert _training_reward(tiny_tokenizer, trajectory) == pytest.approx(1.1)
    assert _evaluation_reward(tiny_tokenizer, trajectory) == pytest.approx(1.1)


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("<python> print('<python>') </python>", "print('<python>')"),
        ("<python>s = '<python>x'\nprint(s[8:])</python>", "s = '<python>x'\nprint(s[8:])"),
        # a tag mentioned while thinking does not open the call
        ("<think> I will use <python> now </think> <python> print(1) </python>", "print(1)"),
        ("<think> forgot to close <python> print(2) </python>", "print(2)"),  # unclosed think: the call still opens
        ("<think> only <python> here </think></python>", ""),  # no call outside the think block: empty call
        ("</python>", ""),
    ],
)
def test_python_call_content_keeps_its_own_tag(text, content):
    assert extract_tool_call(text, "</python>") == ("python", content)


def test_executed_tools_counts_only_calls_that_ran_and_answered():
    from llamafactory_agentic.rewards import executed_tools
    from llamafactory_agentic.rollout.trajectory import ToolCallRecord

    def call(tool, content, status):
        return ToolCallRecord(tool, content, 0, status, 0.0, False, 3)

    records = [
        call("search", "q", "ok"),
        call("search", "", "empty"),  # empty call
        call("python", "x", "limit"),  # past its limit: not run
        call("python", "x", "repeat"),  # repeated: not run
        call("search", "zzz", "cache_miss"),  # replay search without the query: nothing ran
        call("search", "q", "unknown_tool"),
        call("python", "1/0", "error"),  # ran and raised
        call("python", "while 1: pass", "timeout"),  # ran until its time limit
        call("search", "zzz", "empty"),  # ran, found nothing
    ]
    assert executed_tools(records) == ["search", "python", "python", "search"]
    reward = get_reward_function("em")
    text = f"<think> a </think><search> q </search><result></result><python> x </python><result></result>{ANSWER}"
    assert reward(text, "Paris", {"executed_tools": ["search", "python"]}) == pytest.approx(1.1)
    assert reward(text, "Paris", {"executed_tools": ["search", "search"]}) == 1.0  # records win over the text
    assert reward(text, "Paris", {"executed_tools": []}) == 1.0

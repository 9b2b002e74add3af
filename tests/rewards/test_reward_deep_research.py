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

"""The reference deep-research reward (docs/algorithms.md §6): format gate, extraction, F1, bonus, math modes."""

import pytest

from llamafactory_agentic.rewards import (
    exact_match_score,
    extract_boxed_answer,
    f1_score,
    get_reward_function,
    math_verify_score,
    normalize_answer,
    normalize_ground_truths,
    validate_format,
)


def _text(answer: str = "\\boxed{Paris}", tools: str = "") -> str:
    return f"<think> reasoning </think>{tools}<answer> The final answer is \\[ {answer} \\] </answer>"


SEARCH = "<search> capital of France </search><result></result> <think> ok </think>"
PYTHON = "<python> print(1) </python><result></result> <think> ok </think>"


@pytest.mark.parametrize(
    "text",
    [
        "<answer> \\boxed{Paris} </answer>",  # no think block
        "<think> a </think><think> b <answer> \\boxed{Paris} </answer>",  # unpaired think
        _text() + "<answer> \\boxed{Paris} </answer>",  # two answers
        "<think> a </think></answer> \\boxed{Paris} <answer>",  # closing tag first
        _text(tools="<search> q </search> <think> no result </think>"),  # search without result
        _text(tools="<search> q <result></result></search>"),  # result before </search>
        _text(tools="<python> x = 1 </python>"),  # python without result
        _text(answer="Paris"),  # no \boxed
        _text(answer="\\boxed{Paris"),  # \boxed{ without a later }
        _text(answer="\\boxed{a} and \\boxed{b"),  # passes the gate, last \boxed never closes -> extraction fails
        "",
    ],
)
def test_format_failures_score_minus_one(text):
    reward = get_reward_function("f1")
    assert reward(text, "Paris", {"ability": "qa"}) == -1.0


def test_validate_format_reasons():
    assert validate_format(_text(tools=SEARCH + PYTHON)) == (True, "format is correct")
    ok, reason = validate_format(_text(tools="<search> q </search>"))
    assert not ok and "search" in reason


def test_correct_answer_and_multi_tool_bonus():
    reward = get_reward_function("f1")
    meta = {"data_source": "hotpotqa", "ability": "qa"}
    assert reward(_text(), "Paris", meta) == 1.0
    assert reward(_text(tools=SEARCH), "Paris", meta) == 1.0
    assert reward(_text(tools=SEARCH + PYTHON), "Paris", meta) == pytest.approx(1.1)
    assert reward(_text(tools=SEARCH + PYTHON), "Lyon", meta) == 0.0  # no bonus without a correct answer
    # partial credit: precision 1/2, recall 1 -> F1 2/3, plus bonus
    assert reward(_text("\\boxed{Paris France}", SEARCH + PYTHON), "Paris", meta) == pytest.approx(2 / 3 + 0.1)


def test_tool_bonus_is_a_setting_of_the_built_in_rewards():
    """`agentic_reward_tool_bonus`: 0 turns the bonus off, another value replaces 0.1; user rewards refuse it."""
    meta = {"data_source": "synthetic_tool_use", "ability": "python_count"}
    for name in ("f1", "em", "math"):
        off = get_reward_function(name, tool_bonus=0.0).compute(_text("\\boxed{2}", SEARCH + PYTHON), "2", meta)
        assert (off.score, off.correctness, off.reason) == (1.0, 1.0, "correct"), name
        big = get_reward_function(name, tool_bonus=0.5)(_text("\\boxed{2}", SEARCH + PYTHON), "2", meta)
        assert big == pytest.approx(1.5), name
        assert get_reward_function(name, tool_bonus=0.5)(_text("\\boxed{2}", SEARCH), "2", meta) == 1.0, name
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite number >= 0"):
            get_reward_function("em", tool_bonus=bad)
    with pytest.raises(ValueError, match="computes its own score"):
        get_reward_function("os.path:exists", tool_bonus=0.0)
    assert get_reward_function("os.path:exists").name == "os.path:exists"  # the default bonus passes through


def test_yes_no_rule():
    assert f1_score("yes", "no") == 0.0
    assert f1_score("Yes.", "yes") == 1.0
    assert f1_score("yes it is", "yes") == 0.0  # reference is "yes" and the prediction differs
    assert f1_score("no answer", "noanswer") == 0.0  # "no answer" normalises to two tokens, not "noanswer"
    assert f1_score("noanswer", ["yes", "noanswer"]) == 1.0


def test_normalisation_examples():
    assert normalize_answer("3\\sqrt{3} - 6") == "3sqrt3 6"
    assert normalize_answer("The  Eiffel-Tower, a landmark!") == "eiffeltower landmark"
    assert f1_score("3\\sqrt{3} - 6", "-6 + 3\\sqrt{3}") == 1.0
    assert f1_score("3\\sqrt{3} - 6", "3\\sqrt{3}-6") == 0.0  # "3sqrt3 6" vs "3sqrt36": reference behaviour
    assert exact_match_score("The Paris", "paris") == 1.0
    assert exact_match_score("Paris France", "Paris") == 0.0


def test_boxed_extraction():
    assert extract_boxed_answer("x \\boxed{1} y \\boxed{\\frac{1}{2}} z") == "\\frac{1}{2}"
    assert extract_boxed_answer("\\boxed{a} then \\boxed 42$ done") == "42"
    assert extract_boxed_answer("\\boxed{a} \\boxedx") == "a"
    assert extract_boxed_answer("\\boxed{a") is None
    assert extract_boxed_answer("no box") is None
    # only the answer span counts: a \boxed in the reasoning is ignored
    text = "<think> maybe \\boxed{9} </think><answer> \\boxed{3} </answer>"
    assert get_reward_function("f1")(text, "3", {}) == 1.0
    assert get_reward_function("f1")(text, "9", {}) == 0.0


def test_ground_truth_forms():
    assert normalize_ground_truths(["Paris", "City of Paris"]) == ["Paris", "City of Paris"]
    assert normalize_ground_truths('["Paris", "Lyon"]') == ["Paris", "Lyon"]
    assert normalize_ground_truths("['Paris', 'Lyon']") == ["Paris", "Lyon"]
    assert normalize_ground_truths("[1, 2]") == ["[1, 2]"]  # a math interval, not a list of aliases
    assert normalize_ground_truths("[4,\\infty)") == ["[4,\\infty)"]
    assert normalize_ground_truths(42) == ["42"]
    assert normalize_ground_truths(None) == []
    assert normalize_ground_truths([["a"], "b", 3]) == ["a", "b", "3"]
    assert f1_score("Lyon", '["Paris", "Lyon"]') == 1.0
    assert f1_score("37", "(37") == 1.0  # noisy reference: punctuation is normalised away
    assert f1_score("Paris", None) == 0.0
    assert f1_score("Paris", "") == 0.0
    assert get_reward_function("f1")(_text("\\boxed{city of paris}"), ["Lyon", "City of Paris"], {}) == 1.0


def test_math_verify_equivalence():
    assert math_verify_score("\\frac{1}{2}", "0.5") == 1.0
    assert math_verify_score("-6 + 3\\sqrt{3}", "3\\sqrt{3} - 6") == 1.0
    assert math_verify_score("\\frac{1}{3}", "0.5") == 0.0
    assert math_verify_score("37", "(37") == 0.0  # an unparsable reference is not equivalent, no exception
    assert math_verify_score("", "3") == 0.0
    assert math_verify_score("2", ["7", "2"]) == 1.0


@pytest.mark.parametrize(
    "mode, ability, expected",
    [
        ("f1", "math", 0.0),  # F1("frac12", "05") = 0
        ("math_verify", "math", 1.0),
        ("max", "math", 1.0),
        ("math_verify", "qa", 0.0),  # only ability == math rows use math-verify
        ("math_verify", None, 0.0),
    ],
)
def test_math_modes(mode, ability, expected):
    reward = get_reward_function("f1", math_mode=mode)
    assert reward(_text("\\boxed{\\frac{1}{2}}"), "0.5", {"ability": ability}) == expected


def test_math_mode_max_keeps_partial_f1_and_bonus():
    reward = get_reward_function("f1", math_mode="max")
    # math-verify says no (x = 2 vs 3), F1 gives partial credit for the shared token "x"
    assert reward(_text("\\boxed{x 2}"), "x 3", {"ability": "math"}) == pytest.approx(0.5)
    verified = get_reward_function("f1", math_mode="math_verify")
    assert verified(_text("\\boxed{0.5}", SEARCH + PYTHON), "\\frac{1}{2}", {"ability": "math"}) == pytest.approx(1.1)
    assert verified(_text("\\boxed{0.5", SEARCH + PYTHON), "\\frac{1}{2}", {"ability": "math"}) == -1.0


def test_math_reward_name_verifies_every_row():
    reward = get_reward_function("math")
    assert reward(_text("\\boxed{\\frac{1}{2}}"), "0.5", {"ability": "qa"}) == 1.0
    assert reward(_text("\\boxed{\\frac{1}{3}}"), "0.5", {}) == 0.0


def test_reward_result_details():
    result = get_reward_function("em").compute(_text("\\boxed{The Paris}", SEARCH + PYTHON), "paris", {})
    assert result.score == pytest.approx(1.1) and result.correctness == 1.0 and result.answer == "The Paris"
    failed = get_reward_function("em").compute("<think></think>", "paris", {})
    assert failed.score == -1.0 and not failed.format_ok and "format" in failed.reason


def test_real_ground_truths_score_themselves(shared_data):
    # every ground truth of the shipped RL files is handled without error and scores F1 = 1 against itself
    # (except the few whose normalised form is empty)
    import pyarrow.parquet as pq

    reward = get_reward_function("f1")
    for name in ("valid", "hard_search_1k"):
        rows = pq.read_table(shared_data / "arpo" / "rl" / f"{name}.parquet").to_pylist()
        for row in rows:
            truth = row["reward_model"]["ground_truth"]
            if not normalize_answer(truth) or "}" in truth or "{" in truth:
                continue  # braces would break the \boxed{} wrapper of this synthetic answer
            score = reward(_text("\\boxed{" + truth + "}"), truth, {"ability": row["ability"]})
            assert score == 1.0, (name, truth)


@pytest.mark.parametrize("name", ["f1", "em"])
def test_numeric_ground_truths_compare_as_numbers(name):
    # issue 8 item 3: SQuAD normalisation deleted the decimal point, so "10.0" became "100" (the answer 10 scored 0
    # and 100 scored 1); numbers with a fraction or an exponent are now compared in canonical decimal form
    reward = get_reward_function(name)
    for truth in (10.0, "10.0", "10.00", [10.0, "ten"]):
        assert reward(_text("\\boxed{10}"), truth, {}) == 1.0, truth
        assert reward(_text("\\boxed{10.0}"), truth, {}) == 1.0, truth
        assert reward(_text("\\boxed{100}"), truth, {}) == 0.0, truth
    assert reward(_text("\\boxed{10.5}"), "10.50", {}) == 1.0
    assert reward(_text("\\boxed{1050}"), "10.50", {}) == 0.0
    assert reward(_text("\\boxed{105}"), 10.5, {}) == 0.0
    assert reward(_text("\\boxed{1000}"), "1e3", {}) == 1.0
    assert reward(_text("\\boxed{1,000}"), 1000, {}) == 1.0
    assert reward(_text("\\boxed{1,000.50}"), "1000.5", {}) == 1.0
    assert reward(_text("\\boxed{\\$10.50}"), "10.5 dollars", {}) == pytest.approx(2 / 3 if name == "f1" else 0.0)


def test_number_normalisation_examples():
    assert normalize_answer("$10.50") == "10.5"
    assert normalize_answer("92.46\\%") == "92.46"
    assert normalize_answer("8.005 million") == "8.005 million"
    assert normalize_answer("128.0") == "128"
    assert normalize_answer("The answer is 10.") == "answer is 10"
    assert normalize_answer("1.5e-3") == "0.0015"
    assert normalize_answer("1e400") == "1e400"  # exponent out of range: left as written
    assert normalize_answer("-0.0") == "0"
    # integers, versions and numbers glued to letters keep the reference behaviour
    assert normalize_answer("007") == "007"
    assert normalize_answer("1,000") == "1000"
    assert normalize_answer("v1.2.3") == "v123"
    assert normalize_answer("3.5.2020") == "352020"
    assert normalize_ground_truths(10.0) == ["10"]
    assert normalize_ground_truths(10.5) == ["10.5"]
    assert normalize_ground_truths(float("nan")) == []  # no usable reference: scores 0, never raises
    assert normalize_ground_truths([1e3, 7]) == ["1000", "7"]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        # the only answer is written while thinking
        ("<think> so <answer> The final answer is \\[ \\boxed{Paris} \\] </answer> </think>", "a <think> block"),
        # ... or printed by the code of a python call
        (
            "<think> a </think><python> print('<answer> \\boxed{Paris} </answer>') </python><result></result>"
            "<think> b </think>",
            "a <python> call",
        ),
        # ... or sent as a search query
        (
            "<think> a </think><search> <answer> \\boxed{Paris} </answer> </search><result></result><think> b </think>",
            "a <search> call",
        ),
    ],
)
def test_answer_inside_think_or_a_tool_call_is_a_format_failure(text, where):
    """Issue 24: each scored 1.0 (one <answer>, one </answer>, a \\boxed{} in the span); the answer must be outside."""
    assert validate_format(text) == (False, f"<answer> is inside {where}")
    assert get_reward_function("f1")(text, "Paris", {}) == -1.0
    # the same answer written after the block is fine
    fixed = text.replace("<answer> ", "").replace(" </answer>", "").replace("\\boxed{Paris}", "") + _text()
    assert validate_format(fixed) == (True, "format is correct")
    assert get_reward_function("f1")(fixed, "Paris", {}) == 1.0

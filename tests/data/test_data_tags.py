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

"""Pure-text operations on inline trajectories: split, join, tag balance, the \\x08oxed repair."""

import pytest

from llamafactory_agentic.data.tags import (
    TrajectoryFormatError,
    Turn,
    check_tag_balance,
    check_turns_balance,
    count_control_chars,
    join_trajectory,
    repair_boxed,
    split_inline_trajectory,
    unwrap_observation,
    wrap_observation,
)


TRAJECTORY = (
    "<think> I need the year. </think>\n<search> Balliol College founded </search> <result>\n"
    "Page 1: Balliol College was founded in 1263.\n</result> <think> Now compute. </think>\n"
    "<python>\nprint(2024 - 1263)\n</python> <result>\n761\n</result> <think> Done. </think> "
    "<answer> The final answer is \\[ \\boxed{761} \\] </answer>"
)


def test_split_inline_trajectory_into_function_observation_assistant():
    turns = split_inline_trajectory(TRAJECTORY)
    assert [t.role for t in turns] == ["function", "observation", "function", "observation", "assistant"]
    assert turns[0].content == "<think> I need the year. </think>\n<search> Balliol College founded </search>"
    # raw tool output: no tags, no newline after <result> / before </result>
    assert turns[1].content == "Page 1: Balliol College was founded in 1263."
    assert turns[2].content == " <think> Now compute. </think>\n<python>\nprint(2024 - 1263)\n</python>"
    assert turns[3].content == "761"
    assert turns[4].content == " <think> Done. </think> <answer> The final answer is \\[ \\boxed{761} \\] </answer>"


def test_join_is_the_inverse_of_split_for_rollout_shaped_text():
    assert join_trajectory(split_inline_trajectory(TRAJECTORY)) == TRAJECTORY


def test_split_normalises_whitespace_around_results_to_the_rollout_format():
    text = "<search> q </search>\n\n<result>Page 1: x</result> <answer> a </answer>"
    turns = split_inline_trajectory(text)
    assert turns[0].content == "<search> q </search>"
    assert turns[1].content == "Page 1: x"
    assert join_trajectory(turns) == "<search> q </search> <result>\nPage 1: x\n</result> <answer> a </answer>"


def test_split_without_results_gives_one_assistant_turn_and_keeps_a_final_unanswered_call():
    assert split_inline_trajectory("<think> easy </think> <answer> 4 </answer>") == [
        Turn("assistant", "<think> easy </think> <answer> 4 </answer>")
    ]
    # call limit reached: the trajectory ends right after the tool call, no result was inserted
    assert split_inline_trajectory("<search> q </search>") == [Turn("assistant", "<search> q </search>")]


@pytest.mark.parametrize(
    "text",
    [
        "<think> a </think> <result>\nx\n</result>",  # after </think>, not a tool call
        "<result>\nx\n</result> <answer> 1 </answer>",  # at the start
        "<search> q </search> <result>\nx\n</result><result>\ny\n</result>",  # two results for one call
    ],
)
def test_result_block_must_follow_a_closing_tool_tag(text):
    with pytest.raises(TrajectoryFormatError) as info:
        split_inline_trajectory(text)
    assert info.value.tag == "<result>"


def test_custom_tool_tags_split_too():
    turns = split_inline_trajectory("<browse> url </browse> <result>\npage\n</result> done")
    assert [t.role for t in turns] == ["function", "observation", "assistant"]


def test_wrap_and_unwrap_observation():
    assert wrap_observation("42") == " <result>\n42\n</result>"
    assert unwrap_observation(" <result>\n42\n</result>") == "42"
    assert unwrap_observation("<result>42</result>") == "42"
    assert unwrap_observation("Page 1: plain") == "Page 1: plain"


def test_balanced_trajectory_passes_and_result_content_is_not_inspected():
    check_tag_balance(TRAJECTORY)
    # a search snippet may contain anything, including tags
    check_tag_balance("<search> q </search> <result>\nsee <think> and </python>\n</result> <answer> a </answer>")


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        ("<think> a <search> q </search> <answer> b </answer>", "<think>"),  # never closed
        ("<think> a </think> </search> <answer> b </answer>", "</search>"),  # closes nothing
        ("<answer> a <answer> b </answer>", "<answer>"),  # opens twice
        ("<search> q </search> <result>\nno end <answer> x </answer>", "<result>"),  # stray <result>
        ("<python> x </python> out\n</result>", "</result>"),  # stray </result>
    ],
)
def test_unbalanced_tags_name_the_tag(text, tag):
    with pytest.raises(TrajectoryFormatError) as info:
        check_tag_balance(text)
    assert info.value.tag == tag
    assert tag in str(info.value)


def test_repair_boxed_and_control_characters():
    text = "answer in \x08oxed{} ... \\[ \x08oxed{x} \\]\x0c\r"
    repaired, count = repair_boxed(text)
    assert count == 2
    assert repaired == "answer in \\boxed{} ... \\[ \\boxed{x} \\]\x0c\r"
    assert repair_boxed("already \\boxed{1}") == ("already \\boxed{1}", 0)
    # the backspace of \x08oxed is reported by the repair, not as another control character; \n and \t are fine
    assert count_control_chars(text + "\n\t") == {"\x0c": 1, "\r": 1}
    assert count_control_chars("a\x08b") == {"\x08": 1}


def test_turn_balance_ignores_observation_text():
    from llamafactory_agentic.data.tags import Turn, check_turns_balance

    turns = [
        Turn("function", "<think> look it up </think>\n<search> q </search>"),
        Turn("observation", "a page quoting </result> <result> <answer> </think> verbatim"),
        Turn("assistant", " <answer> \\boxed{1} </answer>"),
    ]
    check_turns_balance(turns)
    # the model-written text is still checked
    turns[2] = Turn("assistant", " <answer> \\boxed{1}")
    with pytest.raises(TrajectoryFormatError, match="<answer> at character .* is never closed"):
        check_turns_balance(turns)
    # the same turns joined into inline text are ambiguous (the inline layout cannot tell where the result ends)
    turns = [turns[0], Turn("observation", "quoting </result> here"), Turn("assistant", " <answer> 1 </answer>")]
    check_turns_balance(turns)
    with pytest.raises(TrajectoryFormatError, match="stray </result>"):
        check_tag_balance(join_trajectory(turns))


def test_tool_call_bodies_are_not_inspected():
    """Issue 24: code may contain its own tag or any other; the old check read `'<python>'` in code as a second call
    ("<python> ... opens again before the <python> ... is closed") and `'<answer>'` in code as the answer tag."""
    code = "<python> print('<python>', '<answer>') </python>"
    text = f"<think> a </think>{code} <result>\n<python> <answer>\n</result> <answer> \\boxed{{1}} </answer>"
    check_tag_balance(text)
    check_turns_balance(split_inline_trajectory(text))
    with pytest.raises(TrajectoryFormatError, match="never closed") as info:
        check_tag_balance("<think> a </think><python> print(1)")
    assert info.value.tag == "<python>"

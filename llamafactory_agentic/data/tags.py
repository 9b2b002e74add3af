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

r"""The inline-tag trajectory format of ARPO (docs/algorithms.md §2) as plain-text operations.

A trajectory is one assistant text such as::

    <think> ... </think>
    <search> query </search> <result>
    Page 1: ...
    </result> <think> ... </think> <answer> The final answer is \[ \boxed{42} \] </answer>

This module splits it into LLaMA-Factory turns (`function` = model text through the closing tool tag, `observation` =
raw tool output, `assistant` = the text after the last result), joins turns back into the inline text, checks that
tags are balanced, and repairs the `\x08oxed` corruption of the ARPO RL files. Nothing here imports torch or
LLaMA-Factory.
"""

import re
from collections import Counter
from dataclasses import dataclass


THINK_TAG = "think"
ANSWER_TAG = "answer"
RESULT_TAG = "result"
TOOL_TAGS = ("search", "python")
CHECKED_TAGS = (THINK_TAG, *TOOL_TAGS, RESULT_TAG, ANSWER_TAG)
NON_TOOL_TAGS = frozenset({THINK_TAG, ANSWER_TAG, RESULT_TAG})
# Tags a tool may not take (docs/tools.md "Reserved tags"): a tool tagged `think` would receive every thought, one
# tagged `answer` would never run (the answer ends the trajectory), one tagged `result` would make the observation's
# own opening tag a stop string.
RESERVED_TAGS = NON_TOOL_TAGS


def reserved_tag_error(tag: str, rename: str) -> str | None:
    r"""The message refusing `tag` as a tool tag, or None when the tag is free.

    Args:
        tag: The tag a tool would be called by (`<tag>...</tag>`); compared exactly, as the rollout matches tags.
        rename: How to give the tool another tag in its config, e.g. "`tag: think_tool` in the entry".

    Returns:
        A message naming the tag, why it is reserved and the fix; None for a tag that is not reserved.
    """
    if tag not in RESERVED_TAGS:
        return None
    why = {
        THINK_TAG: "the model's reasoning is written in <think>...</think>, so every thought would be sent to the tool",
        ANSWER_TAG: "<answer>...</answer> ends the trajectory, so the tool would never run",
        RESULT_TAG: "<result>...</result> wraps every observation, so the tag would stop generation at each result",
    }[tag]
    return (
        f"tag <{tag}> is reserved ({', '.join(f'<{t}>' for t in sorted(RESERVED_TAGS))} belong to the trajectory "
        f'format: {why}); give the tool another tag: {rename} (docs/tools.md, "Reserved tags")'
    )


# Inserted after a tool call, RUC-NLPIR/ARPO vllm_rollout_with_tools.py:363-426 (docs/algorithms.md §2.3).
OBSERVATION_PREFIX = " <result>\n"
OBSERVATION_SUFFIX = "\n</result>"

BROKEN_BOXED = "\x08oxed"
REPAIRED_BOXED = "\\boxed"

_RESULT_BLOCK = re.compile(r"<result>(.*?)</result>", re.DOTALL)
_CLOSING_TAG_AT_END = re.compile(r"</([A-Za-z_][\w.-]*)>$")
_ALLOWED_CONTROL = frozenset("\n\t")


class TrajectoryFormatError(ValueError):
    r"""An inline trajectory cannot be split or has unbalanced tags.

    Attributes:
        tag: The offending tag written as `<name>` or `</name>` (None when the problem is not about one tag).
        problem: What is wrong, in words.
    """

    def __init__(self, problem: str, tag: str | None = None):
        r"""Build the error from its description and the offending tag."""
        super().__init__(problem)
        self.problem = problem
        self.tag = tag


@dataclass
class Turn:
    r"""One LLaMA-Factory message of a split trajectory.

    Attributes:
        role: `function` (sampled text ending in a closing tool tag), `observation` (tool output, no tags) or
            `assistant` (sampled text after the last result).
        content: The message text.
    """

    role: str
    content: str


def repair_boxed(text: str) -> tuple[str, int]:
    r"""Replace every `\x08oxed` (backspace + "oxed", an unescaped `\b`) with `\boxed`.

    Source: docs/algorithms.md §2.8.

    Returns:
        The repaired text and the number of replacements.
    """
    count = text.count(BROKEN_BOXED)
    if count == 0:
        return text, 0

    return text.replace(BROKEN_BOXED, REPAIRED_BOXED), count


def count_control_chars(text: str) -> Counter:
    r"""Count C0 control characters other than `\n` and `\t` (and other than the `\x08` of `\x08oxed`).

    Returns:
        A `Counter` mapping each control character to its number of occurrences.
    """
    counts: Counter = Counter()
    for pos, char in enumerate(text):
        if ord(char) < 32 and char not in _ALLOWED_CONTROL:
            if char == "\x08" and text.startswith("oxed", pos + 1):
                continue

            counts[char] += 1

    return counts


def unwrap_observation(text: str) -> str:
    r"""Tool output without the `<result>` tags and the newline after/before them, if it carries them.

    `" <result>\nPage 1\n</result>"` and `"Page 1"` both give `"Page 1"`; text without tags loses nothing.
    """
    stripped = text.strip()
    if stripped.startswith("<result>") and stripped.endswith("</result>") and stripped.count("<result>") == 1:
        return _strip_one_newline(stripped[len("<result>") : -len("</result>")])

    return text


def wrap_observation(text: str) -> str:
    r"""The observation the rollout inserts: `" <result>\n" + text + "\n</result>"` (docs/algorithms.md §2.3)."""
    return OBSERVATION_PREFIX + text + OBSERVATION_SUFFIX


def empty_call_text(tag: str) -> str:
    r"""Observation of an empty tool call: `Error: empty <tag> call.` (docs/algorithms.md §2.5, §12)."""
    return f"Error: empty <{tag}> call."


def _strip_one_newline(text: str) -> str:
    if text.startswith("\n"):
        text = text[1:]

    if text.endswith("\n"):
        text = text[:-1]

    return text


def split_inline_trajectory(text: str) -> list[Turn]:
    r"""Split one inline trajectory into function / observation / assistant turns.

    Every `<result>…</result>` block must follow (after optional whitespace) a closing tool tag such as `</search>` or
    `</python>` (any tag name except think/answer/result counts as a tool). The text up to and including that closing
    tag becomes a `function` turn (the whitespace before `<result>` is dropped: the template re-inserts the single
    space the rollout writes), the block's content without the newline after `<result>` and before `</result>` an
    `observation` turn, and the text after the last block the final `assistant` turn (possibly empty). A text without
    result blocks gives one `assistant` turn.

    Args:
        text: The assistant text of a trajectory.

    Returns:
        Turns in order: `[function, observation] * n + [assistant]`.

    Raises:
        TrajectoryFormatError: if a result block does not follow a closing tool tag.
    """
    turns: list[Turn] = []
    pos = 0
    for match in _RESULT_BLOCK.finditer(text):
        before = text[pos : match.start()].rstrip()
        closing = _CLOSING_TAG_AT_END.search(before)
        if closing is None or closing.group(1) in NON_TOOL_TAGS:
            raise TrajectoryFormatError(
                f"the <result> block at character {match.start()} does not follow a closing tool tag such as "
                "</search> or </python>",
                tag="<result>",
            )

        turns.append(Turn("function", before))
        turns.append(Turn("observation", _strip_one_newline(match.group(1))))
        pos = match.end()

    turns.append(Turn("assistant", text[pos:]))
    return turns


def join_trajectory(turns: list[Turn]) -> str:
    r"""Inverse of `split_inline_trajectory`: one inline text with each observation wrapped as the rollout does.

    Args:
        turns: function / observation / assistant turns of one trajectory, in order.

    Returns:
        The text, e.g. `"<search> q </search> <result>\nPage 1\n</result> <answer> a </answer>"`.
    """
    parts = []
    for turn in turns:
        if turn.role == "observation":
            parts.append(wrap_observation(unwrap_observation(turn.content)))
        else:
            parts.append(turn.content)

    return "".join(parts)


def check_tag_balance(text: str, tags: tuple[str, ...] = CHECKED_TAGS) -> None:
    r"""Check that the model-written tags of an inline trajectory open and close in turn.

    Result blocks are environment output, so their content is not inspected (a search snippet may contain anything);
    a `<result>` or `</result>` left over after removing whole blocks is unbalanced. The body of a tool call (from
    `<search>`/`<python>` to the first closing tag of that tool, where the rollout stops) is a query or code, so it is
    not inspected either: code may print `'<python>'` or `'<answer>'`. For every other tag in `tags` the occurrences
    must alternate opening, closing, opening, ... and end closed. Nesting across different tags is not checked.

    Args:
        text: The inline trajectory.
        tags: Tag names to check.

    Raises:
        TrajectoryFormatError: naming the first unbalanced tag and its character offset in the text without results.
    """
    model_text = _RESULT_BLOCK.sub(" ", text)
    pattern = re.compile(r"<(/?)(" + "|".join(re.escape(tag) for tag in tags) + r")>")
    open_at: dict[str, int | None] = dict.fromkeys(tags)
    cursor = 0
    while (match := pattern.search(model_text, cursor)) is not None:
        cursor = match.end()
        closing, name = match.group(1) == "/", match.group(2)
        if name in TOOL_TAGS and not closing:
            close = model_text.find(f"</{name}>", cursor)
            if close < 0:
                raise TrajectoryFormatError(f"<{name}> at character {match.start()} is never closed", tag=f"<{name}>")
            cursor = close + len(name) + 3  # the call's body is a query or code: any text, not checked
            continue
        if name == RESULT_TAG:
            raise TrajectoryFormatError(
                f"<result> and </result> do not pair up (stray {match.group(0)} at character {match.start()} of the "
                "text without result blocks)",
                tag=match.group(0),
            )

        if closing:
            if open_at[name] is None:
                raise TrajectoryFormatError(
                    f"</{name}> at character {match.start()} closes no open <{name}>", tag=f"</{name}>"
                )

            open_at[name] = None
        else:
            if open_at[name] is not None:
                raise TrajectoryFormatError(
                    f"<{name}> at character {match.start()} opens again before the <{name}> at character "
                    f"{open_at[name]} is closed",
                    tag=f"<{name}>",
                )

            open_at[name] = match.start()

    for name, start in open_at.items():
        if start is not None:
            raise TrajectoryFormatError(f"<{name}> at character {start} is never closed", tag=f"<{name}>")


def check_turns_balance(turns: list[Turn], tags: tuple[str, ...] = CHECKED_TAGS) -> None:
    r"""`check_tag_balance` over the model-written turns of a split trajectory; observation text is not inspected.

    Each observation counts as an empty `<result></result>` block, so a tool output may contain any text, also a
    literal `</result>`, `<answer>` or `</think>` (a web page quoting markup), while function and assistant turns
    are checked as in `check_tag_balance`.

    Args:
        turns: function / observation / assistant turns of one trajectory, in order.
        tags: Tag names to check.

    Raises:
        TrajectoryFormatError: naming the first unbalanced tag of the model-written text.
    """
    check_tag_balance(join_trajectory([Turn(t.role, "") if t.role == "observation" else t for t in turns]), tags)

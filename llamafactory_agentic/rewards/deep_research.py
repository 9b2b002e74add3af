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

r"""The reference deep-research reward: format gate, `\boxed{}` extraction, SQuAD-style token F1, multi-tool bonus.

Documented in docs/algorithms.md §6; reference RUC-NLPIR/ARPO
`ARPO/verl_arpo_entropy/verl/utils/reward_score/deep_research.py:9-76,212-279,317-351` (arXiv 2507.19849 section 3.2,
Eq. 8). All functions take the *model view* of a response (see `model_view.build_model_view`): model-written text with
every observation reduced to `<result></result>`.
"""

import ast
import json
import math
import re
import string
from collections import Counter
from collections.abc import Iterable
from typing import Any

from ..data.rl_schema import canonical_decimal, format_number


_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_YES_NO = frozenset({"yes", "no", "noanswer"})
_ANSWER_SPAN = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# a number with a fraction or an exponent (optional thousands commas), not glued to a letter, a digit or another
# decimal point ("v1.2", "3.5.2020" and integers are left to the reference normalisation); applied after lower-casing
_DECIMAL_NUMBER = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+(?:e[+-]?\d+)?|e[+-]?\d+)(?!\d|[.,]\d)")


def validate_format(text: str) -> tuple[bool, str]:
    r"""The reference format gate; any failure makes the reward -1.

    Rules, in order:
    1. `<think>` and `</think>` occur equally often, at least once.
    2. Exactly one `<answer>` and exactly one `</answer>`, the opening tag first.
    3. Every `<search>` is followed, in order, by `</search>`, `<result>`, `</result>`: scanning from the start, for
       each next `<search>` the first `</search>` after it, the first `<result>` after it and the first `</result>`
       after that `<result>` must all exist and satisfy `<search>` < `</search>` < `<result>` < `</result>`; the scan
       resumes after that `</result>`. The same for `<python>`.
    4. The answer span (from `<answer>` up to `</answer>`) contains `\boxed{` and a `}` after it.
    5. `<answer>` and `</answer>` lie outside every `<think>` block and every tool call (`<search>` or `<python>` up to
       its closing tag; blocks are paired as in rule 3): an answer written while thinking or inside code or a query
       is not an answer (the project's rule, not the reference's; docs/algorithms.md §6.1).

    Source: RUC-NLPIR/ARPO `ARPO/verl_arpo_entropy/verl/utils/reward_score/deep_research.py:9-76` (rules 1-4).

    Args:
        text: Model view of the response.

    Returns:
        `(ok, reason)`; `reason` names the first failed rule (or "format is correct").
    """
    num_think = text.count("<think>")
    if num_think != text.count("</think>"):
        return False, "<think> and </think> counts differ"
    if num_think == 0:
        return False, "no <think> block"
    if text.count("<answer>") != 1 or text.count("</answer>") != 1:
        return False, "need exactly one <answer> and one </answer>"
    answer_start = text.find("<answer>")
    answer_end = text.find("</answer>")
    if answer_start > answer_end:
        return False, "</answer> before <answer>"
    for tag in ("search", "python"):
        cursor = 0
        while True:
            open_pos = text.find(f"<{tag}>", cursor)
            if open_pos == -1:
                break
            close_pos = text.find(f"</{tag}>", open_pos)
            result_pos = text.find("<result>", open_pos)
            result_end = text.find("</result>", result_pos) if result_pos != -1 else -1
            if -1 in (close_pos, result_pos, result_end):
                return False, f"{tag}/result tags are incomplete"
            if not open_pos < close_pos < result_pos < result_end:
                return False, f"{tag}/result tags are in the wrong order"
            cursor = result_end
    answer_span = text[answer_start:answer_end]
    boxed_pos = answer_span.find("\\boxed{")
    if boxed_pos == -1 or answer_span.find("}", boxed_pos + len("\\boxed{")) == -1:
        return False, "answer is missing \\boxed{...}"
    for tag in ("think", "search", "python"):
        for open_pos, close_pos in _tag_blocks(text, tag):
            if open_pos < answer_start < close_pos or open_pos < answer_end < close_pos:
                where = "a <think> block" if tag == "think" else f"a <{tag}> call"
                return False, f"<answer> is inside {where}"
    return True, "format is correct"


def _tag_blocks(text: str, tag: str) -> list[tuple[int, int]]:
    r"""`(start of <tag>, start of its </tag>)` of every block, each `<tag>` paired with the first `</tag>` after it.

    The scan resumes after that closing tag, so a `<tag>` written inside a block (code printing `'<python>'`) opens
    nothing. An opening tag that is never closed gives a block up to the end of the text.
    """
    blocks, cursor = [], 0
    while (open_pos := text.find(f"<{tag}>", cursor)) != -1:
        close_pos = text.find(f"</{tag}>", open_pos)
        if close_pos == -1:
            blocks.append((open_pos, len(text)))
            break
        blocks.append((open_pos, close_pos))
        cursor = close_pos + len(tag) + 3
    return blocks


def answered_tool_calls(text: str) -> list[str]:
    r"""Tools of the calls that the model view shows with a body and an observation, in order.

    A call counts when a `<search>` or `<python>` block has a non-blank body and its closing tag is followed, after
    whitespace only, by a `<result>` block. Bare closing tags (`</search>` with no `<search>`), empty calls
    (`<search> </search>`) and calls without a result count nothing. This is the text-only stand-in for the
    executed-call records (`registry.executed_tools`) when a caller scores text without them (docs/algorithms.md §6.4).

    Args:
        text: Model view of a response (observations reduced to `<result></result>`).

    Returns:
        Tool names, e.g. `["search", "python"]`.
    """
    calls = []
    for tag in ("search", "python"):
        for open_pos, close_pos in _tag_blocks(text, tag):
            body = text[open_pos + len(tag) + 2 : close_pos]
            after = text[close_pos + len(tag) + 3 :].lstrip()
            if body.strip() and close_pos < len(text) and after.startswith("<result>"):
                calls.append((open_pos, tag))
    return [tag for _, tag in sorted(calls)]


def extract_answer_span(text: str) -> str | None:
    r"""Content of the first `<answer>...</answer>` (non-greedy, across lines), or None."""
    match = _ANSWER_SPAN.search(text)
    return match.group(1) if match else None


def extract_boxed_answer(text: str) -> str | None:
    r"""Content of the last `\boxed` in `text`, wrapper removed.

    The last occurrence of `\boxed` decides the form: `\boxed{...}` returns the brace-matched content (nested braces
    kept; None if the braces never close); `\boxed ` (a space) returns the text after it up to the next `$` (or the
    end). An occurrence followed by anything else (e.g. `\boxedx`) is skipped in favour of an earlier one.

    Source: `last_boxed_only_string` / `remove_boxed` in RUC-NLPIR/ARPO
    `ARPO/verl_arpo_entropy/verl/utils/reward_score/deep_research.py` (which lets any `\boxed ` win over a later
    `\boxed{`; we use the last occurrence, see docs/algorithms.md §6.2).

    Args:
        text: Typically the answer span.

    Returns:
        The boxed content or None.
    """
    marker = "\\boxed"
    idx = text.rfind(marker)
    while idx != -1:
        rest_start = idx + len(marker)
        if text.startswith("{", rest_start):
            depth = 0
            for pos in range(rest_start, len(text)):
                char = text[pos]
                if char == "{":
                    depth += 1
                elif char == "}":
                    depth -= 1
                    if depth == 0:
                        return text[rest_start + 1 : pos]
            return None
        if text.startswith(" ", rest_start):
            return text[rest_start + 1 :].split("$")[0]
        idx = text.rfind(marker, 0, idx)
    return None


def normalize_answer(text: str) -> str:
    r"""SQuAD normalisation with numbers kept intact: lower-case, delete ASCII punctuation, delete a/an/the, collapse spaces.

    A number written with a fraction or an exponent (`10.50`, `1e3`, `1,000.5`) is replaced by its canonical decimal
    form (`canonical_decimal`: `10.5`, `1000`, `1000.5`) and its decimal point survives the punctuation step, so
    `10.0` equals `10` and no longer equals `100` (the reference turns `10.0` into `100`, issue 8). Integers, version
    strings and numbers glued to letters are normalised as in the reference (`1,000` -> `1000`, `v1.2` -> `v12`).

    Examples: `3\sqrt{3} - 6` -> `3sqrt3 6`; `$10.50` -> `10.5`; `92.46\%` -> `92.46`.
    """
    text = text.lower()
    pieces, pos = [], 0
    for match in _DECIMAL_NUMBER.finditer(text):
        canonical = canonical_decimal(match.group(0))
        if canonical is None:  # exponent too large to expand: the text stays as written
            continue
        pieces.append(_strip_punctuation(text[pos : match.start()]))
        pieces.append(canonical)
        pos = match.end()
    pieces.append(_strip_punctuation(text[pos:]))
    text = _ARTICLES.sub(" ", "".join(pieces))
    return " ".join(text.split())


def _strip_punctuation(text: str) -> str:
    return "".join(char for char in text if char not in _PUNCTUATION)


def normalize_ground_truths(ground_truth: Any) -> list[str]:
    r"""Ground truth(s) as a list of reference strings.

    Accepts a string, a number (written with `format_number`: `10.0` -> `"10"`; NaN and infinities give no
    reference), None (no reference), a list/tuple/array of those (nested lists are flattened), or a
    string that is a JSON or Python literal of a list of strings (e.g. `'["Paris", "Paris, France"]'`), as other
    exports of the ARPO data store them. A string that parses to anything else (e.g. the math interval `[1, 2]`) or
    does not parse (noisy values like `(37`) is kept verbatim as one reference.
    """
    if ground_truth is None:
        return []
    if isinstance(ground_truth, str):
        stripped = ground_truth.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            parsed = _parse_list_literal(stripped)
            if parsed is not None:
                return parsed
        return [ground_truth]
    if isinstance(ground_truth, bytes):
        return [ground_truth.decode("utf-8", errors="replace")]
    if hasattr(ground_truth, "tolist") and not isinstance(ground_truth, (int, float)):
        ground_truth = ground_truth.tolist()
    if isinstance(ground_truth, Iterable) and not isinstance(ground_truth, (str, bytes, dict)):
        references: list[str] = []
        for item in ground_truth:
            references.extend(normalize_ground_truths(item))
        return references
    if isinstance(ground_truth, float) and not math.isfinite(ground_truth):
        return []
    if isinstance(ground_truth, (int, float)) and not isinstance(ground_truth, bool):
        return [format_number(ground_truth)]
    return [str(ground_truth)]


def _parse_list_literal(text: str) -> list[str] | None:
    for loader in (json.loads, ast.literal_eval):
        try:
            value = loader(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
            return value
        return None
    return None


def f1_score(prediction: str, ground_truths: Any) -> float:
    r"""Token F1 of `prediction` against the best-matching reference (SQuAD style), in [0, 1].

    Both sides are normalised with `normalize_answer`. Yes/no rule: if either normalised side is `yes`, `no` or
    `noanswer` and the two differ, that reference scores 0. No reference (None, empty list) scores 0.

    Source: `get_f1_score` in RUC-NLPIR/ARPO `ARPO/verl_arpo_entropy/verl/utils/reward_score/deep_research.py`.
    """
    best = 0.0
    pred_norm = normalize_answer(prediction)
    pred_tokens = pred_norm.split()
    for reference in normalize_ground_truths(ground_truths):
        ref_norm = normalize_answer(reference)
        if (pred_norm in _YES_NO or ref_norm in _YES_NO) and pred_norm != ref_norm:
            continue
        ref_tokens = ref_norm.split()
        common = Counter(pred_tokens) & Counter(ref_tokens)
        num_same = sum(common.values())
        if num_same == 0:
            continue
        precision = num_same / len(pred_tokens)
        recall = num_same / len(ref_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def exact_match_score(prediction: str, ground_truths: Any) -> float:
    r"""1.0 if the normalised prediction equals any normalised reference (`normalize_answer`), else 0.0."""
    pred_norm = normalize_answer(prediction)
    return float(any(pred_norm == normalize_answer(ref) for ref in normalize_ground_truths(ground_truths)))

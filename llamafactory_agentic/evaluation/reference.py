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

r"""The `reference` scoring profile: the scoring of RUC-NLPIR/ARPO `evaluation/` (docs/algorithms.md section 9.3).

Written for this project from the behaviour of the reference's `src/utils.py` (`extract_answer`), `src/evaluator.py`,
`src/metrics.py` and `src/math_equivalence.py` (the MATH dataset's `is_equiv`); no code is taken from there. Each
record is scored twice, by the plugin's rules (`scoring.py`, the `current` profile) and by these, and every summary
shows both columns. Differences from `current`:

* prediction: the last `\boxed{}` of the last `<answer>` span; when that span has no box, the span's text itself;
  without an answer span, the last `\boxed{}` anywhere in the output (tool results included); when all that is empty,
  the last 5 lines of the output (`current`: only a box inside the answer span, else no prediction);
* normalisation: lower case, articles removed (QA only), white space collapsed; punctuation is kept, numbers are not
  normalised (`Paris.` vs `Paris`: F1 0 and EM 0 here, 1 in `current`);
* math equivalence: the MATH `is_equiv` string rules (units, `\left`, `\dfrac`, `a/b`, ...), with no numeric or
  symbolic comparison (`70.0` vs `70`, `10%` vs `10`: not equivalent here; equivalent by math-verify in `current`);
* headline without a judge: math sets `is_equiv`, QA sets F1 (the reference's `accuracy`); with a judge: the judge's
  verdict on this profile's prediction, correct as well when `is_equiv(prediction, gold)` holds on the raw strings
  (the reference's rule). A failed judge call stays an error (the reference falls back to `is_equiv`).
* judge request: the reference's exactly (`reference_judge_item`): no temperature in the body (the server's
  default), `Golden Answer:` the answer field as the file holds it, printed as Python prints it (a list with its
  brackets and quotes, `['Michio Sugeno']`); no call only where the reference's `is_equiv(prediction, gold)` on the
  raw values already decides (never for a list gold answer, which `is_equiv` cannot read).

The reference's per-set system prompts (`src/prompt_manager.py`: `code_search` for English sets, `code_search_cn` for
xbench) are kept word for word below because they are part of the protocol; `eval_system_prompt: reference` (the
`paper` preset's default) selects them per set.
"""

import re
from collections import Counter
from typing import Any


REFERENCE_PROMPTS = {
    "code_search": (
        "You are a helpful assistant that can solve the given question step by step with the help of the wikipedia "
        "search tool and python interpreter tool. Given a question, you need to first think about the reasoning "
        "process in the mind and then provide the answer. During thinking, you can invoke the wikipedia search tool "
        "to search and python interpreter tool to calculate the math problem for fact information about specific "
        "topics if needed. The reasoning process and answer are enclosed within <think> </think> and <answer> "
        "</answer> tags respectively, and the search query and result are enclosed within <search> </search> and "
        "<result> </result> tags respectively. For example, <think> This is the reasoning process. </think> <search> "
        "search query here </search> <result> search result here </result> <think> This is the reasoning process. "
        "</think> <python> python code here </python> <result> python interpreter result here </result> <think> This "
        "is the reasoning process. </think> <answer> The final answer is \\[ \\boxed{answer here} \\] </answer>. In "
        "the last part of the answer, the final exact answer is enclosed within \\boxed{} with latex format."
    ),
    "code_search_cn": (
        "你是一个乐于助人的助手，能够借助 Wikipedia 搜索工具和 Python 解释器工具，逐步解决给定的问题。\n"
        "给定一个问题后，你需要先在头脑中进行推理过程，然后再提供答案。\n"
        "在思考过程中，你可以调用 Wikipedia 搜索工具来搜索特定主题的事实信息，也可以使用 Python 解释器工具来计算数学问题（如有需要）。\n"
        "推理过程和答案分别用 <think> 和 </think>，以及 <answer> 和 </answer> 标签括起来；\n"
        "搜索查询和结果分别用 <search> 和 </search>，以及 <result> 和 </result> 标签括起来。\n"
        "例如：\n"
        "<think> 这是推理过程。 </think> <search> 这里是搜索查询 </search> <result> 这里是搜索结果 </result>\n"
        "<think> 这是推理过程。 </think> <python> 这里是 Python 代码 </python> <result> 这里是 Python 解释器的结果 </result>\n"
        "<think> 这是推理过程。 </think> <answer> 最终答案是 \\[ \\boxed{这里是答案} \\] </answer>"
    ),
}
PROFILES = ("current", "reference")
REFERENCE_JUDGE_TEMPERATURE = None  # the reference's judge request sends no temperature (the server's default)


def reference_label(record: dict[str, Any]) -> Any:
    r"""The gold answer as the reference passes it to its judge.

    The record's `label` (the answer field as the file holds it, `benchmarks.Sample.label`); for records written
    before labels were kept, one alias as itself and several as their list.
    """
    if "label" in record and record["label"] is not None:
        return record["label"]
    answers = list(record.get("answers") or [])
    return answers[0] if len(answers) == 1 else answers


def reference_judge_item(record: dict[str, Any], prediction: str) -> dict[str, Any]:
    r"""The reference profile's judge item (`rewards.judge.LLMJudge.judge_many`) of one record.

    `answers` holds one text, the label as `str.format` prints it in the reference's prompt (so the prompt is
    byte-identical to the reference's); `equivalent` is the reference's `is_equiv(prediction, label)`, which is False
    for a label that is not a string (the reference's `_strip_string` fails on it and compares the raw values).
    An empty prediction is not judged (the reference scores it 0 without a call).
    """
    label = reference_label(record)
    equivalent = isinstance(label, str) and bool(prediction) and is_equiv(prediction, label)
    return {"question": record["question"], "answers": [f"{label}"], "prediction": prediction or None,
            "equivalent": equivalent}  # fmt: skip


def _last_box(text: str) -> str:
    r"""The last `\boxed...` (or `\fbox...`) group of `text` with its braces, to the end when unclosed; "" if none."""
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
        if start < 0:
            return ""
    depth = 0
    for pos in range(start, len(text)):
        if text[pos] == "{":
            depth += 1
        elif text[pos] == "}":
            depth -= 1
            if depth == 0:
                return text[start : pos + 1]
    return text[start:]


def _unbox(group: str) -> str:
    r"""`\boxed{x}` -> `x`, then one whole `\text{y}` -> `y`; other groups unchanged."""
    if group.startswith("\\boxed{") and group.endswith("}"):
        group = group[len("\\boxed{") : -1]
        if group.startswith("\\text{") and group.endswith("}"):
            group = group[len("\\text{") : -1]
    return group


def reference_prediction(output: str) -> str:
    r"""The reference's prediction from the full output text (model text and tool results).

    Examples: `<answer>\boxed{42}</answer>` -> `42`; `<answer>Paris</answer>` -> `Paris`; `... \boxed{7}` without an
    answer span -> `7`; neither -> the last 5 lines of the output ("" for an empty output).
    """
    end = output.rfind("</answer>")
    span = None
    if end >= 0:
        start = output.rfind("<answer>", 0, end)
        if start >= 0:
            span = output[start + len("<answer>") : end]
    if span:
        boxed = _unbox(_last_box(span.strip()))
        prediction = boxed or span
    else:
        prediction = _unbox(_last_box(output.strip()))
    if not prediction:
        prediction = "\n".join(output.replace("\n\n", "\n").strip().split("\n")[-5:])
    return prediction


def normalize(text: Any, remove_articles: bool = False) -> str:
    r"""Lower case, stripped, articles (a, an, the) removed when asked, white space collapsed; punctuation kept."""
    text = str(text).lower().strip()
    if remove_articles:
        text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def token_f1(prediction: str, gold: str) -> float:
    r"""F1 of the white-space tokens of two normalised strings (0.0 without overlap)."""
    pred, ref = prediction.split(), gold.split()
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


# ----------------------------------------------------------------------------- MATH-style strict equivalence
def _braced_fracs(s: str) -> str:
    r"""`\frac12` -> `\frac{1}{2}`, `\frac1{7}` -> `\frac{1}{7}`; already braced numerators are left alone."""
    head, *rest = s.split("\\frac")
    out = head
    for part in rest:
        out += "\\frac"
        if part.startswith("{"):
            out += part
            continue
        if len(part) < 2:
            return s
        num, den, tail = part[0], part[1], part[2:]
        out += "{" + num + "}" + (den + tail if den == "{" else "{" + den + "}" + tail)
    return out


def _slash_fraction(s: str) -> str:
    r"""`3/4` (two integers, nothing else) -> `\frac{3}{4}`."""
    match = re.fullmatch(r"(-?\d+)/(-?\d+)", s)
    if not match or s != f"{int(match.group(1))}/{int(match.group(2))}":
        return s
    return "\\frac{" + match.group(1) + "}{" + match.group(2) + "}"


def _braced_sqrt(s: str) -> str:
    r"""`\sqrt3` -> `\sqrt{3}`."""
    head, *rest = s.split("\\sqrt")
    if any(not p for p in rest):
        raise IndexError("\\sqrt without an argument")
    return head + "".join("\\sqrt" + (p if p.startswith("{") else "{" + p[0] + "}" + p[1:]) for p in rest)


def canonical_math(s: str) -> str:
    r"""The MATH dataset's answer canonicalisation (string rules only).

    Line breaks, `\!`, `\left`/`\right`, degree marks, `\$`, `\%` and spaces removed; `\\` -> `\`;
    `tfrac`/`dfrac` -> `frac`; a unit after `\text{ ` dropped; a leading `.5` -> `0.5`; a short `x =` prefix dropped;
    `\sqrt3` and `\frac12` braced; `0.5` -> `\frac{1}{2}`; `a/b` -> `\frac{a}{b}`.

    Raises:
        ValueError: a `\text{ ` unit split that is ambiguous (the caller then compares the raw strings).
    """
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac").replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "")
    if "\\text{ " in s:
        parts = s.split("\\text{ ")
        if len(parts) != 2:
            raise ValueError("ambiguous unit")
        s = parts[0]
    s = s.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s.startswith("."):
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        s = sides[1]
    if "\\sqrt" in s:
        s = _braced_sqrt(s)
    s = _braced_fracs(s.replace(" ", ""))
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _slash_fraction(s)


def is_equiv(a: str | None, b: str | None) -> bool:
    r"""Strict MATH equivalence: equal after `canonical_math` (raw equality when canonicalisation fails).

    Examples: `\dfrac{3}{4}` = `3/4`; `x = 5` = `5`; `70.0` != `70`; `10%` != `10` (only `\%` is removed).
    """
    if a is None or b is None:
        return a is None and b is None
    try:
        return canonical_math(a) == canonical_math(b)
    except (ValueError, IndexError):
        return a == b


def reference_scores(prediction: str, answers: list[str], task: str) -> dict[str, float]:
    r"""The reference's per-sample scores: `em`, `acc` (gold contained), `f1`, `math_equal`; maximum over aliases.

    Math sets normalise without removing articles, QA and deep-search sets remove them; `math_equal` compares the
    normalised strings with `is_equiv`. An empty prediction scores 0 everywhere.
    """
    if not prediction:
        return {"em": 0.0, "acc": 0.0, "f1": 0.0, "math_equal": 0.0}
    articles = task != "math"
    pred = normalize(prediction, remove_articles=articles)
    best = {"em": 0.0, "acc": 0.0, "f1": 0.0, "math_equal": 0.0}
    for answer in answers:
        gold = normalize(answer, remove_articles=articles)
        best["em"] = max(best["em"], float(pred == gold))
        best["acc"] = max(best["acc"], float(gold in pred))
        best["f1"] = max(best["f1"], token_f1(pred, gold))
        best["math_equal"] = max(best["math_equal"], float(is_equiv(pred, gold)))
    return best


def reference_headline(metric: str, task: str, scores: dict[str, float], verdict: bool | None) -> tuple[float, bool]:
    r"""`(value, correct)` under the reference profile.

    `f1` sets: F1, correct = EM. `judge` sets: with a verdict, the verdict (which holds the reference's raw
    `is_equiv(prediction, label)` already: `reference_judge_item`); without a judge, the reference's accuracy (math:
    `math_equal`; otherwise F1, correct = EM). `em`, `math_equiv` map to `em`, `math_equal`; `reward`
    and `accuracy` (the training's reward) have no reference counterpart and use the current value (caller's choice).
    """
    if metric == "f1":
        return scores["f1"], bool(scores["em"])
    if metric == "judge":
        if verdict is not None:
            return float(bool(verdict)), bool(verdict)
        if task == "math":
            return scores["math_equal"], bool(scores["math_equal"])
        return scores["f1"], bool(scores["em"])
    if metric == "em":
        return scores["em"], bool(scores["em"])
    return scores["math_equal"], bool(scores["math_equal"])

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

r"""Per-sample scoring (docs/algorithms.md sections 6 and 9).

The prediction, exact match, token F1, math-verify equivalence, the training reward, and the headline value of a
record.

Everything reads the model view of the response (model-written text, every observation reduced to
`<result></result>`, `rewards.build_model_view`), so an answer that appears only in a tool output earns nothing.
"""

from typing import Any

from ..rewards import exact_match_score, extract_boxed_answer, f1_score, math_verify_score


def _unwrap_text(value: str) -> str:
    r"""`\text{abc}` -> `abc` when the whole value is one `\text{...}` group (braces matched), repeatedly."""
    while value.startswith("\\text{") and value.endswith("}"):
        depth = 0
        for pos in range(len("\\text"), len(value)):
            depth += {"{": 1, "}": -1}.get(value[pos], 0)
            if depth == 0:
                break
        if pos != len(value) - 1:
            return value
        value = value[len("\\text{") : -1].strip()
    return value


def extract_prediction(model_text: str) -> str | None:
    r"""The prediction: the last `\boxed{}` in the last `<answer>…</answer>` span, `\text{}` unwrapped.

    Source: docs/algorithms.md section 9. Unlike RUC-NLPIR/ARPO `evaluation/src/utils.py:extract_answer`, there is no
    fallback to the bare answer span or to a `\boxed{}` outside the answer span: such responses have no prediction.

    Args:
        model_text: The model view of the response.

    Returns:
        The stripped answer, or None (no closed answer span, or no `\boxed` in it).
    """
    end = model_text.rfind("</answer>")
    if end < 0:
        return None
    start = model_text.rfind("<answer>", 0, end)
    if start < 0:
        return None
    boxed = extract_boxed_answer(model_text[start + len("<answer>") : end])
    if boxed is None:
        return None
    return _unwrap_text(boxed.strip())


def rule_scores(prediction: str | None, answers: list[str], task: str) -> dict[str, float | None]:
    r"""Exact match, token F1 (max over aliases) and, for `task == "math"`, math-verify equivalence.

    Args:
        prediction: From `extract_prediction` (None scores 0 everywhere).
        answers: Gold aliases.
        task: `math`, `qa` or `deep_search`.

    Returns:
        `{"em", "f1", "math_equiv"}`; `math_equiv` is None outside math sets.
    """
    if prediction is None:
        return {"em": 0.0, "f1": 0.0, "math_equiv": 0.0 if task == "math" else None}
    return {
        "em": exact_match_score(prediction, answers),
        "f1": f1_score(prediction, answers),
        "math_equiv": math_verify_score(prediction, answers) if task == "math" else None,
    }


def rule_equivalent(scores: dict[str, Any]) -> bool:
    r"""The judge's rule-based half: exact match after normalisation, or math-verify equivalence."""
    return bool(scores.get("em")) or bool(scores.get("math_equiv"))


def headline(
    metric: str, scores: dict[str, Any], verdict: bool | None, judge_error: bool = False
) -> tuple[float, bool, str]:
    r"""`(value, correct, source)` of a record for a benchmark's headline metric.

    * `f1`: value F1, correct = EM (pass@k needs a yes/no outcome; F1 = 1 and EM agree up to word order).
    * `judge`: the judge's verdict; a failed judge call counts as not correct (source `judge_error`, never replaced by
      the rule); without a judge configured the rule alone (EM or math-verify), source `rule`.
    * `em`, `math_equiv`: that score. `reward`: the reward, correct = correctness 1. `accuracy`: correctness == 1
      (the `reward/accuracy` of validation during training).

    Args:
        metric: The headline metric name.
        scores: The record's scores (`em`, `f1`, `math_equiv`, `reward`, `reward_correctness`).
        verdict: The judge verdict (None: no judge configured, or a judge error).
        judge_error: The judge call failed.

    Returns:
        The value in [0, 1] (reward in [-1, 1.1]), whether it counts as correct, and where it came from.
    """
    if metric == "f1":
        return float(scores["f1"]), bool(scores["em"]), "f1"
    if metric == "judge":
        if judge_error:
            return 0.0, False, "judge_error"
        if verdict is None:
            correct = rule_equivalent(scores)
            return float(correct), correct, "rule"
        return float(bool(verdict)), bool(verdict), "judge"
    if metric == "em":
        return float(scores["em"]), bool(scores["em"]), "em"
    if metric == "math_equiv":
        value = scores.get("math_equiv") or 0.0
        return float(value), bool(value), "math_equiv"
    correct = float(scores.get("reward_correctness") or 0.0) >= 1.0
    if metric == "reward":
        return float(scores.get("reward") or 0.0), correct, "reward"
    return float(correct), correct, "accuracy"

# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Your reward: format gate, then the boxed number against the ground truth (written by `task init`; edit it).

Named in the recipes as `agentic_reward: units_reward:score` (this folder on `PYTHONPATH`). It is called once per
trajectory with the model view of the response (tool results replaced by a placeholder, docs/rewards.md), the row's
`reward_model.ground_truth` (a string in training; the list of accepted answers in `llamafactory-agentic eval`) and
`{data_source, ability, extra, executed_tools}`, and returns a float:
-1 when the format gate fails, 0 for a wrong answer, 1 for a right one, +0.1 when the convert tool ran.
"""

from llamafactory_agentic.rewards import extract_boxed_answer, validate_format


def score(model_text: str, ground_truth: str | list, metadata: dict) -> float:
    """-1 (format gate failed), 0 (wrong) or 1 (right), +0.1 when the convert tool ran."""
    ok, _reason = validate_format(model_text)  # a (bool, reason) pair: `if not validate_format(...)` never fails
    if not ok:
        return -1.0
    answer = extract_boxed_answer(model_text)
    truths = ground_truth if isinstance(ground_truth, list) else [ground_truth]  # evaluation: the accepted answers
    right = answer is not None and any(same_number(answer, truth) for truth in truths)
    bonus = 0.1 if "convert" in metadata.get("executed_tools", ()) else 0.0
    return (1.0 if right else 0.0) + bonus


def same_number(a: str, b: str) -> bool:
    """Both parse as numbers that agree to 6 significant digits (the tool prints 6)."""
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return False
    return abs(x - y) <= 1e-6 * max(1.0, abs(x))

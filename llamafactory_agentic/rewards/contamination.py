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

r"""Search contamination guard: a URL blocklist for web results and the answer-leak check (docs/plan.md §3).

* The URL blocklist of web results (`Blocklist`, `DEFAULT_BLOCKLIST`) belongs to the search tool: `tools/blocklist.py`.
* `answer_leaks(observation, ground_truth)`: whether an observation holds a reference answer, both normalised as the
  reward normalises answers (`rewards/deep_research.py:normalize_answer`), matched on whole words.
  `tools/answer_leak_rate` is the share of trajectories with at least one such observation (logged by the trainer for
  training and validation rollouts).
* `guard_observation(text, ground_truth, mode)`: `log` keeps the text, `mask` replaces the answer by `[masked]`,
  `drop` replaces the whole observation by a notice.
"""

import re
from collections.abc import Sequence
from typing import Any


def _references(ground_truth: Any) -> list[str]:
    from ..rewards.deep_research import normalize_answer, normalize_ground_truths

    return [n for n in (normalize_answer(str(g)) for g in normalize_ground_truths(ground_truth)) if n]


def answer_leaks(observation: str, ground_truth: Any) -> bool:
    r"""Whether `observation` holds one of the reference answers (normalised as the reward does, whole words)."""
    from ..rewards.deep_research import normalize_answer

    text = f" {normalize_answer(observation or '')} "
    return any(f" {ref} " in text for ref in _references(ground_truth))


def guard_observation(text: str, ground_truth: Any, mode: str = "log") -> tuple[str, bool]:
    r"""`(text to show the model, leaked)` for one observation under `mode` (`log`, `mask` or `drop`).

    `mask` replaces each occurrence of a reference answer (case-insensitive, as written in the ground truth, and its
    normalised form) by `[masked]`; `drop` replaces the whole text by a notice.

    Raises:
        ValueError: unknown `mode`.
    """
    if mode not in ("log", "mask", "drop"):
        raise ValueError(f"contamination mode {mode!r}: expected log, mask or drop")
    leaked = answer_leaks(text, ground_truth)
    if not leaked or mode == "log":
        return text, leaked
    if mode == "drop":
        return "[result withheld: it contained the answer to this question]", True
    from ..rewards.deep_research import normalize_ground_truths

    out = text
    for ref in sorted({str(g) for g in normalize_ground_truths(ground_truth)} | set(_references(ground_truth)), key=len,
                      reverse=True):  # fmt: skip
        if ref.strip():
            out = re.sub(r"(?<!\w)" + re.escape(ref.strip()) + r"(?!\w)", "[masked]", out, flags=re.IGNORECASE)
    return out, True


def observation_texts(tokenizer: Any, response_ids: Sequence[int], loss_mask: Sequence[int]) -> list[str]:
    r"""The decoded observations of a trajectory: each maximal run of loss-mask-0 tokens of the response."""
    texts, run = [], []
    for token, m in zip(response_ids, loss_mask):
        if m == 0:
            run.append(int(token))
        elif run:
            texts.append(tokenizer.decode(run, skip_special_tokens=True))
            run = []
    if run:
        texts.append(tokenizer.decode(run, skip_special_tokens=True))
    return texts


def answer_leak_rate(observations: Sequence[Sequence[str]], ground_truths: Sequence[Any]) -> float:
    r"""Share of trajectories (one list of observation texts each) with an observation that holds its answer."""
    if not observations:
        return 0.0
    hits = sum(any(answer_leaks(o, gt) for o in obs) for obs, gt in zip(observations, ground_truths))
    return hits / len(observations)
